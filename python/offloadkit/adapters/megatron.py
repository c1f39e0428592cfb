"""Megatron-LM's fine-grained activation offloading as an offloadkit activation implementation.

Written against NVIDIA/Megatron-LM commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22,
main), ``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``, its public names
only: ``FineGrainedActivationOffloadingInterface.reset_instance()`` and
``.init_chunk_handler(...)``, ``PipelineOffloadManager.get_instance()`` / ``cur_forward_chunk()`` /
``pop_forward_chunk(name)``, and the ``ChunkOffloadHandler`` methods that Megatron's saved-tensor
hooks and its group autograd functions call: ``tensor_push`` / ``tensor_pop`` (what
``on_save_for_backward`` / ``on_get_saved_tensor`` delegate to), ``tensor_need_offloading_checker``,
``on_group_start_forward`` / ``on_group_commit_forward`` (the forward of
``FineGrainedOffloadingGroupStartFunction`` / ``...GroupCommitFunction``) and
``on_group_commit_backward`` / ``on_group_start_backward`` (their backward). Importing the module
imports ``megatron.core`` (install megatron-core); no model, pipeline schedule or process group is
built.

Mapping
-------
- ``Activation(executor, options)``: ``reset_instance()``, then ``init_chunk_handler(pp_rank=0,
  vp_size=1, vp_stage=None, min_offloaded_tensor_size=N, delta_offload_bytes_across_pp_ranks=0,
  activation_offload_fraction=1.0)``: one model chunk (one microbatch) on a fresh manager.
- ``pack``: the first pack of a layer opens a group (``pop_forward_chunk(name)``, then
  ``on_group_start_forward(name)``, with ``name`` "core_attn" for every layer), then
  ``tensor_push(tensor)``; the tag is the handle.
- ``forward_layer_end``: ``on_group_commit_forward(name, [])`` of the open group, on the caller's
  stream: Megatron copies the group's tensors on its own D2H stream, which waits for the caller's.
- ``backward_layer_begin``: ``on_group_start_backward()`` for the layer whose backward ended
  (not for the first), which starts the reload of the next offloaded group on Megatron's H2D
  stream, then ``on_group_commit_backward(name)``, which makes the caller's stream wait for that
  layer's reload.
- ``unpack``: ``tensor_pop(tag)``.

Each pack, unpack and hint runs with the protocol's stream as PyTorch's current stream, through
``offloadkit.saved_tensor_hooks``'s adapter.

Declared profile, and why
-------------------------
- Offload decision ``opaque_predicate``: Megatron copies at the group's commit every tensor that
  ``tensor_need_offloading_checker`` accepts: on the GPU, not a parameter, not marked
  ``_do_not_offload`` or ``_TE_do_not_offload`` by TransformerEngine, and of at least
  ``min_offloaded_tensor_size`` *elements* (a byte threshold that changes with the dtype). The
  adapter reports that checker's answer for each pack in ``stats()``; a tensor of a layer that
  ends without ``forward_layer_end`` is never committed, so it stays on the device.
- ``origin_device``: a reload allocates on the device the tensor was offloaded from.
- Not ``dedup_by_storage``: two tensors over one storage are copied twice (Megatron only counts
  the duplicate bytes, as a diagnostic).
- No ``prefetch_bound``, ``pending_bound`` or ``backward_prefetch``: the library bounds nothing in
  bytes, and its reloads are PyTorch copies the executor does not see.
- ``cuda_executor`` only: PyTorch allocates and copies itself.

What the battery will see that is the library's design
------------------------------------------------------
- The first iteration only: Megatron calls ``reset()`` between training iterations, and the
  first one (its warmup) decides what later ones do (the last group of each name kept on the
  device, ``activation_offload_fraction``, ``delta_offload_bytes_across_pp_ranks``). The
  activation protocol has no iteration boundary, so every case runs in the warmup iteration, in
  which every accepted tensor is offloaded.
- ``tensor_pop`` of a tensor whose group was not reloaded by ``on_group_start_backward`` reloads
  it on the caller's stream without waiting for the group's offload event.
- One manager per process: ``PipelineOffloadManager`` is a singleton and a chunk's backward calls
  go through it, so a second object while one lives is refused (``Unsupported``).
- The host copies come from a pinned pool of the manager, kept for the manager's life and
  released when ``close()`` replaces it; PyTorch's pinned cache keeps them after that.

What the adapter adds
---------------------
- The hand-back of sources after Megatron's D2H stream: the library drops its reference to an
  offloaded tensor once its copy is queued, relying on ``record_stream(d2h_stream)`` and
  PyTorch's caching allocator to keep the memory until the copy is done. offloadkit's sources are
  not PyTorch allocations (``record_stream`` does nothing for them), so the adapter records an
  event on the manager's D2H stream and hands the source back once it has completed.
- Not entering the manager's context (``with PipelineOffloadManager.get_instance():``): that
  context enables PyTorch's saved-tensor hooks for autograd and TransformerEngine's
  ``CPUOffloadEnabled`` flag (it raises "TE CPU offload is not available" without
  TransformerEngine); the protocol calls the hooks' targets directly, with no autograd graph.
- The layer groups: the protocol's layers are the groups Megatron's model code opens and commits.
- The refusal of a second live object, and the translation of the library's errors
  (``AssertionError`` of its state checks as ``StateError``, ``KeyError`` / ``IndexError`` as
  ``OutOfRange``, PyTorch's out-of-memory error as ``OutOfMemory``), each with its message.
"""

import gc
import weakref
from typing import Any, Optional

from ..errors import StateError
from ..hooks import _HooksActivation
from ..protocol import CUDA_EXECUTOR, Plugin
from . import Unsupported, import_library, library_call, library_version

LIBRARY = "megatron.core"
DISTRIBUTION = "megatron-core"
MODULE = "megatron.core.pipeline_parallel.fine_grained_activation_offload"
COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
ADAPTER = "offloadkit.adapters.megatron"
CAPABILITIES = frozenset({CUDA_EXECUTOR, "opaque_predicate", "origin_device"})
#: The group every layer opens: one of Megatron's offloadable modules whose host copies come from
#: the manager's pinned pool.
GROUP = "core_attn"
#: Megatron's default ``min_offloaded_tensor_size`` (elements).
MIN_OFFLOADED_TENSOR_SIZE = 1024 * 1024
#: The threshold of ``make_offload_all``: every tensor of at least one element is offloaded.
OFFLOAD_ALL = 1

_live: Optional["weakref.ref[Any]"] = None


def activation(*, min_offloaded_tensor_size: int = MIN_OFFLOADED_TENSOR_SIZE) -> type:
    """The Activation class over Megatron's fine-grained offloading with this threshold
    (elements)."""
    module = import_library(MODULE, ADAPTER)
    interface = module.FineGrainedActivationOffloadingInterface

    class FineGrainedOffload(_HooksActivation):
        implementation = "megatron-fine-grained-offload"
        capabilities = CAPABILITIES

        def __init__(self, executor: Any, options: Any):
            global _live
            live = _live() if _live is not None else None
            if live is not None and live.manager is not None:
                raise Unsupported(
                    "a second Megatron fine-grained offloader while one is live: "
                    "PipelineOffloadManager is a process-wide singleton and a chunk's backward "
                    "calls (on_group_commit_backward) go through it")
            super().__init__(executor, options)
            with library_call("FineGrainedActivationOffloadingInterface.reset_instance()"):
                interface.reset_instance()
            call = (f"FineGrainedActivationOffloadingInterface.init_chunk_handler(pp_rank=0, "
                    f"vp_size=1, vp_stage=None, min_offloaded_tensor_size="
                    f"{min_offloaded_tensor_size}, delta_offload_bytes_across_pp_ranks=0, "
                    f"activation_offload_fraction=1.0)")
            with library_call(call):
                interface.init_chunk_handler(
                    pp_rank=0, vp_size=1, vp_stage=None,
                    min_offloaded_tensor_size=min_offloaded_tensor_size,
                    delta_offload_bytes_across_pp_ranks=0, activation_offload_fraction=1.0)
                self.manager = module.PipelineOffloadManager.get_instance()
                self.chunk = self.manager.cur_forward_chunk()
            if self.chunk is None:
                raise StateError(f"{call} made no forward chunk")
            self._group_open = False
            self._backward_started = False
            self._committing = False
            self._offloads = False
            _live = weakref.ref(self)

        def pack_hook(self, tensor: Any) -> Any:
            if not self._group_open:
                with library_call(f"PipelineOffloadManager.pop_forward_chunk(name={GROUP!r})"):
                    chunk = self.manager.pop_forward_chunk(name=GROUP)
                if chunk is not self.chunk:
                    raise StateError(f"PipelineOffloadManager.pop_forward_chunk(name={GROUP!r}) "
                                     f"returned {chunk!r}, not the chunk of this offloader")
                with library_call(f"ChunkOffloadHandler.on_group_start_forward({GROUP!r})"):
                    self.chunk.on_group_start_forward(GROUP)
                self._group_open = True
            with library_call("ChunkOffloadHandler.tensor_need_offloading_checker"):
                self._offloads = bool(self.chunk.tensor_need_offloading_checker(tensor))
            with library_call("ChunkOffloadHandler.tensor_push"):
                return self.chunk.tensor_push(tensor)

        def unpack_hook(self, packed: Any) -> Any:
            with library_call("ChunkOffloadHandler.tensor_pop"):
                return self.chunk.tensor_pop(packed)

        def pack(self, tensor: Any, stream: Any) -> int:
            handle = super().pack(tensor, stream)
            if not self._offloads:
                self._stats.offloaded_bytes -= tensor.nbytes
                self._stats.kept += 1
            return handle

        def _source_freed(self, nbytes: int, release: Any) -> None:
            if self._committing and self.executor.backend == "cuda":
                # Megatron dropped the source once its copy was queued on its D2H stream.
                import torch

                event = torch.cuda.Event()
                event.record(self.chunk.d2h_stream)
                self._given_up.append((event, nbytes, release))
                return
            super()._source_freed(nbytes, release)

        def forward_layer_end(self, layer: int, stream: Any) -> None:
            super().forward_layer_end(layer, stream)
            if not self._group_open:
                return
            self._committing = True
            try:
                with self._current(stream):
                    with library_call(
                            f"ChunkOffloadHandler.on_group_commit_forward({GROUP!r}, [])"):
                        self.chunk.on_group_commit_forward(GROUP, [])
            finally:
                self._committing = False
            self._group_open = False

        def backward_layer_begin(self, layer: int, stream: Any) -> None:
            super().backward_layer_begin(layer, stream)
            if not self.chunk.offload_groups:
                return  # nothing packed yet: Megatron has no group to reload or wait for
            with self._current(stream):
                if self._backward_started:
                    with library_call("ChunkOffloadHandler.on_group_start_backward()"):
                        self.chunk.on_group_start_backward()
                with library_call(f"ChunkOffloadHandler.on_group_commit_backward({GROUP!r})"):
                    self.chunk.on_group_commit_backward(GROUP)
            self._backward_started = True

        def close(self) -> None:
            if self.manager is None:
                return
            # The manager holds itself (its saved-tensor hooks are its bound methods) and the
            # chunk, which holds the tensors still packed: replace it and collect the cycle, so
            # that those sources go back now.
            self.manager = self.chunk = None
            with library_call("FineGrainedActivationOffloadingInterface.reset_instance()"):
                interface.reset_instance()
            gc.collect()
            super().close()

    return FineGrainedOffload


def _plugin(name: str, min_offloaded_tensor_size: int) -> Plugin:
    library = import_library(LIBRARY, ADAPTER)
    return Plugin(name=name, version=library_version(library, DISTRIBUTION),
                  activation=activation(min_offloaded_tensor_size=min_offloaded_tensor_size))


def make() -> Plugin:
    """Megatron's defaults (``min_offloaded_tensor_size`` 1048576 elements):
    ``python -m offloadkit check offloadkit.adapters.megatron:make``. Every tensor the batteries
    make is below that threshold, so Megatron keeps them all on the device: a run of this factory
    checks the bookkeeping of kept tensors, not an offload."""
    return _plugin("megatron-fine-grained-offload", MIN_OFFLOADED_TENSOR_SIZE)


def make_offload_all() -> Plugin:
    """``min_offloaded_tensor_size = 1`` (Megatron's ``--min-offloaded-tensor-size 1``): every
    tensor of at least one element is offloaded, so the batteries' tensors (bytes to a few MiB)
    go through Megatron's offload and reload paths:
    ``python -m offloadkit check offloadkit.adapters.megatron:make_offload_all``. The ecosystem's
    column for Megatron runs this factory."""
    return _plugin("megatron-fine-grained-offload", OFFLOAD_ALL)
