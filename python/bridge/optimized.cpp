// offloadkit's optimized implementations as Python classes of offloadkit._native: the graph-stable
// regions (vmm_region, unified_region), the activation offloader (async_offloader), the coalesced
// arena (coalesced_offloader) and the paged stash (paged_stash), the same C++ objects the
// batteries check, with the methods of offloadkit.protocol's Region, Activation, Arena and
// Stash. offloadkit.optimized names them as a factory (`python -m offloadkit check
// offloadkit.optimized:make`) and offloadkit.torch puts torch tensors and streams on them.
//
// Executors: an object is built on the Executor a battery lends it (so fault injection and the
// host executor reach it), or, given None or an executor of someone else's whose backend is
// "cuda" (bench_peers' torch stand-in), on one cuda executor this module keeps for the process.
// Every method releases the GIL while the C++ object runs; Python callbacks (a tensor's release,
// a graph's capture) take it again.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bridge.hpp"
#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/region/unified_region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/stash/paged_stash.hpp"

namespace offloadkit::python_bridge {
namespace {

using namespace pybind11::literals;

/// The cuda executor of objects built without one of offloadkit's executors. Never destroyed:
/// its streams and pools would be released after the interpreter (and perhaps the driver) had
/// begun to shut down.
std::shared_ptr<executor_handle> process_cuda_executor() {
  static std::shared_ptr<executor_handle>* held = nullptr;
  if (held == nullptr) {
    executor* ex = nullptr;
    {
      py::gil_scoped_release nogil;
      ex = new cuda_executor();
    }
    auto h = std::make_shared<executor_handle>();
    h->ex = ex;
    h->kind = ex->kind();
    held = new std::shared_ptr<executor_handle>(std::move(h));
  }
  return *held;
}

/// The executor an object is built on (see the file's comment). Needs the GIL.
std::shared_ptr<executor_handle> executor_from(py::handle ex) {
  start_runtime();
  if (py::isinstance<executor_handle>(ex)) return ex.cast<std::shared_ptr<executor_handle>>();
  if (!ex.is_none()) {
    const py::object backend = py::getattr(ex, "backend", py::none());
    OFFLOADKIT_EXPECTS(!backend.is_none() && py::str(backend).cast<std::string>() == "cuda",
                       out_of_range, "executor ", py::repr(ex).cast<std::string>(),
                       " is not one of the valid values: offloadkit's Executor (the one a battery "
                       "lends), None, or an executor whose backend is 'cuda' (then offloadkit's "
                       "own cuda executor runs the object)");
  }
  return process_cuda_executor();
}

/// `obj.field`, an int in [low, high], named in the error as `who`'s `field`.
template <class T>
T int_field(py::handle obj, const char* field, const char* who, T low, T high) {
  const py::int_ v(obj.attr(field));
  const bool in_range = v >= py::int_(low) && v <= py::int_(high);
  OFFLOADKIT_EXPECTS(in_range, out_of_range, who, ": ", field, " = ",
                     static_cast<std::string>(py::str(v.ptr())), " is outside [", low, ", ", high,
                     "]");
  return v.cast<T>();
}

/// `obj.field` as a count of bytes, in [0, 2^64).
std::size_t count_field(py::handle obj, const char* field, const char* who) {
  return int_field<std::size_t>(obj, field, who, 0, std::numeric_limits<std::size_t>::max());
}

region::pause_mode to_mode(const std::string& mode) {
  if (mode == "preserve") return region::pause_mode::preserve;
  OFFLOADKIT_EXPECTS(mode == "discard", out_of_range, "pause mode '", mode,
                     "' is not one of the valid values preserve, discard");
  return region::pause_mode::discard;
}

/// What each class below shares: the executor its object runs on, the C++ object (null once
/// closed), a StateError naming `what` for a call after close(), and a destructor that closes.
template <class Interface>
class native_object {
 public:
  native_object(const native_object&) = delete;
  native_object& operator=(const native_object&) = delete;

  Interface& get() const {
    OFFLOADKIT_EXPECTS(impl_ != nullptr, state_error, "this ", what_, " was closed; build another");
    return *impl_;
  }
  /// Frees the C++ object without the GIL: its destructor may wait for its copies, and give back
  /// sources whose release callbacks take the GIL.
  void close() {
    if (!impl_) return;
    std::unique_ptr<Interface> gone = std::move(impl_);
    py::gil_scoped_release nogil;
    gone.reset();
  }
  [[nodiscard]] bool closed() const noexcept { return impl_ == nullptr; }

 protected:
  native_object(py::handle ex, std::string what)
      : handle_(executor_from(ex)), what_(std::move(what)) {}
  ~native_object() {
    try {
      close();
    } catch (const std::exception& e) {
      // A destructor cannot throw (the object is being collected): the error is said here.
      std::fprintf(stderr, "offloadkit.optimized: destroying this %s: %s\n", what_.c_str(),
                   e.what());
    }
  }

  std::shared_ptr<executor_handle> handle_;
  std::unique_ptr<Interface> impl_;

 private:
  std::string what_;
};

/// close(), closed, and use as a context manager whose end closes.
template <class T>
void add_lifetime(py::class_<T>& c, const char* close_doc) {
  c.def(
       "close", [](T& o) { o.close(); }, close_doc)
      .def_property_readonly("closed", [](const T& o) { return o.closed(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](T& o, const py::args&) { o.close(); });
}

// ---- regions ----------------------------------------------------------------------------------

class native_region : public native_object<region::offload_region> {
 public:
  native_region(py::handle ex, py::handle config, const std::string& kind)
      : native_object(ex, kind + " region") {
    OFFLOADKIT_EXPECTS(kind == "vmm" || kind == "unified", out_of_range, "region kind '", kind,
                       "' is not one of the valid values vmm, unified");
    region::region_config c;
    c.bytes = count_field(config, "bytes", "RegionConfig");
    c.device = int_field<int>(config, "device", "RegionConfig", std::numeric_limits<int>::min(),
                              std::numeric_limits<int>::max());
    c.chunk_bytes = count_field(config, "chunk_bytes", "RegionConfig");
    const py::object fixed = py::getattr(config, "fixed_mode", py::none());
    if (!fixed.is_none()) c.fixed_mode = to_mode(py::str(fixed).cast<std::string>());
    executor& e = handle_->get();
    py::gil_scoped_release nogil;
    if (kind == "vmm") {
      impl_ = std::make_unique<region::vmm_region>(e, c);
    } else {
      impl_ = std::make_unique<region::unified_region>(e, c);
    }
  }

  py::object info() const {
    const region::offload_region& r = get();
    return py::module_::import("offloadkit")
        .attr("RegionInfo")("data"_a = reinterpret_cast<std::uintptr_t>(r.data()),
                            "size"_a = r.size(), "device"_a = r.device(),
                            "state"_a = region::to_string(r.state()), "footprint"_a = r.footprint(),
                            "captures"_a = r.captures());
  }
  void pause(const std::string& mode, py::handle stream) {
    const region::pause_mode m = to_mode(mode);
    const stream_ref s = to_stream(stream);
    region::offload_region& r = get();
    py::gil_scoped_release nogil;
    r.pause(m, s);
  }
  void resume(py::handle stream) {
    const stream_ref s = to_stream(stream);
    region::offload_region& r = get();
    py::gil_scoped_release nogil;
    r.resume(s);
  }
  void swap_with(native_region& in, const std::string& mode, py::handle stream) {
    const region::pause_mode m = to_mode(mode);
    const stream_ref s = to_stream(stream);
    region::offload_region& r = get();
    region::offload_region& other = in.get();
    py::gil_scoped_release nogil;
    r.swap_with(other, m, s);
  }
  std::uint64_t register_graph(py::object capture, py::handle stream) {
    const stream_ref s = to_stream(stream);
    region::offload_region& r = get();
    std::shared_ptr<py::object> fn = held_callable(std::move(capture));
    region::capture_fn c = [fn](void* base, stream_ref cs) {
      call_python("Region", "register_graph's capture",
                  [&] { (*fn)(reinterpret_cast<std::uintptr_t>(base), make_stream(cs)); });
    };
    py::gil_scoped_release nogil;
    return r.register_graph(std::move(c), s);
  }
  void replay(std::uint64_t graph, py::handle stream) {
    const stream_ref s = to_stream(stream);
    region::offload_region& r = get();
    py::gil_scoped_release nogil;
    r.replay(graph, s);
  }
  void unregister_graph(std::uint64_t graph) {
    region::offload_region& r = get();
    py::gil_scoped_release nogil;
    r.unregister_graph(graph);
  }
};

// ---- activation offload -----------------------------------------------------------------------

class native_activation : public native_object<activation::offloader> {
 public:
  native_activation(py::handle ex, py::handle options) : native_object(ex, "activation offloader") {
    activation::offload_options o;
    const char* who = "OffloadOptions";
    o.keep_threshold = count_field(options, "keep_threshold", who);
    o.prefetch_bytes = count_field(options, "prefetch_bytes", who);
    o.prefetch_layers =
        int_field<int>(options, "prefetch_layers", who, std::numeric_limits<int>::min(),
                       std::numeric_limits<int>::max());
    o.max_pending_bytes = count_field(options, "max_pending_bytes", who);
    executor& e = handle_->get();
    py::gil_scoped_release nogil;
    impl_ = std::make_unique<activation::async_offloader>(e, o);
  }

  /// The offloader, after the error a release callback kept, if any (said once).
  activation::offloader& get() {
    activation::offloader& a = native_object::get();
    pending_->throw_if_any();
    return a;
  }

  std::uint64_t pack(py::handle tensor, py::handle stream) {
    activation::offloader& a = get();
    activation::tensor t =
        tensor_from_python(tensor, "the release of a tensor given to pack()", pending_);
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    return a.pack(std::move(t), s).id;
  }
  py::object unpack(std::uint64_t h, py::handle stream) {
    activation::offloader& a = get();
    const stream_ref s = to_stream(stream);
    activation::tensor t;
    {
      py::gil_scoped_release nogil;
      t = a.unpack(activation::handle{h}, s);
    }
    auto release = std::make_shared<release_once>();
    release->fn = std::move(t.release);
    return tensor_to_python(t, handle_->kind, s, release);
  }
  void forward_layer_end(int layer, py::handle stream) {
    activation::offloader& a = get();
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    a.forward_layer_end(layer, s);
  }
  void backward_layer_begin(int layer, py::handle stream) {
    activation::offloader& a = get();
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    a.backward_layer_begin(layer, s);
  }
  void synchronize() {
    activation::offloader& a = get();
    {
      py::gil_scoped_release nogil;
      a.synchronize();
    }
    pending_->throw_if_any();
  }
  py::object stats() {
    const activation::offload_stats st = get().stats();
    return py::module_::import("offloadkit")
        .attr("ActivationStats")(
            "packed"_a = st.packed, "kept"_a = st.kept, "offloaded_bytes"_a = st.offloaded_bytes,
            "restored_bytes"_a = st.restored_bytes, "prefetched"_a = st.prefetched,
            "demand_uploads"_a = st.demand_uploads, "served_from_source"_a = st.served_from_source,
            "peak_prefetch_bytes"_a = st.peak_prefetch_bytes,
            "pinned_allocations"_a = st.pinned_allocations,
            "device_allocations"_a = st.device_allocations, "pending_waits"_a = st.pending_waits);
  }
  std::size_t keep_threshold() { return get().keep_threshold(); }
  /// Closes, then says the error a release callback kept (one never said is printed when the
  /// last callback goes).
  void close() {
    native_object::close();
    pending_->throw_if_any();
  }

 private:
  std::shared_ptr<pending_errors> pending_ = std::make_shared<pending_errors>();
};

// ---- coalesced arena --------------------------------------------------------------------------

/// The tensors of an arena call: each a device Buffer (or anything with an address, as
/// to_address reads it, and `nbytes`).
std::vector<arena::device_tensor> tensor_set(py::handle tensors) {
  std::vector<arena::device_tensor> set;
  for (py::handle t : py::iter(tensors)) {
    arena::device_tensor d;
    d.data = to_address(t);
    d.bytes = count_field(t, "nbytes", "arena tensor");
    set.push_back(d);
  }
  return set;
}

class native_arena : public native_object<arena::offloader> {
 public:
  explicit native_arena(py::handle ex) : native_object(ex, "arena") {
    executor& e = handle_->get();
    py::gil_scoped_release nogil;
    impl_ = std::make_unique<arena::coalesced_offloader>(e);
  }

  py::object info() const {
    const arena::offloader& a = get();
    return py::module_::import("offloadkit")
        .attr("ArenaInfo")("released"_a = a.released(), "holds_copy"_a = a.holds_copy(),
                           "host_bytes"_a = a.host_bytes());
  }
  /// offload() or reload(): the event it returns is the caller's (executor.destroy_event); with
  /// `want_event` false there is none (the copies are ordered on the stream all the same).
  py::object run(bool to_host, py::handle tensors, py::handle stream, bool want_event) {
    arena::offloader& a = get();
    const std::vector<arena::device_tensor> set = tensor_set(tensors);
    const stream_ref s = to_stream(stream);
    event_ref done;
    {
      py::gil_scoped_release nogil;
      event e = to_host ? a.offload(set, s) : a.reload(set, s);
      if (want_event) done = e.release();  // else e's end destroys it (its work goes on)
    }
    if (!want_event) return py::none();
    return make_event(done);
  }
  void release() {
    arena::offloader& a = get();
    py::gil_scoped_release nogil;
    a.release();
  }
};

// ---- paged stash ------------------------------------------------------------------------------

stash::stash_key key_from(py::handle key) {
  const py::tuple k = names().support.attr("_key")(key);
  std::uint32_t fields[3] = {};
  const char* names_of[3] = {"vp", "layer", "microbatch"};
  for (std::size_t i = 0; i < 3; ++i) {
    const py::int_ v(k[i]);
    OFFLOADKIT_EXPECTS(v >= py::int_(0) && v <= py::int_(std::numeric_limits<std::uint32_t>::max()),
                       out_of_range, "StashKey.", names_of[i], " = ",
                       static_cast<std::string>(py::str(v.ptr())), " is outside [0, ",
                       std::numeric_limits<std::uint32_t>::max(), "]");
    fields[i] = v.cast<std::uint32_t>();
  }
  return stash::stash_key{fields[0], fields[1], fields[2]};
}

std::uint64_t* rows_at(py::handle buffer) {
  return buffer.is_none() ? nullptr : static_cast<std::uint64_t*>(to_address(buffer));
}

/// The items of stash_batch, (key, src, rows), or of restore_batch, (key, dst, rows_out or None).
template <class Item>
std::vector<Item> batch_items(py::handle items) {
  std::vector<Item> batch;
  for (py::handle h : py::iter(items)) {
    const py::tuple t = py::reinterpret_borrow<py::object>(h);
    batch.push_back({key_from(t[0]), to_address(t[1]), rows_at(t[2])});
  }
  return batch;
}

class native_stash : public native_object<stash::stash_interface> {
 public:
  native_stash(py::handle ex, py::handle config, py::handle stream) : native_object(ex, "stash") {
    const char* who = "StashConfig";
    stash::stash_config c;
    c.row_bytes = count_field(config, "row_bytes", who);
    c.rows_per_page = count_field(config, "rows_per_page", who);
    c.max_rows = count_field(config, "max_rows", who);
    c.device_pages = count_field(config, "device_pages", who);
    c.pinned_pages = count_field(config, "pinned_pages", who);
    c.max_keys = count_field(config, "max_keys", who);
    c.device = int_field<int>(config, "device", who, std::numeric_limits<int>::min(),
                              std::numeric_limits<int>::max());
    const stream_ref s = to_stream(stream);
    executor& e = handle_->get();
    py::gil_scoped_release nogil;
    impl_ = std::make_unique<stash::paged_stash>(e, c, s);
  }

  void stash(py::handle key, py::handle src, py::handle rows, py::handle stream) {
    stash::stash_interface& st = get();
    const stash::stash_key k = key_from(key);
    const void* from = to_address(src);
    const std::uint64_t* r = rows_at(rows);
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.stash(k, from, r, s);
  }
  void restore(py::handle key, py::handle dst, py::handle rows_out, py::handle stream) {
    stash::stash_interface& st = get();
    const stash::stash_key k = key_from(key);
    void* to = to_address(dst);
    std::uint64_t* r = rows_at(rows_out);
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.restore(k, to, r, s);
  }
  void stash_batch(py::handle items, py::handle stream) {
    stash::stash_interface& st = get();
    const std::vector<stash::stash_item> batch = batch_items<stash::stash_item>(items);
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.stash_batch(batch, s);
  }
  void restore_batch(py::handle items, py::handle stream) {
    stash::stash_interface& st = get();
    const std::vector<stash::restore_item> batch = batch_items<stash::restore_item>(items);
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.restore_batch(batch, s);
  }
  void reset(py::handle stream) {
    stash::stash_interface& st = get();
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.reset(s);
  }
  void clear_status(py::handle stream) {
    stash::stash_interface& st = get();
    const stream_ref s = to_stream(stream);
    py::gil_scoped_release nogil;
    st.clear_status(s);
  }
  py::object snapshot(py::handle stream) {
    stash::stash_interface& st = get();
    const stream_ref s = to_stream(stream);
    stash::stash_snapshot snap;
    {
      py::gil_scoped_release nogil;
      snap = st.snapshot(s);
    }
    const py::module_ ok = py::module_::import("offloadkit");
    py::list entries;
    for (const stash::entry_view& e : snap.entries) {
      entries.append(ok.attr("StashEntry")(key_to_python(e.key), e.rows, e.device_pages,
                                           e.pinned_pages, e.page_ids));
    }
    const stash::stash_status& x = snap.status;
    // offloadkit.types.STASH_STATUS_CODES names the codes in the order of stash::status_code.
    const py::object code = py::module_::import("offloadkit.types")
                                .attr("STASH_STATUS_CODES")[py::int_(static_cast<int>(x.code))];
    const py::object status = ok.attr("StashStatus")(
        "code"_a = code, "key"_a = key_to_python(x.key), "rows"_a = x.rows, "needed"_a = x.needed,
        "free_device"_a = x.free_device, "free_pinned"_a = x.free_pinned);
    return ok.attr("StashSnapshot")("free_device"_a = snap.free.device,
                                    "free_pinned"_a = snap.free.pinned, "entries"_a = entries,
                                    "status"_a = status, "free_ids"_a = snap.free_ids);
  }
};

}  // namespace

void add_optimized_classes(py::module_& m) {
  py::class_<native_region> region_class(
      m, "OptimizedRegion",
      "offloadkit's graph-stable region (kind 'vmm': vmm_region, whose "
      "pause gives its device memory back to the driver; 'unified': "
      "unified_region), with offloadkit.protocol.Region's methods");
  region_class
      .def(py::init<py::handle, py::handle, const std::string&>(), "executor"_a, "config"_a,
           "kind"_a = "vmm")
      .def("info", &native_region::info)
      .def("pause", &native_region::pause, "mode"_a, "stream"_a)
      .def("resume", &native_region::resume, "stream"_a)
      .def("swap_with", &native_region::swap_with, "other"_a, "mode"_a, "stream"_a,
           "Pauses this region while resuming `other` (an RL phase switch: the copy out and the "
           "copy in share the link, one direction each)")
      .def("register_graph", &native_region::register_graph, "capture"_a, "stream"_a)
      .def("replay", &native_region::replay, "graph_id"_a, "stream"_a)
      .def("unregister_graph", &native_region::unregister_graph, "graph_id"_a);
  add_lifetime(
      region_class,
      "Frees the region's device memory, host copy and graphs (queued work that uses it must "
      "be finished)");
  py::class_<native_activation> activation_class(
      m, "OptimizedActivation",
      "offloadkit's activation offloader (async_offloader: side-stream "
      "copies into a pinned pool, bounded prefetch), with "
      "offloadkit.protocol.Activation's methods");
  activation_class.def(py::init<py::handle, py::handle>(), "executor"_a, "options"_a)
      .def("pack", &native_activation::pack, "tensor"_a, "stream"_a)
      .def("unpack", &native_activation::unpack, "handle"_a, "stream"_a)
      .def("forward_layer_end", &native_activation::forward_layer_end, "layer"_a, "stream"_a)
      .def("backward_layer_begin", &native_activation::backward_layer_begin, "layer"_a, "stream"_a)
      .def("synchronize", &native_activation::synchronize)
      .def("stats", &native_activation::stats)
      .def("keep_threshold", &native_activation::keep_threshold);
  add_lifetime(
      activation_class,
      "Waits for the offloader's copies and gives back every source it holds (tensors from "
      "unpack() must have been released)");
  py::class_<native_arena> arena_class(
      m, "OptimizedArena",
      "offloadkit's coalesced arena (coalesced_offloader: one cached pinned "
      "arena, copies batched per run of device-contiguous tensors), with "
      "offloadkit.protocol.Arena's methods");
  arena_class.def(py::init<py::handle>(), "executor"_a)
      .def("info", &native_arena::info)
      .def(
          "offload",
          [](native_arena& a, py::handle tensors, py::handle stream, bool event) {
            return a.run(true, tensors, stream, event);
          },
          "tensors"_a, "stream"_a, "event"_a = true,
          "Copies every tensor (device Buffers) to the arena in the order of `stream`; returns an "
          "Event that completes with the copies, the caller's to destroy (None with event=False)")
      .def(
          "reload",
          [](native_arena& a, py::handle tensors, py::handle stream, bool event) {
            return a.run(false, tensors, stream, event);
          },
          "tensors"_a, "stream"_a, "event"_a = true,
          "Copies the arena's copy back into `tensors` (same sizes); returns an Event as offload()")
      .def("release", &native_arena::release,
           "Frees the host memory (after the queued copies that use it); idempotent");
  add_lifetime(arena_class, "Frees everything");
  py::class_<native_stash> stash_class(
      m, "OptimizedStash",
      "offloadkit's paged stash (paged_stash: device and pinned pages, "
      "device-resident page table, one launch per call or per 64 keys), with "
      "offloadkit.protocol.Stash's methods");
  stash_class
      .def(py::init<py::handle, py::handle, py::handle>(), "executor"_a, "config"_a, "stream"_a)
      .def("stash", &native_stash::stash, "key"_a, "src"_a, "rows"_a, "stream"_a)
      .def("restore", &native_stash::restore, "key"_a, "dst"_a, "rows_out"_a, "stream"_a)
      .def("stash_batch", &native_stash::stash_batch, "items"_a, "stream"_a)
      .def("restore_batch", &native_stash::restore_batch, "items"_a, "stream"_a)
      .def("reset", &native_stash::reset, "stream"_a)
      .def("clear_status", &native_stash::clear_status, "stream"_a)
      .def("snapshot", &native_stash::snapshot, "stream"_a,
           "Free pages of both tiers, the live entries and the status word (waits for `stream`)");
  add_lifetime(stash_class, "Frees the pages and the page table");
}

}  // namespace offloadkit::python_bridge
