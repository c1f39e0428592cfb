"""Recording a production run's paged-stash schedule from Python, for ``offloadkit replay``.

A training job creates one ``ScheduleRecorder`` per pipeline rank and step, calls
``record_stash`` / ``record_restore`` where it stashes and restores a saved activation (with the
key's row count where it is known, or later with ``set_rows``), and writes the file at the end of
the step::

    rec = offloadkit.ScheduleRecorder(virtual_stages=2, layers=4, microbatches=8,
                                      row_bytes=hidden * 2, max_rows=max_tokens, page_rows=64,
                                      name="moe step 1200, rank 1")
    ...
    rec.record_stash(vp, layer, microbatch, rows=int(tokens))
    ...
    rec.record_restore(vp, layer, microbatch)
    ...
    rec.write("step1200_rank1.json")        # then: offloadkit replay step1200_rank1.json

The file is the documented schedule format, version 1 (traces/SCHEDULE_FORMAT.md): complete
forward and backward chunks are written as "F"/"B" entries, everything else as "S"/"R". Before
writing, the recording is checked by the rules ``offloadkit replay`` applies (every key stashed
once and restored once after it, per microbatch in (vp, layer) order and back, ranges), so a
recording that replay would refuse raises ``ScheduleError`` naming the offending step.
Thread-safe: stashes and restores may be reported from several threads.

Row counts that live on the device (a paged stash under CUDA graphs keeps them there) are given as
a one-element integer tensor: ``record_stash(vp, layer, mb, rows=count_tensor)`` enqueues an
asynchronous copy of it into a slot of a pinned ring on the current stream and never waits;
``resolve()``, called where the job synchronizes anyway (the end of the step), reads the slots
(``record_stashes`` takes a MoE layer's counts, one key per expert, in one copy). So
recording adds no host synchronization, and works under CUDA graph capture (each replay refreshes
the slot). ``write`` resolves first. With ``nvtx=torch.cuda.nvtx.mark``, ``resolve()`` also
writes every event as an NVTX mark of the convention in traces/SCHEDULE_FORMAT.md, so that a
capture of the job (``offloadkit capture``) holds the same schedule (``offloadkit
schedule-from-trace``)::

    rec = offloadkit.ScheduleRecorder(..., nvtx=torch.cuda.nvtx.mark)
    rec.record_stash(vp, layer, mb, rows=tokens_per_expert[e])   # a CUDA tensor: no sync
    ...
    torch.cuda.synchronize()                                      # the job's own step end
    rec.resolve()
"""

import json
import threading
from typing import Callable, Optional, Sequence, Union

from .errors import LogicError, OutOfRange, StateError

FORMAT = "offloadkit.schedule"
VERSION = 1
MAX_VIRTUAL_STAGES = 64
MAX_LAYERS = 4096
MAX_MICROBATCHES = 1 << 12  # the stash key holds 12 bits of microbatch
MAX_KEYS = 1 << 24
MAX_ROW_BYTES = 1 << 32
MAX_MAX_ROWS = 1 << 31
MAX_PAGE_ROWS = 1 << 20
MAX_POOL_PAGES = (1 << 31) - 1  # device + pinned: the implementations' page ids are 31-bit
MAX_PIPELINE_SIZE = 65536
MAX_NAME_BYTES = 4096
MAX_RING_SLOTS = 1 << 24


def expanded(doc: dict) -> dict:
    """The schedule document ``doc`` (a dict of the format) with its "F"/"B" chunk entries written
    out as "S"/"R" steps, one per layer, and ``row_bytes`` as one entry per layer: the form in
    which two writers' files (the recorder's, ``offloadkit schedule-from-trace``'s) compare by
    content."""
    layers = doc["pipeline"]["layers"]
    steps = []
    for s in doc["steps"]:
        if s[0] == "F":
            steps += [["S", s[1], layer, s[2]] for layer in range(layers)]
        elif s[0] == "B":
            steps += [["R", s[1], layer, s[2]] for layer in reversed(range(layers))]
        else:
            steps.append(list(s))
    out = dict(doc, steps=steps)
    if isinstance(out["row_bytes"], int):
        out["row_bytes"] = [out["row_bytes"]] * layers
    return out


class ScheduleError(LogicError):
    """A recording the schedule format cannot express; ``where`` is a JSON pointer into the file
    it would have written ("/steps/17", "/rows/3") and ``reason`` names the bad value and the
    valid range."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class TorchRing:
    """The pinned ring of row counts: ``put`` enqueues, on the current stream, the copy of an
    integer CUDA tensor of n counts into slots [slot, slot + n); ``get`` reads a slot, -1 until the
    copy has landed. One ring may serve the recorders of successive steps (one pinned allocation
    for the whole run): pass it as ``ring=``."""

    def __init__(self, slots):
        import torch  # only where device row counts are recorded

        self._torch = torch
        self.slots = slots
        self._ring = torch.full((slots,), -1, dtype=torch.int64, pin_memory=True)
        self._host = self._ring.numpy()

    def put(self, slot, rows):
        if rows.dtype.is_floating_point or rows.dtype.is_complex or rows.dtype == self._torch.bool:
            raise LogicError(f"rows is a tensor of {rows.dtype}; an integer tensor is expected")
        n = rows.numel()
        self._host[slot:slot + n] = -1  # before the copy is enqueued; the copy overwrites them
        src = rows.reshape(-1)
        if src.dtype != self._torch.int64:
            src = src.to(self._torch.int64)
        self._ring[slot:slot + n].copy_(src, non_blocking=True)

    def get(self, slot):
        return int(self._host[slot])


def _on_device(rows):
    return rows is not None and bool(getattr(rows, "is_cuda", False))


def _in_range(where, value, lo, hi):
    if not lo <= value <= hi:
        raise ScheduleError(where, f"{value} is outside [{lo}, {hi}]")


class ScheduleRecorder:
    """Collects one rank's stashes, restores and row counts; ``write`` produces a schedule file.

    ``row_bytes`` is one integer for all layers or one per layer; ``device_pages`` and
    ``pinned_pages``, where given, are the pool ``replay`` checks for overflow. ``nvtx``: a
    function that writes an NVTX mark (``torch.cuda.nvtx.mark``), called by ``resolve()`` for each
    event. ``ring_slots``: device row counts that may wait for ``resolve()`` at once; ``ring``:
    the ring itself (default a ``TorchRing`` of that many pinned slots, made at the first device
    row count).
    """

    def __init__(self, *, virtual_stages: int, layers: int, microbatches: int,
                 row_bytes: Union[int, Sequence[int]], max_rows: int, page_rows: int = 64,
                 name: Optional[str] = None, pipeline_size: int = 1, pipeline_rank: int = 0,
                 device_pages: Optional[int] = None, pinned_pages: Optional[int] = None,
                 nvtx: Optional[Callable[[str], None]] = None, ring_slots: int = 4096,
                 ring: Optional[object] = None):
        _in_range("/pipeline/virtual_stages", virtual_stages, 1, MAX_VIRTUAL_STAGES)
        _in_range("/pipeline/layers", layers, 1, MAX_LAYERS)
        _in_range("/pipeline/microbatches", microbatches, 1, MAX_MICROBATCHES)
        keys = virtual_stages * layers * microbatches
        if keys > MAX_KEYS:
            raise ScheduleError("/pipeline", f"virtual_stages x layers x microbatches = {keys} "
                                f"exceeds {MAX_KEYS} keys")
        _in_range("/pipeline/size", pipeline_size, 1, MAX_PIPELINE_SIZE)
        _in_range("/pipeline/rank", pipeline_rank, 0, pipeline_size - 1)
        if isinstance(row_bytes, int):
            row_bytes = [row_bytes] * layers
        row_bytes = [int(b) for b in row_bytes]
        if len(row_bytes) != layers:
            raise ScheduleError("/row_bytes", f"has {len(row_bytes)} entries; expected one per "
                                f"layer ({layers})")
        for i, b in enumerate(row_bytes):
            _in_range(f"/row_bytes/{i}", b, 1, MAX_ROW_BYTES)
        _in_range("/max_rows", max_rows, 0, MAX_MAX_ROWS)
        _in_range("/page_rows", page_rows, 1, MAX_PAGE_ROWS)
        if name is not None and len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise ScheduleError("/name", f"is {len(name.encode('utf-8'))} bytes long; at most "
                                f"{MAX_NAME_BYTES}")
        self.name = name
        self.virtual_stages = virtual_stages
        self.layers = layers
        self.microbatches = microbatches
        self.row_bytes = row_bytes
        self.max_rows = max_rows
        self.page_rows = page_rows
        self.pipeline_size = pipeline_size
        self.pipeline_rank = pipeline_rank
        _in_range("ring_slots", ring_slots, 1, MAX_RING_SLOTS)
        self.pools = None
        self._rows = [0] * keys
        self._steps = []  # ("S" | "R", vp, layer, microbatch)
        # Events not yet resolved, in recording order: ("S", vp, layer, mb, slot or None),
        # ("R", vp, layer, mb, None), ("P", device_pages, pinned_pages, 0, None).
        self._pending = []
        self._nvtx = nvtx
        self._ring = ring
        self._ring_slots = ring_slots
        self._next_slot = 0
        self._used_slots = 0
        self._header_written = False
        self._lock = threading.Lock()
        if device_pages is not None or pinned_pages is not None:
            self.set_pools(device_pages or 0, pinned_pages or 0)

    # ---- recording ----------------------------------------------------------------------------

    def _key_index(self, vp, layer, microbatch):
        for field, value, limit in (("vp", vp, self.virtual_stages), ("layer", layer, self.layers),
                                    ("microbatch", microbatch, self.microbatches)):
            if not 0 <= value < limit:
                raise OutOfRange(f"{field} = {value} is outside [0, {limit})")
        return (vp * self.layers + layer) * self.microbatches + microbatch

    def record_stash(self, vp: int, layer: int, microbatch: int, rows=None):
        """A stash of key (vp, layer, microbatch), in issue order; ``rows``: its row count, where
        known: a Python int (or anything int() takes), or a one-element integer CUDA tensor, whose
        value is copied to the host asynchronously and read by ``resolve()``."""
        vp, layer, microbatch = int(vp), int(layer), int(microbatch)
        with self._lock:
            index = self._key_index(vp, layer, microbatch)
            slot = None
            if _on_device(rows):
                if rows.numel() != 1:
                    raise OutOfRange(f"rows is a tensor of {rows.numel()} elements; one row "
                                     "count is expected (record_stashes takes several)")
                slot = self._take_slots_locked(rows)
            elif rows is not None:
                self._set_rows_locked(index, rows)
            self._pending.append(("S", vp, layer, microbatch, slot))

    def record_stashes(self, vp: int, first_layer: int, microbatch: int, rows):
        """Stashes of keys (vp, first_layer + i, microbatch) for i in range(len(rows)), in that
        order, whose row counts are the 1-D integer CUDA tensor ``rows`` (a MoE layer's tokens per
        expert, one layer index per expert): one asynchronous copy for all of them."""
        vp, first_layer, microbatch = int(vp), int(first_layer), int(microbatch)
        if not _on_device(rows):
            for i, r in enumerate(rows):
                self.record_stash(vp, first_layer + i, microbatch, rows=r)
            return
        n = rows.numel()
        with self._lock:
            self._key_index(vp, first_layer, microbatch)
            self._key_index(vp, first_layer + max(n, 1) - 1, microbatch)
            slot = self._take_slots_locked(rows)
            for i in range(n):
                self._pending.append(("S", vp, first_layer + i, microbatch, slot + i))

    def _take_slots_locked(self, rows):
        """Consecutive ring slots for the counts in ``rows``, their copy enqueued."""
        n = rows.numel()
        if self._used_slots == 0:
            self._next_slot = 0  # every count was resolved: start the ring over
        if self._next_slot + n > self._ring_slots:
            raise StateError(f"the ring's {self._ring_slots} row-count slots cannot take "
                             f"{n} more ({self._used_slots} wait for resolve()): resolve() at a "
                             "point the job synchronizes, or give more ring_slots")
        if self._ring is None:
            self._ring = TorchRing(self._ring_slots)
        slot = self._next_slot
        self._ring.put(slot, rows)
        self._next_slot += n
        self._used_slots += n
        return slot

    def record_restore(self, vp: int, layer: int, microbatch: int, rows: Optional[int] = None):
        """A restore of key (vp, layer, microbatch), in issue order."""
        vp, layer, microbatch = int(vp), int(layer), int(microbatch)
        with self._lock:
            index = self._key_index(vp, layer, microbatch)
            if rows is not None:
                self._set_rows_locked(index, rows)
            self._pending.append(("R", vp, layer, microbatch, None))

    def resolve(self) -> int:
        """Reads the device row counts copied since the last call and applies the events recorded
        since then, in order (writing their NVTX marks where ``nvtx`` was given). Call it after
        the job synchronized the streams the copies went to: a count that has not reached the host
        is a ``StateError`` naming its key, and that event and the later ones stay pending for a
        later call. Returns the number of events resolved."""
        with self._lock:
            return self._resolve_locked()

    @property
    def pending(self) -> int:
        """Events recorded and not yet resolved."""
        with self._lock:
            return len(self._pending)

    def _mark(self, text):
        if self._nvtx is not None:
            self._nvtx(text)

    def _shape_text(self):
        uniform = all(b == self.row_bytes[0] for b in self.row_bytes)
        text = (f"offloadkit.schedule version={VERSION} pipeline_size={self.pipeline_size} "
                f"pipeline_rank={self.pipeline_rank} virtual_stages={self.virtual_stages} "
                f"layers={self.layers} microbatches={self.microbatches} "
                f"max_rows={self.max_rows} page_rows={self.page_rows} row_bytes="
                + (str(self.row_bytes[0]) if uniform else ",".join(map(str, self.row_bytes))))
        return text + (f" name={self.name}" if self.name else "")

    def _resolve_locked(self):
        if not self._header_written:
            self._mark(self._shape_text())
            self._header_written = True
        done = 0
        try:
            for op, a, b, c, slot in self._pending:
                if op == "S":
                    index = self._key_index(a, b, c)
                    if slot is not None:
                        rows = self._ring.get(slot)
                        if rows < 0:
                            raise StateError(f"resolve(): the row count of key ({a}, {b}, {c}) "
                                             "has not reached the host yet; call resolve() after "
                                             "the stream its stash ran on has been synchronized")
                        self._set_rows_locked(index, rows)
                        self._used_slots -= 1
                    self._steps.append(("S", a, b, c))
                    self._mark(f"offloadkit.stash vp={a} layer={b} mb={c} "
                               f"rows={self._rows[index]}")
                elif op == "R":
                    self._steps.append(("R", a, b, c))
                    self._mark(f"offloadkit.restore vp={a} layer={b} mb={c}")
                else:
                    self._mark(f"offloadkit.pools device_pages={a} pinned_pages={b}")
                done += 1
        finally:
            del self._pending[:done]
        return done

    def set_rows(self, vp: int, layer: int, microbatch: int, rows: int):
        """The row count of a key (for counts read back later, e.g. at the end of the step)."""
        with self._lock:
            self._set_rows_locked(self._key_index(int(vp), int(layer), int(microbatch)), rows)

    def _set_rows_locked(self, index, rows):
        rows = int(rows)
        if not 0 <= rows <= self.max_rows:
            raise OutOfRange(f"rows = {rows} is outside [0, max_rows = {self.max_rows}]")
        self._rows[index] = rows

    def set_pools(self, device_pages: int, pinned_pages: int):
        """The pool replay checks for overflow (pages of each tier)."""
        _in_range("/pools/device_pages", device_pages, 0, MAX_POOL_PAGES)
        _in_range("/pools/pinned_pages", pinned_pages, 0, MAX_POOL_PAGES)
        if device_pages + pinned_pages > MAX_POOL_PAGES:
            raise ScheduleError("/pools", f"device_pages + pinned_pages = {device_pages} + "
                                f"{pinned_pages} is outside [0, {MAX_POOL_PAGES}]")
        with self._lock:
            self.pools = (int(device_pages), int(pinned_pages))
            self._pending.append(("P", self.pools[0], self.pools[1], 0, None))

    @property
    def steps_recorded(self) -> int:
        """Stashes and restores recorded, resolved or not."""
        with self._lock:
            return len(self._steps) + sum(1 for e in self._pending if e[0] in "SR")

    # ---- output -------------------------------------------------------------------------------

    def validate(self):
        """Raises ScheduleError at the first step ``offloadkit replay`` would refuse."""
        with self._lock:
            self._resolve_locked()
            self._validate_locked(list(self._steps))

    def _validate_locked(self, steps):
        layers, per_mb = self.layers, self.virtual_stages * self.layers
        state = [0] * len(self._rows)  # 0 not stashed, 1 stashed, 2 restored
        next_stash = [0] * self.microbatches
        next_restore = [per_mb - 1] * self.microbatches

        def key_text(vp, layer, mb):
            return f"key (vp {vp}, layer {layer}, microbatch {mb})"

        def pos_text(pos):
            return f"(vp {pos // layers}, layer {pos % layers})"

        for i, (op, vp, layer, mb) in enumerate(steps):
            where = f"/steps/{i}"
            index = (vp * layers + layer) * self.microbatches + mb
            pos = vp * layers + layer
            if op == "S":
                if state[index] != 0:
                    raise ScheduleError(where, f"{key_text(vp, layer, mb)} is stashed a second "
                                        "time")
                if next_stash[mb] != pos:
                    raise ScheduleError(where, f"stash of {key_text(vp, layer, mb)} out of "
                                        f"forward order: this microbatch stashes "
                                        f"{pos_text(next_stash[mb])} next")
                state[index] = 1
                next_stash[mb] += 1
            else:
                if state[index] == 0:
                    raise ScheduleError(where, f"restore of {key_text(vp, layer, mb)} before its "
                                        "stash")
                if state[index] == 2:
                    raise ScheduleError(where, f"{key_text(vp, layer, mb)} is restored a second "
                                        "time")
                if next_restore[mb] != pos:
                    raise ScheduleError(where, f"restore of {key_text(vp, layer, mb)} out of "
                                        "backward (reverse) order: this microbatch restores "
                                        f"{pos_text(next_restore[mb])} next")
                state[index] = 2
                next_restore[mb] -= 1
        for vp in range(self.virtual_stages):
            for layer in range(layers):
                for mb in range(self.microbatches):
                    st = state[(vp * layers + layer) * self.microbatches + mb]
                    if st != 2:
                        raise ScheduleError("/steps", f"{key_text(vp, layer, mb)} is never "
                                            f"{'stashed' if st == 0 else 'restored'} (every key "
                                            "must be stashed once and restored once)")

    def _compressed_steps(self, steps):
        """Steps as file entries: a whole chunk in layer order (stash) or reverse order (restore)
        becomes one "F"/"B" entry, as offloadkit's own writer does."""
        out, i, layers = [], 0, self.layers
        while i < len(steps):
            op, vp, _, mb = steps[i]
            whole = i + layers <= len(steps)
            for k in range(layers):
                if not whole:
                    break
                o = steps[i + k]
                want = k if op == "S" else layers - 1 - k
                whole = o[0] == op and o[1] == vp and o[3] == mb and o[2] == want
            if whole:
                out.append(["F" if op == "S" else "B", vp, mb])
                i += layers
            else:
                out.append(list(steps[i]))
                i += 1
        return out

    def to_dict(self) -> dict:
        """The validated recording as the schedule document (a dict ready for json.dump)."""
        with self._lock:
            self._resolve_locked()
            steps = list(self._steps)
            self._validate_locked(steps)
            doc = {"format": FORMAT, "version": VERSION}
            if self.name:
                doc["name"] = self.name
            doc["pipeline"] = {"size": self.pipeline_size, "rank": self.pipeline_rank,
                               "virtual_stages": self.virtual_stages, "layers": self.layers,
                               "microbatches": self.microbatches}
            uniform = all(b == self.row_bytes[0] for b in self.row_bytes)
            doc["row_bytes"] = self.row_bytes[0] if uniform else list(self.row_bytes)
            doc["max_rows"] = self.max_rows
            doc["page_rows"] = self.page_rows
            if self.pools is not None:
                doc["pools"] = {"device_pages": self.pools[0], "pinned_pages": self.pools[1]}
            doc["rows"] = list(self._rows)
            doc["steps"] = self._compressed_steps(steps)
            return doc

    def dumps(self) -> str:
        """The schedule file's text: one step per line, rows one microbatch row per line."""
        doc = self.to_dict()
        steps = doc.pop("steps")
        rows = doc.pop("rows")
        head = json.dumps(doc, indent=2)[:-2]  # without the closing "\n}"
        mb = self.microbatches
        row_lines = ",\n    ".join(",".join(str(r) for r in rows[i:i + mb])
                                   for i in range(0, len(rows), mb))
        step_lines = ",\n    ".join(json.dumps(s, separators=(",", ":")) for s in steps)
        return (f"{head},\n  \"rows\": [\n    {row_lines}\n  ],\n"
                f"  \"steps\": [\n    {step_lines}\n  ]\n}}\n")

    def write(self, path: str):
        """Writes the validated recording to ``path``."""
        text = self.dumps()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
