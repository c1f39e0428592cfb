"""All four offload features written in Python with NumPy, against offloadkit's Python protocol.

Every byte moves through the executor offloadkit lends (``executor.copy``, ``allocate`` ...), so
the same code runs on the cuda executor (the GPU) and on the CPU-only host executor, and
offloadkit's fault injection reaches its allocations and copies; NumPy only reads and writes
memory the implementation allocated as pinned host memory itself, after synchronizing the stream
that wrote it (see "Stream order" in ``offloadkit.protocol``).

    offloadkit check --executor host --python examples/python/numpy_offload.py:make
    offloadkit check --python examples/python/numpy_offload.py:make_stash --feature stash

- ``NumpyStash``: a paged stash: one device pool and one pinned pool of fixed-size pages, free
  lists of page ids (NumPy stacks), a page table per key, the row count read through a pinned
  staging word.
- ``NumpyRegion``: pause copies to a fresh pageable buffer and frees the device allocation; resume
  allocates again and captures every registered graph again (its address changes).
- ``NumpyArena``: one cached pinned arena for the whole tensor set, laid out once per shape with
  NumPy, copies issued without a host wait (device-contiguous tensors of one allocation in one
  copy) and ordered by events.
- ``NumpyActivation``: pack copies to pageable host memory and gives the source back; unpack copies
  back into a fresh allocation on the tensor's own device.
"""

import itertools

import numpy as np

import offloadkit as ok
from offloadkit import with_context

# ---- paged stash ----------------------------------------------------------------------------


class NumpyStash(ok.Stash):
    implementation = "numpy-paged"
    capabilities = ok.BOTH_EXECUTORS | {"page_ids"}

    def __init__(self, executor, config, stream):
        self.ex = executor
        self.cfg = config
        self.device_pool = self.pinned_pool = self.staging = None
        try:
            self.device_pool = executor.allocate(config.device_pages * config.page_bytes, "device",
                                                 config.device)
            self.pinned_pool = executor.allocate(config.pinned_pages * config.page_bytes, "pinned")
            self.staging = executor.allocate(8, "pinned")
        except BaseException:
            self.close()
            raise
        self.word = self.staging.numpy().view(np.uint64)
        self._fill_free_lists()
        self.entries = {}  # key code -> (key, rows, page ids)
        self.codes = set()  # distinct keys named so far (at most max_keys)
        self.status = ok.StashStatus()

    def _fill_free_lists(self):
        devices, pinned = self.cfg.device_pages, self.cfg.pinned_pages
        # Stacks popped from the end: page 0 of each tier first.
        self.free_device = list(np.arange(devices, dtype=np.uint32)[::-1])
        self.free_pinned = list(np.arange(devices, devices + pinned, dtype=np.uint32)[::-1])

    def _note(self, key):
        return ok.Stash.note_key(self.codes, key, self.cfg.max_keys)

    def _fail(self, code, key, rows, needed):
        if self.status.ok:  # sticky: the first failure stays
            self.status = ok.StashStatus(code, key, rows, needed, len(self.free_device),
                                         len(self.free_pinned))

    def _page(self, page_id):
        """The page's bytes: device tier ids 0..D-1, pinned tier D..D+P-1."""
        d = self.cfg.device_pages
        pool, index = (self.device_pool, page_id) if page_id < d else (self.pinned_pool,
                                                                        page_id - d)
        return pool.at(int(index) * self.cfg.page_bytes, self.cfg.page_bytes)

    def _give_back(self, pages):
        for p in reversed(pages):
            (self.free_device if p < self.cfg.device_pages else self.free_pinned).append(p)

    def _write_word(self, dst, value, stream):
        self.word[0] = value
        self.ex.copy(dst, self.staging, 8, stream)
        self.ex.synchronize(stream)  # the staging word is reused at once

    def stash(self, key, src, rows, stream):
        code = self._note(key)
        self.ex.copy(self.staging, rows, 8, stream)
        self.ex.synchronize(stream)
        r = int(self.word[0])
        cfg = self.cfg
        if r > cfg.max_rows:
            return self._fail("rows_too_large", key, r, 0)
        need = cfg.pages_for(r)
        if code in self.entries:
            return self._fail("double_stash", key, r, need)
        if need > len(self.free_device) + len(self.free_pinned):
            return self._fail("overflow", key, r, need)
        on_device = min(need, len(self.free_device))
        pages = [self.free_device.pop() for _ in range(on_device)]
        pages += [self.free_pinned.pop() for _ in range(need - on_device)]
        try:
            for i, page in enumerate(pages):
                n = min(cfg.rows_per_page, r - i * cfg.rows_per_page) * cfg.row_bytes
                self.ex.copy(self._page(page), src.at(i * cfg.page_bytes, n), n, stream)
            self.ex.synchronize(stream)
        except BaseException:
            self._give_back(pages)  # nothing stored: every page goes back
            raise
        self.entries[code] = (ok.StashKey(*key), r, pages)

    def stash_batch(self, items, stream):
        """A layer's keys in one call from the bridge: (key, src, rows) each, keys distinct."""
        for key, src, rows in items:
            self.stash(key, src, rows, stream)

    def restore_batch(self, items, stream):
        for key, dst, rows_out in items:
            self.restore(key, dst, rows_out, stream)

    def restore(self, key, dst, rows_out, stream):
        code = self._note(key)
        entry = self.entries.get(code)
        if entry is None:
            self._fail("restore_empty", key, 0, 0)
            if rows_out is not None:
                self._write_word(rows_out, 0, stream)
            return
        _, r, pages = entry
        cfg = self.cfg
        for i, page in enumerate(pages):
            n = min(cfg.rows_per_page, r - i * cfg.rows_per_page) * cfg.row_bytes
            self.ex.copy(dst.at(i * cfg.page_bytes, n), self._page(page), n, stream)
        if rows_out is not None:
            self._write_word(rows_out, r, stream)
        self.ex.synchronize(stream)
        del self.entries[code]
        self._give_back(pages)

    def reset(self, stream):
        self.ex.synchronize(stream)
        self.entries.clear()
        self._fill_free_lists()
        self.status = ok.StashStatus()

    def clear_status(self, stream):
        self.ex.synchronize(stream)
        self.status = ok.StashStatus()

    def snapshot(self, stream):
        d = self.cfg.device_pages
        entries = [ok.StashEntry(key, rows, sum(1 for p in pages if p < d),
                                 sum(1 for p in pages if p >= d), list(pages))
                   for key, rows, pages in self.entries.values()]
        return ok.StashSnapshot(len(self.free_device), len(self.free_pinned), entries,
                                self.status, self.free_device + self.free_pinned)

    def close(self):
        for name in ("device_pool", "pinned_pool", "staging"):
            buffer = getattr(self, name, None)
            if buffer is not None:
                self.ex.deallocate(buffer)
                setattr(self, name, None)


class NumpyOneTierStash(NumpyStash):
    """NumpyStash as a library that keeps activations only in pinned host buffers and checks its
    config when it is first used declares itself: one tier, pinned pages (``pinned_tier_only``: a
    config that gives device pages is a bad config), and the config checked by the first
    ``stash`` or ``restore`` (``config_at_first_use``), which, like every later call while the
    config is bad, raises OutOfRange naming the field and writes nothing."""

    implementation = "numpy-one-tier-stash"
    capabilities = NumpyStash.capabilities | {"pinned_tier_only", "config_at_first_use"}

    def __init__(self, executor, config, stream):
        # NumpyStash.__init__ (its pools) runs at the first call, once the config is checked.
        self.ex = executor
        self.cfg = config
        self.device_pool = self.pinned_pool = self.staging = None
        self.ready = False

    def _check_config(self):
        cfg = self.cfg
        for name in ("row_bytes", "rows_per_page", "max_keys"):
            if getattr(cfg, name) < 1:
                raise ok.OutOfRange(f"stash_config.{name} = {getattr(cfg, name)} is outside "
                                    "[1, inf)")
        if cfg.device_pages != 0:
            raise ok.OutOfRange(f"stash_config.device_pages = {cfg.device_pages} is outside "
                                "[0, 0] (this stash has pinned pages only)")
        if cfg.pinned_pages >= 1 << 31:
            raise ok.OutOfRange(f"stash_config.pinned_pages = {cfg.pinned_pages} is outside "
                                f"[0, {1 << 31})")
        if not 0 <= cfg.device < self.ex.device_count:
            raise ok.OutOfRange(f"stash_config.device = {cfg.device} is outside "
                                f"[0, {self.ex.device_count})")

    def _first_use(self, stream):
        if not self.ready:
            self._check_config()
            NumpyStash.__init__(self, self.ex, self.cfg, stream)
            self.ready = True

    def stash(self, key, src, rows, stream):
        self._first_use(stream)
        super().stash(key, src, rows, stream)

    def restore(self, key, dst, rows_out, stream):
        self._first_use(stream)
        super().restore(key, dst, rows_out, stream)

    def reset(self, stream):
        self._first_use(stream)
        super().reset(stream)

    def clear_status(self, stream):
        self._first_use(stream)
        super().clear_status(stream)

    def snapshot(self, stream):
        self._first_use(stream)
        return super().snapshot(stream)


# ---- graph-stable region --------------------------------------------------------------------


class NumpyDecimalStash(NumpyStash):
    """NumpyStash as a library whose keys are decimal schedule positions declares itself: layer
    and microbatch below 1000 (``key_limits``), and a key that does not fit raises OutOfMemory and
    stores nothing (``overflow_exception``); other failures still go to the status word."""

    implementation = "numpy-decimal-stash"
    capabilities = NumpyStash.capabilities | {"overflow_exception"}
    key_limits = (ok.CODEC_KEY_LIMITS[0], 1000, 1000)

    def _note(self, key):
        for name, value, limit in zip(("vp", "layer", "microbatch"), tuple(key), self.key_limits):
            if not 0 <= value < limit:
                raise ok.OutOfRange(f"key {tuple(key)}: {name} = {value} is outside [0, {limit})")
        return super()._note(key)

    def _fail(self, code, key, rows, needed):
        if code == "overflow":
            raise ok.OutOfMemory(f"key {tuple(key)} needs {needed} pages; free: "
                                 f"{len(self.free_device)} device, {len(self.free_pinned)} pinned")
        super()._fail(code, key, rows, needed)


class NumpyRegion(ok.Region):
    implementation = "numpy-reference"
    capabilities = ok.BOTH_EXECUTORS | {"releases_memory", "multi_device"}

    def __init__(self, executor, config):
        ok.Region.check_config(executor, config)
        self.ex = executor
        self.size = config.bytes
        self.device = config.device
        self.footprint = config.bytes
        self.memory = executor.allocate(self.size, "device", self.device)
        self.host = None  # the pageable copy while paused (None after a discard)
        self.state = "active"
        self.graphs = {}  # id -> [capture, graph]
        self.ids = itertools.count(1)
        self.captures = 0

    @property
    def data(self):
        return self.memory.ptr if self.memory is not None else 0

    def pause(self, mode, stream):
        if mode == "discard":
            self.ex.synchronize(stream)
        else:
            self.host = ok.host_copy(self.ex, self.memory, self.size, stream)
        self.ex.deallocate(self.memory)
        self.memory = None
        self.state = "paused"

    def resume(self, stream):
        memory = self.ex.allocate(self.size, "device", self.device)
        fresh = {}
        try:
            if self.host is not None:
                self.ex.copy(memory, self.host, self.size, stream)
                self.ex.synchronize(stream)
            # Graphs captured on the old address would write freed memory: capture them again.
            for gid, (capture, _) in self.graphs.items():
                fresh[gid] = ok.capture_graph(self.ex, capture, memory, stream)
        except BaseException:
            for graph in fresh.values():
                self.ex.destroy_graph(graph)
            self.ex.deallocate(memory)  # still paused: the host copy is untouched
            raise
        for gid, graph in fresh.items():
            self.ex.destroy_graph(self.graphs[gid][1])
            self.graphs[gid][1] = graph
        self.captures += len(fresh)
        if self.host is not None:
            self.ex.deallocate(self.host)
            self.host = None
        self.memory = memory
        self.state = "active"

    def register_graph(self, capture, stream):
        graph = ok.capture_graph(self.ex, capture, self.memory, stream)
        gid = next(self.ids)
        self.graphs[gid] = [capture, graph]
        self.captures += 1
        return gid

    def replay(self, graph_id, stream):
        if graph_id not in self.graphs:
            raise ok.OutOfRange(f"graph {graph_id} is not registered (registered: "
                                f"{sorted(self.graphs)})")
        self.ex.replay(self.graphs[graph_id][1], stream)

    def unregister_graph(self, graph_id):
        entry = self.graphs.pop(graph_id, None)
        if entry is not None:
            self.ex.destroy_graph(entry[1])

    def close(self):
        for _, graph in self.graphs.values():
            self.ex.destroy_graph(graph)
        self.graphs.clear()
        for name in ("memory", "host"):
            buffer = getattr(self, name)
            if buffer is not None:
                self.ex.deallocate(buffer)
                setattr(self, name, None)


# ---- coalesced pinned arena -----------------------------------------------------------------


class NumpyArena(ok.Arena):
    """One pinned host buffer for the whole set, grown (never two at once) when a larger set
    comes; copies are issued without waiting on the host, and events order them: an offload waits
    for the reloads still reading the arena, a reload for the offload that wrote it."""

    implementation = "numpy-pinned-arena"
    capabilities = ok.BOTH_EXECUTORS | {"asynchronous", "pinned_steady_state",
                                        "single_host_buffer"}

    def __init__(self, executor):
        self.ex = executor
        self.arena = None
        self.sizes = None  # sizes of the set the arena holds a copy of
        self.released = False
        self.holds_copy = False
        self.written = None  # event: the last offload's copies are complete
        self.readers = []  # events: reloads that may still read the arena

    @property
    def host_bytes(self):
        return self.arena.nbytes if self.arena is not None else 0

    def _runs(self, tensors):
        """The arena layout (tensor i at offsets[i], back to back) and the copies to issue:
        (first tensor, last tensor, arena offset, bytes) for every run of tensors that also lie
        back to back in one device allocation (one copy may not span two)."""
        sizes = np.fromiter((t.nbytes for t in tensors), dtype=np.int64, count=len(tensors))
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        runs = []
        end, limit = None, None  # where the current run ends on the device, and its allocation
        for i, t in enumerate(tensors):
            if t.nbytes == 0:
                continue
            if runs and t.ptr == end and t.ptr + t.nbytes <= limit:
                first, _, offset, nbytes = runs[-1]
                runs[-1] = (first, i, offset, nbytes + t.nbytes)
            else:
                base, extent = self.ex.extent_of(t)
                limit = base + extent if extent else t.ptr + t.nbytes
                runs.append((i, i, int(offsets[i]), t.nbytes))
            end = t.ptr + t.nbytes
        return runs, int(offsets[-1])

    def _copies_back(self, tensors):
        """The copies reload issues: the same runs as offload's."""
        return self._runs(tensors)[0]

    def _wait_all(self, events, stream):
        for e in events:
            self.ex.wait(e, stream)

    def _drop_events(self, events):
        for e in events:
            self.ex.destroy_event(e)

    def _record(self, stream):
        event = self.ex.create_event(stream.device)
        try:
            self.ex.record(event, stream)
        except BaseException:
            self.ex.destroy_event(event)
            raise
        return event

    def _replace_written(self, stream):
        event = self._record(stream)
        if self.written is not None:
            self.ex.destroy_event(self.written)
        self.written = event

    def _arena_for(self, nbytes):
        """An arena of at least ``nbytes``: the current one, or (after everything that uses the
        old one has finished) a larger one. Single host buffer: the old goes before the new."""
        if self.arena is not None and self.arena.nbytes >= nbytes:
            return
        if self.arena is not None:
            for e in self.readers + ([self.written] if self.written is not None else []):
                self.ex.synchronize(e)
            self.ex.deallocate(self.arena)
            self.arena = None
        try:
            self.arena = self.ex.allocate(nbytes, "pinned")
        except ok.Error as e:
            raise with_context(e, f"numpy arena offload: pinned allocation of {nbytes} bytes "
                               "for the arena failed") from e

    def offload(self, tensors, stream):
        self.holds_copy = False  # whatever happens below, the old copy is being overwritten
        runs, total = self._runs(tensors)
        self._arena_for(total)
        # Reloads still copying out of the arena, and an earlier offload still writing it, first.
        self._wait_all(self.readers + ([self.written] if self.written is not None else []),
                       stream)
        issued = False
        for first, last, offset, nbytes in runs:
            try:
                # A run spans several tensors' buffers: its source is an address, not one Buffer.
                self.ex.copy(self.arena.at(offset, nbytes), tensors[first].ptr, nbytes, stream)
            except ok.Error as e:
                if issued:  # the copies already queued still write the arena
                    self._replace_written(stream)
                raise with_context(e, f"numpy arena offload: copy of tensor {first}"
                                   f"{'' if last == first else f'..{last}'} of {len(tensors)} "
                                   f"({nbytes} bytes) to the host failed") from e
            issued = True
        done = self._record(stream)
        try:
            self._replace_written(stream)
        except BaseException:
            self.ex.destroy_event(done)  # never handed out: nobody else would destroy it
            raise
        self._drop_events(self.readers)
        self.readers = []
        self.sizes = [t.nbytes for t in tensors]
        self.holds_copy = True
        return done

    def reload(self, tensors, stream):
        sizes = [t.nbytes for t in tensors]
        if len(sizes) != len(self.sizes):
            raise ok.OutOfRange(f"numpy arena reload: set of {len(sizes)} tensors, but the host "
                                f"copy holds {len(self.sizes)}")
        for i, (got, held) in enumerate(zip(sizes, self.sizes)):
            if got != held:
                raise ok.OutOfRange(f"numpy arena reload: tensor {i} has {got} bytes, but the "
                                    f"host copy holds {held}")
        runs = self._copies_back(tensors)
        self.ex.wait(self.written, stream)  # read after write
        issued = False
        for first, last, offset, nbytes in runs:
            try:
                self.ex.copy(tensors[first].ptr, self.arena.at(offset, nbytes), nbytes, stream)
            except ok.Error as e:
                if issued:  # the copies already queued still read the arena
                    self.readers.append(self._record(stream))
                raise with_context(e, f"numpy arena reload: copy of tensor {first} of "
                                   f"{len(tensors)} ({nbytes} bytes) to the device failed; the "
                                   "host copy is kept, retry reload()") from e
            issued = True
        done = self._record(stream)
        try:
            self.readers.append(self._record(stream))
        except BaseException:
            self.ex.destroy_event(done)  # never handed out: nobody else would destroy it
            raise
        return done

    def release(self):
        self.close()
        self.released = True

    def close(self):
        events = self.readers + ([self.written] if self.written is not None else [])
        for e in events:
            self.ex.synchronize(e)  # the queued copies that use the arena go first
        self._drop_events(events)
        self.readers, self.written = [], None
        if self.arena is not None:
            self.ex.deallocate(self.arena)
            self.arena = None
        self.holds_copy = False


# ---- activation offload ---------------------------------------------------------------------


class NumpyActivation(ok.Activation):
    implementation = "numpy-reference"
    capabilities = ok.BOTH_EXECUTORS | {"origin_device", "prefetch_bound", "pending_bound"}

    def __init__(self, executor, options):
        self.ex = executor
        self.keep_threshold = options.keep_threshold
        self.entries = {}  # handle -> (tensor, host copy or None)
        self.ids = itertools.count(1)
        self.streams = {}  # device -> copy stream
        self.counters = ok.ActivationStats()

    def _copy_stream(self, device):
        if device not in self.streams:
            self.streams[device] = self.ex.create_stream(device)
        return self.streams[device]

    def pack(self, tensor, stream):
        elements = int(np.prod(tensor.shape, dtype=np.int64))
        if any(x < 0 for x in tensor.shape):
            raise ok.OutOfRange(f"shape {tensor.shape} has a negative extent")
        expected = elements * ok.types.DTYPE_SIZES[tensor.dtype]
        if tensor.nbytes != expected:
            raise ok.OutOfRange(f"{tensor!r}: {tensor.nbytes} bytes, but shape and dtype make "
                                f"{expected}")
        if not 0 <= tensor.device < self.ex.device_count:
            raise ok.OutOfRange(f"device {tensor.device} is outside [0, {self.ex.device_count})")
        host = None
        if tensor.nbytes < self.keep_threshold:
            self.counters.kept += 1
        else:
            host = ok.host_copy(self.ex, tensor.data, tensor.nbytes, stream)  # after the producer
            self.counters.offloaded_bytes += tensor.nbytes
            tensor.release()  # its copy has completed: the source goes back to its owner
        self.counters.packed += 1
        handle = next(self.ids)
        self.entries[handle] = (tensor, host)
        return handle

    def unpack(self, handle, stream):
        if handle not in self.entries:
            raise ok.OutOfRange(f"handle {handle} is not packed (never packed, or already "
                                "unpacked)")
        tensor, host = self.entries[handle]
        if host is None:  # kept on the device: the caller gets the source itself
            del self.entries[handle]
            return tensor
        memory = self.ex.allocate(tensor.nbytes, "device", tensor.device)
        try:
            if tensor.nbytes:
                copy_stream = self._copy_stream(tensor.device)
                self.ex.copy(memory, host, tensor.nbytes, copy_stream)
                self.ex.synchronize(copy_stream)
        except BaseException:
            self.ex.deallocate(memory)  # still packed: a retry can succeed
            raise
        del self.entries[handle]
        self.ex.deallocate(host)
        self.counters.restored_bytes += tensor.nbytes
        self.counters.demand_uploads += 1
        ex = self.ex

        def release():
            ex.synchronize(stream)  # the caller's work on the unpack stream may still read it
            ex.deallocate(memory)

        return ok.Tensor(memory, tensor.nbytes, tensor.device, tensor.dtype, tensor.shape, release)

    def stats(self):
        return self.counters

    def close(self):
        for tensor, host in self.entries.values():
            if host is None:
                tensor.release()  # never unpacked: back to its owner
            else:
                self.ex.deallocate(host)
        self.entries.clear()
        for s in self.streams.values():
            self.ex.destroy_stream(s)
        self.streams.clear()


# ---- factories ------------------------------------------------------------------------------


def make():
    return ok.Plugin(name="numpy-offload", version=ok.__version__, stash=NumpyStash,
                     region=NumpyRegion, arena=NumpyArena, activation=NumpyActivation)


def make_stash():
    return ok.Plugin(name="numpy-offload", stash=NumpyStash)


def make_decimal_stash():
    return ok.Plugin(name="numpy-offload", stash=NumpyDecimalStash)


def make_one_tier_stash():
    return ok.Plugin(name="numpy-offload", stash=NumpyOneTierStash)


def make_region():
    return ok.Plugin(name="numpy-offload", region=NumpyRegion)


def make_arena():
    return ok.Plugin(name="numpy-offload", arena=NumpyArena)


def make_activation():
    return ok.Plugin(name="numpy-offload", activation=NumpyActivation)
