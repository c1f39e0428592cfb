"""vLLM's sleep-mode allocator (``CuMemAllocator``, csrc/cumem_allocator.cpp): after one
allocation in its pool fails, every later allocation in the pool fails too, whatever memory is
free.

``CUDA_CHECK`` stores a failed driver call's code in the global ``error_code``; ``my_malloc``
returns ``nullptr`` whenever ``error_code != 0`` after a call, but only the Python entry points
(``python_create_and_map``, ``python_unmap_and_release``) reset it. One refused allocation (an
out-of-memory ``cuMemCreate``) therefore leaves ``error_code`` set, and the next ``my_malloc``
gives up at its first check. Upstream: vllm-project/vllm issue 36651 ("stale error codes").

    python3 vllm_cumem_stale_error.py

Exit status 1: reproduced (a 1 MiB allocation fails after a refused one, with the GPU's memory
free); 0: not reproduced; 2: it cannot run here.
"""

import sys


def main() -> int:
    try:
        import torch
        from vllm.device_allocator.cumem import CuMemAllocator
    except ImportError as e:
        print(f"cannot run here: {e}")
        return 2
    if not torch.cuda.is_available():
        print("cannot run here: no CUDA device")
        return 2
    allocator = CuMemAllocator.get_instance()
    free, _ = torch.cuda.mem_get_info()
    with allocator.use_memory_pool(tag="kv"):
        try:
            torch.empty(free + (1 << 30), dtype=torch.uint8, device="cuda")
            print("the allocation larger than the free memory was not refused")
        except torch.OutOfMemoryError:
            print("an allocation larger than the free memory is refused (as it should be)")
        try:
            x = torch.ones(1 << 20, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            print(f"then a 1 MiB allocation works ({int(x.sum())} bytes set)")
            stale = False
        except torch.OutOfMemoryError as e:
            free_now, _ = torch.cuda.mem_get_info()
            print(f"then a 1 MiB allocation fails with {free_now >> 20} MiB free: "
                  f"{str(e).splitlines()[0]}")
            stale = True
    print("REPRODUCED" if stale else "not reproduced")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
