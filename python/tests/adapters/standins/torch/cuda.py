"""``torch.cuda`` of the torch stand-in: the current device, and synchronization through the bound
executor."""

import contextlib
from typing import Iterator, Optional

_current = 0


def current_device() -> int:
    return _current


@contextlib.contextmanager
def device(index: int) -> Iterator[None]:
    """``torch.cuda.device(index)``: ``index`` is the current device inside the context."""
    global _current
    previous, _current = _current, int(index)
    try:
        yield
    finally:
        _current = previous


def synchronize(device: Optional[int] = None) -> None:  # noqa: ARG001 (PyTorch's signature)
    """Nothing to wait for: the library stand-ins synchronize the streams they use themselves."""
