"""Saved-tensor hooks as an activation implementation.

PyTorch offloads activations through a pair of hooks (``torch.autograd.graph.saved_tensors_hooks``:
``pack_hook(tensor) -> packed`` in forward, ``unpack_hook(packed) -> tensor`` in backward), e.g.
``torch.autograd.graph.save_on_cpu(pin_memory=True)``. ``saved_tensor_hooks`` turns such a pair
into an ``Activation`` feature, so that offloadkit's activation battery checks it::

    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    activation = offloadkit.saved_tensor_hooks(hooks.pack_hook, hooks.unpack_hook,
                                               implementation="save_on_cpu")

How the adapter drives the hooks:

- ``pack(tensor, stream)``: the tensor becomes a ``torch.Tensor`` over its own memory (no copy,
  through ``__cuda_array_interface__``) and the hook runs with ``stream`` as PyTorch's current
  stream, as autograd runs it on the stream that produced the tensor. The source goes back to its
  owner in stream order, as PyTorch's caching allocator would reuse it: when the last PyTorch
  tensor over its memory is freed (at once for a hook that copies it, only at unpack for a hook
  that keeps it), an event is recorded on the stream of that call (``stream`` of the pack or the
  unpack), and the source is handed back once the event has completed, so that a hook's
  ``non_blocking=True`` copy is finished first. Completed events are collected at every call;
  ``synchronize`` and ``close`` wait for all of them, and ``pack`` waits for the oldest while the
  sources held exceed ``max_pending_bytes`` (counted in ``pending_waits``). A hook that copies on
  a side stream of its own must make that stream wait, or ``record_stream`` the source, as it
  must in PyTorch: the adapter sees only the stream it was called on.
- ``unpack(handle, stream)``: the hook runs with ``stream`` current; the tensor it returns is
  handed back, and released (its reference dropped, so PyTorch's caching allocator reuses the
  memory in the order of the stream it was allocated on) when the caller releases it.
- Hooks have no threshold: ``keep_threshold`` is 0 and every tensor goes through the hooks.
- On the host executor (CPU tensors, e.g. Debian's CPU-only PyTorch) the adapter synchronizes the
  stream before a hook reads the source, and before a returned CPU tensor goes back to PyTorch. A
  CPU tensor is host memory, not the host executor's device memory, so the battery counts it as
  returned to the wrong device: hooks that keep tensors on the CPU are not offload to check there.

PyTorch calls CUDA itself, so the executor cannot see or fail its allocations: such a feature
declares ``cuda_executor`` (not ``host_executor`` or ``executor_allocations``), plus the promises
it keeps (``origin_device``, ``prefetch_bound``, ``pending_bound``).
"""

import collections
import contextlib
import itertools
import weakref

from .errors import OutOfRange
from .protocol import CUDA_EXECUTOR, Activation
from .torch_support import as_torch, from_torch, torch_stream
from .types import ActivationStats, Buffer, Tensor


def saved_tensor_hooks(pack_hook, unpack_hook, *, implementation="saved-tensor-hooks",
                       capabilities=(CUDA_EXECUTOR,)):
    """An Activation class (for ``Plugin(activation=...)``) running ``pack_hook`` and
    ``unpack_hook``; ``capabilities`` are what the hooks promise."""

    class SavedTensorHooks(_HooksActivation):
        pass

    SavedTensorHooks.pack_hook = staticmethod(pack_hook)
    SavedTensorHooks.unpack_hook = staticmethod(unpack_hook)
    SavedTensorHooks.implementation = implementation
    SavedTensorHooks.capabilities = frozenset(capabilities)
    return SavedTensorHooks


class _HooksActivation(Activation):
    pack_hook = None
    unpack_hook = None

    def __init__(self, executor, options):
        self.executor = executor
        self.options = options
        self.keep_threshold = 0
        self._packed = {}
        self._ids = itertools.count(1)
        self._stats = ActivationStats()
        # Sources whose last PyTorch tensor is gone, oldest first: (event, nbytes, release),
        # handed back once the event (recorded on the stream of the call that freed them) is done.
        self._given_up = collections.deque()
        self._pending_bytes = 0
        self._call_stream = None  # the stream of the pack or unpack in progress

    def _source_freed(self, nbytes, release):
        """The last PyTorch tensor over a source was freed: hand it back in stream order."""
        stream = self._call_stream
        if stream is None or self.executor.backend != "cuda":
            # Outside a call (close), or on the host, where the stream was synchronized before
            # the hook ran: nothing of it is in flight.
            self._pending_bytes -= nbytes
            release()
            return
        import torch

        event = torch.cuda.Event()
        event.record(torch_stream(stream))
        self._given_up.append((event, nbytes, release))

    def _hand_back(self, wait=False, until_bytes=None):
        """Hands back the sources whose events have completed; with ``wait``, waits for every
        event; with ``until_bytes``, waits for the oldest until the sources still held total at
        most that (counting each wait)."""
        while self._given_up:
            event, nbytes, release = self._given_up[0]
            if not event.query():
                must_wait = wait or (until_bytes is not None and
                                     self._pending_bytes > until_bytes)
                if not must_wait:
                    break
                event.synchronize()
                if not wait:
                    self._stats.pending_waits += 1
            self._given_up.popleft()
            self._pending_bytes -= nbytes
            release()

    def _current(self, stream):
        """PyTorch's stream context for a call on ``stream``: the cuda executor's streams are CUDA
        streams; on the host executor the hooks run on the host, after the stream's work."""
        if self.executor.backend == "cuda":
            import torch

            return torch.cuda.stream(torch_stream(stream))
        self.executor.synchronize(stream)
        return contextlib.nullcontext()

    def pack(self, tensor, stream):
        self._hand_back()
        # A view of our own over the source's memory: the source goes back to its owner (in
        # stream order) when the view, and with it every PyTorch tensor over that memory, has
        # been freed.
        data = tensor.data
        view = Buffer(data.ptr, tensor.nbytes, data.kind, tensor.device, data.backend, stream)
        given_back = weakref.finalize(view, self._source_freed, tensor.nbytes, tensor.release)
        self._call_stream = stream
        try:
            with self._current(stream):
                source = as_torch(Tensor(view, tensor.nbytes, tensor.device, tensor.dtype,
                                         tensor.shape))
                packed = self.pack_hook(source)
            self._pending_bytes += tensor.nbytes
            del source, view
        except BaseException:
            # Not packed: the caller keeps the buffer.
            given_back.detach()
            raise
        finally:
            self._call_stream = None
        if self.options.max_pending_bytes:
            self._hand_back(until_bytes=self.options.max_pending_bytes)
        handle = next(self._ids)
        self._packed[handle] = (packed, tensor.nbytes, tensor.device)
        self._stats.packed += 1
        self._stats.offloaded_bytes += tensor.nbytes
        return handle

    def unpack(self, handle, stream):
        if handle not in self._packed:
            raise OutOfRange(f"handle {handle} is not packed (never packed, or already unpacked)")
        packed, nbytes, device = self._packed[handle]
        self._hand_back()
        self._call_stream = stream
        try:
            with self._current(stream):
                out = self.unpack_hook(packed).contiguous()
            # Only now is the handle spent: a hook that raised leaves it packed for a retry. A
            # source the hook kept is freed here, after its reads on ``stream``.
            del self._packed[handle], packed
        finally:
            self._call_stream = None
        self._stats.restored_bytes += nbytes
        self._stats.demand_uploads += 1
        if out.is_cuda:
            return from_torch(out)
        # A CPU tensor has no stream to order its reuse: the caller's work on the unpack stream
        # has to finish before the memory goes back to PyTorch.
        executor = self.executor
        return from_torch(out, device=device, before=lambda: executor.synchronize(stream))

    def forward_layer_end(self, layer, stream):
        self._hand_back()

    def backward_layer_begin(self, layer, stream):
        self._hand_back()

    def synchronize(self):
        self._hand_back(wait=True)

    def stats(self):
        return self._stats

    def close(self):
        # Whatever was never unpacked: dropping the packed objects frees their host copies (and
        # gives back sources a hook kept, at once: outside a call); then every source whose
        # event is still pending, once it is done.
        self._packed.clear()
        self._hand_back(wait=True)
