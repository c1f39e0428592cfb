"""A stand-in for vLLM's sleep-mode allocator ``CuMemAllocator`` (tests only), written from its
documented public behaviour; none of vLLM's code.

``CuMemAllocator.get_instance()`` is the process-wide allocator. Inside
``use_memory_pool(tag=None)`` tensors are allocated from a memory pool of the allocator, each
allocation in an address range of its own with physical memory mapped into it, and remembered
with the tag. ``sleep(offload_tags=None)`` copies every allocation whose tag is in
``offload_tags`` (default: the default tag) to host memory with a blocking copy, then unmaps and
releases the physical memory of *every* allocation, whatever its tag (the rest is discarded).
``wake_up(tags=None)`` maps new physical memory at the same addresses for the allocations of
``tags`` (all when None) and copies their backups back; a failure unmaps what that call had
mapped and is raised again. The driver calls fail as the allocator's C extension reports them:
``RuntimeError("CUDA Error: ...")`` (unmapping memory that is not mapped, mapping memory that is).
A backup's pinned block is kept for the allocation's next sleep, as PyTorch's caching host
allocator keeps it. A block freed inside a pool stays cached in the pool; the pool gives it back
when the ``use_memory_pool`` context ends (blocks already free then) or when the pool itself is
destroyed.

Device memory is the bound executor's (``torch._standin_bind``), through its virtual-memory calls.

Planted defect (tests only): with ``OFFLOADKIT_STANDIN_DEFECT=wake_up_drops_backup`` in the
environment, ``wake_up`` maps the memory but does not copy the backups back.
"""

import contextlib
import gc
import os
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import torch

cumem_available = True


class AllocationData:
    """What the allocator remembers of one allocation: ``handle`` (device, size, address,
    physical memory), ``tag`` and the host backup while asleep."""

    def __init__(self, handle: Tuple[int, int, int], tag: str, executor: Any, physical: Any):
        self.handle = handle
        self.tag = tag
        self.executor = executor
        self.physical = physical
        self.cpu_backup_tensor: Optional[Any] = None
        # PyTorch's caching host allocator, reduced to what one allocation needs: the pinned
        # block of its last backup, reused by the next sleep.
        self.host_cache: Optional[Any] = None


def _unmap_and_release(data: AllocationData) -> None:
    device, size, address = data.handle
    if data.physical is None:
        raise RuntimeError("CUDA Error: invalid argument at cumem_allocator.cpp (cuMemUnmap of "
                           f"an unmapped range at {address:#x})")
    data.executor.unmap(address, size)
    data.executor.release_physical(data.physical)
    data.physical = None


def _create_and_map(data: AllocationData) -> None:
    device, size, address = data.handle
    if data.physical is not None:
        raise RuntimeError("CUDA Error: invalid argument at cumem_allocator.cpp (cuMemMap of a "
                           f"mapped range at {address:#x})")
    try:
        physical = data.executor.create_physical(size, device)
    except MemoryError as e:
        raise RuntimeError(f"CUDA Error: out of memory at cumem_allocator.cpp ({e})") from e
    data.executor.map(address, size, physical)
    data.executor.set_access(address, size, device)
    data.physical = physical


def _blocking_copy(executor: Any, dst: Any, src: Any, nbytes: int, device: int) -> None:
    """``cudaMemcpy``: a copy that has finished when it returns (on a stream of its own)."""
    stream = executor.create_stream(device)
    try:
        executor.copy(dst, src, nbytes, stream)
        executor.synchronize(stream)
    finally:
        executor.destroy_stream(stream)


class _Pool:
    """A memory pool of the allocator: blocks freed by their tensors stay cached here."""

    def __init__(self, allocator: "CuMemAllocator"):
        self.allocator = allocator
        self.cached: Dict[int, bool] = {}  # address -> in use

    def malloc(self, nbytes: int, device: int):
        address = self.allocator._malloc(nbytes, device)
        self.cached[address] = True

        def free() -> None:
            self.cached[address] = False

        return address, free

    def release_unused(self) -> None:
        for address in [a for a, used in self.cached.items() if not used]:
            del self.cached[address]
            self.allocator._free(address)

    def __del__(self) -> None:
        for address in list(self.cached):
            self.allocator._free(address)
        self.cached.clear()


class CuMemAllocator:
    """The sleep-mode allocator; a singleton (``get_instance``)."""

    instance: "Optional[CuMemAllocator]" = None
    default_tag: str = "default"

    @staticmethod
    def get_instance() -> "CuMemAllocator":
        assert cumem_available, "cumem allocator is not available"
        if CuMemAllocator.instance is None:
            CuMemAllocator.instance = CuMemAllocator()
        return CuMemAllocator.instance

    def __init__(self) -> None:
        self.pointer_to_data: Dict[int, AllocationData] = {}
        self.current_tag: str = CuMemAllocator.default_tag
        self.allocator_and_pools: Dict[str, Any] = {}

    def _malloc(self, nbytes: int, device: int) -> int:
        executor = torch._standin_executor()
        granularity = executor.granularity(device)
        size = -(-max(nbytes, 1) // granularity) * granularity
        address = executor.reserve(size, device)
        data = AllocationData((device, size, address), self.current_tag, executor, None)
        try:
            _create_and_map(data)
        except RuntimeError as e:
            executor.unreserve(address, size)
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes} "
                                         f"bytes ({e})") from e
        self.pointer_to_data[address] = data
        return address

    def _free(self, address: int) -> None:
        data = self.pointer_to_data.pop(address)
        for backup in (data.cpu_backup_tensor, data.host_cache):
            if backup is not None:
                data.executor.deallocate(backup)
        data.cpu_backup_tensor = data.host_cache = None
        _unmap_and_release(data)
        data.executor.unreserve(address, data.handle[1])

    def sleep(self, offload_tags: Union[Tuple[str, ...], str, None] = None) -> None:
        """Offloads the allocations of ``offload_tags`` to host memory, and releases the device
        memory of every allocation."""
        if offload_tags is None:
            offload_tags = (CuMemAllocator.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        assert isinstance(offload_tags, tuple)
        for address, data in self.pointer_to_data.items():
            device, size, _ = data.handle
            if data.tag in offload_tags:
                backup = (data.cpu_backup_tensor if data.cpu_backup_tensor is not None
                          else data.host_cache)
                if backup is None:
                    backup = data.executor.allocate(size, "pinned")
                data.host_cache = None
                _blocking_copy(data.executor, backup, address, size, device)
                data.cpu_backup_tensor = backup
            _unmap_and_release(data)
        gc.collect()

    def wake_up(self, tags: Optional[Sequence[str]] = None) -> None:
        """Maps the allocations of ``tags`` (all when None) again and copies their backups
        back."""
        mapped = []
        try:
            for address, data in self.pointer_to_data.items():
                if tags is None or data.tag in tags:
                    _create_and_map(data)
                    mapped.append(address)
                    backup = data.cpu_backup_tensor
                    if backup is not None:
                        device, size, _ = data.handle
                        if os.environ.get("OFFLOADKIT_STANDIN_DEFECT") != "wake_up_drops_backup":
                            _blocking_copy(data.executor, address, backup, size, device)
                        data.host_cache, data.cpu_backup_tensor = backup, None
        except Exception:
            for address in mapped:
                _unmap_and_release(self.pointer_to_data[address])
            raise

    @contextlib.contextmanager
    def use_memory_pool(self, tag: Optional[str] = None) -> Iterator[None]:
        """Tensors allocated inside come from the allocator's pool, with ``tag``."""
        if tag is None:
            tag = CuMemAllocator.default_tag
        assert isinstance(tag, str)
        old_tag, self.current_tag = self.current_tag, tag
        pool = _Pool(self)
        torch._standin_push_allocator(pool.malloc)
        try:
            self.allocator_and_pools[tag] = pool
            yield
            pool.release_unused()
        finally:
            torch._standin_pop_allocator()
            self.current_tag = old_tag

    def get_current_usage(self) -> int:
        return sum(data.handle[1] for data in self.pointer_to_data.values())
