"""A stand-in for the few PyTorch calls that offloadkit's adapters, the library stand-ins and the
peer benchmark (``bench/peers``) make (tests only; CI has no PyTorch). Device memory is the memory
of an offloadkit executor bound with ``_standin_bind(executor)``, so that the stand-ins run on
offloadkit's CPU-only host executor (or the tests' own executor of host memory).

Provided: the dtypes ``uint8`` and ``bfloat16``, ``device``, ``empty(*size, dtype=..., device=...,
pin_memory=...)`` and ``empty_like``, ``as_tensor`` (of an object with
``__cuda_array_interface__``, without a copy), a ``Tensor`` with ``data_ptr()``, ``nbytes``,
``dtype``, ``shape``, ``numel()``, ``view(dtype)``, ``reshape``, ``contiguous()``, ``copy_``,
``to``, ``fill_`` and ``(tensor != value).sum().item()`` (its memory is freed when the last
reference goes, as PyTorch gives a block back), ``OutOfMemoryError``, ``torch.cuda`` (see
``cuda.py``) and ``torch.autograd.graph.save_on_cpu``. An allocator context (the library
stand-ins' memory pools) is pushed with ``_standin_push_allocator(malloc)``, where
``malloc(nbytes, device) -> (address, free)``; outside one, ``empty`` allocates device memory from
the executor. Every copy goes through the executor's ``copy`` on the current stream, and completes
there (the executors behind the stand-in run stream work in order, so a copy is complete for the
host once the stream is synchronized). Reading memory from the host (``!=``) needs the executor's
memory to be host-addressable, as the host executor's is.

For Megatron's paged stash stand-in, small tensors of the dtypes ``int64`` and ``bool`` over the
same memory, computed on the host with NumPy once the current stream is synchronized: ``zeros``,
``tensor``, ``arange``, ``maximum``, and the methods ``eq``, ``ne``, ``lt``, ``gt``,
``logical_or``, ``mul``, ``mul_``, ``add_``, ``zero_``, ``clone``, ``to(dtype)``, ``item``,
``tolist``, ``numpy``, ``narrow``, ``flatten``, ``dim`` and ``view(dtype or shape)``.
"""

import ctypes
import struct
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from . import autograd, cuda

__version__ = "0+offloadkit.standin"


class dtype:  # noqa: N801 (PyTorch's name)
    """``torch.dtype``: its name and ``itemsize``."""

    def __init__(self, name: str, itemsize: int, pack: Callable[[float], bytes]):
        self.name = name
        self.itemsize = itemsize
        self._pack = pack

    def __repr__(self) -> str:
        return f"torch.{self.name}"


uint8 = dtype("uint8", 1, lambda v: struct.pack("<B", int(v) & 0xFF))
# bf16 is the upper half of the float32 (values the benchmarks use are exact in bf16).
bfloat16 = dtype("bfloat16", 2, lambda v: struct.pack("<f", float(v))[2:])

int64 = dtype("int64", 8, lambda v: struct.pack("<q", int(v)))
bool_ = dtype("bool", 1, lambda v: struct.pack("<B", 1 if v else 0))  # torch.bool, at the end
_NUMPY = {"uint8": "u1", "int64": "<i8", "bool": "?", "bfloat16": "<u2"}

_executor: Optional[Any] = None
_allocators: List[Callable[[int, int], Tuple[int, Callable[[], None]]]] = []


class OutOfMemoryError(RuntimeError):
    """PyTorch's out-of-memory error (``torch.OutOfMemoryError``)."""


class device:  # noqa: N801 (PyTorch's name)
    """``torch.device(type, index)`` (also ``torch.device("cuda:1")``)."""

    def __init__(self, type: Union[str, "device"], index: Optional[int] = None):  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        elif ":" in type:
            type, number = type.split(":", 1)
            index = int(number)
        self.type = type
        self.index = index

    def __repr__(self) -> str:
        return f"device(type={self.type!r}, index={self.index})"


class _Count:
    """What ``(tensor != value).sum()`` gives: a count, read with ``item()``."""

    def __init__(self, value: int):
        self.value = value

    def sum(self) -> "_Count":
        return self

    def item(self) -> int:
        return self.value


class Tensor:
    """A contiguous tensor over executor memory: device memory (``device.type == "cuda"``) or
    pinned / pageable host memory of the executor (``"cpu"``)."""

    def __init__(self, address: int, nbytes: int, index: Optional[int],
                 free: Optional[Callable[[], None]], dtype_: dtype = uint8,
                 shape: Optional[Sequence[int]] = None, owner: Any = None):
        self._address = address
        self.nbytes = nbytes
        self.device = device("cuda", index) if index is not None else device("cpu")
        self.dtype = dtype_
        self.shape = tuple(shape) if shape is not None else (nbytes // dtype_.itemsize,)
        self._free = free
        self._owner = owner  # what this tensor views (kept alive as long as the view lives)

    def data_ptr(self) -> int:
        return self._address

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self) -> int:
        return self.dtype.itemsize

    def size(self) -> Tuple[int, ...]:
        return self.shape

    def stride(self) -> Tuple[int, ...]:
        strides, step = [], 1
        for d in reversed(self.shape):
            strides.append(step)
            step *= d
        return tuple(reversed(strides))

    def is_contiguous(self) -> bool:
        return True

    def contiguous(self) -> "Tensor":
        return self

    def _view(self, dtype_: dtype, shape: Sequence[int]) -> "Tensor":
        return Tensor(self._address, self.nbytes, self.device.index, None, dtype_, shape, self)

    def view(self, *target: Any) -> "Tensor":
        if len(target) == 1 and isinstance(target[0], dtype):
            dtype_ = target[0]
            last = self.shape[-1] * self.dtype.itemsize // dtype_.itemsize
            return self._view(dtype_, self.shape[:-1] + (last,))
        return self.reshape(*target)

    # ---- NumPy-computed operations (host-addressable memory) ---------------------------------

    def numpy(self) -> Any:
        """The tensor's elements as a NumPy array over its memory, once the current stream's
        work is done."""
        import numpy as np

        _standin_executor().synchronize(cuda._handle(cuda.current_stream()))
        if self.nbytes == 0:
            return np.zeros(self.shape, dtype=_NUMPY[self.dtype.name])
        raw = (ctypes.c_char * self.nbytes).from_address(self._address)
        return np.frombuffer(raw, dtype=_NUMPY[self.dtype.name]).reshape(self.shape)

    def _new(self, values: Any, dtype_: Optional[dtype] = None) -> "Tensor":
        out = empty(tuple(values.shape), dtype=dtype_ or self.dtype, device=self.device)
        out.numpy()[...] = values
        return out

    @staticmethod
    def _value(other: Any) -> Any:
        return other.numpy() if isinstance(other, Tensor) else other

    def eq(self, other: Any) -> "Tensor":
        return self._new(self.numpy() == self._value(other), bool_)

    def ne(self, other: Any) -> "Tensor":
        return self._new(self.numpy() != self._value(other), bool_)

    def lt(self, other: Any) -> "Tensor":
        return self._new(self.numpy() < self._value(other), bool_)

    def gt(self, other: Any) -> "Tensor":
        return self._new(self.numpy() > self._value(other), bool_)

    def logical_or(self, other: "Tensor") -> "Tensor":
        return self._new(self.numpy() | other.numpy(), bool_)

    def mul(self, other: Any) -> "Tensor":
        return self._new(self.numpy() * self._value(other))

    def mul_(self, other: Any) -> "Tensor":
        self.numpy()[...] = self.numpy() * self._value(other)
        return self

    def add_(self, other: Any) -> "Tensor":
        self.numpy()[...] = self.numpy() + self._value(other)
        return self

    def zero_(self) -> "Tensor":
        self.numpy()[...] = 0
        return self

    def clone(self) -> "Tensor":
        return self._new(self.numpy().copy())

    def item(self) -> Any:
        return self.numpy().reshape(-1)[0].item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def dim(self) -> int:
        return len(self.shape)

    def flatten(self) -> "Tensor":
        return self.reshape(self.numel())

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        if dim != 0 or len(self.shape) != 1:
            raise ValueError("the torch stand-in narrows 1-D tensors only")
        size = self.dtype.itemsize
        return Tensor(self._address + start * size, length * size, self.device.index, None,
                      self.dtype, (length,), self)

    def reshape(self, *shape: Any) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._view(self.dtype, shape)

    def copy_(self, src: "Tensor", non_blocking: bool = False) -> "Tensor":
        if src.nbytes != self.nbytes:
            raise RuntimeError(f"copy_: {src.nbytes} bytes into a tensor of {self.nbytes}")
        executor = _standin_executor()
        stream = cuda.current_stream()
        executor.copy(self._address, src._address, self.nbytes, cuda._handle(stream))
        if not non_blocking:
            executor.synchronize(cuda._handle(stream))
        return self

    def to(self, target: Any, non_blocking: bool = False) -> "Tensor":
        if isinstance(target, dtype):
            return self._new(self.numpy().astype(_NUMPY[target.name]), target)
        where = device(target) if isinstance(target, (str, device)) else target
        if where.type == self.device.type and (where.index is None or
                                               where.index == self.device.index):
            return self
        out = empty(self.shape, dtype=self.dtype, device=where)
        return out.copy_(self, non_blocking=non_blocking)

    def fill_(self, value: float) -> "Tensor":
        pattern = self.dtype._pack(value)
        executor = _standin_executor()
        stream = cuda._handle(cuda.current_stream())
        executor.synchronize(stream)
        ctypes.memmove(self._address, pattern * (self.nbytes // len(pattern)), self.nbytes)
        return self

    def __ne__(self, value: object) -> _Count:  # type: ignore[override]
        pattern = self.dtype._pack(value)  # type: ignore[arg-type]
        _standin_executor().synchronize(cuda._handle(cuda.current_stream()))
        data = ctypes.string_at(self._address, self.nbytes)
        n = len(pattern)
        if data == pattern * (self.nbytes // n):
            return _Count(0)
        return _Count(sum(1 for i in range(0, self.nbytes, n) if data[i:i + n] != pattern))

    __hash__ = object.__hash__

    def __del__(self) -> None:
        free, self._free = self._free, None
        if free is not None:
            free()


def _standin_bind(executor: Any) -> None:
    """Makes ``executor`` the device of the tensors allocated from now on."""
    global _executor
    _executor = executor


def _standin_executor() -> Any:
    if _executor is None:
        raise RuntimeError("the torch stand-in has no executor bound (_standin_bind)")
    return _executor


def _standin_push_allocator(malloc: Callable[[int, int], Tuple[int, Callable[[], None]]]) -> None:
    _allocators.append(malloc)


def _standin_pop_allocator() -> None:
    _allocators.pop()


def _executor_malloc(nbytes: int, index: int,
                     kind: str = "device") -> Tuple[int, Callable[[], None]]:
    executor = _standin_executor()
    try:
        buffer = executor.allocate(nbytes, kind, index)
    except MemoryError as e:
        raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes} bytes ({e})") from e
    return buffer.ptr, lambda: executor.deallocate(buffer)


def empty(*size: Any, dtype: dtype = uint8, device: Any = None,  # noqa: A002
          pin_memory: bool = False) -> Tensor:
    """``torch.empty(*size, dtype=..., device=..., pin_memory=...)``: device memory (of the
    current allocator context, else the executor) on a cuda device, pinned or pageable executor
    memory on the CPU."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    if not isinstance(dtype, globals()["dtype"]):
        raise TypeError(f"the torch stand-in has no dtype {dtype!r}")
    where = globals()["device"](device) if device is not None else globals()["device"]("cpu")
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    if where.type == "cpu":
        address, free = _executor_malloc(nbytes, 0, "pinned" if pin_memory else "pageable")
        return Tensor(address, nbytes, None, free, dtype, shape)
    if where.type != "cuda":
        raise ValueError(f"the torch stand-in allocates on cuda and cpu only, not on {where!r}")
    index = cuda.current_device() if where.index is None else int(where.index)
    malloc = _allocators[-1] if _allocators else _executor_malloc
    address, free = malloc(nbytes, index)
    return Tensor(address, nbytes, index, free, dtype, shape)


def empty_like(t: Tensor, *, dtype: Optional[dtype] = None, device: Any = None,  # noqa: A002
               pin_memory: bool = False) -> Tensor:
    """``torch.empty_like``: ``t``'s shape and dtype, on ``device`` (default ``t``'s)."""
    return empty(t.shape, dtype=dtype or t.dtype, device=device or t.device,
                 pin_memory=pin_memory)


def as_tensor(obj: Any, device: Any = None) -> Tensor:  # noqa: A002
    """``torch.as_tensor`` of an object with ``__cuda_array_interface__`` (or, for a buffer of
    offloadkit's host executor, which stands for device memory, ``__array_interface__``): a uint8
    tensor over its memory, without a copy, that keeps ``obj`` alive."""
    face = getattr(obj, "__cuda_array_interface__", None)
    if face is None:
        face = obj.__array_interface__
    nbytes = 1
    for s in face["shape"]:
        nbytes *= int(s)
    index = globals()["device"](device).index if device is not None else cuda.current_device()
    return Tensor(int(face["data"][0]), nbytes, index or 0, None, uint8, (nbytes,), obj)


def zeros(*size: Any, dtype: dtype = uint8, device: Any = None) -> Tensor:  # noqa: A002
    """``torch.zeros``."""
    return empty(*size, dtype=dtype, device=device).zero_()


def tensor(values: Sequence[int], dtype: dtype = int64, device: Any = None) -> Tensor:  # noqa: A002
    """``torch.tensor`` of a list of numbers."""
    import numpy as np

    out = empty(len(values), dtype=dtype, device=device)
    out.numpy()[...] = np.asarray(values)
    return out


def arange(n: int, dtype: dtype = int64, device: Any = None) -> Tensor:  # noqa: A002
    """``torch.arange(n)``."""
    return tensor(list(range(int(n))), dtype=dtype, device=device)


def maximum(a: Tensor, b: Tensor) -> Tensor:
    """``torch.maximum`` of two tensors of one shape."""
    import numpy as np

    return a._new(np.maximum(a.numpy(), b.numpy()))


globals()["bool"] = bool_  # torch.bool (after the definitions, whose annotations name the builtin)
