"""torch_memory_saver, hook mode "torch": memory allocated inside ``region()`` and freed outside
it ends the process.

The library's free entry point (``tms_torch_free``, csrc/entrypoint.cpp) requires the calling
thread to be inside a ``region()`` (``SIMPLE_CHECK(is_interesting_region(), "only support
interesting region")``, which calls ``exit(1)``). PyTorch frees a region's memory whenever its
memory pool gives a block back: ``torch.cuda.empty_cache()`` outside the region, or the pool's
destruction at interpreter exit. So a program that used a region and then ends (or empties the
cache) dies, after all its work succeeded.

    python3 torch_memory_saver_free_outside_region.py

Exit status 1: reproduced (a child that finished its work ended badly); 0: not reproduced; 2: it
cannot run here (no torch_memory_saver, no GPU).
"""

import subprocess
import sys

CHILD = r"""
import sys, torch, torch_memory_saver
saver = torch_memory_saver.torch_memory_saver
saver.hook_mode = "torch"
with saver.region(tag="kv", enable_cpu_backup=True):
    x = torch.full((1 << 22,), 7, dtype=torch.uint8, device="cuda")
if "cycle" in sys.argv:
    saver.pause("kv")
    saver.resume("kv")
    assert int(x[12345]) == 7, "contents lost across pause/resume"
if "free" in sys.argv:
    del x
    torch.cuda.empty_cache()
torch.cuda.synchronize()
print("work done", flush=True)
"""


def main() -> int:
    try:
        import torch
        import torch_memory_saver  # noqa: F401
    except ImportError as e:
        print(f"cannot run here: {e}")
        return 2
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device")
        return 2
    reproduced = False
    for variant in ([], ["cycle"], ["free"], ["cycle", "free"]):
        run = subprocess.run([sys.executable, "-c", CHILD, *variant], capture_output=True,
                             text=True, timeout=300)
        done = "work done" in run.stdout
        status = run.returncode if run.returncode >= 0 else f"signal {-run.returncode}"
        tail = (run.stderr.strip().splitlines() or [""])[-1]
        print(f"variant {' '.join(variant) or 'allocate only'}: work done={done}, "
              f"exit status {status}; last stderr line: {tail}")
        reproduced |= done and run.returncode != 0
    print("REPRODUCED" if reproduced else "not reproduced")
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())
