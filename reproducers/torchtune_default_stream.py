"""torchtune ``OffloadActivations(use_streams=False)`` copies on the device's default stream,
which it caches at construction (``self.s0 = torch.cuda.default_stream()``), and never waits for
the stream that is current when its hooks run. Under code that computes on another stream (a
``torch.cuda.stream(s)`` block, FSDP2, a custom autograd Function on its own stream), the pack
copies the activation before the producer's last write lands: backward gets stale bytes.

TRL's copy of this class had the same cached ``s0``; huggingface/trl pull request 7195 made it a
property that reads the current stream.

    python3 torchtune_default_stream.py

Exit status 1: reproduced (the unpacked tensor lacks the last write); 0: not reproduced; 2: it
cannot run here.
"""

import sys


def main() -> int:
    try:
        import torch
        from torchtune.training import OffloadActivations
    except ImportError as e:
        print(f"cannot run here: {e}")
        return 2
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device")
        return 2
    hooks = OffloadActivations(use_streams=False)
    compute = torch.cuda.Stream()
    x = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(compute):
        torch.cuda._sleep(1_000_000_000)  # the producer is still busy on its stream ...
        x.fill_(7)  # ... when its last write is queued
        packed = hooks.pack_hook(x)
        y = hooks.unpack_hook(packed)
    torch.cuda.synchronize()
    stale = int((y != 7).sum())
    print(f"{stale} of {y.numel()} unpacked bytes lack the producer's last write")
    print("REPRODUCED" if stale else "not reproduced")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
