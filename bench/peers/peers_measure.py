"""What bench_peers.py measures in this interpreter: each peer library through its offloadkit
adapter (the objects ``python -m offloadkit check`` checks), timed with torch.cuda events on one
stream, next to the limit of the same bytes measured in the same run with torch on the same device
(a plain pinned copy each way, taking turns with the peer's operations).

Region peers (sizes doubled from --min-mib to --max-mib): ``pause("preserve")``, ``resume`` and the
RL phase switch (one region paused while another resumes: ``a.swap_with(b)`` where the region
has it, as offloadkit's has, else ``a.pause`` then ``b.resume``, the adapters' libraries being
synchronous), against a pinned D2H copy, an H2D copy, and the
both-directions limit (the two at once on two streams). Activation peers: the saved tensors of
bench_activation_mlp's MLP step (per block: its input, h x tokens, and the pre- and post-GELU
tensors, 4h x tokens, bf16), packed block by block in forward order (``forward_layer_end`` after
each block), then unpacked in backward order as autograd does (post-GELU, pre-GELU, input; each
released after its use), against the same tensors copied plainly to pinned memory and back.
Contents are checked once after the timed rounds (``#wrong``); every call to a peer is counted.
"""

import statistics
from typing import Any, Callable, Dict, List, Optional, Tuple

import offloadkit as ok

MIB = 1 << 20
#: The granularity the peers' footprints are rounded to (the CUDA VMM granularity of current
#: GPUs); the adapters read it for ``info().footprint`` only.
GRANULARITY = 2 * MIB
#: How many bytes ``Device.wrong`` compares at once.
WRONG_SLICE = 256 * MIB


class TorchExecutor:
    """The part of offloadkit's executor the adapters call (``backend``, ``device_count``,
    ``granularity``, ``synchronize``), over torch: the peers call CUDA themselves, through
    PyTorch, so nothing else of an executor is used."""

    backend = "cuda"

    def __init__(self, torch: Any):
        self.torch = torch
        self.device_count = int(torch.cuda.device_count())
        self.name = str(torch.cuda.get_device_name(0))

    def granularity(self, device: int = 0) -> int:  # noqa: ARG002 (the executor's signature)
        return GRANULARITY

    def synchronize(self, stream: Any) -> None:
        ok.torch_stream(stream).synchronize()


#: The streams a row can be driven on: a stream of the benchmark's own ("side", as a training
#: loop that computes on a stream of its own), or the device's default stream ("default", where a
#: plain PyTorch loop computes; libraries that copy on the default stream are ordered with it).
STREAMS = ("side", "default")


class Device:
    """One GPU seen through torch: a stream (``stream_kind``, one of STREAMS), events, the limit's
    plain copies."""

    def __init__(self, torch: Any, stream_kind: str = "side"):
        if stream_kind not in STREAMS:
            raise ValueError(f"stream_kind {stream_kind!r} is not one of {', '.join(STREAMS)}")
        self.torch = torch
        self.executor = TorchExecutor(torch)
        self.name = self.executor.name
        self.stream_kind = stream_kind
        self.stream = (torch.cuda.Stream(device=0) if stream_kind == "side" else
                       torch.cuda.default_stream(0))
        self.side = torch.cuda.Stream(device=0)
        # torch's default stream is handle 0, which offloadkit's cuda executor refuses.
        self.proto_stream = ok.Stream(self.stream.cuda_stream or ok.LEGACY_DEFAULT_STREAM, 0)

    def on(self, stream_kind: str) -> "Device":
        """This device driven on the stream ``stream_kind``."""
        return self if stream_kind == self.stream_kind else Device(self.torch, stream_kind)

    def seconds(self, run: Callable[[], None]) -> float:
        """Seconds from an event recorded before ``run`` to one recorded after it on the
        stream, waited for (a synchronous call's time, or the stream's work it issued)."""
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        run()
        end.record(self.stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def device_bytes(self, nbytes: int, dtype: Any = None, shape: Any = None) -> Any:
        torch = self.torch
        return torch.empty(shape or (nbytes,), dtype=dtype or torch.uint8,
                           device=torch.device("cuda", 0))

    def pinned_bytes(self, nbytes: int) -> Any:
        return self.torch.empty((nbytes,), dtype=self.torch.uint8, pin_memory=True)

    def copy(self, dst: Any, src: Any, stream: Any = None) -> None:
        with self.torch.cuda.stream(stream or self.stream):
            dst.copy_(src, non_blocking=True)

    def both_directions(self, d2h: Tuple[Any, Any], h2d: Tuple[Any, Any]) -> None:
        """A D2H copy on the stream and an H2D copy on the side stream at once; the stream waits
        for both."""
        self.side.wait_stream(self.stream)
        self.copy(*d2h)
        self.copy(*h2d, stream=self.side)
        self.stream.wait_stream(self.side)

    def view(self, address: int, nbytes: int) -> Any:
        """A uint8 tensor over ``nbytes`` of device memory at ``address`` (no copy)."""
        return self.torch.as_tensor(ok.Buffer(address, nbytes, "device", 0, "cuda"),
                                    device=self.torch.device("cuda", 0))

    def fill(self, address: int, nbytes: int, value: int) -> None:
        with self.torch.cuda.stream(self.stream):
            self.view(address, nbytes).fill_(value)
        self.stream.synchronize()

    def wrong(self, address: int, nbytes: int, value: int) -> int:
        """The bytes of ``nbytes`` at ``address`` that are not ``value``, counted WRONG_SLICE
        bytes at a time: ``(t != value).sum()`` holds a bool mask and its 8-byte sum copy, 9 times
        the bytes compared (72 GiB for an 8 GiB region, more than an 80 GB GPU has free)."""
        with self.torch.cuda.stream(self.stream):
            return sum(int((self.view(address + at, min(WRONG_SLICE, nbytes - at)) != value)
                           .sum().item()) for at in range(0, nbytes, WRONG_SLICE))


class Counted:
    """Counts the calls the benchmark makes on a peer's object."""

    def __init__(self, target: Any, calls: Dict[str, int]):
        self._target = target
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] = self._calls.get(name, 0) + 1
            return method(*args, **kwargs)

        return call


def _median(values: List[float]) -> float:
    return statistics.median(values) if values else 0.0


def figure(time_s: float, limit_s: float, **extra: Any) -> Dict[str, Any]:
    """A measured figure: its time, the limit's time and the fraction of the limit reached."""
    return {"time_s": time_s, "limit_s": limit_s,
            "of_limit": limit_s / time_s if time_s > 0 else 0.0, **extra}


def measure_region(dev: Device, region_class: Any, nbytes: int, reps: int,
                   calls: Dict[str, int]) -> Dict[str, Any]:
    """Pause and resume of one region against a plain D2H and H2D copy of ``nbytes``, taking
    turns. Returns the figures of "pause" and "resume", and the words found wrong after."""
    config = ok.RegionConfig(bytes=nbytes, device=0, fixed_mode="preserve")
    region = Counted(region_class(dev.executor, config), calls)
    stream = dev.proto_stream
    try:
        dev_buf, pin = dev.device_bytes(nbytes), dev.pinned_bytes(nbytes)
        dev.copy(pin, dev_buf)
        dev.stream.synchronize()
        dev.fill(region.info().data, nbytes, 0x5A)
        region.pause("preserve", stream)  # warm-up: what the library allocates once
        region.resume(stream)
        d2h, h2d, pause, resume = [], [], [], []
        for _ in range(reps):
            d2h.append(dev.seconds(lambda: dev.copy(pin, dev_buf)))
            pause.append(dev.seconds(lambda: region.pause("preserve", stream)))
            h2d.append(dev.seconds(lambda: dev.copy(dev_buf, pin)))
            resume.append(dev.seconds(lambda: region.resume(stream)))
        wrong = dev.wrong(region.info().data, nbytes, 0x5A)
    finally:
        close = getattr(region, "close", None)
        if close is not None:
            close()
    return {"pause": figure(_median(pause), _median(d2h), wrong=wrong),
            "resume": figure(_median(resume), _median(h2d), wrong=wrong)}


def measure_switch(dev: Device, region_class: Any, nbytes: int, reps: int,
                   calls: Dict[str, int]) -> Dict[str, Any]:
    """The RL phase switch: two regions of ``nbytes``, one active, one paused; each round pauses
    the active one and resumes the other, against both directions of the link at once."""
    config = ok.RegionConfig(bytes=nbytes, device=0, fixed_mode="preserve")
    stream = dev.proto_stream
    regions: List[Any] = []
    try:
        for _ in range(2):
            regions.append(Counted(region_class(dev.executor, config), calls))
        dev_a, dev_b = dev.device_bytes(nbytes), dev.device_bytes(nbytes)
        pin_a, pin_b = dev.pinned_bytes(nbytes), dev.pinned_bytes(nbytes)
        values = (0x3C, 0xC3)
        for r, v in zip(regions, values):
            dev.fill(r.info().data, nbytes, v)
        swap = hasattr(regions[0]._target, "swap_with")
        regions[1].pause("preserve", stream)
        regions[0].pause("preserve", stream)  # warm-up: both have been paused and resumed once
        regions[1].resume(stream)
        active, paused = regions[1], regions[0]
        limit, switch = [], []
        for _ in range(reps):
            limit.append(dev.seconds(lambda: dev.both_directions((pin_a, dev_a),
                                                                 (dev_b, pin_b))))

            def phase_switch() -> None:
                if swap:  # both at once, one copy direction each
                    active.swap_with(paused._target, "preserve", stream)
                else:
                    active.pause("preserve", stream)
                    paused.resume(stream)

            switch.append(dev.seconds(phase_switch))
            active, paused = paused, active
        paused.resume(stream)
        wrong = sum(dev.wrong(r.info().data, nbytes, v) for r, v in zip(regions, values))
    finally:
        for r in regions:
            close = getattr(r, "close", None)
            if close is not None:
                close()
    return figure(_median(switch), _median(limit), wrong=wrong)


def mlp_saved_shapes(blocks: int, hidden: int, tokens: int) -> List[List[Tuple[int, int]]]:
    """Per block, the shapes (rows, columns) of the tensors bench_activation_mlp's step saves:
    the block's input, the pre-GELU and the post-GELU tensors (bf16)."""
    return [[(tokens, hidden), (tokens, 4 * hidden), (tokens, 4 * hidden)]
            for _ in range(blocks)]


def _value(block: int, j: int) -> float:
    return float((block * 3 + j) % 120 + 1)  # small integers: exact in bf16


class _Step:
    """One step's saved-tensor traffic through a peer's activation object."""

    def __init__(self, dev: Device, shapes: List[List[Tuple[int, int]]]):
        self.dev = dev
        self.shapes = shapes
        self.torch = dev.torch

    def _tensor(self, shape: Tuple[int, int], value: Optional[float]) -> "ok.Tensor":
        t = self.dev.device_bytes(0, dtype=self.torch.bfloat16, shape=shape)
        if value is not None:
            with self.torch.cuda.stream(self.dev.stream):
                t.fill_(value)
        nbytes = shape[0] * shape[1] * 2
        held = [t]
        data = ok.Buffer(t.data_ptr(), nbytes, "device", 0, "cuda", self.dev.proto_stream)
        return ok.Tensor(data, nbytes, 0, "bf16", shape, release=held.clear)

    def forward(self, act: Any, check: bool) -> List[List[int]]:
        stream = self.dev.proto_stream
        handles = []
        for b, block in enumerate(self.shapes):
            handles.append([act.pack(self._tensor(s, _value(b, j) if check else None), stream)
                            for j, s in enumerate(block)])
            act.forward_layer_end(b, stream)
        return handles

    def backward(self, act: Any, handles: List[List[int]], check: bool) -> int:
        stream = self.dev.proto_stream
        wrong = 0
        for b in reversed(range(len(self.shapes))):
            act.backward_layer_begin(b, stream)
            for j in (2, 1, 0):  # autograd's order: post-GELU, pre-GELU, block input
                out = act.unpack(handles[b][j], stream)
                if check:
                    with self.torch.cuda.stream(self.dev.stream):
                        # A peer hands back a torch tensor; offloadkit a Buffer of its memory.
                        data = ok.as_torch(out) if isinstance(out.data, ok.Buffer) else out.data
                        wrong += int((data != _value(b, j)).sum().item())
                out.release()
        return wrong


def measure_activation(dev: Device, activation_class: Any, blocks: int, hidden: int,
                       tokens: int, reps: int, calls: Dict[str, int]) -> Dict[str, Any]:
    """Forward (every pack, the copies finished) and backward (every unpack, finished) phases of
    the MLP step's saved tensors, against their plain copies to pinned memory and back."""
    shapes = mlp_saved_shapes(blocks, hidden, tokens)
    saved = sum(r * c * 2 for block in shapes for r, c in block)
    options = ok.OffloadOptions()
    act = Counted(activation_class(dev.executor, options), calls)
    step = _Step(dev, shapes)
    stream = dev.proto_stream
    floor_src = [dev.device_bytes(r * c * 2) for r, c in shapes[0]]
    floor_pin = [[dev.pinned_bytes(r * c * 2) for r, c in block] for block in shapes]

    def floor(to_host: bool) -> None:
        for block in floor_pin:
            for src, pin in zip(floor_src, block):
                dev.copy(pin, src) if to_host else dev.copy(src, pin)

    try:
        step.backward(act, step.forward(act, False), False)  # warm-up
        act.synchronize()
        fw_floor, fw, bw_floor, bw = [], [], [], []
        for _ in range(reps):
            fw_floor.append(dev.seconds(lambda: floor(True)))
            handles: List[List[int]] = []

            def forward() -> None:
                handles.extend(step.forward(act, False))
                act.synchronize()

            fw.append(dev.seconds(forward))
            bw_floor.append(dev.seconds(lambda: floor(False)))

            def backward() -> None:
                step.backward(act, handles, False)
                act.synchronize()

            bw.append(dev.seconds(backward))
        wrong = step.backward(act, step.forward(act, True), True)
        act.synchronize()
    finally:
        close = getattr(act, "close", None)
        if close is not None:
            close()
    return {"saved_bytes": saved,
            "forward": figure(_median(fw), _median(fw_floor), wrong=wrong),
            "backward": figure(_median(bw), _median(bw_floor), wrong=wrong)}
