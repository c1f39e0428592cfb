"""Adapters that put the ecosystem's offload libraries under offloadkit's batteries.

Each module imports the *installed* library's public API (nothing of the library is shipped with
offloadkit), maps offloadkit's protocol (``offloadkit.protocol``) onto it, declares the library's
real profile, and has a ``make`` factory::

    python -m offloadkit check offloadkit.adapters.torch_memory_saver:make --executor cuda

- ``offloadkit.adapters.torch_memory_saver`` (region): ``torch_memory_saver.region`` /
  ``pause`` / ``resume``; factories ``make``, ``make_retain_cpu_backup``.
- ``offloadkit.adapters.vllm`` (region): ``vllm.device_allocator.cumem.CuMemAllocator``'s sleep
  mode; factory ``make``.
- ``offloadkit.adapters.torchtune`` (activation): ``torchtune.training.OffloadActivations``;
  factories ``make`` (refused, see the module) and ``make_single_stream``.
- ``offloadkit.adapters.trl`` (activation): ``trl.models.activation_offloading.
  OffloadActivations``; factories ``make`` (refused) and ``make_single_stream``.
- ``offloadkit.adapters.torch_save_on_cpu`` (activation): PyTorch's own
  ``torch.autograd.graph.save_on_cpu``; factory ``make`` (``pin_memory=True``).
- ``offloadkit.adapters.megatron`` (activation): Megatron-LM's fine-grained activation
  offloading (``megatron.core.pipeline_parallel.fine_grained_activation_offload``: the manager's
  chunk handler, its groups and its hooks' targets); factories ``make`` (Megatron's default
  threshold, which keeps every tensor the batteries make) and ``make_offload_all`` (threshold 1
  element, the ecosystem's column).
- ``offloadkit.adapters.megatron_paged_stash`` (stash): Megatron-LM's paged stash of MoE
  activations (``megatron.core.transformer.moe.paged_stash``: ``PagedStashManager``, its
  ``PagedStashBuffer`` and ``PagedTensor`` with their Triton kernels); factory ``make``.

Each module's docstring names the library commit it was written against, the profile it declares
and why, and what the adapter adds that the library does not do itself.

No adapter for NeMo-RL's pinned optimizer offload (``use_pinned_optimizer_offload``,
``_get_or_alloc_pinned_buf``; NVIDIA-NeMo/RL pull request 2248): it is not in a released branch.
Its code is only on the pull request's branch ``sniverty/optimizer_offload_perf`` (commit
f45ee06b48818e4387bc4d60f99ee6b079d22aa6), not in ``main`` (commit
7ea279abfbeb698b092856d0dab61e7cf39bc909, whose ``MegatronPolicyWorkerImpl.move_optimizer`` moves
each optimizer state tensor with a blocking ``v.to("cpu")`` / ``v.to("cuda")``) nor in any release
branch or tag (r0.1.0 to r0.7.0, v0.1.0 to v0.7.0). On that branch the coalescing is private
methods of the Ray worker ``MegatronPolicyWorkerImpl``
(``nemo_rl/models/policy/workers/megatron_policy_worker.py``: ``_coalesced_optimizer_to_cpu``,
``_get_or_alloc_pinned_buf``, behind ``use_coalesced_optimizer_offload``), whose module imports
Ray, Megatron-Bridge and Megatron-Core, and which works on the optimizer the worker builds.

No adapter for FastVideo's activation offloading (hao-ai-lab/FastVideo pull request 1106): it is
not in a released branch. Its ``pack_hook`` / ``unpack_hook`` (``tensor.to("cpu",
non_blocking=True)`` and back to the tensor's device, in
``fastvideo/pipelines/composed_pipeline_base.py``) are only on ``refs/pull/1106/head`` (commit
34a576de0b5450cb281f7a8dc7f286f03c13a5f6), not in ``main`` (commit
2f3d4074064e4d86f99dc784ebbaa296e6f5925f, which has no saved-tensor hooks) nor in any tag (v0.0.5
to v0.2.0).

A library error reaches the batteries as offloadkit's typed error (``library_call``), its message
kept and prefixed with the library call that raised it.

Running against the real libraries (a GPU machine with PyTorch for CUDA; each library installed
from its own source or package, never from offloadkit)::

    python -m offloadkit check offloadkit.adapters.torch_memory_saver:make --executor cuda \\
        --report tms.json
    python -m offloadkit check offloadkit.adapters.torch_memory_saver:make_retain_cpu_backup \\
        --executor cuda --report tms-retain.json
    python -m offloadkit check offloadkit.adapters.vllm:make --executor cuda --report vllm.json
    python -m offloadkit check offloadkit.adapters.torchtune:make_single_stream \\
        --executor cuda --report torchtune.json
    python -m offloadkit check offloadkit.adapters.trl:make_single_stream --executor cuda \\
        --report trl.json
    python -m offloadkit check offloadkit.adapters.torch_save_on_cpu:make --executor cuda \\
        --report torch_save_on_cpu.json
    python -m offloadkit check offloadkit.adapters.megatron:make_offload_all --executor cuda \\
        --report megatron.json
    python -m offloadkit check offloadkit.adapters.megatron_paged_stash:make --executor cuda \\
        --report megatron-paged-stash.json

and the same with ``--driver-faults`` for the driver-fault table of each. ``ADAPTERS`` below is
the table of these factories (one per matrix column, with the library module each imports and the
distribution that installs it); ``python -m offloadkit ecosystem`` runs every one of them and writes
the conformance matrix (``offloadkit.ecosystem``), with the classifications of
``classified.json`` beside this file. CI runs the adapters
against stand-ins of the libraries' public APIs (``python/tests/adapters``): the region
batteries over their stand-ins, the activation adapters' mapping, profile and error translation
in unit tests (their hooks run on PyTorch tensors, which the stand-ins do not provide), and the
stash battery and unit tests over a stand-in of Megatron's paged stash module whose kernels run on
the host.
"""

import contextlib
import importlib
from typing import Any, Iterator, NamedTuple

from ..errors import (CudaError, Error, LogicError, OutOfMemory, OutOfRange, PlatformError,
                      StateError)


class Adapter(NamedTuple):
    """One column of the ecosystem's conformance matrix: a library driven through a factory."""

    name: str  #: the column's name, and the file name of its reports
    factory: str  #: MODULE:FACTORY
    feature: str
    library: str  #: the library module the adapter imports (the module's LIBRARY)
    distribution: str  #: the package that installs it (the module's DISTRIBUTION)
    adds: str  #: what the adapter adds or chooses, for the matrix's notes


#: Every factory of this package that checks a library, in the matrix's order.
ADAPTERS = (
    Adapter("torch_memory_saver", "offloadkit.adapters.torch_memory_saver:make", "region",
            "torch_memory_saver", "torch_memory_saver",
            "the library's defaults; a stream wait before pause, a tag per region, the other "
            "pause mode refused"),
    Adapter("torch_memory_saver-retain",
            "offloadkit.adapters.torch_memory_saver:make_retain_cpu_backup", "region",
            "torch_memory_saver", "torch_memory_saver",
            "retain_cpu_backup = True; a stream wait before pause, a tag per region, the other "
            "pause mode refused"),
    Adapter("vllm", "offloadkit.adapters.vllm:make", "region", "vllm", "vllm",
            "CuMemAllocator's sleep mode; a stream wait before sleep, a tag per region, the "
            "pool handed back at close, a second live region refused"),
    *(Adapter(name, f"offloadkit.adapters.{name}:make_single_stream", "activation", name, name,
              "OffloadActivations(use_streams=False) (use_streams=True needs autograd's "
              "engine); one library object per case") for name in ("torchtune", "trl")),
    Adapter("torch_save_on_cpu", "offloadkit.adapters.torch_save_on_cpu:make", "activation",
            "torch", "torch", "save_on_cpu(pin_memory=True); one hooks object per case"),
    Adapter("megatron", "offloadkit.adapters.megatron:make_offload_all", "activation",
            "megatron.core", "megatron-core",
            "fine-grained activation offloading with min_offloaded_tensor_size = 1 (the default "
            "1048576 elements keeps every tensor the batteries make), one chunk on a fresh "
            "manager, layers as groups; the warmup iteration only; a second live object "
            "refused"),
    Adapter("megatron-paged-stash", "offloadkit.adapters.megatron_paged_stash:make", "stash",
            "megatron.core", "megatron-core",
            "paged stash, a manager of its own per object brought to its captured state, one "
            "buffer sized by the config; too many rows, a double stash and an empty restore "
            "raise the overflow flag on the device"),
)


class Unsupported(Error, NotImplementedError):
    """The library does not provide this operation (or this mode of it). The batteries read it as
    an unsupported operation (``NotImplementedError``), which a profile can mark as not
    applicable."""


class LibraryMissing(LogicError):
    """The library an adapter wraps cannot be imported in this interpreter."""


def import_library(module: str, adapter: str) -> Any:
    """Imports ``module`` (the installed library); LibraryMissing names the module, the adapter
    and Python's reason when it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise LibraryMissing(f"{adapter}: the library module {module!r} cannot be imported here "
                             f"({e}); install it, or put its source on PYTHONPATH") from e


def library_version(module: Any, distribution: str) -> str:
    """The library's ``__version__``, else the installed distribution's version, else
    "unknown"."""
    version = getattr(module, "__version__", None)
    if version is None:
        import importlib.metadata

        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
    return str(version)


def translate(error: BaseException, call: str) -> Error:
    """offloadkit's typed error for ``error`` raised by the library call ``call``, with the
    library's exception type and message kept in the text.

    ======================================================  ================
    library exception                                       offloadkit
    ======================================================  ================
    ``MemoryError``, ``*OutOfMemoryError``, "out of memory"  ``OutOfMemory``
    ``NotImplementedError``                                 ``Unsupported``
    ``KeyError``, ``IndexError``                            ``OutOfRange``
    ``AssertionError`` (the libraries' state checks)         ``StateError``
    ``ValueError``, ``TypeError``                           ``LogicError``
    ``RuntimeError`` naming a CUDA error                    ``CudaError``
    anything else                                           ``PlatformError``
    ======================================================  ================
    """
    if isinstance(error, Error):
        return error
    text = f"{call}: {type(error).__name__}: {error}"
    names = {cls.__name__ for cls in type(error).__mro__}
    lowered = str(error).lower()
    if isinstance(error, MemoryError) or "OutOfMemoryError" in names or "out of memory" in lowered:
        return OutOfMemory(text)
    if isinstance(error, NotImplementedError):
        return Unsupported(text)
    if isinstance(error, (KeyError, IndexError)):
        return OutOfRange(text)
    if isinstance(error, AssertionError):
        return StateError(text)
    if isinstance(error, (ValueError, TypeError)):
        return LogicError(text)
    if "cuda error" in lowered or "cudaerror" in lowered or "curesult" in lowered:
        return CudaError(text)
    return PlatformError(text)


@contextlib.contextmanager
def library_call(call: str) -> Iterator[None]:
    """Runs the body as the library call ``call``: an exception it raises (other than one of
    offloadkit's own, and other than KeyboardInterrupt / SystemExit) leaves as offloadkit's typed
    error (``translate``), chained to the original."""
    try:
        yield
    except Error:
        raise
    except Exception as e:
        raise translate(e, call) from e
