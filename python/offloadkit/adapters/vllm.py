"""vLLM's sleep-mode allocator (``CuMemAllocator``) as an offloadkit region.

Written against vllm-project/vllm, ``vllm/device_allocator/cumem.py`` at commit
010c211270c004db49f91933849804821d153e4d and its C extension ``csrc/cumem_allocator.cpp`` at
commit 0035e224f4bb39065187bddf4b5ae20ffe1bf945, public API only:
``vllm.device_allocator.cumem.CuMemAllocator.get_instance()``, its
``use_memory_pool(tag=...)`` context, ``sleep(offload_tags=...)`` and ``wake_up(tags=...)``.

Mapping
-------
- ``Region(executor, config)``: a ``torch.empty(config.bytes, dtype=torch.uint8)`` on
  ``config.device``, allocated inside ``use_memory_pool(tag=T)`` with a tag ``T`` of the
  region's own.
- ``pause("preserve", stream)``: ``executor.synchronize(stream)``, then
  ``sleep(offload_tags=(T,))``; ``pause("discard", stream)``: the same with
  ``sleep(offload_tags=())``.
- ``resume(stream)``: ``wake_up(tags=[T])``.
- ``info().data``: the tensor's ``data_ptr()``, which the allocator keeps across sleep and wake.
- ``close()``: ``wake_up(tags=[T])`` where paused (the allocator's free path unmaps the memory,
  which must be mapped), then the tensor is dropped and the tag's pool is taken out of the
  allocator's ``allocator_and_pools``, so that the pool gives its block back through the
  allocator's free callback.

Declared profile, and why
-------------------------
- Both pause modes: the mode is chosen per sleep (``offload_tags``), not per allocation.
- ``synchronous``: ``sleep`` and ``wake_up`` take no stream; they copy with the blocking
  ``cudaMemcpy`` and map with the driver's virtual-memory calls, and return when done.
- ``no_graphs``: the allocator keeps no graphs; offloadkit captures through the executor.
- ``address_stable``: each allocation's address range is reserved once and kept.
- ``releases_memory``: ``sleep`` unmaps and releases the physical memory.
- ``multi_device``: each allocation remembers its device and is mapped there again.
- ``cuda_executor`` only: PyTorch and the allocator call CUDA themselves.

One live region per process
---------------------------
``sleep`` releases *every* allocation of the allocator, whatever its tag: ``offload_tags`` only
chooses which ones are copied to the host first, the others are discarded. A region of this
allocator is therefore every allocation in its pool, and pausing one region would discard the
contents of any other. The adapter refuses to create a region while another one is live
(``Unsupported``, naming the live region); the battery's properties that hold two regions at once
report that refusal. That is the allocator's documented design, not a defect.

What the adapter adds
---------------------
- A stream wait before ``sleep``: the allocator waits for no stream before it copies and
  unmaps, so the adapter synchronizes the caller's stream first.
- The tag per region and the pool hand-back in ``close`` described above.

Errors
------
The C extension reports a failed driver call as ``RuntimeError("CUDA Error: ...")`` after the
loop of ``sleep`` has already released the allocations before it; ``wake_up`` unmaps what it had
mapped and raises again. Both reach the batteries as ``CudaError`` (PyTorch's out-of-memory error
of the allocation as ``OutOfMemory``), the allocator's message kept
(``offloadkit.adapters.translate``). ``get_instance`` where the extension is not built asserts;
the adapter reports that as ``Unsupported``.
"""

import gc
from typing import Any, Optional

from ..errors import OutOfRange
from ..protocol import CUDA_EXECUTOR, Plugin
from . import Unsupported, import_library, library_call, library_version
from ._tagged_region import TaggedTensorRegion

LIBRARY = "vllm"
DISTRIBUTION = "vllm"
MODULE = "vllm.device_allocator.cumem"
COMMIT = "010c211270c004db49f91933849804821d153e4d"
EXTENSION_COMMIT = "0035e224f4bb39065187bddf4b5ae20ffe1bf945"
PAUSE_MODES = ("preserve", "discard")


def _allocator_class() -> Any:
    cumem = import_library(MODULE, "offloadkit.adapters.vllm")
    if not getattr(cumem, "cumem_available", False):
        raise Unsupported(f"{MODULE}.cumem_available is False: this vLLM build has no cumem "
                          "allocator extension (CUDA and ROCm builds only)")
    return cumem.CuMemAllocator


class CuMemAllocatorRegion(TaggedTensorRegion):
    """One ``torch.empty`` allocated in ``CuMemAllocator.use_memory_pool`` under its own tag."""

    implementation = "vllm-cumem"
    capabilities = frozenset({CUDA_EXECUTOR, "address_stable", "releases_memory", "multi_device",
                              "synchronous", "no_graphs"})

    #: The region that holds the allocator (see "One live region per process").
    live: Optional["CuMemAllocatorRegion"] = None

    def __init__(self, executor: Any, config: Any):
        super().__init__(executor, config)
        holder = CuMemAllocatorRegion.live
        if holder is not None:
            raise Unsupported(
                f"a second region while {holder.tag!r} is live: CuMemAllocator.sleep() releases "
                "every allocation of the process whatever its tag (offload_tags only chooses "
                "what is copied first), so one region's pause would discard the other's")
        cls = _allocator_class()
        torch = import_library("torch", "offloadkit.adapters.vllm")
        with library_call("CuMemAllocator.get_instance()"):
            self.allocator = cls.get_instance()
        self._allocate(torch, f"CuMemAllocator.use_memory_pool(tag={self.tag!r})",
                       lambda: self.allocator.use_memory_pool(tag=self.tag))
        CuMemAllocatorRegion.live = self

    def pause(self, mode: str, stream: Any) -> None:
        if mode not in PAUSE_MODES:
            raise OutOfRange(f"pause mode {mode!r} is not one of {', '.join(PAUSE_MODES)}")
        offload_tags = (self.tag,) if mode == "preserve" else ()
        # The allocator waits for no stream: the caller's queued writes must land first.
        self.executor.synchronize(stream)
        with library_call(f"CuMemAllocator.sleep(offload_tags={offload_tags!r})"):
            self.allocator.sleep(offload_tags=offload_tags)
        self.state = "paused"

    def resume(self, stream: Any) -> None:
        with library_call(f"CuMemAllocator.wake_up(tags=[{self.tag!r}])"):
            self.allocator.wake_up(tags=[self.tag])
        self.state = "active"

    def close(self) -> None:
        if self.tensor is None:
            return
        try:
            if self.state == "paused":
                with library_call(f"CuMemAllocator.wake_up(tags=[{self.tag!r}])"):
                    self.allocator.wake_up(tags=[self.tag])
                self.state = "active"
            self.tensor = None
            with library_call(f"CuMemAllocator: giving back the pool of {self.tag!r}"):
                self.allocator.allocator_and_pools.pop(self.tag, None)
                gc.collect()
        finally:
            if CuMemAllocatorRegion.live is self:
                CuMemAllocatorRegion.live = None


def make() -> Plugin:
    """The factory: ``python -m offloadkit check offloadkit.adapters.vllm:make``."""
    library = import_library(LIBRARY, "offloadkit.adapters.vllm")
    return Plugin(name="vllm-cumem", version=library_version(library, DISTRIBUTION),
                  region=CuMemAllocatorRegion)
