"""``torch.cuda`` of the torch stand-in: the current device, streams over the bound executor's
streams, events timed by the host clock, and synchronization through the bound executor."""

import contextlib
import time
from typing import Any, Iterator, List, Optional

_current = 0


def current_device() -> int:
    return _current


def _executor() -> Any:
    from . import _standin_executor

    return _standin_executor()


def is_available() -> bool:
    from . import _executor as bound

    return bound is not None


def device_count() -> int:
    return int(_executor().device_count)


def get_device_name(device: Optional[int] = None) -> str:  # noqa: ARG001 (PyTorch's signature)
    return f"torch stand-in over {getattr(_executor(), 'name', type(_executor()).__name__)}"


@contextlib.contextmanager
def device(index: int) -> Iterator[None]:
    """``torch.cuda.device(index)``: ``index`` is the current device inside the context."""
    global _current
    previous, _current = _current, int(index)
    try:
        yield
    finally:
        _current = previous


class Stream:
    """``torch.cuda.Stream``: a new stream of the bound executor (``cuda_stream`` its handle)."""

    def __init__(self, device: Optional[int] = None):  # noqa: A002
        index = current_device() if device is None else int(getattr(device, "index", device) or 0)
        self.device_index = index
        self.cuda_stream = int(_executor().create_stream(index))

    def synchronize(self) -> None:
        _executor().synchronize(_handle(self))

    def wait_event(self, event: "Event") -> None:
        pass  # the executor's streams run in order of issue

    def wait_stream(self, stream: "Stream") -> None:
        pass


def _handle(stream: Stream) -> Any:
    """The stream as the executor takes it: an offloadkit ``Stream`` (handle and device)."""
    from offloadkit.types import Stream as Handle

    return Handle(stream.cuda_stream, stream.device_index)


class ExternalStream(Stream):
    """``torch.cuda.ExternalStream(handle, device=...)``: a stream the caller created."""

    def __init__(self, stream_ptr: int, device: Any = None):  # noqa: A002
        self.device_index = int(getattr(device, "index", None) or 0)
        self.cuda_stream = int(stream_ptr)


class _DefaultStream(ExternalStream):
    def synchronize(self) -> None:
        pass  # nothing is ever queued on it: the stand-ins copy on explicit streams or in place


_default = _DefaultStream(0)
_streams: List[Stream] = []


def current_stream(device: Any = None) -> Stream:  # noqa: ARG001 (PyTorch's signature)
    return _streams[-1] if _streams else _default


def default_stream(device: Any = None) -> Stream:  # noqa: ARG001 (PyTorch's signature)
    return _default


@contextlib.contextmanager
def stream(s: Optional[Stream]) -> Iterator[None]:
    """``torch.cuda.stream(s)``: ``s`` is the current stream inside the context."""
    if s is None:
        yield
        return
    _streams.append(s)
    try:
        yield
    finally:
        _streams.pop()


class Event:
    """``torch.cuda.Event``: recorded on a stream once the stream's work is done (the stand-ins'
    executors run it in order), timed by the host clock."""

    def __init__(self, enable_timing: bool = False):
        self.enable_timing = enable_timing
        self.time: Optional[float] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        (stream or current_stream()).synchronize()
        self.time = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Optional[Stream] = None) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        if not self.enable_timing or self.time is None or end.time is None:
            raise RuntimeError("elapsed_time: both events must be recorded with enable_timing")
        return (end.time - self.time) * 1e3


def synchronize(device: Optional[int] = None) -> None:  # noqa: ARG001 (PyTorch's signature)
    """Nothing to wait for: the stand-ins synchronize the streams they use themselves."""

