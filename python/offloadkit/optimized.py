"""offloadkit's optimized implementations, from Python: the graph-stable regions, the activation
offloader, the coalesced arena and the paged stash, the very C++ objects (``vmm_region``,
``unified_region``, ``async_offloader``, ``coalesced_offloader``, ``paged_stash``) that the
batteries check in C++, with the methods of ``offloadkit.protocol``'s ``Region``, ``Activation``,
``Arena`` and ``Stash``. ``make`` is their factory, so the batteries check them through the Python
bridge as they check any Python implementation::

    python -m offloadkit check offloadkit.optimized:make --executor host

Each class takes the executor it is given: offloadkit's own (what a battery lends; fault injection
and the host executor then reach it), or None, or an executor of someone else's whose ``backend``
is "cuda", for which offloadkit's own cuda executor (one per process) runs the object. Streams are
``offloadkit.Stream`` values (a raw ``cudaStream_t`` int with ``.device``). Each object is a
context manager whose end closes it. ``offloadkit.torch`` puts torch tensors and streams on them.
"""

from typing import Any, Optional

from . import protocol as _p
from .errors import LogicError
from .types import OffloadOptions, RegionConfig, StashConfig

try:
    from . import _native
except ImportError as _e:  # the package without its extension module (a source checkout)
    _native = None
    _NATIVE_ERROR = str(_e)


def _classes() -> Any:
    if _native is None:
        raise LogicError(
            f"offloadkit's optimized implementations need the extension module offloadkit._native, "
            f"which cannot be imported ({_NATIVE_ERROR}): install offloadkit with `pip install "
            f"--no-build-isolation .` from its checkout, or put a build's python folder "
            f"(<build>/python) on PYTHONPATH")
    return _native


class VmmRegion(_native.OptimizedRegion if _native else object):  # type: ignore[misc]
    """The graph-stable region over CUDA virtual memory (``vmm_region``): pause copies the contents
    to pinned memory chunk by chunk and gives the device memory back to the driver; resume maps it
    again at the same address, so tensors and CUDA graphs over it stay valid. ``swap_with`` is the
    RL phase switch: one region's copy out and another's copy in share the link."""

    capabilities = frozenset({_p.CUDA_EXECUTOR, _p.HOST_EXECUTOR, _p.EXECUTOR_ALLOCATIONS,
                              "address_stable", "releases_memory", "multi_device"})
    implementation = "offloadkit.vmm_region"

    def __init__(self, executor: Any, config: RegionConfig):
        _classes()
        super().__init__(executor, config, "vmm")


class UnifiedRegion(_native.OptimizedRegion if _native else object):  # type: ignore[misc]
    """The region over one managed allocation (``unified_region``): pause prefetches its pages to
    the host; touching it while paused migrates them back instead of faulting; discard behaves as
    preserve."""

    capabilities = frozenset({_p.CUDA_EXECUTOR, _p.HOST_EXECUTOR, _p.EXECUTOR_ALLOCATIONS,
                              "address_stable", "managed_memory"})
    implementation = "offloadkit.unified_region"

    def __init__(self, executor: Any, config: RegionConfig):
        _classes()
        super().__init__(executor, config, "unified")


class AsyncActivation(_native.OptimizedActivation if _native else object):  # type: ignore[misc]
    """The activation offloader (``async_offloader``): each packed tensor is copied on a side
    stream into a pooled pinned buffer and its source given back once the copy is done;
    ``backward_layer_begin`` prefetches the layers next in backward order, within
    ``prefetch_bytes`` and ``prefetch_layers``."""

    capabilities = frozenset({_p.CUDA_EXECUTOR, _p.HOST_EXECUTOR, _p.EXECUTOR_ALLOCATIONS,
                              "origin_device", "prefetch_bound", "pending_bound",
                              "backward_prefetch"})
    implementation = "offloadkit.async_offloader"

    def __init__(self, executor: Any, options: Optional[OffloadOptions] = None):
        _classes()
        super().__init__(executor, options if options is not None else OffloadOptions())


class CoalescedArena(_native.OptimizedArena if _native else object):  # type: ignore[misc]
    """The coalesced arena (``coalesced_offloader``): a tensor set (an optimizer's states, a
    model's weights) copied to one cached pinned arena, laid out once per shape, one copy per run
    of device-contiguous tensors, none synchronizing the host; in steady state it allocates no
    host memory. ``offload`` and ``reload`` take device Buffers and return an Event that the
    caller destroys (``executor.destroy_event``)."""

    capabilities = frozenset({_p.CUDA_EXECUTOR, _p.HOST_EXECUTOR, _p.EXECUTOR_ALLOCATIONS,
                              "asynchronous", "pinned_steady_state", "single_host_buffer"})
    implementation = "offloadkit.coalesced_offloader"

    def __init__(self, executor: Any):
        _classes()
        super().__init__(executor)


class PagedStash(_native.OptimizedStash if _native else object):  # type: ignore[misc]
    """The paged stash (``paged_stash``): device pages, then pinned host pages, with the page
    table, freelists and status word on the device and one launch per call (or per 64 keys in a
    batch); the row count never goes to the host, so a CUDA graph of a step replays with other
    row counts."""

    capabilities = frozenset({_p.CUDA_EXECUTOR, _p.HOST_EXECUTOR, _p.EXECUTOR_ALLOCATIONS,
                              "capturable", "page_ids"})
    implementation = "offloadkit.paged_stash"

    def __init__(self, executor: Any, config: StashConfig, stream: Any):
        _classes()
        super().__init__(executor, config, stream)


def make() -> _p.Plugin:
    """The factory of the optimized region (vmm), activation offloader, arena and stash."""
    _classes()
    return _p.Plugin(name="offloadkit-optimized", region=VmmRegion, activation=AsyncActivation,
                     arena=CoalescedArena, stash=PagedStash)


def make_unified() -> _p.Plugin:
    """The factory of the unified-memory region."""
    _classes()
    return _p.Plugin(name="offloadkit-optimized-unified", region=UnifiedRegion)
