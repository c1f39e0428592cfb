"""torch_memory_saver (CUDA): a ``resume`` that cannot get the device memory back ends the
process instead of raising.

``TorchMemorySaver::resume`` (csrc/core.cpp) wraps ``cu_mem_create`` in ``CUDA_ERROR_CHECK`` and
``cuMemMap`` in ``CURESULT_CHECK``, both of which print and call ``exit(1)``. An out-of-memory
resume (another allocation took the memory while the region was paused) kills the training
process; the caller cannot free memory and retry, and the region's host backup is lost with the
process. The library's XPU path does what a caller needs: ``resume`` raises "partially failed
...; some allocations remain paused. Retry after resolving the failure (e.g. free device
memory)" (torch_memory_saver/entrypoint.py).

    python3 torch_memory_saver_resume_oom_exits.py

Exit status 1: reproduced (the child process ended inside resume); 0: not reproduced (resume
raised, and a retry after freeing memory restored the contents); 2: it cannot run here.
"""

import subprocess
import sys

CHILD = r"""
import torch, torch_memory_saver
saver = torch_memory_saver.torch_memory_saver
saver.hook_mode = "torch"
with saver.region(tag="kv", enable_cpu_backup=True):
    x = torch.full((1 << 30,), 7, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
saver.pause("kv")
free, _ = torch.cuda.mem_get_info()
hog = torch.empty(free - (256 << 20), dtype=torch.uint8, device="cuda")  # leaves < 1 GiB free
print("resuming with", torch.cuda.mem_get_info()[0] >> 20, "MiB free", flush=True)
try:
    saver.resume("kv")
    print("resume returned", flush=True)
except Exception as e:
    print("resume raised:", type(e).__name__, e, flush=True)
    del hog
    saver.resume("kv")
    print("retry after freeing memory: contents", "kept" if int(x[12345]) == 7 else "LOST",
          flush=True)
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
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=300)
    print(run.stdout.strip())
    tail = [line for line in run.stderr.splitlines() if "torch_memory_saver" in line][-1:]
    status = run.returncode if run.returncode >= 0 else f"signal {-run.returncode}"
    print(f"exit status {status}; {tail[0] if tail else 'no message from the library'}")
    ended_inside = "resuming" in run.stdout and "resume r" not in run.stdout
    print("REPRODUCED" if ended_inside else "not reproduced")
    return 1 if ended_inside else 0


if __name__ == "__main__":
    sys.exit(main())
