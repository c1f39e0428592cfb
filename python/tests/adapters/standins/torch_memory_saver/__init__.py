"""A stand-in for torch_memory_saver's public API (tests only), written from the library's README
and the documented behaviour of its public calls; none of the library's code.

``torch_memory_saver`` (the process-wide ``TorchMemorySaver``) with ``region(tag="default",
enable_cpu_backup=False, enable_disk_backup=False, cpu_backup_backend=None)``, ``pause(tag=None)``
and ``resume(tag=None)``. Inside ``region``, ``torch.empty`` allocates through the saver: an
address range is reserved and kept for the allocation's life, physical memory is mapped into it;
``pause`` of a tag copies the allocations made with ``enable_cpu_backup`` to pinned host memory
(a blocking copy) and unmaps and releases the physical memory of every allocation of the tag;
``resume`` maps new physical memory at the same address and copies the backup back, then frees
the backup unless ``retain_cpu_backup`` is set (then the next pause copies into the same one).
Neither waits for work queued on any stream. As in the library, pausing an allocation that is not active or
resuming one that is not paused, and a driver failure during either, end the process (exit 1).

Device memory is the bound executor's (``torch._standin_bind``), through its virtual-memory calls.

Planted defect (tests only): with ``OFFLOADKIT_STANDIN_DEFECT=pause_ignores_cpu_backup`` in the
environment, ``pause`` discards the contents of every allocation, also of those allocated with
``enable_cpu_backup=True``.
"""

import contextlib
import os
import sys
from typing import Any, Dict, Iterator, Optional

import torch

__version__ = "0.0.10b1+offloadkit.standin"
_TAG_DEFAULT = "default"


def _planted(name: str) -> bool:
    return os.environ.get("OFFLOADKIT_STANDIN_DEFECT") == name


def _fatal(message: str) -> None:
    """What the library does on a failed check: a line on stderr, then exit(1)."""
    sys.stderr.write(f"[torch_memory_saver.cpp] {message}\n")
    sys.stderr.flush()
    os._exit(1)


class _Allocation:
    def __init__(self, executor: Any, address: int, size: int, mapped: int, device: int,
                 tag: str, cpu_backup: bool):
        self.executor = executor
        self.address = address
        self.size = size
        self.mapped = mapped
        self.device = device
        self.tag = tag
        self.cpu_backup = cpu_backup
        self.physical: Optional[Any] = None
        self.host: Optional[Any] = None
        self.state = "active"
        # The library's blocking copies, on a stream of its own (no caller's stream is waited for).
        self.stream = executor.create_stream(device)


class TorchMemorySaver:
    """The process-wide saver (``torch_memory_saver.torch_memory_saver``)."""

    def __init__(self) -> None:
        self._allocations: Dict[int, _Allocation] = {}
        self._retain_cpu_backup = False
        self._hook_mode = "preload"

    @property
    def hook_mode(self) -> str:
        raise AttributeError

    @hook_mode.setter
    def hook_mode(self, hook_mode: str) -> None:
        """"preload" (LD_PRELOAD) or "torch" (PyTorch's pluggable allocator); the stand-in
        allocates the same way in both."""
        self._hook_mode = hook_mode

    @property
    def retain_cpu_backup(self) -> bool:
        """Whether ``resume`` keeps the host backup for the next ``pause`` (default False: the
        backup is allocated at every pause and freed at every resume)."""
        return self._retain_cpu_backup

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value: bool) -> None:
        self._retain_cpu_backup = bool(value)

    @contextlib.contextmanager
    def region(self, tag: str = _TAG_DEFAULT, enable_cpu_backup: bool = False,
               enable_disk_backup: bool = False,
               cpu_backup_backend: Optional[str] = None) -> Iterator[None]:
        """Tensors allocated inside are pausable under ``tag``; with ``enable_cpu_backup`` a pause
        keeps their contents, without it a pause discards them."""
        if cpu_backup_backend is not None and not enable_cpu_backup:
            raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
        assert not (enable_cpu_backup and enable_disk_backup), \
            "enable_cpu_backup and enable_disk_backup are mutually exclusive"
        if enable_disk_backup:
            raise NotImplementedError("the stand-in has no disk backup")

        def malloc(nbytes: int, device: int):
            address = self._malloc(nbytes, device, tag, enable_cpu_backup)
            return address, lambda: self._free(address)

        torch._standin_push_allocator(malloc)
        try:
            yield
        finally:
            torch._standin_pop_allocator()

    def _malloc(self, nbytes: int, device: int, tag: str, cpu_backup: bool) -> int:
        executor = torch._standin_executor()
        granularity = executor.granularity(device)
        mapped = -(-max(nbytes, 1) // granularity) * granularity
        try:
            physical = executor.create_physical(mapped, device)
        except MemoryError as e:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {nbytes} bytes ({e})") from e
        address = executor.reserve(mapped, device)
        executor.map(address, mapped, physical)
        executor.set_access(address, mapped, device)
        allocation = _Allocation(executor, address, nbytes, mapped, device, tag, cpu_backup)
        allocation.physical = physical
        self._allocations[address] = allocation
        return address

    def _free(self, address: int) -> None:
        a = self._allocations.pop(address)
        ex = a.executor
        ex.synchronize(a.stream)
        if a.physical is not None:
            ex.unmap(a.address, a.mapped)
            ex.release_physical(a.physical)
        ex.unreserve(a.address, a.mapped)
        if a.host is not None:
            ex.deallocate(a.host)
        ex.destroy_stream(a.stream)

    def _matching(self, tag: Optional[str]):
        return [a for a in self._allocations.values() if not tag or a.tag == tag]

    def pause(self, tag: Optional[str] = None) -> None:
        """Pauses every allocation of ``tag`` (every allocation when None)."""
        for a in self._matching(tag):
            if a.state != "active":
                _fatal(f"Cannot pause allocation that is not active. tag={a.tag} ptr={a.address}")
            ex = a.executor
            try:
                if a.cpu_backup and not _planted("pause_ignores_cpu_backup"):
                    if a.host is None:
                        a.host = ex.allocate(a.size, "pinned")
                    ex.copy(a.host, a.address, a.size, a.stream)
                    ex.synchronize(a.stream)
                ex.unmap(a.address, a.mapped)
                ex.release_physical(a.physical)
            except Exception as e:  # the library's CUDA checks end the process
                _fatal(f"CUresult error: {e}")
            a.physical = None
            a.state = "paused"

    def resume(self, tag: Optional[str] = None) -> None:
        """Resumes every allocation of ``tag`` (every allocation when None) at its address."""
        for a in self._matching(tag):
            if a.state != "paused":
                _fatal(f"Cannot resume allocation that is not paused. tag={a.tag} "
                       f"ptr={a.address}")
            ex = a.executor
            try:
                physical = ex.create_physical(a.mapped, a.device)
                ex.map(a.address, a.mapped, physical)
                ex.set_access(a.address, a.mapped, a.device)
                if a.cpu_backup and a.host is not None:
                    ex.copy(a.address, a.host, a.size, a.stream)
                    ex.synchronize(a.stream)
                    if not self._retain_cpu_backup:
                        ex.deallocate(a.host)
                        a.host = None
            except Exception as e:
                _fatal(f"cudaError error: {e}")
            a.physical = physical
            a.state = "active"

    @contextlib.contextmanager
    def cuda_graph(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        raise NotImplementedError("the stand-in has no pausable CUDA graph memory")
        yield  # pragma: no cover


torch_memory_saver = TorchMemorySaver()
