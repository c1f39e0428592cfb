"""torch_memory_saver's pause/resume allocator as an offloadkit region.

Written against fzyzcjy/torch_memory_saver commit 4a43c97771f139db0215c1378e8a0b50e679d23d
(2026-08-20, version 0.0.10b1), public API only: ``torch_memory_saver.torch_memory_saver`` (the
process-wide ``TorchMemorySaver``), its ``region(tag=..., enable_cpu_backup=...)`` context,
``pause(tag)`` and ``resume(tag)``.

Mapping
-------
- ``Region(executor, config)``: a ``torch.empty(config.bytes, dtype=torch.uint8)`` on
  ``config.device``, allocated inside ``torch_memory_saver.region(tag=T,
  enable_cpu_backup=B)`` with a tag ``T`` of the region's own, so that ``pause(T)`` and
  ``resume(T)`` reach this region only. ``B`` is ``config.fixed_mode == "preserve"`` (the
  default where the caller does not say: preserve).
- ``pause(mode, stream)``: ``executor.synchronize(stream)``, then ``pause(T)``.
- ``resume(stream)``: ``resume(T)``.
- ``info().data``: the tensor's ``data_ptr()``, which the library keeps across pause and resume.
- ``close()``: ``pause(T)`` where the region is active, then the tensor is dropped.

Declared profile, and why
-------------------------
- ``fixed_pause_mode``: whether a pause keeps the contents is fixed when the memory is allocated
  (``enable_cpu_backup`` of the ``region`` context); ``pause`` has no mode argument. A pause in
  the other mode raises ``Unsupported`` and changes nothing.
- ``synchronous``: ``pause`` and ``resume`` take no stream. The library copies with the blocking
  ``cudaMemcpy`` and maps with the driver's virtual-memory calls, and returns when they are done.
- ``no_graphs``: the library keeps no graphs of a region's users (its ``cuda_graph`` context makes
  a graph's own memory pausable, which is another thing); offloadkit captures and replays through
  the executor.
- ``address_stable``: the virtual address is reserved once and kept across pause and resume.
- ``releases_memory``: a pause unmaps and releases the physical memory.
- ``multi_device``: allocations remember their device and are remapped there.
- ``cuda_executor`` only: PyTorch and the library call CUDA themselves, so offloadkit's executor
  neither sees nor fails their allocations.

What the adapter adds
---------------------
- A stream wait before ``pause``: the library does not wait for work queued on any stream
  before it copies and unmaps, so the adapter synchronizes the caller's stream first (the
  region contract's pause waits for it). Nothing is added after ``resume``: whether the
  library's own copy is finished when ``resume`` returns is what ``synchronous`` declares and
  what the battery checks.
- The refusal of the other pause mode (the library has no mode argument to refuse).
- A tag per region (the library pauses by tag; the default tag would pause every region).
- The hook mode: the library's default ("preload") needs its binary in ``LD_PRELOAD`` before
  the process starts; where it is not there, ``make`` chooses the library's in-process "torch"
  mode (PyTorch's pluggable allocator). Pause and resume are the same in both.

Factories: ``make`` (the library's defaults) and ``make_retain_cpu_backup`` (its
``retain_cpu_backup`` switched on). With the defaults every preserving pause allocates a pinned
backup and every resume frees it, which the region battery's ``many_cycles`` reports.

What the library does not let the adapter do
--------------------------------------------
- Free a region: PyTorch keeps a freed tensor's block cached in the tag's memory pool, which the
  library keeps for the life of the process. ``close()`` pauses the tag, so its device memory is
  released; the address range (and the host backup of a preserving region) stay with the
  library. offloadkit's leak ledger reports them.
- Report errors: a driver failure in pause or resume, and a pause of a region that is not active
  (or a resume of one that is not paused), end the process with ``exit(1)`` inside the library;
  ``offloadkit check`` reports such a property as "exited with code 1 without a result". The
  Python-level errors (``ValueError`` of a bad backup option, PyTorch's out-of-memory error of
  the allocation) are translated by ``offloadkit.adapters.translate``.
"""

import os
from typing import Any, Mapping, Optional

from ..errors import OutOfRange, StateError
from ..protocol import CUDA_EXECUTOR, Plugin
from . import Unsupported, import_library, library_call, library_version
from ._tagged_region import TaggedTensorRegion

LIBRARY = "torch_memory_saver"
DISTRIBUTION = "torch_memory_saver"
COMMIT = "4a43c97771f139db0215c1378e8a0b50e679d23d"
PAUSE_MODES = ("preserve", "discard")


class TorchMemorySaverRegion(TaggedTensorRegion):
    """One ``torch.empty`` allocated in a ``torch_memory_saver.region`` of its own tag."""

    implementation = "torch_memory_saver"
    capabilities = frozenset({CUDA_EXECUTOR, "address_stable", "releases_memory", "multi_device",
                              "fixed_pause_mode", "synchronous", "no_graphs"})

    def __init__(self, executor: Any, config: Any):
        super().__init__(executor, config)
        mode = config.fixed_mode or "preserve"
        if mode not in PAUSE_MODES:
            raise OutOfRange(f"fixed_mode = {mode!r} is not one of {', '.join(PAUSE_MODES)}")
        library = import_library(LIBRARY, "offloadkit.adapters.torch_memory_saver")
        torch = import_library("torch", "offloadkit.adapters.torch_memory_saver")
        self.saver = library.torch_memory_saver
        self.mode = mode
        backup = mode == "preserve"
        self._allocate(torch, f"torch_memory_saver.region(tag={self.tag!r}, "
                              f"enable_cpu_backup={backup})",
                       lambda: self.saver.region(tag=self.tag, enable_cpu_backup=backup))

    def pause(self, mode: str, stream: Any) -> None:
        if mode != self.mode:
            raise Unsupported(
                f"pause mode {mode!r}: torch_memory_saver fixes the mode when the memory is "
                f"allocated, and this region was allocated with enable_cpu_backup="
                f"{self.mode == 'preserve'} (mode {self.mode!r})")
        # The library waits for no stream: the caller's queued writes must land first.
        self.executor.synchronize(stream)
        with library_call(f"torch_memory_saver.pause({self.tag!r})"):
            self.saver.pause(self.tag)
        self.state = "paused"

    def resume(self, stream: Any) -> None:
        with library_call(f"torch_memory_saver.resume({self.tag!r})"):
            self.saver.resume(self.tag)
        self.state = "active"

    def close(self) -> None:
        if self.tensor is None:
            return
        if self.state == "active":
            with library_call(f"torch_memory_saver.pause({self.tag!r})"):
                self.saver.pause(self.tag)
            self.state = "paused"
        self.tensor = None


HOOK_MODES = ("preload", "torch")


def hook_mode_for(environ: Mapping[str, str] = os.environ) -> str:
    """The library's hook mode for this process: "preload" where ``LD_PRELOAD`` names the
    library's preload binary (the library's default, which needs it), "torch" (PyTorch's
    pluggable allocator, in process) otherwise."""
    preload = environ.get("LD_PRELOAD", "")
    return "preload" if "torch_memory_saver" in preload else "torch"


def _set_hook_mode(saver: Any, mode: str) -> None:
    if mode not in HOOK_MODES:
        raise OutOfRange(f"hook_mode = {mode!r} is not one of {', '.join(HOOK_MODES)}")
    try:
        saver.hook_mode = mode
    except (AttributeError, AssertionError) as e:
        raise StateError(f"torch_memory_saver.hook_mode = {mode!r}: the library was initialized "
                         f"before the adapter could choose its hook mode ({type(e).__name__}: "
                         f"{e})") from e


def make(hook_mode: Optional[str] = None) -> Plugin:
    """The factory: ``python -m offloadkit check offloadkit.adapters.torch_memory_saver:make``.
    The library as it is configured by default: a preserving pause allocates its pinned backup
    and the resume frees it (``retain_cpu_backup`` off). ``hook_mode`` ("preload" or "torch";
    default ``hook_mode_for()``) is set before the library initializes."""
    library = import_library(LIBRARY, "offloadkit.adapters.torch_memory_saver")
    _set_hook_mode(library.torch_memory_saver, hook_mode or hook_mode_for())
    return Plugin(name="torch_memory_saver",
                  version=library_version(library, DISTRIBUTION),
                  region=TorchMemorySaverRegion)


def make_retain_cpu_backup() -> Plugin:
    """``make()`` with the library's ``retain_cpu_backup`` switched on (process-wide): a resume
    keeps the pinned backup and the next pause of the same allocation copies into it, so pause
    cycles allocate nothing after the first."""
    plugin = make()
    saver = import_library(LIBRARY, "offloadkit.adapters.torch_memory_saver").torch_memory_saver
    with library_call("torch_memory_saver.retain_cpu_backup = True"):
        saver.retain_cpu_backup = True
    plugin.name = "torch_memory_saver-retain"
    return plugin
