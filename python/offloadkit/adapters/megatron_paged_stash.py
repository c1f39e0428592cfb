"""Megatron-LM's paged stash of MoE activations as an offloadkit stash implementation.

Written against NVIDIA/Megatron-LM commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22,
main), ``megatron/core/transformer/moe/paged_stash.py`` and its Triton kernels
(``megatron/core/transformer/moe/ops/paged_stash.py``: ``paged_stash_copy_kernel``,
``paged_stash_pop_kernel``). Line numbers below are that file's.

What it imports: ``megatron.core.transformer.moe.paged_stash``, the module of the classes the
adapter drives; nothing smaller holds them. Importing it imports ``megatron.core`` (its
``__init__``: ``tensor_parallel``, ``parallel_state``, ``DistributedDataParallel`` ...), Triton
(the kernels), ``megatron.core.full_cuda_graph``, the distributed optimizer and the MoE token
dispatcher (lines 9-18). PyTorch is required, TransformerEngine and apex are not. No model,
pipeline schedule or process group is built.

How Megatron drives the classes
-------------------------------
The MoE expert layer (``experts.py``) opens a group with ``paged_stash_group_start`` and enters
``get_paged_stash_context(max_num_tokens=<rows of the padded token buffer>,
num_tokens_tensor=tokens_per_expert.sum())``, which clones the count on the device (line 871).
While it is entered, autograd's saved-tensor hook ``PagedStashManager.on_save_for_backward`` makes
a ``PagedTensor`` of every saved tensor that TransformerEngine marked with
``grouped_tensor_scale_inv`` (lines 684-778). ``paged_stash_group_commit`` then runs
``stash_paged_tensors(schedule_layer)`` (line 355): Megatron's pack stream waits for the current
stream and ``offload_to_stash`` launches one copy kernel per tensor, which pops pages from the
buffer's device-resident circular free list. The next group's start calls
``wait_for_stash_to_complete`` (line 311): the current stream waits for the pack stream and the
source is dropped. In backward, ``reload_paged_tensors`` allocates the destination on the current
stream and launches the pop kernel on the unpack stream (the pack stream itself, line 407), which
copies the rows back and returns the pages; ``PipelinePostScheduleFunction.backward`` makes the
current stream wait for it (line 378). ``paged_stash_reset`` starts each iteration: the first one
records the token maxima ("capture"), the second allocates the buffers from them
(``allocate_stash_buffers``) and every later one resets the free lists and the flags.

Mapping
-------
- ``Stash(executor, config, stream)``: a new ``PagedStashManager``, brought to the state a
  training run reaches at its third iteration, through Megatron's own functions:
  ``paged_stash_init_chunk_handler(1, None)``, ``paged_stash_reset`` (begin -> capture), the
  capture maxima set to ``device_pages * rows_per_page`` (and ``pinned_pages * rows_per_page`` for
  the host tier) tokens of dtype ``torch.uint8`` and hidden size ``row_bytes``, and
  ``paged_stash_reset`` again (capture -> captured, ``allocate_stash_buffers`` with the factors
  -1.0 (CUDA, the maxima as they are) and 1.0 (host)). One ``PagedStashBuffer`` results: pages of
  ``rows_per_page`` tokens, ``device_pages`` of them in device memory and ``pinned_pages`` in
  pinned host memory, and the manager's one overflow flag.
- ``stash(key, src, rows)``: on the caller's stream, ``get_paged_stash_context(max_num_tokens=
  max_rows, num_tokens_tensor=rows)``, ``on_save_for_backward(src as a (max_rows, row_bytes)
  uint8 tensor marked grouped_tensor_scale_inv = False)``, ``stash_paged_tensors(layer)`` and
  ``wait_for_stash_to_complete()``, where ``layer`` is ``get_schedule_layer(vp + 1, layer,
  microbatch)``, Megatron's decimal schedule position.
- ``restore(key, dst, rows_out)``: ``reload_paged_tensors``'s body with the caller's ``dst`` as
  the destination (``PagedTensor._tensor``) instead of a new ``torch.empty``, then
  ``PipelinePostScheduleFunction.backward``'s wait; ``rows_out`` gets the key's row count, or 0.
- ``reset``: ``paged_stash_reset`` on the caller's stream (free lists, overflow and host-spill
  flags reset; the buffers kept).
- ``clear_status``: ``overflow.zero_()`` and ``host_spill.zero_()`` on the caller's stream, as
  ``PagedStashRunner.prepare_for_rerun`` does (lines 1165-1168), keeping the buffers.
- ``snapshot``: read from the library's device tensors with ``.tolist()`` / ``.item()`` (the bridge
  has synchronized the stream): free pages per tier ``free_list_tail - free_list_head``, the free
  page ids from ``free_list_cuda`` / ``free_list_host`` between head and tail, each live key's
  ``num_tokens_tensor``, ``spilled_to_host`` (its tier) and ``page_record`` (its pages), and the
  overflow flag.

The module-level functions (``get_paged_stash_context``, ``paged_stash_reset`` ...) reach the
manager through the process-wide ``PagedStashManager.STASH_MGR``; the adapter installs its own
manager there for the duration of each call (and puts back what was there), so that every object
has a manager, pack stream, buffers and flag of its own and any number of them can live at once.

Declared profile, and why
-------------------------
- ``sticky_flag``: one overflow flag per manager, shared by all its buffers (``overflow``,
  line 65: "Overflow flag tensor (shared across all buffers)"). The copy kernel sets it when a key
  fits in neither tier, and once it is set both kernels return before any write ("If overflow is
  already set, restore freelist heads and return", ops lines 42 and 171): every later stash stores
  nothing and every restore gives back nothing until ``paged_stash_reset`` clears it. Megatron
  reads it once per step (``check_paged_stash_overflow``, line 956) and reruns the step without
  the stash (``PagedStashRunner``).
- ``whole_key_per_tier``: the copy kernel takes the CUDA free list if it has all the pages
  (``use_cuda = avail_cuda >= required_pages``, ops line 65), else the host free list if it has
  them all, else it overflows; one ``spilled_to_host`` flag per tensor says which.
- ``page_ids``: the pages are ids in the free lists and each tensor's ``page_record``; the
  snapshot reports them (device ids 0..D-1, host ids D..D+P-1), so the battery checks that none is
  lost or handed out twice.
- ``key_limits`` (256, 1000, 1000): keys are decimal schedule positions, ``vp_stage * 1000000 +
  layer_no * 1000 + microbatch_no`` with layer and microbatch below 1000 (line 461); vp has no
  limit of its own there (offloadkit's codec's 256).
- Not ``capturable``: Megatron captures the whole forward-backward step with
  ``FullCudaGraphWrapper``, not one stash or restore; the manager's Python bookkeeping
  (``paged_tensors_to_reload``) and the adapter's per-key state are not replayed by a graph.
- ``cuda_executor`` only: PyTorch allocates, Triton kernels copy.
- Restore of an empty key goes to the flag (the default ``restore_empty``), as do a row count
  above ``max_rows`` and a double stash: see below. Not ``unknown_restore_error``: telling an empty
  key apart on the host would need the row counts and the flag, which live on the device.

What the adapter adds
---------------------
Megatron's schedule never does what offloadkit's battery does on purpose; the adapter keeps the
library's one-flag, all-on-the-device design for those cases and never synchronizes in ``stash``
or ``restore``:

- A row count above ``max_rows`` (or past 2^63 - 1): Megatron's counts are bounded by the padded
  token buffer the count describes, so the kernel does not check; it would write ``page_record``
  past its end. The adapter raises the overflow flag on the device before the kernel, which then
  stores nothing.
- A double stash: Megatron asserts on the host that a schedule layer is not stashed twice
  (line 488). A key's earlier stash may or may not have been stored (the flag and the count are on
  the device), so the adapter keeps a device flag per stashed tensor, "held" (1 after a stash
  that stored it, 0 once restored), raises the overflow flag on the device when the key holds one,
  and leaves Megatron's per-layer list empty between calls.
- A restore of a key that holds nothing: Megatron raises ``KeyError`` for a layer it never
  stashed (line 526) and reloads nothing for one reloaded already; the adapter raises the flag (on
  the device, from the held flags) and writes 0 rows.
- A restore after ``clear_status`` of a key that was dropped: its ``page_record`` is zeros, and
  the pop kernel would copy page 0 and hand it back to the free list once more. The adapter
  multiplies the tensor's token count by its held flag before the reload, so that a dropped key
  reloads 0 tokens and returns no pages.
- ``max_rows = 0``: ``on_save_for_backward`` divides by ``max_num_tokens`` and a grid of
  ``min(max_num_tokens, 2048)`` blocks is empty (the new free-list heads would stay
  uninitialized); only 0-row keys fit, and the adapter stores them without a ``PagedTensor``.
- The translation of the library's errors (``AssertionError`` of its state checks as
  ``StateError``, PyTorch's out-of-memory error as ``OutOfMemory``, a CUDA error as ``CudaError``),
  each with its message, and ``OutOfRange`` for a key past ``key_limits`` or ``max_keys``.
"""

import contextlib
import threading
import types as _types
from typing import Any, Dict, Iterator, List

from ..errors import OutOfRange
from ..protocol import CODEC_KEY_LIMITS, CUDA_EXECUTOR, Plugin, Stash
from ..types import StashEntry, StashKey, StashSnapshot, StashStatus
from . import import_library, library_call, library_version

LIBRARY = "megatron.core"
DISTRIBUTION = "megatron-core"
MODULE = "megatron.core.transformer.moe.paged_stash"
COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
ADAPTER = "offloadkit.adapters.megatron_paged_stash"
CAPABILITIES = frozenset({CUDA_EXECUTOR, "sticky_flag", "whole_key_per_tier", "page_ids"})
#: (vp, layer, microbatch): Megatron's schedule code keeps layer and microbatch below 1000.
KEY_LIMITS = (CODEC_KEY_LIMITS[0], 1000, 1000)
#: ``allocate_stash_buffers``' factors: negative sizes the CUDA tier from the capture maxima as
#: they are (scale 1), positive the host tier from the "average" maxima (scale 1).
CUDA_FACTOR = -1.0
CPU_FACTOR = 1.0

#: Serializes the installation of a manager as ``PagedStashManager.STASH_MGR``.
_singleton = threading.Lock()


class _Entry:
    """One stash of a key: Megatron's PagedTensor (None for a 0-row key when ``max_rows`` is 0),
    its token count and the adapter's held flag (both int64 device tensors of one element)."""

    __slots__ = ("paged", "tokens", "held")

    def __init__(self, paged: Any, tokens: Any, held: Any):
        self.paged = paged
        self.tokens = tokens
        self.held = held


def stash_class() -> type:
    """The Stash class over Megatron's paged stash module (imported here)."""
    module = import_library(MODULE, ADAPTER)
    import torch

    manager_class = module.PagedStashManager

    @contextlib.contextmanager
    def installed(manager: Any) -> Iterator[None]:
        """``manager`` is ``PagedStashManager.STASH_MGR`` (what ``get_instance()`` returns) inside
        the context; what was there before is put back."""
        with _singleton:
            previous = manager_class.STASH_MGR
            manager_class.STASH_MGR = manager
            try:
                yield
            finally:
                manager_class.STASH_MGR = previous

    class MegatronPagedStash:
        implementation = "megatron-paged-stash"
        capabilities = CAPABILITIES
        key_limits = KEY_LIMITS

        def __init__(self, executor: Any, config: Any, stream: Any):
            self.executor = executor
            self.config = config
            self.manager: Any = None
            self.buffer: Any = None
            self.device = torch.device("cuda", int(config.device))
            self.entries: Dict[int, List[_Entry]] = {}
            self.keys: set = set()
            # What paged_stash_reset reads from the TransformerConfig.
            self.settings = _types.SimpleNamespace(
                moe_paged_stash_page_size=int(config.rows_per_page),
                moe_paged_stash_buffer_size_factor_cuda=CUDA_FACTOR,
                moe_paged_stash_buffer_size_factor_cpu=CPU_FACTOR)
            with self._on(stream):
                with installed(None):
                    with library_call("PagedStashManager.get_instance()"):
                        manager = manager_class.get_instance()
                self.manager = manager
                with self._as_singleton():
                    with library_call("paged_stash_init_chunk_handler(vp_size=1, vp_stage=None)"):
                        module.paged_stash_init_chunk_handler(1, None)
                    call = (f"paged_stash_reset(enabled=True, config=<page size "
                            f"{config.rows_per_page}>) (begin -> capture)")
                    with library_call(call):
                        module.paged_stash_reset(enabled=True, config=self.settings)
                    # What the capture iteration's on_save_for_backward records: the most tokens
                    # of (dtype, hidden size) held at once.
                    group = (torch.uint8, int(config.row_bytes))
                    manager.max_tokens_across_vp_stages = {
                        group: int(config.device_pages) * int(config.rows_per_page)}
                    manager.max_avg_tokens_across_vp_stages = {
                        group: int(config.pinned_pages) * int(config.rows_per_page)}
                    manager.temp_tokens_across_vp_stages = {group: 0}
                    manager.temp_avg_tokens_across_vp_stages = {group: 0}
                    manager.device = self.device  # what paged_stash_group_commit sets
                    call = (f"paged_stash_reset(enabled=True, config=<factors {CUDA_FACTOR} "
                            f"CUDA, {CPU_FACTOR} host>) (capture -> captured, "
                            f"allocate_stash_buffers)")
                    with library_call(call):
                        module.paged_stash_reset(enabled=True, config=self.settings)
                self.buffer = manager.stash_buffers[torch.uint8][int(config.row_bytes)]

        # ---- helpers ------------------------------------------------------------------------

        def _on(self, stream: Any) -> Any:
            """The protocol's stream as PyTorch's current stream, on the config's device."""
            stack = contextlib.ExitStack()
            stack.enter_context(torch.cuda.device(self.device.index))
            stack.enter_context(torch.cuda.stream(
                torch.cuda.ExternalStream(int(stream), device=self.device)))
            return stack

        def _as_singleton(self) -> Any:
            return installed(self.manager)

        def _code(self, key: Any) -> int:
            key = StashKey(*key)
            for field, value, limit in zip(StashKey._fields, key, KEY_LIMITS):
                if not 0 <= value < limit:
                    raise OutOfRange(f"{field} = {value} is outside [0, {limit}) (key "
                                     f"{tuple(key)}; Megatron's schedule positions are "
                                     f"vp * 1000000 + layer * 1000 + microbatch)")
            with library_call(f"PagedStashManager.get_schedule_layer{(key.vp + 1, ) + key[1:]}"):
                code = self.manager.get_schedule_layer(key.vp + 1, key.layer, key.microbatch)
            return Stash.note_key(self.keys, key, self.config.max_keys, code)

        def _raise_flag(self, condition: Any) -> None:
            """Sets Megatron's overflow flag where ``condition`` (a device tensor) holds, on the
            current stream."""
            flag = self.manager.overflow
            flag.copy_(torch.maximum(flag, condition.to(torch.int64)))

        def _held(self, entries: List[_Entry]) -> Any:
            """How many of ``entries`` hold rows (a device tensor)."""
            total = entries[0].held.clone()
            for e in entries[1:]:
                total.add_(e.held)
            return total

        def _bytes(self, buffer: Any) -> Any:
            return torch.as_tensor(buffer, device=self.device)

        def _count(self, buffer: Any) -> Any:
            """A row count buffer (one uint64) as a one-element int64 tensor."""
            return self._bytes(buffer).narrow(0, 0, 8).view(torch.int64)

        def _rows(self, buffer: Any) -> Any:
            """A source or destination as Megatron's (max_rows, row_bytes) uint8 tensor."""
            cfg = self.config
            flat = self._bytes(buffer).narrow(0, 0, int(cfg.max_rows) * int(cfg.row_bytes))
            return flat.reshape(int(cfg.max_rows), int(cfg.row_bytes))

        # ---- the protocol -------------------------------------------------------------------

        def stash(self, key: Any, src: Any, rows: Any, stream: Any) -> None:
            code = self._code(key)
            cfg = self.config
            manager = self.manager
            with self._on(stream):
                count = self._count(rows)
                # A row count past max_rows (or past 2^63 - 1) stores nothing: Megatron's
                # kernel trusts the count, so the flag is raised before it runs.
                self._raise_flag(count.lt(0).logical_or(count.gt(int(cfg.max_rows))))
                earlier = self.entries.get(code, [])
                if earlier:
                    # A double stash: the key still holds an earlier stash.
                    self._raise_flag(self._held(earlier).gt(0))
                if cfg.max_rows == 0:
                    tokens = count.clone()
                    entry = _Entry(None, tokens, manager.overflow.eq(0).to(torch.int64))
                else:
                    entry = self._stash_paged(code, src, count)
            self.entries.setdefault(code, []).append(entry)

        def _stash_paged(self, code: int, src: Any, count: Any) -> _Entry:
            cfg = self.config
            manager = self.manager
            with self._as_singleton():
                call = (f"get_paged_stash_context(max_num_tokens={cfg.max_rows}, "
                        f"num_tokens_tensor=<rows>)")
                with library_call(call):
                    module.get_paged_stash_context(
                        name=None, max_num_tokens=int(cfg.max_rows), num_tokens_tensor=count,
                        avg_num_tokens=None)
            data = self._rows(src)
            data.grouped_tensor_scale_inv = False  # what TransformerEngine marks
            with library_call("PagedStashManager.on_save_for_backward"):
                paged = manager.on_save_for_backward(data)
            if not isinstance(paged, module.PagedTensor):
                raise OutOfRange(f"PagedStashManager.on_save_for_backward kept the source "
                                 f"instead of a PagedTensor (returned {type(paged).__name__})")
            with library_call(f"PagedStashManager.stash_paged_tensors({code})"):
                manager.stash_paged_tensors(code)
            with library_call("PagedStashManager.wait_for_stash_to_complete()"):
                manager.wait_for_stash_to_complete()
            # Megatron keeps the tensor in its per-layer list until the layer's reload; the
            # adapter keeps it per key (a key may hold a dropped stash and a stored one).
            manager.paged_tensors_to_reload[code].remove(paged)
            held = manager.overflow.eq(0).to(torch.int64)
            return _Entry(paged, paged.num_tokens_tensor, held)

        def restore(self, key: Any, dst: Any, rows_out: Any, stream: Any) -> None:
            code = self._code(key)
            manager = self.manager
            entries = self.entries.get(code, [])
            with self._on(stream):
                out = self._count(rows_out) if rows_out is not None else None
                if not entries:
                    # Restore of an empty key: nothing to reload, the flag goes up.
                    manager.overflow.fill_(1)
                    if out is not None:
                        out.zero_()
                    return
                running = manager.overflow.eq(0).to(torch.int64)  # the flag is down
                self._raise_flag(self._held(entries).eq(0))  # nothing held: restore_empty
                for e in entries:
                    e.tokens.mul_(e.held)  # a dropped stash reloads no token
                paged = [e.paged for e in entries if e.paged is not None]
                if paged:
                    self._reload(code, paged, dst)
                if out is not None:
                    total = entries[0].tokens.clone()
                    for e in entries[1:]:
                        total.add_(e.tokens)
                    out.copy_(total.mul(running))
                for e in entries:
                    e.held.mul_(running.eq(0).to(torch.int64))  # kept only while the flag is up

        def _reload(self, code: int, paged: List[Any], dst: Any) -> None:
            """``reload_paged_tensors(code)`` into ``dst``, then the wait of
            ``PipelinePostScheduleFunction.backward``."""
            manager = self.manager
            target = self._rows(dst)
            current = torch.cuda.current_stream()
            unpack = manager.unpack_stream
            unpack.wait_stream(current)
            for p in paged:
                p._tensor = target  # reload_paged_tensors: a torch.empty of original_shape
            try:
                with torch.cuda.stream(unpack):
                    manager._unpack_stream_status = "reloading"
                    for p in paged:
                        stash_buffer = manager.stash_buffers[p.dtype][p.hidden_size]
                        with library_call(f"PagedTensor.reload_from_stash (layer {code})"):
                            p.reload_from_stash(stash_buffer)
            finally:
                for p in paged:
                    p._tensor = None
            with library_call("PagedStashManager.wait_for_stash_to_complete()"):
                manager.wait_for_stash_to_complete()
            if manager._unpack_stream_status == "reloading":
                current.wait_stream(unpack)
                manager._unpack_stream_status = "idle"

        def reset(self, stream: Any) -> None:
            with self._on(stream), self._as_singleton():
                with library_call("paged_stash_reset(enabled=True)"):
                    module.paged_stash_reset(enabled=True, config=self.settings)
            self.entries.clear()

        def clear_status(self, stream: Any) -> None:
            with self._on(stream):
                self.manager.overflow.zero_()
                self.manager.host_spill.zero_()

        def snapshot(self, stream: Any) -> StashSnapshot:
            with self._on(stream):
                buf = self.buffer
                head = buf.free_list_head.tolist()
                tail = buf.free_list_tail.tolist()
                pages = (buf.num_cuda_pages, buf.num_host_pages)
                free = (tail[0] - head[0], tail[1] - head[1])
                free_ids: List[int] = []
                for tier, ids in enumerate((buf.free_list_cuda, buf.free_list_host)):
                    if free[tier] == 0:
                        continue
                    listed = ids.tolist()
                    base = 0 if tier == 0 else pages[0]
                    free_ids += [base + listed[(head[tier] + i) % pages[tier]]
                                 for i in range(free[tier])]
                flag = int(self.manager.overflow.item())
                live = []
                for code, entries in self.entries.items():
                    kept = [e for e in entries if int(e.held.item()) != 0]
                    entries[:] = kept  # a stash not held now never holds again
                    for e in kept:
                        live.append(self._entry(code, e, pages[0]))
            for code in [c for c, e in self.entries.items() if not e]:
                del self.entries[code]
            live.sort(key=lambda e: tuple(e.key))
            status = StashStatus("overflow") if flag else StashStatus()
            return StashSnapshot(free[0], free[1], live, status, free_ids)

        def _entry(self, code: int, e: _Entry, device_pages: int) -> StashEntry:
            vp, rest = divmod(code, 1000000)
            key = StashKey(vp - 1, rest // 1000, rest % 1000)
            rows = int(e.tokens.item())
            need = (rows + self.config.rows_per_page - 1) // self.config.rows_per_page
            if e.paged is None or need == 0:
                return StashEntry(key, rows, need, 0, ())
            ids = e.paged.page_record.tolist()[:need]
            if int(e.paged.spilled_to_host.item()):
                return StashEntry(key, rows, 0, need, [device_pages + i for i in ids])
            return StashEntry(key, rows, need, 0, ids)

        def close(self) -> None:
            if self.manager is None:
                return
            manager, self.manager = self.manager, None
            self.entries.clear()
            self.buffer = None
            with library_call("PagedStashManager.release_stash_buffers()"):
                manager.release_stash_buffers()  # synchronizes the device first
            # What release_stash_buffers keeps ("Shared overflow / host_spill scalars are
            # retained (small)", line 638) and the last count: the manager is the object's only.
            manager.overflow = manager.host_spill = manager.num_tokens_tensor = None
            manager.paged_tensors_to_reload.clear()

    return MegatronPagedStash


def make() -> Plugin:
    """Megatron's paged stash, sized by offloadkit's config:
    ``python -m offloadkit check offloadkit.adapters.megatron_paged_stash:make``."""
    library = import_library(LIBRARY, ADAPTER)
    return Plugin(name="megatron-paged-stash", version=library_version(library, DISTRIBUTION),
                  stash=stash_class())
