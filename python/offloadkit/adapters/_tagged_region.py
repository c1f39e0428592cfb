"""What the adapters of torch_memory_saver and vLLM's ``CuMemAllocator`` share: a region that is
one ``torch.empty`` of ``uint8`` allocated inside the library's context for a tag of the region's
own, so that the library's pause and resume of that tag move exactly this memory."""

import itertools
from typing import Any, Callable, ContextManager, Optional

from ..protocol import Region
from ..types import RegionInfo
from . import library_call

_tags = itertools.count(1)


class TaggedTensorRegion(Region):
    """The config checked and the fields every such region has (``executor``, ``tag``, ``size``,
    ``device``, ``footprint``: the size rounded up to the executor's granularity, ``captures``);
    the subclass allocates with ``_allocate`` and keeps ``state`` from then on."""

    def __init__(self, executor: Any, config: Any):
        self.check_config(executor, config)
        self.executor = executor
        self.tag = f"offloadkit-region-{next(_tags)}"
        self.size = int(config.bytes)
        self.device = int(config.device)
        granularity = executor.granularity(self.device)
        self.footprint = -(-self.size // granularity) * granularity
        self.captures = 0
        self.tensor: Optional[Any] = None

    def _allocate(self, torch: Any, call: str, context: Callable[[], ContextManager[Any]]) -> None:
        """The region's memory: ``torch.empty`` of its size on its device, inside the library's
        ``context()`` (made and entered as the library call ``call``); the region is then
        active."""
        with library_call(call):
            with torch.cuda.device(self.device):
                with context():
                    self.tensor = torch.empty(self.size, dtype=torch.uint8,
                                              device=torch.device("cuda", self.device))
        self.address = int(self.tensor.data_ptr())
        self.state = "active"

    def info(self) -> RegionInfo:
        return RegionInfo(self.address, self.size, self.device, self.state, self.footprint,
                          self.captures)
