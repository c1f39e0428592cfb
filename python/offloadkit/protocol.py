"""The Python protocol: how an offload implementation written in Python is checked by offloadkit's
batteries (``python -m offloadkit check MODULE:FACTORY``, the pytest plugin ``offloadkit.pytest``,
or the C++ command's ``offloadkit check --python MODULE:FACTORY``). ``help(offloadkit.protocol)``
shows this text, ``help(offloadkit.Stash)`` (``Region``, ``Arena``, ``Activation``) each
feature's methods and their contracts.

The factory
-----------
``python -m offloadkit check my_module:make`` imports ``my_module`` (a module name on the Python
path, or the path of a ``.py`` file) in the interpreter that runs it (the C++ command's
``--python`` runs that same command in the interpreter ``OFFLOADKIT_PYTHON`` names, else
``python3``), calls ``make()`` with no arguments, and reads the features of the ``Plugin`` it
returns::

    def make():
        return offloadkit.Plugin(name="mine", stash=MyStash, arena=MyArena)

Each feature is a class (or any callable) that builds one object per battery case, with two class
attributes: ``capabilities`` (a set of the names below: what the implementation promises, which
decides the properties it faces) and optionally ``implementation`` (the name in results; default
the class name). Wrap a plain function in ``Feature(make, capabilities, implementation)``.

=============  ================================  =============================================
feature        built as                          feature capabilities (besides the common ones)
=============  ================================  =============================================
``stash``      ``make(executor, config, stream)``  ``capturable``, ``page_ids``; profile:
                                                   ``sticky_flag``, ``overflow_exception``,
                                                   ``whole_key_per_tier``,
                                                   ``device_tier_only``,
                                                   ``pinned_tier_only``,
                                                   ``unknown_restore_error``,
                                                   ``config_at_first_use``; ``key_limits``
``region``     ``make(executor, config)``          ``address_stable``, ``releases_memory``,
                                                   ``multi_device``, ``managed_memory``;
                                                   profile: ``fixed_pause_mode``,
                                                   ``synchronous``, ``no_graphs``
``arena``      ``make(executor)``                  ``asynchronous``, ``pinned_steady_state``,
                                                   ``single_host_buffer``
``activation`` ``make(executor, options)``         ``origin_device``, ``prefetch_bound``,
                                                   ``pending_bound``, ``backward_prefetch``;
                                                   profile: ``opaque_predicate``,
                                                   ``dedup_by_storage``
=============  ================================  =============================================

Common capabilities: ``cuda_executor`` (runs on the GPU), ``host_executor`` (runs on offloadkit's
CPU-only host executor: all its memory and stream work goes through the executor it is given) and
``executor_allocations`` (it allocates and copies through that executor, so offloadkit's fault
injection reaches it). Code that calls CUDA itself (PyTorch, CuPy) declares ``cuda_executor`` only.

Methods mirror the C++ interfaces (``offloadkit/<feature>/...hpp``); the base classes below list
them with their contracts. Inheriting from them is optional.

Calls and threads
-----------------
The bridge calls one object from one thread at a time, holding the GIL only while Python runs.
``close()``, where defined, is called when the C++ side destroys the object: give back what it
holds there (``__del__`` runs too late, or never). An exception it raises is a close failure: the
case that destroyed the object fails with it (the plugin table's ``close``, ABI 1.2).

Values
------
Streams arrive as ``Stream`` (an int: the raw handle, plus ``.device``); ``torch_stream(stream)``
wraps one as ``torch.cuda.ExternalStream``. Buffers arrive as ``Buffer`` (``.ptr``, ``.nbytes``,
``__cuda_array_interface__`` on the cuda executor, ``__array_interface__`` where the host can read
them). Wherever the protocol takes an address back (``Region.info().data``, an unpacked tensor's
``data``), a Buffer, an int or an object with an array interface (a torch tensor) will do.

Stream order on the host executor
---------------------------------
A buffer is valid in the order of the stream it comes with, as on a GPU: work already queued on
that stream may still be writing it when the method is called. On the host executor a stream is a
worker thread, so Python code that reads or writes memory directly (NumPy) calls
``executor.synchronize(stream)`` first; the bridge does not synchronize for it (so that an
implementation's own stream discipline is what the properties check). Device memory of the cuda
executor cannot be touched from the host at all: copy it to a pinned buffer with
``executor.copy(dst, src, nbytes, stream)``, synchronize, then read that. Written that way, with
NumPy only on memory it allocated as pinned or pageable, an implementation runs unchanged on both
executors. The one exception: ``Stash.snapshot`` is called after the bridge has synchronized its
stream, as the C++ contract says.

Errors
------
Raise the classes of ``offloadkit.errors`` (``OutOfRange``, ``StateError``, ``OutOfMemory`` ...):
the batteries check for the C++ types they stand for. Any other exception fails the property with
its type, message and traceback. The executor raises the same classes, so an injected fault keeps
its type if you let it through (``errors.with_context`` adds context without losing it).

The executor
------------
Every object gets the executor of the battery it runs in (an ``Executor`` of the bridge; its
methods release the GIL while they run). ``backend`` ("host" or "cuda"), ``name``,
``device_count``;
memory: ``allocate(nbytes, kind="device", device=0) -> Buffer``, ``deallocate(buffer)``,
``classify(address) -> (kind, device)``, ``extent_of(address) -> (base, nbytes)``,
``device_memory(device=0) -> (free, total)``;
streams and events: ``create_stream(device=0) -> Stream``, ``destroy_stream(s)``,
``create_event(device=0) -> Event``, ``destroy_event(e)``, ``copy(dst, src, nbytes, stream)``,
``fill(dst, value, nbytes, stream)``, ``record(event, stream)``, ``wait(event, stream)``,
``synchronize(stream_or_event)``, ``ready(event) -> bool``;
graphs: ``begin_capture(stream)``, ``end_capture(stream) -> Graph``, ``replay(graph, stream)``,
``destroy_graph(graph)``;
virtual memory: ``granularity(device=0)``, ``reserve(nbytes, device=0) -> int``,
``unreserve(address, nbytes)``, ``create_physical(nbytes, device=0) -> Physical``,
``release_physical(p)``, ``map(address, nbytes, p)``, ``unmap(address, nbytes)``,
``set_access(address, nbytes, device=0)``.
Addresses may be Buffers or ints (``buffer.at(offset, nbytes)`` is a sub-buffer); ``copy`` and
``fill`` refuse a Buffer smaller than ``nbytes`` with OutOfRange before touching memory, and a
Buffer deallocated once cannot be deallocated again. An executor is valid while the object it was
lent to lives.
"""

import dataclasses
from typing import Any, Callable, Iterable, Optional, Sequence

from . import types as _t
from .errors import OutOfRange

CUDA_EXECUTOR = "cuda_executor"
HOST_EXECUTOR = "host_executor"
EXECUTOR_ALLOCATIONS = "executor_allocations"
#: What an implementation that does all its work through the executor declares.
BOTH_EXECUTORS = frozenset({CUDA_EXECUTOR, HOST_EXECUTOR, EXECUTOR_ALLOCATIONS})

COMMON_CAPABILITIES = (CUDA_EXECUTOR, HOST_EXECUTOR, EXECUTOR_ALLOCATIONS)
FEATURE_CAPABILITIES = {
    "stash": ("capturable", "page_ids", "sticky_flag", "whole_key_per_tier",
              "unknown_restore_error", "overflow_exception", "device_tier_only",
              "pinned_tier_only", "config_at_first_use"),
    "region": ("address_stable", "releases_memory", "multi_device", "managed_memory",
               "fixed_pause_mode", "synchronous", "no_graphs"),
    "arena": ("asynchronous", "pinned_steady_state", "single_host_buffer"),
    "activation": ("origin_device", "prefetch_bound", "pending_bound", "backward_prefetch",
                   "opaque_predicate", "dedup_by_storage"),
}
FEATURES = tuple(FEATURE_CAPABILITIES)
#: offloadkit's key codec's limits (vp, layer, microbatch): the key space of a stash that declares
#: no ``key_limits``, and the largest one a stash may declare.
CODEC_KEY_LIMITS = (256, 4096, 4096)


@dataclasses.dataclass
class Feature:
    """A feature given by a function rather than a class with class attributes."""

    make: Callable[..., Any]
    capabilities: Iterable[str]
    implementation: Optional[str] = None
    #: A stash's key space, as ``Stash.key_limits``.
    key_limits: Optional[tuple] = None


@dataclasses.dataclass
class Plugin:
    """What a factory returns: a name, a version and the features it provides (None: not
    provided).

    ``release_cached_memory`` (optional, a callable taking nothing): gives back what a cache of
    the implementation's framework keeps after its objects are gone. ``offloadkit check
    --driver-faults`` calls it before it reads the leak ledger (and then empties PyTorch's device
    and pinned caches itself, where PyTorch is loaded), and reports what was released as the
    framework's cache rather than as a leak."""

    name: str
    version: str = "0"
    stash: Any = None
    region: Any = None
    arena: Any = None
    activation: Any = None
    release_cached_memory: Optional[Callable[[], Any]] = None


class Stash:
    """Paged stash (``offloadkit/stash/stash.hpp``). Built as ``cls(executor, config, stream)``
    with a ``StashConfig``.

    A stash keeps the valid rows of a saved activation between its forward and its backward. Keys
    are ``StashKey(vp, layer, microbatch)``; one outside offloadkit's key codec, or a distinct key
    beyond ``config.max_keys``, raises OutOfRange (its message says ``max_keys = N``). A key of r
    rows takes ``config.pages_for(r)`` pages, device pages first, then pinned ones. A key that
    cannot be stored does not raise: it is dropped and the first such failure since the last clear
    is kept in a sticky status word (``StashStatus``): ``rows_too_large`` (r > max_rows, needed
    0), ``double_stash`` (the key holds rows), ``overflow`` (not enough free pages in both tiers),
    ``restore_empty`` (restore of a key that holds nothing, rows 0, needed 0), each with the key,
    its rows, the pages it needed and the free pages of both tiers at that moment.

    Profile (declared in ``capabilities``; the defaults are the rules above): ``sticky_flag``:
    one flag instead of the status word, after the first failure every ``stash`` stores nothing
    and every ``restore`` gives back nothing (0 rows) until ``reset`` or ``clear_status``, and
    ``snapshot`` reports only the code; ``whole_key_per_tier``: a key goes whole into the device
    tier if it has room, else whole into the pinned tier, else it overflows;
    ``unknown_restore_error``: ``restore`` of a key that holds nothing raises StateError and
    changes nothing; ``overflow_exception`` (not with ``sticky_flag``): ``stash`` of a key that
    does not fit raises OutOfMemory (naming the key, the pages it needs and the free pages),
    stores nothing and leaves the status word as it was, and later calls go on; the other
    failures (``rows_too_large``, ``double_stash``) still go to the status word;
    ``device_tier_only`` or ``pinned_tier_only`` (at most one placement of these and
    ``whole_key_per_tier``): the stash has that one tier, a key goes whole into it or overflows,
    and a config that gives the other tier pages is a bad config (OutOfRange naming
    ``pinned_pages`` or ``device_pages`` and the valid range [0, 0]); ``config_at_first_use``:
    the constructor accepts any config, and a bad one (any field ``check_config`` refuses, or
    pages in a missing tier) makes the first ``stash`` or ``restore``, and every later one, raise
    OutOfRange naming the field and its valid range, writing nothing (not ``dst``, not
    ``rows_out``); the object can still be closed. Without it the constructor raises OutOfRange
    for a bad config.

    Key space (``key_limits``, a class attribute): ``(vp, layer, microbatch)``, each field of a
    key below its limit, each limit in [1, ``CODEC_KEY_LIMITS``]; a key past a limit raises
    OutOfRange naming the field, its value and the limit. ``None`` (the default) is the codec's
    ``CODEC_KEY_LIMITS``. A library whose keys are decimal schedule positions declares
    ``(1000, 1000, 1000)``; the battery's ``key_limits`` property checks the corners of the
    declared space and the first values past it.

    Ownership of ``rows``: the stash reads the row count in the order of ``stream``; the caller
    may overwrite the ``rows`` buffer with work it issues to ``stream`` after ``stash`` returns
    (that work runs after the read), and from the host or another stream only once ``stream``
    has reached that point (an event or a synchronization).

    Optional: ``stash_batch(items, stream)`` with a list of ``(key, src, rows)`` and
    ``restore_batch(items, stream)`` with a list of ``(key, dst, rows_out)``, the keys distinct
    (the bridge checks), must leave what ``stash`` / ``restore`` of each item in order leave
    (the battery's ``batch_matches_per_key`` compares the two). A class without them gets one call
    per item.
    """

    implementation: Optional[str] = None
    capabilities = frozenset()
    key_limits: Optional[tuple] = None

    @staticmethod
    def note_key(codes: set, key: "_t.StashKey", max_keys: int, code: Optional[int] = None) -> int:
        """The key's code, added to ``codes``, the set of the distinct keys' codes named so far;
        OutOfRange, naming ``max_keys``, for a distinct key past ``max_keys``: the key budget
        every stash keeps. ``code`` is the implementation's own code for the key; by default
        ``encode_key(key)`` (OutOfRange for a field outside the key codec)."""
        if code is None:
            code = _t.encode_key(key)
        if code not in codes:
            if len(codes) >= max_keys:
                raise OutOfRange(f"key {tuple(key)} would be distinct key number "
                                 f"{len(codes) + 1}, outside [1, max_keys = {max_keys}]")
            codes.add(code)
        return code

    def stash(self, key: "_t.StashKey", src: "_t.Buffer", rows: "_t.Buffer",
              stream: "_t.Stream") -> None:
        """Stashes the first r rows of ``src`` (device Buffer of max_rows * row_bytes bytes) under
        ``key``, where r is the uint64 in the device Buffer ``rows``, read in the order of
        ``stream``."""
        raise NotImplementedError

    def restore(self, key: "_t.StashKey", dst: "_t.Buffer", rows_out: Optional["_t.Buffer"],
                stream: "_t.Stream") -> None:
        """Copies the key's rows into the first rows of ``dst`` (device Buffer), writes the row
        count (0 when the key held nothing) as a uint64 into ``rows_out`` (a device Buffer, or
        None), and frees the key's pages. Bytes of ``dst`` past the rows stay untouched."""
        raise NotImplementedError

    def reset(self, stream: "_t.Stream") -> None:
        """Drops every entry, returns every page and clears the status word."""
        raise NotImplementedError

    def clear_status(self, stream: "_t.Stream") -> None:
        """Clears the status word only."""
        raise NotImplementedError

    def snapshot(self, stream: "_t.Stream") -> "_t.StashSnapshot":
        """Free pages of both tiers, the live entries and the status word (``StashSnapshot``);
        the bridge has synchronized ``stream`` before the call."""
        raise NotImplementedError

    def close(self) -> None:
        """Frees what the stash holds (called once, when the C++ side destroys it)."""


class Region:
    """Graph-stable offload region (``offloadkit/region/region.hpp``). Built as
    ``cls(executor, config)`` with a ``RegionConfig``: ``config.bytes`` (at least 1, else
    OutOfRange) on ``config.device`` (in [0, device_count), else OutOfRange).

    Profile (declared in ``capabilities``; the default is both pause modes, stream-ordered calls
    and graphs of its own): ``fixed_pause_mode``: the mode is chosen at creation
    (``config.fixed_mode``, "preserve" or "discard") and ``pause`` in the other mode raises
    NotImplementedError, changing nothing; ``synchronous``: ``pause`` and ``resume`` wait for the
    work queued on ``stream`` (or the whole device) and return once their own work is finished;
    ``no_graphs``: the region keeps no graphs (``register_graph`` and ``replay`` are not called),
    and offloadkit captures them through the executor, again after a resume that moved it.

    States: "active" (contents on the device at ``data``), "paused" (no device memory held,
    contents on the host or discarded), "partial" (a pause or resume failed midway; no byte lost;
    pause() or resume() completes the transition). The bridge refuses calls in the wrong state with
    StateError before they reach you, and a stream of another device with OutOfRange.
    """

    implementation: Optional[str] = None
    capabilities = frozenset()

    @staticmethod
    def check_config(executor: Any, config: Any) -> None:
        """Raises OutOfRange, naming the value and the valid range, where ``config`` is not one a
        region can be made of: ``bytes`` below 1, or ``device`` outside [0, device_count). The
        check every region's constructor makes first (offloadkit's own regions make the same)."""
        if config.bytes < 1:
            raise OutOfRange(f"bytes = {config.bytes}; a region holds at least 1 byte")
        if not 0 <= config.device < executor.device_count:
            raise OutOfRange(f"device = {config.device} is outside [0, {executor.device_count})")

    def info(self) -> "_t.RegionInfo":
        """Address, size, device, state, footprint (device bytes held while active) and captures
        (graph captures so far). The bridge reads it after every call. The default builds it from
        attributes of those names."""
        return _t.RegionInfo(self.data, self.size, self.device, self.state, self.footprint,
                             self.captures)

    def pause(self, mode: str, stream: "_t.Stream") -> None:
        """Waits for the work queued on ``stream``, copies the contents to the host unless
        ``mode`` is "discard" ("preserve" otherwise), and releases the device memory."""
        raise NotImplementedError

    def resume(self, stream: "_t.Stream") -> None:
        """Brings device memory back and copies the contents in, in the order of ``stream``."""
        raise NotImplementedError

    def register_graph(self, capture: Callable[[int, "_t.Stream"], Any],
                       stream: "_t.Stream") -> int:
        """Captures ``capture(base, stream)`` on ``stream`` into a graph kept with the region and
        returns its id; ``capture_graph`` does the capture. A region whose address changes
        captures it again on every resume."""
        raise NotImplementedError

    def replay(self, graph_id: int, stream: "_t.Stream") -> None:
        """Replays a registered graph (unknown id: OutOfRange)."""
        raise NotImplementedError

    def unregister_graph(self, graph_id: int) -> None:
        """Destroys a registered graph; unknown ids are ignored."""
        raise NotImplementedError

    def close(self) -> None:
        """Frees device memory, host copy, address range and graphs."""


def capture_graph(executor: Any, capture: Callable[[int, "_t.Stream"], Any], base: int,
                  stream: "_t.Stream") -> "_t.Graph":
    """Captures ``capture(base, stream)`` on ``stream`` and returns the graph; on a failure the
    capture is ended and its graph destroyed, so that the stream is usable again."""
    executor.begin_capture(stream)
    try:
        capture(base, stream)
    except BaseException as failure:
        _end_capture_after(executor, stream, failure)
        raise
    try:
        return executor.end_capture(stream)
    except BaseException as failure:
        # A failed end may leave the stream capturing: end it once more.
        _end_capture_after(executor, stream, failure)
        raise


def host_copy(executor: Any, src: Any, size: int, stream: "_t.Stream") -> "_t.Buffer":
    """A new pageable host buffer holding the ``size`` bytes at ``src``, copied on ``stream`` and
    waited for (nothing is copied for 0 bytes): what a region's pause or an offloaded activation
    keeps. Where the copy fails the buffer is freed again and the error raised; the source is
    left as it was."""
    host = executor.allocate(size, "pageable")
    try:
        if size:
            executor.copy(host, src, size, stream)
            executor.synchronize(stream)
    except BaseException:
        executor.deallocate(host)
        raise
    return host


def _end_capture_after(executor, stream, failure):
    """Ends a capture that ``failure`` interrupted and drops its graph. ``failure`` is what the
    caller reports; a second failure here is added to it as a note."""
    try:
        executor.destroy_graph(executor.end_capture(stream))
    except Exception as cleanup:  # the stream may not be capturing any more
        failure.add_note(f"(ending the interrupted capture raised too: {cleanup!r})")


class Arena:
    """Coalesced offload of a tensor set (``offloadkit/arena/offloader.hpp``). Built as
    ``cls(executor)``.

    Tensors are lists of device Buffers (zero-byte ones may have address 0). The first offload
    acquires host memory, kept across cycles until release(). A failed offload leaves the device
    tensors untouched and no copy held; a failed reload keeps the host copy so a retry succeeds.
    Errors raised for a copy or an allocation should say which (offload or reload) and which
    tensor ("offload: copy of tensor 3 ..."), keeping their type (``errors.with_context``).
    """

    implementation: Optional[str] = None
    capabilities = frozenset()

    def info(self) -> "_t.ArenaInfo":
        """released, holds_copy (a complete host copy is held) and host_bytes; read after every
        call. The default builds it from attributes of those names."""
        return _t.ArenaInfo(self.released, self.holds_copy, self.host_bytes)

    def offload(self, tensors: Sequence["_t.Tensor"], stream: "_t.Stream") -> "_t.Event":
        """Copies every tensor to host memory in the order of ``stream`` and returns an event
        (from ``executor.create_event``, recorded after the copies) that completes with them; the
        caller owns and destroys it."""
        raise NotImplementedError

    def reload(self, tensors: Sequence["_t.Tensor"], stream: "_t.Stream") -> "_t.Event":
        """Copies the host copy back into ``tensors`` (same sizes, any addresses; other sizes:
        OutOfRange) in the order of ``stream``; the event completes when they hold it."""
        raise NotImplementedError

    def release(self) -> None:
        """Frees the host memory (after the queued copies that use it). Idempotent."""
        raise NotImplementedError

    def close(self) -> None:
        """Frees everything (also without a release())."""


class Activation:
    """Activation offload, shaped like saved-tensor hooks (``offloadkit/activation/
    offloader.hpp``). Built as ``cls(executor, options)`` with ``OffloadOptions``.

    ``keep_threshold`` (an attribute, default ``options.keep_threshold``, read once after
    construction): tensors with fewer bytes stay on the device.

    Profile (declared in ``capabilities``; the defaults are the rules above and in ``unpack``):

    - return device: ``origin_device`` declared, ``unpack`` returns a tensor on the device it was
      packed from, whatever device its stream belongs to; not declared (``current``), on the
      device of the stream given to ``unpack``. Either way it holds the packed bytes.
    - offload decision: by default tensors of at least ``keep_threshold`` bytes are offloaded and
      smaller ones kept on the device. ``opaque_predicate``: the implementation decides per
      tensor by a rule of its own (its dtype, a framework's flag ...) and ``keep_threshold`` means
      nothing; it reports every decision in ``stats()``, which the battery reads before and after
      each ``pack``: a kept tensor adds one to ``kept`` and nothing to ``offloaded_bytes``, an
      offloaded one adds its bytes to ``offloaded_bytes`` and nothing to ``kept``. A kept tensor
      is not copied: its ``release`` is not called before ``unpack`` returns it, in its own
      buffer (same ``data``). Define ``stats`` to declare it.
    - dedup: by default every offloaded pack is copied on its own. ``dedup_by_storage``: a pack
      of a tensor with the ``data``, ``nbytes`` and device of an earlier pack whose source is
      still held (its ``release`` not called, not unpacked) is the same storage with the same
      contents (PyTorch saving one tensor twice); it is not copied again (``offloaded_bytes``
      grows by nothing), both handles unpack to those contents, and each pack's ``release`` is
      called exactly once.
    """

    implementation: Optional[str] = None
    capabilities = frozenset()

    def pack(self, tensor: "_t.Tensor", stream: "_t.Stream") -> int:
        """Takes ownership of ``tensor`` (a ``Tensor``, ready in the order of ``stream``) and
        returns a handle (int). Call ``tensor.release()`` once, when nothing you issued still
        reads its buffer. If pack raises, nothing is packed and release must not have been
        called. Bytes that disagree with shape and dtype, or a device outside the executor's:
        OutOfRange."""
        raise NotImplementedError

    def unpack(self, handle: int, stream: "_t.Stream") -> "_t.Tensor":
        """Returns the packed tensor, ready in the order of ``stream``, on the device it was
        packed from (whatever device ``stream`` belongs to; without ``origin_device``, on
        ``stream.device``); its ``release`` frees what you
        allocated for it, after the caller's work on ``stream``. Unknown or already unpacked
        handle: OutOfRange (KeyError will do). If unpack raises, the handle stays packed."""
        raise NotImplementedError

    def forward_layer_end(self, layer: int, stream: "_t.Stream") -> None:
        """Forward has finished producing ``layer``'s saved tensors."""

    def backward_layer_begin(self, layer: int, stream: "_t.Stream") -> None:
        """Backward of ``layer`` is about to start: its tensors are next."""

    def synchronize(self) -> None:
        """Waits for the offloader's own copies and gives back every source whose copy has
        completed."""

    def stats(self) -> "_t.ActivationStats":
        """Counters (``ActivationStats``); checks read ``packed``, ``kept``,
        ``offloaded_bytes`` (the decision per tensor under ``opaque_predicate``, one copy per
        storage under ``dedup_by_storage``) and ``peak_prefetch_bytes``."""
        return _t.ActivationStats()

    def close(self) -> None:
        """Gives back every source still held and frees host copies."""
