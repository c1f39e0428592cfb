"""offloadkit's optimized offload for PyTorch: the same C++ implementations the batteries check
(``offloadkit.optimized``), on torch tensors and torch streams, without a copy.

``Region``: device memory that torch tensors live in and that ``pause()`` gives back to the driver
(its contents kept in pinned host memory) and ``resume()`` brings back at the same address, so the
tensors, and CUDA graphs captured over them, stay valid. ``swap`` is an RL phase switch: one
region's copy out and another's copy in share the link, one direction each::

    import torch, offloadkit.torch as okt
    weights = okt.Region(2 << 30)                 # 2 GiB on the current device
    w = weights.tensor((4096, 4096), torch.bfloat16)
    w.normal_()
    weights.pause()                               # device memory back to the driver
    ...                                           # another phase uses the GPU
    weights.resume()                              # same address: w is valid again
    y = x @ w

``offload_activations``: a ``torch.autograd.graph.saved_tensors_hooks`` context manager, used where
torchtune's or TRL's ``OffloadActivations`` is: the tensors autograd saves in forward are copied to
pinned memory on a side stream (their device memory given back once each copy is done) and
uploaded again, ahead of use, in backward::

    offload = okt.offload_activations()
    for x, y in batches:
        with offload:
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

``TensorSet``: an optimizer's states (or any set of CUDA tensors) copied to one pinned arena and
back, their device memory freed in between (``coalesced_offloader``). ``Stash``: rows whose count
only the device knows, kept in device and pinned pages between forward and backward
(``paged_stash``).

All run on offloadkit's own cuda executor, one per process, ordered on torch's streams: an
operation takes a ``torch.cuda.Stream`` (default: the current stream of the object's device) and
its work is ordered after what that stream already holds.
"""

import sys
from typing import Any, Optional, Sequence

from . import optimized as _optimized
from .errors import LogicError, OutOfRange, StateError
from .torch_support import from_torch, torch_dtype, torch_stream
from .types import (LEGACY_DEFAULT_STREAM, Buffer, OffloadOptions, RegionConfig, StashConfig,
                    Stream, dtype_name)

#: Where ``Region.tensor`` places tensors: every tensor starts at a multiple of this many bytes.
ALIGNMENT = 256


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise LogicError(f"offloadkit.torch needs PyTorch, which this interpreter "
                         f"({sys.executable}) cannot import: {e}") from e
    return torch


def _device_index(device: Any) -> int:
    torch = _torch()
    if device is None:
        return int(torch.cuda.current_device())
    d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if d.type != "cuda":
        raise OutOfRange(f"device {device!r} is not a CUDA device (valid: an index, 'cuda', "
                         "'cuda:N' or a torch.device of type cuda)")
    return int(d.index) if d.index is not None else int(torch.cuda.current_device())


def as_stream(stream: Any = None, device: Any = None) -> Stream:
    """The ``offloadkit.Stream`` of a ``torch.cuda.Stream`` (default: the current stream of
    ``device``); torch's default stream (handle 0) is ``LEGACY_DEFAULT_STREAM``."""
    torch = _torch()
    if stream is None:
        stream = torch.cuda.current_stream(_device_index(device))
    if isinstance(stream, Stream):
        return stream
    if not hasattr(stream, "cuda_stream"):
        raise OutOfRange(f"stream {stream!r} is not a torch.cuda.Stream or an offloadkit.Stream")
    index = stream.device.index if stream.device.index is not None else _device_index(device)
    return Stream(int(stream.cuda_stream) or LEGACY_DEFAULT_STREAM, int(index))


class Region:
    """``nbytes`` of device memory on ``device`` that holds torch tensors (``tensor()``) and can be
    paused and resumed at the same address. ``kind``: "vmm" (``vmm_region``: pause gives the
    device memory back to the driver; touching a paused region faults) or "unified"
    (``unified_region``: managed memory; pause migrates its pages to the host, and a touch brings
    them back). ``chunk_bytes``: how much is mapped and copied at a time (0: offloadkit's
    default).

    Tensors from ``tensor()`` are views of the region: valid while it is active, their contents
    kept across a pause. ``close()`` (or leaving a ``with`` block) frees the region; views left
    after it must not be used."""

    def __init__(self, nbytes: int, device: Any = None, *, kind: str = "vmm",
                 chunk_bytes: int = 0):
        classes = {"vmm": _optimized.VmmRegion, "unified": _optimized.UnifiedRegion}
        if kind not in classes:
            raise OutOfRange(f"kind {kind!r} is not one of the valid values vmm, unified")
        self.device = _device_index(device)
        self._impl = classes[kind](None, RegionConfig(bytes=int(nbytes), device=self.device,
                                                      chunk_bytes=int(chunk_bytes)))
        self.kind = kind
        self.nbytes = int(nbytes)
        self._base = int(self._impl.info().data)
        self._used = 0

    @property
    def state(self) -> str:
        """"active", "paused" or "partial" (a pause or resume that failed midway: pause() or
        resume() finishes it; no byte is lost)."""
        return self._impl.info().state

    @property
    def used(self) -> int:
        """Bytes handed out by ``tensor()`` so far, alignment included."""
        return self._used

    def data_ptr(self) -> int:
        """The region's device address (the same for its whole life)."""
        return self._base

    def tensor(self, shape: Sequence[int], dtype: Any = None) -> Any:
        """A new tensor of ``shape`` and ``dtype`` (default torch.float32) placed in the region,
        after the ones before it (aligned to ALIGNMENT bytes). Its contents are unspecified."""
        torch = _torch()
        dtype = dtype if dtype is not None else torch.float32
        shape = tuple(int(x) for x in shape)
        if any(x < 0 for x in shape):
            raise OutOfRange(f"shape {shape} has a negative extent")
        count = 1
        for x in shape:
            count *= x
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        offset = -(-self._used // ALIGNMENT) * ALIGNMENT
        if offset + nbytes > self.nbytes:
            raise OutOfRange(f"Region.tensor: {nbytes} bytes at offset {offset} do not fit: the "
                             f"region holds {self.nbytes} bytes, {self.nbytes - offset} of them "
                             "free")
        self._used = offset + nbytes
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=torch.device("cuda", self.device))
        view = torch.as_tensor(Buffer(self._base + offset, nbytes, "device", self.device, "cuda"),
                               device=torch.device("cuda", self.device))
        return view.view(dtype).view(shape)

    def pause(self, mode: str = "preserve", stream: Any = None) -> None:
        """Waits for the work queued on ``stream`` (default: the current stream), copies the
        contents to pinned host memory (unless ``mode`` is "discard") and gives the device memory
        back. Returns once it is given back."""
        self._impl.pause(mode, as_stream(stream, self.device))

    def resume(self, stream: Any = None) -> None:
        """Brings the device memory back at the same address and copies the contents in, in order
        on ``stream``: work issued to it afterwards sees them."""
        self._impl.resume(as_stream(stream, self.device))

    def swap(self, other: "Region", mode: str = "preserve", stream: Any = None) -> None:
        """Pauses this region while resuming ``other`` (a region of the same device), one copy
        direction each at once: an RL phase switch. Work issued to ``stream`` afterwards sees
        other's contents."""
        if not isinstance(other, Region):
            raise OutOfRange(f"Region.swap: other is {other!r}, not an offloadkit.torch.Region")
        self._impl.swap_with(other._impl, mode, as_stream(stream, self.device))

    def close(self) -> None:
        """Frees the device memory, the host copy and the address range (work still queued that
        uses the region must be finished)."""
        self._impl.close()

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._impl.closed else self.state
        return (f"offloadkit.torch.Region({self.nbytes} bytes, {self.kind}, cuda:{self.device}, "
                f"{state}, {self._used} used)")


class _Packed:
    """What autograd keeps for an offloaded tensor."""

    __slots__ = ("handle", "layer", "device")

    def __init__(self, handle: int, layer: int, device: int):
        self.handle = handle
        self.layer = layer
        self.device = device


class _Lease:
    """The memory of an unpacked tensor, lent to torch: torch keeps this object as long as the
    tensor's storage lives, and its end gives the memory back to the offloader (whose reuse is
    ordered after the work issued on the unpack stream)."""

    __slots__ = ("__cuda_array_interface__", "_release")

    def __init__(self, buffer: Buffer, release: Any):
        self.__cuda_array_interface__ = buffer.__cuda_array_interface__
        self._release = release

    def __del__(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class offload_activations:
    """Offloads what autograd saves in forward (inside ``with``) to pinned host memory, and brings
    it back in backward, through offloadkit's ``async_offloader``.

    Tensors stay on the device (saved as they are) when they have fewer than ``min_bytes`` bytes,
    are not CUDA tensors, are parameters (``torch.nn.Parameter``), are not contiguous, or have a
    dtype offload does not carry (bool, complex, float8). Each offloaded tensor is a layer of its
    own unless ``layer_end()`` is called: then the tensors saved between two calls form one layer.
    In backward, the ``prefetch_layers`` layers next in backward order are uploaded ahead of use,
    within ``prefetch_bytes`` of device memory. ``max_pending_bytes`` (0: no bound) bounds the
    device memory of tensors whose copy out is still in flight (forward then waits for copies).

    One object serves every step: enter it for each forward; backward may run after the ``with``
    block has ended. Each saved tensor comes back once: a second backward over the same graph
    (``retain_graph=True``) raises OutOfRange. ``close()`` gives back its pinned and device
    pools."""

    def __init__(self, min_bytes: int = 1 << 20, *, prefetch_bytes: int = 1 << 30,
                 prefetch_layers: int = 2, max_pending_bytes: int = 0):
        torch = _torch()
        options = OffloadOptions(keep_threshold=int(min_bytes), prefetch_bytes=int(prefetch_bytes),
                                 prefetch_layers=int(prefetch_layers),
                                 max_pending_bytes=int(max_pending_bytes))
        self._impl = _optimized.AsyncActivation(None, options)
        self.min_bytes = int(min_bytes)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._layer = 0
        self._layers_by_caller = False
        self._backward_layer: Optional[int] = None
        self._parameter_types = (torch.nn.Parameter,)

    def layer_end(self) -> None:
        """Ends the current layer (call it after each block's forward, inside ``with``)."""
        self._layers_by_caller = True
        self._impl.forward_layer_end(self._layer, as_stream())
        self._layer += 1

    def stats(self) -> Any:
        """The offloader's counters (``offloadkit.ActivationStats``)."""
        return self._impl.stats()

    def synchronize(self) -> None:
        """Waits for the offloader's own copies."""
        self._impl.synchronize()

    def close(self) -> None:
        """Waits for the copies and gives back every pool (unpacked tensors must be gone)."""
        self._impl.close()

    def __enter__(self) -> "offload_activations":
        self._layer = 0
        self._backward_layer = None
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    def _keeps(self, t: Any) -> bool:
        if not t.is_cuda or isinstance(t, self._parameter_types) or not t.is_contiguous():
            return True
        if t.numel() * t.element_size() < self.min_bytes:
            return True
        try:
            dtype_name(t.dtype)
        except OutOfRange:  # bool, complex, float8: dtypes offload does not carry
            return True
        return False

    def _pack(self, t: Any) -> Any:
        if self._keeps(t):
            return t
        device = int(t.device.index)
        stream = as_stream(None, device)
        handle = self._impl.pack(from_torch(t), stream)
        packed = _Packed(handle, self._layer, device)
        if not self._layers_by_caller:
            self._impl.forward_layer_end(self._layer, stream)
            self._layer += 1
        return packed

    def _unpack(self, packed: Any) -> Any:
        if not isinstance(packed, _Packed):
            return packed
        torch = _torch()
        stream = as_stream(None, packed.device)
        if packed.layer != self._backward_layer:
            self._impl.backward_layer_begin(packed.layer, stream)
            self._backward_layer = packed.layer
        t = self._impl.unpack(packed.handle, stream)
        device = torch.device("cuda", t.device)
        if t.nbytes == 0:
            t.release()
            return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device=device)
        flat = torch.as_tensor(_Lease(t.data, t.release), device=device)
        return flat.view(torch_dtype(t.dtype)).view(t.shape)


def _tensor_nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def _cuda_tensors(what: str, tensors: Sequence[Any], device: Any) -> Any:
    """(the device index, the tensors as a list): CUDA tensors of one device, contiguous."""
    torch = _torch()
    tensors = list(tensors)
    index = None if device is None else _device_index(device)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise OutOfRange(f"{what}: tensor {i} is {type(t).__name__} "
                             f"{getattr(t, 'device', '')}, not a CUDA tensor")
        if index is None:
            index = int(t.device.index)
        if int(t.device.index) != index:
            raise OutOfRange(f"{what}: tensor {i} is on cuda:{t.device.index}, not cuda:{index} "
                             "(one device per set)")
        if not t.is_contiguous():
            raise OutOfRange(f"{what}: tensor {i} (shape {tuple(t.shape)}, strides "
                             f"{tuple(t.stride())}) is not contiguous")
    return (index if index is not None else _device_index(None)), tensors


class TensorSet:
    """CUDA tensors of one device (an optimizer's states, a model's weights) copied to one pinned
    host arena and back by offloadkit's ``coalesced_offloader``: the arena is laid out once per set
    of sizes and kept between cycles, so the steady state allocates no host memory; one copy per
    run of tensors adjacent in device memory, none synchronizing the host::

        states = okt.TensorSet([v for s in optimizer.state.values() for v in s.values()
                                if torch.is_tensor(v) and v.is_cuda])
        states.offload(free=True)     # copied out; their device memory back to torch's allocator
        ...                           # another phase (generation) uses the GPU
        states.reload()               # device memory again, contents copied back
        optimizer.step()

    ``offload(free=True)`` frees each tensor's storage once the copy is queued (torch reuses the
    memory only after the copy, in stream order); ``reload()`` then allocates it again, at new
    addresses, and copies the contents in. Without ``free`` the tensors keep their memory and
    ``reload()`` copies the contents back into them (undoing later changes). Both are ordered on
    ``stream`` (default: the current stream): work issued to it afterwards sees the result."""

    def __init__(self, tensors: Sequence[Any], device: Any = None):
        self.device, self.tensors = _cuda_tensors("TensorSet", tensors, device)
        self._impl = _optimized.CoalescedArena(None)
        self.freed = False

    def _buffers(self) -> Any:
        return [Buffer(int(t.data_ptr()), _tensor_nbytes(t), "device", self.device, "cuda")
                for t in self.tensors]

    @property
    def nbytes(self) -> int:
        """The set's bytes."""
        return sum(_tensor_nbytes(t) for t in self.tensors)

    @property
    def host_bytes(self) -> int:
        """Pinned host bytes the arena holds now (its alignment included)."""
        return int(self._impl.info().host_bytes)

    @property
    def holds_copy(self) -> bool:
        """Whether a complete host copy is held (an offload since the last failure)."""
        return bool(self._impl.info().holds_copy)

    def offload(self, stream: Any = None, free: bool = False) -> None:
        """Copies every tensor to the arena, in order on ``stream``; with ``free``, gives their
        device memory back to torch's allocator (each tensor must own its whole storage)."""
        if self.freed:
            raise StateError("TensorSet.offload: the tensors' memory was freed by offload(free="
                             "True); reload() first")
        if free:
            for i, t in enumerate(self.tensors):
                storage = t.untyped_storage()
                if t.storage_offset() != 0 or storage.nbytes() != _tensor_nbytes(t):
                    raise OutOfRange(
                        f"TensorSet.offload(free=True): tensor {i} is a view ({_tensor_nbytes(t)} "
                        f"bytes at offset {t.storage_offset() * t.element_size()} of a storage of "
                        f"{storage.nbytes()}): free needs tensors that own their whole storage")
        s = as_stream(stream, self.device)
        self._impl.offload(self._buffers(), s, event=False)
        if free:
            copying = torch_stream(s)
            for t in self.tensors:
                t.record_stream(copying)  # the allocator reuses it after the copy, not before
                t.untyped_storage().resize_(0)
            self.freed = True

    def reload(self, stream: Any = None) -> None:
        """Copies the arena's contents back in order on ``stream``: into fresh device memory
        after ``offload(free=True)``, else into the tensors as they are."""
        s = as_stream(stream, self.device)
        if self.freed:
            torch = _torch()
            copying = torch_stream(s)
            for t in self.tensors:
                t.untyped_storage().resize_(_tensor_nbytes(t))  # for the current stream ...
                t.record_stream(copying)  # ... and written on `stream`
            # The memory is free in the current stream's order: the copies wait for it.
            copying.wait_stream(torch.cuda.current_stream(self.device))
            self.freed = False
        self._impl.reload(self._buffers(), s, event=False)

    def release(self) -> None:
        """Frees the pinned arena (after the copies that use it); the next offload allocates it
        again."""
        self._impl.release()

    def close(self) -> None:
        """Frees everything the set holds (the tensors stay as they are)."""
        self._impl.close()

    def __enter__(self) -> "TensorSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Stash:
    """offloadkit's ``paged_stash`` on torch tensors: the valid rows of a tensor saved between its
    forward and its backward (a MoE layer's dispatched tokens, whose count only the device knows)
    kept in pages of ``rows_per_page`` rows, ``device_pages`` of them in device memory and
    ``pinned_pages`` in pinned host memory; a key that does not fit is dropped and recorded in
    the status word (``snapshot().status``). The row count is a one-element int64 CUDA tensor read
    in stream order and never by the host, so a CUDA graph of a step replays with other counts::

        stash = okt.Stash((hidden,), torch.bfloat16, max_rows=capacity, rows_per_page=256,
                          device_pages=64, pinned_pages=256)
        stash.stash((0, layer, microbatch), tokens, count)    # tokens: (capacity, hidden)
        ...
        stash.restore((0, layer, microbatch), tokens, count)  # first `count` rows back

    Keys are ``(vp, layer, microbatch)``; ``max_keys`` distinct keys over the stash's life."""

    def __init__(self, row_shape: Sequence[int], dtype: Any, max_rows: int, rows_per_page: int,
                 device_pages: int, pinned_pages: int = 0, max_keys: int = 64,
                 device: Any = None):
        torch = _torch()
        self.device = _device_index(device)
        self.row_shape = tuple(int(x) for x in row_shape)
        self.dtype = dtype
        row_bytes = torch.empty(self.row_shape, dtype=dtype, device="meta").numel() * \
            torch.empty((), dtype=dtype, device="meta").element_size()
        self.max_rows = int(max_rows)
        self.config = StashConfig(row_bytes=int(row_bytes), rows_per_page=int(rows_per_page),
                                  max_rows=self.max_rows, device_pages=int(device_pages),
                                  pinned_pages=int(pinned_pages), max_keys=int(max_keys),
                                  device=self.device)
        self._impl = _optimized.PagedStash(None, self.config, as_stream(None, self.device))

    def _rows_tensor(self, what: str, rows: Any) -> Buffer:
        torch = _torch()
        if not isinstance(rows, torch.Tensor) or not rows.is_cuda or rows.numel() != 1 or \
                rows.dtype not in (torch.int64, torch.uint64) or \
                int(rows.device.index) != self.device:
            raise OutOfRange(f"Stash.{what}: the row count is {rows!r}; give a one-element int64 "
                             f"tensor on cuda:{self.device} (the host never reads it)")
        return Buffer(int(rows.data_ptr()), 8, "device", self.device, "cuda")

    def _rows_buffer(self, what: str, t: Any) -> Buffer:
        torch = _torch()
        shape = (self.max_rows,) + self.row_shape
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != self.dtype \
                or not t.is_cuda or int(t.device.index) != self.device or not t.is_contiguous():
            raise OutOfRange(
                f"Stash.{what}: tensor {tuple(getattr(t, 'shape', ()))} "
                f"{getattr(t, 'dtype', type(t).__name__)} on {getattr(t, 'device', '?')}: give a "
                f"contiguous {self.dtype} tensor of shape {shape} on cuda:{self.device}")
        return Buffer(int(t.data_ptr()), _tensor_nbytes(t), "device", self.device, "cuda")

    def stash(self, key: Sequence[int], src: Any, rows: Any, stream: Any = None) -> None:
        """Keeps the first ``rows`` rows of ``src`` (shape ``(max_rows, *row_shape)``) under
        ``key``, in order on ``stream``; ``src`` may be reused by work issued to ``stream``
        afterwards."""
        self._impl.stash(tuple(key), self._rows_buffer("stash", src),
                         self._rows_tensor("stash", rows), as_stream(stream, self.device))

    def restore(self, key: Sequence[int], dst: Any, rows_out: Any = None,
                stream: Any = None) -> None:
        """Copies the key's rows into the first rows of ``dst`` (the rest untouched), writes their
        count into ``rows_out`` (0 when the key held nothing), frees the key's pages."""
        out = None if rows_out is None else self._rows_tensor("restore", rows_out)
        self._impl.restore(tuple(key), self._rows_buffer("restore", dst), out,
                           as_stream(stream, self.device))

    def snapshot(self, stream: Any = None) -> Any:
        """Free pages of each tier, the live keys and the status word (waits for ``stream``)."""
        return self._impl.snapshot(as_stream(stream, self.device))

    def reset(self, stream: Any = None) -> None:
        """Drops every key, frees every page and clears the status word."""
        self._impl.reset(as_stream(stream, self.device))

    def clear_status(self, stream: Any = None) -> None:
        """Clears the status word only."""
        self._impl.clear_status(as_stream(stream, self.device))

    def close(self) -> None:
        """Frees the pages and the page table."""
        self._impl.close()

    def __enter__(self) -> "Stash":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ALIGNMENT", "Region", "Stash", "TensorSet", "as_stream", "offload_activations"]
