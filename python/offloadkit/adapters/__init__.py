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

Each module's docstring names the library commit it was written against, the profile it declares
and why, and what the adapter adds that the library does not do itself.

No adapter for Megatron-LM's paged stash (``megatron/core/transformer/moe/paged_stash.py`` at
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553): its per-key objects (``PagedStashBuffer``,
``PagedTensor.offload_to_stash`` / ``reload_from_stash``) are reachable, but a restore into the
caller's buffer needs the private ``PagedTensor._tensor`` set beforehand, the stash protocol's
snapshot (free pages per tier, live entries) exists only as the buffer's device-side free-list
indices, and importing the module imports Megatron's full-CUDA-graph wrapper, distributed
optimizer and MoE token dispatcher. Its public entry points (``PagedStashManager``,
``paged_stash_group_start`` / ``_commit``) run inside Megatron's pipeline schedule and autograd
functions, not as a stash of keys.

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

and the same with ``--driver-faults`` for the driver-fault table of each. CI runs the adapters
against stand-ins of the libraries' public APIs (``python/tests/adapters``).
"""

import contextlib
import importlib
from typing import Any, Iterator

from ..errors import (CudaError, Error, LogicError, OutOfMemory, OutOfRange, PlatformError,
                      StateError)


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
