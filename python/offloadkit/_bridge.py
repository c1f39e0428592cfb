"""What the C++ bridge (in the extension module offloadkit._native) calls to load a factory and to
turn protocol values into plain tuples. Private: the protocol is in ``protocol.py``."""

import gc
import importlib
import importlib.util
import os
import sys
import traceback

from . import errors
from . import types as _t
from .protocol import (CODEC_KEY_LIMITS, COMMON_CAPABILITIES, FEATURE_CAPABILITIES, FEATURES,
                       Feature)

# okit_status codes (offloadkit/plugin.h).
OUT_OF_RANGE, STATE, LOGIC, OUT_OF_MEMORY, CUDA, RUNTIME, INJECTED, UNSUPPORTED = range(1, 9)

# The bridge's part of an error message: what fits in okit_error.message (1024 bytes) beside the
# context offloadkit adds.
MESSAGE_BUDGET = 900


# ---- loading --------------------------------------------------------------------------------


def load_factory(spec):
    """The callable named by "MODULE:FACTORY", where MODULE is a module name on the path or the
    path of a .py file (whose directory is put on the path, for its own imports)."""
    module_name, sep, factory_name = spec.rpartition(":")
    if not sep or not module_name or not factory_name:
        raise errors.LogicError(f"OFFLOADKIT_PYTHON_FACTORY = {spec!r} is not MODULE:FACTORY "
                                "(e.g. my_offload:make or /path/to/my_offload.py:make)")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.isfile(path):
            raise errors.LogicError(f"OFFLOADKIT_PYTHON_FACTORY: module file {path!r} does not "
                                    "exist")
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = module
    for part in factory_name.split("."):
        if not hasattr(factory, part):
            raise errors.LogicError(f"OFFLOADKIT_PYTHON_FACTORY = {spec!r}: module "
                                    f"{module.__name__!r} ({getattr(module, '__file__', '?')}) "
                                    f"has no attribute {factory_name!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise errors.LogicError(f"OFFLOADKIT_PYTHON_FACTORY = {spec!r}: {factory_name} is not "
                                "callable")
    return factory


_PLUGIN = None  # what the factory returned, kept for release_cached_memory


def describe(spec):
    """Loads and calls the factory; returns (name, version, {feature: (make, [capabilities],
    implementation, key_limits)}) for the features it provides (key_limits: the stash's
    ``(vp, layer, microbatch)`` limits, 0 for the codec's; ``(0, 0, 0)`` for other features)."""
    global _PLUGIN
    plugin = load_factory(spec)()
    _PLUGIN = plugin
    name = getattr(plugin, "name", None) or spec
    version = str(getattr(plugin, "version", "0"))
    features = {}
    for feature in FEATURES:
        value = getattr(plugin, feature, None)
        if value is None:
            continue
        make = value.make if isinstance(value, Feature) else value
        if not callable(make):
            raise errors.LogicError(f"{spec}: feature {feature} is {value!r}, which is neither "
                                    "callable nor a Feature")
        caps = getattr(value, "capabilities", None)
        if caps is None or isinstance(caps, str):
            raise errors.LogicError(
                f"{spec}: feature {feature} ({value!r}) declares capabilities = {caps!r}; "
                f"expected a set of names among {', '.join(COMMON_CAPABILITIES)}, "
                f"{', '.join(FEATURE_CAPABILITIES[feature])}")
        caps = sorted(set(caps))
        valid = set(COMMON_CAPABILITIES) | set(FEATURE_CAPABILITIES[feature])
        unknown = [c for c in caps if c not in valid]
        if unknown:
            raise errors.OutOfRange(
                f"{spec}: feature {feature} declares unknown capabilities {unknown}; valid ones "
                f"are {', '.join(sorted(valid))}")
        if not set(caps) & {"cuda_executor", "host_executor"}:
            raise errors.LogicError(f"{spec}: feature {feature} declares neither cuda_executor "
                                    "nor host_executor; at least one is required")
        if feature == "stash":
            _check_stash_profile(spec, caps)
        implementation = getattr(value, "implementation", None) or getattr(
            make, "__name__", feature)
        features[feature] = (make, caps, str(implementation),
                             _key_limits(spec, feature, value))
    if not features:
        raise errors.LogicError(f"{spec}: the factory returned {plugin!r}, which provides no "
                                f"feature (set one of {', '.join(FEATURES)})")
    return str(name), version, features


#: Stash policies of which a profile declares at most one (each list is one policy's choices).
_STASH_EXCLUSIVE = (("sticky_flag", "overflow_exception"),
                    ("whole_key_per_tier", "device_tier_only", "pinned_tier_only"))


def _check_stash_profile(spec, caps):
    """Refuses a stash that declares two choices of one policy (two overflow reports, two
    placements), naming them."""
    for choices in _STASH_EXCLUSIVE:
        declared = [c for c in choices if c in caps]
        if len(declared) > 1:
            raise errors.OutOfRange(
                f"{spec}: the stash declares {', '.join(declared)}; these are choices of one "
                f"policy ({', '.join(choices)}): declare one or none")


def _key_limits(spec, feature, value):
    """The declared ``key_limits`` of a stash: three ints, each in [1, the codec's limit], or
    (0, 0, 0) where none is declared (the codec's limits)."""
    limits = getattr(value, "key_limits", None)
    if limits is None:
        return (0, 0, 0)
    if feature != "stash":
        raise errors.LogicError(f"{spec}: feature {feature} declares key_limits; only a stash "
                                "has a key space")
    codec = CODEC_KEY_LIMITS
    try:
        values = tuple(int(v) for v in limits)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or any(not 1 <= v <= c for v, c in zip(values, codec)):
        raise errors.OutOfRange(
            f"{spec}: stash key_limits = {limits!r}; expected (vp, layer, microbatch) with each "
            f"in [1, {codec[0]}], [1, {codec[1]}], [1, {codec[2]}]")
    return values


def release_cached_memory():
    """Gives back what caches keep once the implementation's objects are gone, so that what the
    process still holds afterwards is the implementation's own (``offloadkit check
    --driver-faults`` calls it before it reads the leak ledger): collects garbage, calls the
    plugin's own ``release_cached_memory()`` where it has one, then, where PyTorch is loaded and
    has initialized CUDA, empties its device caching allocator (``torch.cuda.empty_cache``) and
    its pinned host one (``torch._C._host_emptyCache``, where this PyTorch has it). Blocks still
    in use by copies in flight stay cached. Returns the names of the caches asked."""
    gc.collect()
    asked = []
    own = getattr(_PLUGIN, "release_cached_memory", None)
    if callable(own):
        own()
        asked.append("plugin.release_cached_memory")
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and callable(getattr(cuda, "is_initialized", None)) and \
            cuda.is_initialized():
        cuda.empty_cache()
        asked.append("torch.cuda.empty_cache")
        host_empty = getattr(getattr(torch, "_C", None), "_host_emptyCache", None)
        if callable(host_empty):
            host_empty()
            asked.append("torch._C._host_emptyCache")
    return asked


# ---- errors ---------------------------------------------------------------------------------


def error_code(exc):
    """(okit_status code, cuda code) of an exception."""
    if isinstance(exc, errors.InjectedFault):
        return INJECTED, 0
    if isinstance(exc, errors.CudaError):
        return CUDA, exc.code
    if isinstance(exc, MemoryError):
        return OUT_OF_MEMORY, 0
    if isinstance(exc, errors.StateError):
        return STATE, 0
    if isinstance(exc, (IndexError, KeyError)):
        return OUT_OF_RANGE, 0
    if isinstance(exc, NotImplementedError):
        return UNSUPPORTED, 0
    if isinstance(exc, (ValueError, TypeError, AttributeError)):
        return LOGIC, 0
    return RUNTIME, 0


def _describe(exc, limit):
    kind = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "offloadkit.errors"):
        kind = f"{module}.{kind}"
    text = str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = repr(exc.args[0])
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return f"{kind}: {text}"


_OWN_FILES = (os.path.join("offloadkit", "_bridge.py"), os.path.join("importlib", "__init__.py"))


def _user_frames(tb):
    """The traceback's frames without the bridge's own loading code and importlib's machinery,
    which every load goes through and which say nothing about the error."""
    frames = traceback.extract_tb(tb)
    kept = [f for f in frames if not (f.filename.endswith(_OWN_FILES) or
                                       f.filename.startswith("<frozen importlib"))]
    return traceback.format_list(kept)


def format_error(exc, what, tb=None, budget=MESSAGE_BUDGET):
    """(code, cuda code, message): "python WHAT raised TYPE: MESSAGE" and the traceback (``tb``,
    or the exception's own), the innermost frames kept where all of it does not fit ``budget``
    characters (0: no limit)."""
    code, cuda_code = error_code(exc)
    head = f"python {what} raised {_describe(exc, 300 if budget else 10000)}"
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and str(cause) not in str(exc):
        head += f"\n(while handling {_describe(cause, 150 if budget else 10000)})"
    frames = _user_frames(tb if tb is not None else exc.__traceback__)

    def message(kept):
        lines = [head]
        if frames:
            lines.append("Traceback (most recent call last):")
        if kept < len(frames):
            lines.append(f"  ... {len(frames) - kept} outer frame(s) left out")
        if kept:
            lines.append("".join(frames[len(frames) - kept:]).rstrip("\n"))
        return "\n".join(lines)

    # The most innermost frames whose whole message fits; the head alone where none does.
    kept = len(frames)
    text = message(kept)
    while budget and kept and len(text) > budget:
        kept -= 1
        text = message(kept)
    return code, cuda_code, text


# ---- values ---------------------------------------------------------------------------------


def address_of(obj):
    """The address an object stands for: an int, a Buffer, anything with an array interface, or a
    torch tensor."""
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, _t.Buffer):
        return obj.ptr
    # A torch tensor first: its array interfaces refuse dtypes NumPy lacks (bfloat16).
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(obj, attr, None)
        if face is not None:
            return int(face["data"][0])
    ptr = getattr(obj, "ptr", None)
    if ptr is not None:
        return int(ptr)
    raise errors.LogicError(f"{obj!r} is not an address: give an int, a Buffer or an object with "
                            "__cuda_array_interface__ / __array_interface__")


def _key(key):
    vp, layer, microbatch = key
    return int(vp), int(layer), int(microbatch)


def _field(obj, name):
    if isinstance(obj, dict):
        if name not in obj:
            raise errors.LogicError(f"{obj!r} has no {name!r}")
        return obj[name]
    if not hasattr(obj, name):
        raise errors.LogicError(f"{type(obj).__name__} {obj!r} has no attribute {name!r}")
    return getattr(obj, name)


def _status_code(code):
    if isinstance(code, str):
        if code not in _t.STASH_STATUS_CODES:
            raise errors.OutOfRange(f"stash status code {code!r} is not one of "
                                    f"{', '.join(_t.STASH_STATUS_CODES)}")
        return _t.STASH_STATUS_CODES.index(code)
    code = int(code)
    if not 0 <= code < len(_t.STASH_STATUS_CODES):
        raise errors.OutOfRange(f"stash status code {code} is outside [0, "
                                f"{len(_t.STASH_STATUS_CODES)})")
    return code


def stash_snapshot(snap):
    """(free_device, free_pinned, free_ids, entries, status) as plain values."""
    status = _field(snap, "status")
    status_tuple = (_status_code(_field(status, "code")),) + _key(_field(status, "key")) + tuple(
        int(_field(status, f)) for f in ("rows", "needed", "free_device", "free_pinned"))
    entries = []
    for e in _field(snap, "entries"):
        ids = _field(e, "page_ids") if (isinstance(e, dict) and "page_ids" in e) or hasattr(
            e, "page_ids") else ()
        entries.append(_key(_field(e, "key")) +
                       tuple(int(_field(e, f)) for f in ("rows", "device_pages", "pinned_pages")) +
                       ([int(i) for i in ids],))
    free_ids = snap.get("free_ids", ()) if isinstance(snap, dict) else getattr(snap, "free_ids",
                                                                                ())
    return (int(_field(snap, "free_device")), int(_field(snap, "free_pinned")),
            [int(i) for i in free_ids], entries, status_tuple)


def region_info(info):
    """(data, size, device, state code, footprint, captures)."""
    state = _field(info, "state")
    if isinstance(state, str):
        if state not in _t.REGION_STATES:
            raise errors.OutOfRange(f"region state {state!r} is not one of "
                                    f"{', '.join(_t.REGION_STATES)}")
        state = _t.REGION_STATES.index(state)
    return (address_of(_field(info, "data")), int(_field(info, "size")),
            int(_field(info, "device")), int(state), int(_field(info, "footprint")),
            int(_field(info, "captures")))


def arena_info(info):
    """(released, holds_copy, host_bytes)."""
    return (bool(_field(info, "released")), bool(_field(info, "holds_copy")),
            int(_field(info, "host_bytes")))


_STATS_FIELDS = [f.name for f in _t.dataclasses.fields(_t.ActivationStats)]


def activation_stats(stats):
    """The eleven counters of ActivationStats, in order."""
    return tuple(int(_field(stats, f)) for f in _STATS_FIELDS)


def keep_threshold(impl, options):
    value = getattr(impl, "keep_threshold", None)
    if value is None:
        return int(options.keep_threshold)
    return int(value() if callable(value) else value)


def unpacked(tensor):
    """(address, nbytes, device, dtype index, shape, release or None) of what unpack returned."""
    release = None
    if isinstance(tensor, _t.Tensor):
        release = tensor.release if tensor.has_release else None
    else:
        release = getattr(tensor, "release", None)
    dtype = _t.DTYPES.index(_t.dtype_name(_field(tensor, "dtype")))
    return (address_of(_field(tensor, "data")), int(_field(tensor, "nbytes")),
            int(_field(tensor, "device")), dtype, tuple(int(x) for x in _field(tensor, "shape")),
            release)


def event_of(event):
    """(native handle, device) of what offload/reload returned."""
    if event is None or isinstance(event, bool) or not isinstance(event, int):
        raise errors.LogicError(f"expected an Event (from executor.create_event), got {event!r}")
    return int(event), int(getattr(event, "device", 0))
