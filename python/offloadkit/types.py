"""The plain values that cross the Python protocol: handles, buffers, tensors, configurations and
the reports an implementation returns.

Handles are the native ones: a ``Stream`` *is* its raw handle as an ``int`` (a ``cudaStream_t`` on
the cuda executor, opaque on the host executor) and also carries its device, so that
``torch.cuda.ExternalStream(int(stream))`` and the executor both take it. A ``Buffer`` is an address
and a size that exposes ``__cuda_array_interface__`` (version 3, with its stream) where it is device
memory of the cuda executor, and NumPy's ``__array_interface__`` where the host can read it (every
buffer of the host executor; pinned and pageable memory on both), so ``torch.as_tensor``, CuPy,
Triton or ``numpy.asarray`` use it without a copy.
"""

import ctypes
import dataclasses
from collections import namedtuple
from typing import Callable, Optional, Sequence, Tuple

from .errors import OutOfRange, StateError

MEMORY_KINDS = ("device", "pinned", "pageable")
BACKENDS = ("host", "cuda")

# NumPy refuses a NULL data pointer even for zero bytes; an empty buffer with no address points
# here instead (nothing is ever read or written through it).
_EMPTY = ctypes.create_string_buffer(1)


#: ``cudaStreamLegacy``: the handle of the legacy default stream that CUDA takes in any call, where
#: PyTorch's default stream is 0 (``torch.cuda.default_stream().cuda_stream``), which offloadkit's
#: cuda executor refuses as a null stream (the mark of a stream never created).
LEGACY_DEFAULT_STREAM = 1


class Stream(int):
    """A stream: the native handle as an int, plus ``device``.

    Pass back the Stream objects you were given or created; a plain int given to the executor is
    taken as a stream of device 0. The device's default stream is ``LEGACY_DEFAULT_STREAM`` (not
    0, which the cuda executor refuses).
    """

    def __new__(cls, handle: int, device: int = 0):
        self = super().__new__(cls, handle)
        self.device = int(device)
        return self

    def __repr__(self):
        return f"Stream(0x{int(self):x}, device={self.device})"


class Event(int):
    """An event: the native handle as an int (``cudaEvent_t`` on cuda), plus ``device``."""

    def __new__(cls, handle: int, device: int = 0):
        self = super().__new__(cls, handle)
        self.device = int(device)
        return self

    def __repr__(self):
        return f"Event(0x{int(self):x}, device={self.device})"


class Graph(int):
    """A captured, instantiated graph (``cudaGraphExec_t`` on cuda)."""

    def __repr__(self):
        return f"Graph(0x{int(self):x})"


@dataclasses.dataclass(frozen=True)
class Physical:
    """Physical memory created for a virtual range (``CUmemGenericAllocationHandle`` on cuda)."""

    value: int
    device: int
    nbytes: int


class Buffer:
    """``nbytes`` bytes at address ``ptr``: memory of ``kind`` ("device", "pinned" or "pageable")
    on ``device``, of the executor whose backend is ``backend`` ("host" or "cuda").

    ``stream`` is the stream in whose order the contents are valid (the stream of the operation
    that handed the buffer over), or None. It is what ``__cuda_array_interface__`` reports, so a
    consumer such as PyTorch orders its own stream after it.
    """

    __slots__ = ("ptr", "nbytes", "kind", "device", "backend", "stream", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, kind: str = "device", device: int = 0,
                 backend: str = "host", stream: Optional[int] = None):
        if kind not in MEMORY_KINDS:
            raise OutOfRange(f"memory kind {kind!r} is not one of {', '.join(MEMORY_KINDS)}")
        if backend not in BACKENDS:
            raise OutOfRange(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        if nbytes < 0:
            raise OutOfRange(f"nbytes = {nbytes} is outside [0, 2^64)")
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.kind = kind
        self.device = int(device)
        self.backend = backend
        self.stream = stream

    def __repr__(self):
        return (f"Buffer(0x{self.ptr:x}, {self.nbytes} bytes, {self.kind}, device {self.device}, "
                f"{self.backend})")

    def __int__(self):
        return self.ptr

    def __len__(self):
        return self.nbytes

    @property
    def host_accessible(self) -> bool:
        """Whether the host may read and write the bytes (after synchronizing their stream)."""
        return self.backend == "host" or self.kind != "device"

    def at(self, offset: int, nbytes: Optional[int] = None) -> "Buffer":
        """The sub-buffer of ``nbytes`` bytes (default: to the end) from ``offset``."""
        if offset < 0 or offset > self.nbytes:
            raise OutOfRange(f"offset = {offset} is outside [0, {self.nbytes}] of {self!r}")
        if nbytes is None:
            nbytes = self.nbytes - offset
        if nbytes < 0 or offset + nbytes > self.nbytes:
            raise OutOfRange(f"nbytes = {nbytes} at offset {offset} is outside the "
                             f"{self.nbytes} bytes of {self!r}")
        return Buffer(self.ptr + offset if self.ptr else 0, nbytes, self.kind, self.device,
                      self.backend, self.stream)

    @property
    def __array_interface__(self):
        if not self.host_accessible:
            raise AttributeError(
                "a device buffer of the cuda executor has no __array_interface__ (the host cannot "
                "read it); use __cuda_array_interface__, or copy it to pinned memory")
        ptr = self.ptr if self.ptr or self.nbytes else ctypes.addressof(_EMPTY)
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    @property
    def __cuda_array_interface__(self):
        if self.backend != "cuda" or self.kind != "device":
            raise AttributeError(
                f"a {self.kind} buffer of the {self.backend} executor has no "
                "__cuda_array_interface__; use __array_interface__ (NumPy)")
        stream = None
        if self.stream is not None:
            # The interface reserves 0; the legacy default stream is 1.
            stream = int(self.stream) or LEGACY_DEFAULT_STREAM
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": stream}

    def numpy(self):
        """The bytes as a writable ``numpy.uint8`` array, without a copy (host-accessible memory
        only). Synchronize the buffer's stream first: the host does not wait for queued work."""
        import numpy

        if not self.host_accessible:
            raise StateError(f"{self!r} is device memory of the cuda executor: the host cannot "
                             "read it (copy it to a pinned buffer with executor.copy)")
        if self.nbytes == 0:
            return numpy.empty(0, dtype=numpy.uint8)
        return numpy.asarray(self)


DTYPES = ("u8", "i8", "f16", "bf16", "f32", "i32", "f64", "i64")
DTYPE_SIZES = {"u8": 1, "i8": 1, "f16": 2, "bf16": 2, "f32": 4, "i32": 4, "f64": 8, "i64": 8}
_NUMPY_DTYPES = {"u8": "uint8", "i8": "int8", "f16": "float16", "bf16": "uint16", "f32": "float32",
                 "i32": "int32", "f64": "float64", "i64": "int64"}
_DTYPE_ALIASES = {"uint8": "u8", "int8": "i8", "float16": "f16", "half": "f16",
                  "bfloat16": "bf16", "float32": "f32", "float": "f32", "int32": "i32",
                  "int": "i32", "float64": "f64", "double": "f64", "int64": "i64", "long": "i64"}


def dtype_name(dtype) -> str:
    """The protocol's name of a dtype ("u8", "f32", ...) from that name, a NumPy or PyTorch dtype
    or its name ("float32", torch.bfloat16)."""
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_SIZES:
        raise OutOfRange(f"dtype {dtype!r} is not one of {', '.join(DTYPES)} (or their NumPy / "
                         "PyTorch names)")
    return name


class Tensor:
    """A device tensor as activation offload sees it: ``data`` (a Buffer), its ``nbytes``, the
    ``device`` it lives on, ``dtype`` ("u8", "i8", "f16", "bf16", "f32", "i32", "f64", "i64") and
    ``shape``.

    ``release`` gives the buffer back to its owner. Whoever holds the tensor last calls it exactly
    once: ``Activation.pack`` takes ownership of the tensor it is given and calls
    ``tensor.release()`` once nothing it issued still reads the buffer; a tensor returned by
    ``Activation.unpack`` belongs to the caller, who calls its ``release`` (may be None: nothing to
    give back) once the work that reads it has been issued on the unpack stream.
    """

    __slots__ = ("data", "nbytes", "device", "dtype", "shape", "_release")

    def __init__(self, data, nbytes: int, device: int, dtype, shape: Sequence[int],
                 release: Optional[Callable[[], None]] = None):
        self.data = data
        self.nbytes = int(nbytes)
        self.device = int(device)
        self.dtype = dtype_name(dtype)
        self.shape = tuple(int(x) for x in shape)
        self._release = release

    def __repr__(self):
        return (f"Tensor({self.dtype}{list(self.shape)}, {self.nbytes} bytes, device "
                f"{self.device})")

    def release(self):
        """Gives the buffer back to its owner (exactly once)."""
        if self._release is not None:
            self._release()

    @property
    def has_release(self) -> bool:
        return self._release is not None

    def numpy(self):
        """The contents as a NumPy array of the tensor's dtype and shape (bf16 as uint16), without
        a copy; host-accessible memory only."""
        import numpy

        flat = self.data.numpy() if isinstance(self.data, Buffer) else numpy.asarray(self.data)
        return flat.view(numpy.dtype(_NUMPY_DTYPES[self.dtype])).reshape(self.shape)


# ---- paged stash ----------------------------------------------------------------------------

StashKey = namedtuple("StashKey", "vp layer microbatch")
StashKey.__doc__ = "One saved activation: (virtual-pipeline stage, layer, microbatch)."

# Field widths of offloadkit's fixed-width key codec (key.hpp): vp < 256, layer and microbatch <
# 4096. A stash given a key outside them raises OutOfRange.
KEY_LIMITS = StashKey(256, 4096, 4096)


def check_key(key: StashKey) -> None:
    """Raises OutOfRange naming the field, its value and the limit when ``key`` does not fit
    offloadkit's key codec (what the C++ stashes do)."""
    for field, value, limit in zip(StashKey._fields, key, KEY_LIMITS):
        if not 0 <= value < limit:
            raise OutOfRange(f"{field} = {value} is outside [0, {limit}) (key {tuple(key)})")


def encode_key(key: StashKey) -> int:
    """offloadkit's collision-free 32-bit code of a key (checked)."""
    check_key(key)
    return (key.vp << 24) | (key.layer << 12) | key.microbatch


@dataclasses.dataclass(frozen=True)
class StashConfig:
    row_bytes: int
    rows_per_page: int
    max_rows: int
    device_pages: int
    pinned_pages: int
    max_keys: int
    device: int = 0

    @property
    def page_bytes(self) -> int:
        return self.row_bytes * self.rows_per_page

    def pages_for(self, rows: int) -> int:
        """Pages a key of ``rows`` rows occupies."""
        return (rows + self.rows_per_page - 1) // self.rows_per_page


STASH_STATUS_CODES = ("ok", "overflow", "double_stash", "restore_empty", "rows_too_large")


@dataclasses.dataclass
class StashStatus:
    """The sticky status word: the first failure since the last clear. ``code`` is one of
    STASH_STATUS_CODES; ``needed`` the pages the key needed, ``free_device`` and ``free_pinned``
    the free pages of each tier when it failed."""

    code: str = "ok"
    key: StashKey = StashKey(0, 0, 0)
    rows: int = 0
    needed: int = 0
    free_device: int = 0
    free_pinned: int = 0

    @property
    def ok(self) -> bool:
        return self.code == "ok"


@dataclasses.dataclass
class StashEntry:
    """One live key: its rows and the pages of each tier it holds; ``page_ids`` (device tier
    0..D-1, pinned tier D..D+P-1) where the stash declares the ``page_ids`` capability."""

    key: StashKey
    rows: int
    device_pages: int
    pinned_pages: int
    page_ids: Sequence[int] = ()


@dataclasses.dataclass
class StashSnapshot:
    free_device: int
    free_pinned: int
    entries: Sequence[StashEntry] = ()
    status: StashStatus = dataclasses.field(default_factory=StashStatus)
    free_ids: Sequence[int] = ()


# ---- region ---------------------------------------------------------------------------------

REGION_STATES = ("active", "paused", "partial")
PAUSE_MODES = ("preserve", "discard")


@dataclasses.dataclass(frozen=True)
class RegionConfig:
    bytes: int
    device: int = 0
    chunk_bytes: int = 0
    #: For a region that declares ``fixed_pause_mode``: the mode of every pause of this region
    #: ("preserve" or "discard"); None where the caller did not say.
    fixed_mode: Optional[str] = None


@dataclasses.dataclass
class RegionInfo:
    data: int
    size: int
    device: int
    state: str
    footprint: int
    captures: int


# ---- arena ----------------------------------------------------------------------------------


@dataclasses.dataclass
class ArenaInfo:
    released: bool
    holds_copy: bool
    host_bytes: int


# ---- activation -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OffloadOptions:
    keep_threshold: int = 0
    prefetch_bytes: int = 1 << 30
    prefetch_layers: int = 2
    max_pending_bytes: int = 0


@dataclasses.dataclass
class ActivationStats:
    packed: int = 0
    kept: int = 0
    offloaded_bytes: int = 0
    restored_bytes: int = 0
    prefetched: int = 0
    demand_uploads: int = 0
    served_from_source: int = 0
    peak_prefetch_bytes: int = 0
    pinned_allocations: int = 0
    device_allocations: int = 0
    pending_waits: int = 0


Shape = Tuple[int, ...]
