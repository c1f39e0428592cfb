#!/usr/bin/env python3
"""A small PyTorch training step whose saved activations go to pinned host memory through
PyTorch's own torch.autograd.graph.save_on_cpu(pin_memory=True): the baseline that offloadkit's
activation offload is compared with. Each step is an NVTX range "step N", so that
`offloadkit capture` finds the steps:

    offloadkit capture -o save_on_cpu.json --d2h-limit 55 --h2d-limit 54.5 -- \
        python3 traces/pytorch_save_on_cpu.py --hidden 4096 --tokens 4096

Shapes follow the measured limits in DESIGN.md: 8 MLP blocks, bf16, h=4096/4k tokens,
h=4096/16k, h=8192/8k. --no-offload runs the same step without save_on_cpu for the ratio.
"""
import argparse

import torch


class mlp_block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = torch.nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="measured steps")
    p.add_argument("--warmup", type=int, default=2, help="steps before the measured ones")
    p.add_argument("--no-offload", action="store_true", help="keep activations on the GPU")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device visible to PyTorch")
        return 0

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(*[mlp_block(a.hidden) for _ in range(a.blocks)]).to(dev, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(a.tokens, a.hidden, device=dev, dtype=torch.bfloat16)

    def step(i):
        torch.cuda.nvtx.range_push(f"step {i}")
        opt.zero_grad(set_to_none=True)
        if a.no_offload:
            out = model(x)
        else:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                out = model(x)
        loss = out.float().pow(2).mean()
        loss.backward()
        opt.step()
        torch.cuda.nvtx.range_pop()

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    times = []
    for i in range(a.warmup, a.warmup + a.steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        step(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    # Saved tensors per block: the LayerNorm input, the up-projection input and output and the
    # GELU output (bf16), roughly 10 x tokens x hidden x 2 bytes.
    saved = a.blocks * 10 * a.tokens * a.hidden * 2
    print(f"save_on_cpu={'off' if a.no_offload else 'on'} blocks={a.blocks} hidden={a.hidden} "
          f"tokens={a.tokens}: median {times[len(times) // 2]:.1f} ms/step "
          f"(min {times[0]:.1f}, max {times[-1]:.1f}), ~{saved / 2**30:.2f} GiB saved per step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
