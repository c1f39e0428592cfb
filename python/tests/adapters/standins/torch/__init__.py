"""A stand-in for the few PyTorch calls that offloadkit's adapters and the library stand-ins make
(tests only; CI has no PyTorch). Device memory is the memory of an offloadkit executor bound with
``_standin_bind(executor)``, so that the stand-ins run on offloadkit's CPU-only host executor.

Provided: ``uint8``, ``device``, ``empty(n, dtype=uint8, device=...)`` returning a ``Tensor``
with ``data_ptr()`` and ``nbytes`` (its memory is freed when the last reference goes, as PyTorch
gives a block back), ``OutOfMemoryError``, ``cuda.device(index)`` (the current device while the
context is open), ``cuda.current_device()``, ``cuda.synchronize(device)``. An allocator context
(the library stand-ins' memory pools) is pushed with ``_standin_push_allocator(malloc)``, where
``malloc(nbytes, device) -> (address, free)``; outside one, ``empty`` allocates device memory from
the executor.
"""

from typing import Any, Callable, List, Optional, Tuple

from . import cuda

__version__ = "0+offloadkit.standin"
uint8 = "uint8"

_executor: Optional[Any] = None
_allocators: List[Callable[[int, int], Tuple[int, Callable[[], None]]]] = []


class OutOfMemoryError(RuntimeError):
    """PyTorch's out-of-memory error (``torch.OutOfMemoryError``)."""


class device:  # noqa: N801 (PyTorch's name)
    """``torch.device(type, index)``."""

    def __init__(self, type: str, index: Optional[int] = None):  # noqa: A002
        self.type = type
        self.index = index

    def __repr__(self) -> str:
        return f"device(type={self.type!r}, index={self.index})"


class Tensor:
    """A one-dimensional uint8 device tensor over executor memory."""

    def __init__(self, address: int, nbytes: int, index: int, free: Callable[[], None]):
        self._address = address
        self.nbytes = nbytes
        self.device = device("cuda", index)
        self._free = free

    def data_ptr(self) -> int:
        return self._address

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


def _executor_malloc(nbytes: int, index: int) -> Tuple[int, Callable[[], None]]:
    executor = _standin_executor()
    try:
        buffer = executor.allocate(nbytes, "device", index)
    except MemoryError as e:
        raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes} bytes ({e})") from e
    return buffer.ptr, lambda: executor.deallocate(buffer)


def empty(n: int, dtype: str = uint8, device: Optional["device"] = None) -> Tensor:  # noqa: A002
    """``torch.empty(n, dtype=torch.uint8, device=...)``."""
    if dtype != uint8:
        raise TypeError(f"the torch stand-in allocates uint8 only, not {dtype!r}")
    if device is None or device.type != "cuda":
        raise ValueError(f"the torch stand-in allocates cuda tensors only, not on {device!r}")
    index = cuda.current_device() if device.index is None else int(device.index)
    malloc = _allocators[-1] if _allocators else _executor_malloc
    address, free = malloc(int(n), index)
    return Tensor(address, int(n), index, free)
