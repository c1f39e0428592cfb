// The four features behind offloadkit's C++ interfaces, each calling the Python object the
// factory's feature built, and the plugin's entry point, which exports them through the usual
// tables.
#include <pybind11/stl.h>

#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bridge.hpp"
#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/teardown.hpp"

namespace offloadkit::python_bridge {
namespace {

using namespace pybind11::literals;

/// What every feature object shares: the Python object, the executor lent to it (closed when
/// the object goes, so that a reference Python kept cannot reach a destroyed executor) and the
/// errors that could not be reported where they were raised.
class python_object {
 public:
  python_object(executor& ex, const feature_decl& decl)
      : decl_(&decl), handle_(std::make_shared<executor_handle>()) {
    handle_->ex = &ex;
    handle_->kind = ex.kind();
  }
  python_object(const python_object&) = delete;
  python_object& operator=(const python_object&) = delete;

  ~python_object() {
    // A close() that raises is a teardown failure (teardown.hpp): the table's close entry returns
    // it, so the case that destroyed the object fails. Other errors no later call reported stay
    // with pending_errors, which prints them when it goes.
    try {
      py::gil_scoped_acquire gil;
      if (impl_ && py::hasattr(impl_, "close")) {
        try {
          impl_.attr("close")();
        } catch (py::error_already_set& e) {
          record_teardown_error(describe_python_error(decl_->owner + ".close", e).message);
        }
      }
      handle_->ex = nullptr;
      impl_ = py::object();
      executor_ = py::object();
    } catch (const std::exception& e) {
      record_teardown_error("python " + decl_->owner + ".close: " + e.what());
    }
  }

 protected:
  /// Builds the Python object: make(executor, *make_args()), the arguments made with the GIL.
  template <class MakeArgs>
  void create(MakeArgs&& make_args) {
    call_python(decl_->owner, "__init__", [&] {
      executor_ = make_executor(handle_);
      const py::tuple args = make_args();
      impl_ = decl_->make(executor_, *args);
    });
  }

  /// A call into the Python object; first reports an error an earlier call could not.
  template <class F>
  auto call(const char* method, F&& f) -> decltype(f()) {
    pending_->throw_if_any();
    return call_python(decl_->owner, method, std::forward<F>(f));
  }

  /// Runs `f`, then `refresh` (which reads the object's state into the cache its getters answer
  /// from), also when `f` raised: the state after a failed call matters as much as after a good
  /// one. A failure to read it then is kept for the next call; `f`'s own error is the one thrown.
  template <class F, class Refresh>
  void then_refresh(F&& f, Refresh&& refresh) {
    try {
      f();
    } catch (py::error_already_set&) {
      try {
        refresh();
      } catch (py::error_already_set& e) {
        keep("info", e);
      }
      throw;
    }
    refresh();
  }

  /// A Python error raised where it cannot be thrown (noexcept entries), kept for the next call.
  void keep(const char* method, py::error_already_set& e) noexcept {
    pending_->store(describe_python_error(decl_->owner + "." + method, e));
  }
  /// The same for a C++ error on the way (a result that does not convert, pybind11's own errors).
  void keep(const char* method, const std::exception& e) noexcept {
    pending_->store(stored_error{OKIT_ERR_RUNTIME, 0,
                                 "python " + decl_->owner + "." + method + ": " + e.what()});
  }

  [[nodiscard]] py::object buffer(const void* p, std::size_t bytes, int device,
                                  stream_ref s) const {
    return make_buffer(p, bytes, device, memory_kind::device, handle_->kind, s);
  }

  const feature_decl* decl_;
  std::shared_ptr<executor_handle> handle_;
  std::shared_ptr<pending_errors> pending_ = std::make_shared<pending_errors>();
  py::object impl_;
  py::object executor_;
};

// ---- paged stash ------------------------------------------------------------------------------

class python_stash final : public stash::stash_interface, python_object {
 public:
  python_stash(executor& ex, const stash::stash_config& c, stream_ref s)
      : python_object(ex, start().stash), cfg_(c) {
    create([&] {
      return py::make_tuple(
          names().stash_config("row_bytes"_a = c.row_bytes, "rows_per_page"_a = c.rows_per_page,
                               "max_rows"_a = c.max_rows, "device_pages"_a = c.device_pages,
                               "pinned_pages"_a = c.pinned_pages, "max_keys"_a = c.max_keys,
                               "device"_a = c.device),
          make_stream(s));
    });
    call_python(decl_->owner, "__init__", [&] {
      has_stash_batch_ = py::hasattr(impl_, "stash_batch");
      has_restore_batch_ = py::hasattr(impl_, "restore_batch");
    });
  }

 private:
  [[nodiscard]] std::string do_name() const override { return decl_->implementation; }
  [[nodiscard]] const stash::stash_config& do_config() const noexcept override { return cfg_; }
  [[nodiscard]] bool do_capturable() const noexcept override {
    return (decl_->capabilities & OKIT_STASH_CAP_CAPTURABLE) != 0;
  }
  [[nodiscard]] std::size_t buffer_bytes() const { return cfg_.max_rows * cfg_.row_bytes; }

  void do_stash(const stash::stash_key& key, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    call("stash", [&] {
      impl_.attr("stash")(key_to_python(key), buffer(src, buffer_bytes(), cfg_.device, s),
                          buffer(rows, sizeof(std::uint64_t), cfg_.device, s), make_stream(s));
    });
  }
  void do_restore(const stash::stash_key& key, void* dst, std::uint64_t* rows_out,
                  stream_ref s) override {
    call("restore", [&] {
      py::object out = rows_out != nullptr ? buffer(rows_out, sizeof(std::uint64_t), cfg_.device, s)
                                           : py::none();
      impl_.attr("restore")(key_to_python(key), buffer(dst, buffer_bytes(), cfg_.device, s), out,
                            make_stream(s));
    });
  }
  // A class without stash_batch / restore_batch gets per-key calls.
  void do_stash_batch(const stash::stash_item* items, std::size_t n, stream_ref s) override {
    if (!has_stash_batch_) {
      stash_interface::do_stash_batch(items, n, s);
      return;
    }
    call("stash_batch", [&] {
      py::list batch;
      for (std::size_t i = 0; i < n; ++i) {
        batch.append(py::make_tuple(key_to_python(items[i].key),
                                    buffer(items[i].src, buffer_bytes(), cfg_.device, s),
                                    buffer(items[i].rows, sizeof(std::uint64_t), cfg_.device, s)));
      }
      impl_.attr("stash_batch")(batch, make_stream(s));
    });
  }
  void do_restore_batch(const stash::restore_item* items, std::size_t n, stream_ref s) override {
    if (!has_restore_batch_) {
      stash_interface::do_restore_batch(items, n, s);
      return;
    }
    call("restore_batch", [&] {
      py::list batch;
      for (std::size_t i = 0; i < n; ++i) {
        py::object out = items[i].rows_out != nullptr
                             ? buffer(items[i].rows_out, sizeof(std::uint64_t), cfg_.device, s)
                             : py::none();
        batch.append(py::make_tuple(key_to_python(items[i].key),
                                    buffer(items[i].dst, buffer_bytes(), cfg_.device, s), out));
      }
      impl_.attr("restore_batch")(batch, make_stream(s));
    });
  }
  void do_reset(stream_ref s) override {
    call("reset", [&] { impl_.attr("reset")(make_stream(s)); });
  }
  void do_clear_status(stream_ref s) override {
    call("clear_status", [&] { impl_.attr("clear_status")(make_stream(s)); });
  }
  stash::stash_snapshot do_snapshot(stream_ref s) override {
    // The C++ contract synchronizes the stream; doing it here keeps that true whatever the
    // Python side does.
    handle_->get().synchronize(s);
    return call("snapshot", [&] {
      py::tuple t = names().support.attr("stash_snapshot")(impl_.attr("snapshot")(make_stream(s)));
      stash::stash_snapshot snap;
      snap.free.device = t[0].cast<std::uint64_t>();
      snap.free.pinned = t[1].cast<std::uint64_t>();
      snap.free_ids = t[2].cast<std::vector<std::uint32_t>>();
      for (py::handle h : py::list(t[3])) {
        py::tuple e = py::reinterpret_borrow<py::tuple>(h);
        stash::entry_view v;
        v.key = stash::stash_key{e[0].cast<std::uint32_t>(), e[1].cast<std::uint32_t>(),
                                 e[2].cast<std::uint32_t>()};
        v.rows = e[3].cast<std::uint64_t>();
        v.device_pages = e[4].cast<std::uint64_t>();
        v.pinned_pages = e[5].cast<std::uint64_t>();
        v.page_ids = e[6].cast<std::vector<std::uint32_t>>();
        snap.entries.push_back(std::move(v));
      }
      py::tuple st = t[4];
      snap.status.code = static_cast<stash::status_code>(st[0].cast<std::uint32_t>());
      snap.status.key = stash::stash_key{st[1].cast<std::uint32_t>(), st[2].cast<std::uint32_t>(),
                                         st[3].cast<std::uint32_t>()};
      snap.status.rows = st[4].cast<std::uint64_t>();
      snap.status.needed = st[5].cast<std::uint64_t>();
      snap.status.free_device = st[6].cast<std::uint64_t>();
      snap.status.free_pinned = st[7].cast<std::uint64_t>();
      return snap;
    });
  }

  stash::stash_config cfg_;
  bool has_stash_batch_ = false;
  bool has_restore_batch_ = false;
};

// ---- region -----------------------------------------------------------------------------------

class python_region final : public region::offload_region, python_object {
 public:
  python_region(executor& ex, const region::region_config& c) : python_object(ex, start().region) {
    create([&] {
      py::object fixed_mode = py::none();
      if (c.fixed_mode) fixed_mode = py::str(region::to_string(*c.fixed_mode));
      return py::make_tuple(names().region_config("bytes"_a = c.bytes, "device"_a = c.device,
                                                  "chunk_bytes"_a = c.chunk_bytes,
                                                  "fixed_mode"_a = fixed_mode));
    });
    call_python(decl_->owner, "info", [&] { refresh(); });
  }

 private:
  [[nodiscard]] void* do_data() const noexcept override { return info_.data; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return info_.size; }
  [[nodiscard]] int do_device() const noexcept override { return info_.device; }
  [[nodiscard]] region::region_state do_state() const noexcept override { return info_.state; }
  [[nodiscard]] bool do_address_stable() const noexcept override {
    return (decl_->capabilities & OKIT_REGION_CAP_ADDRESS_STABLE) != 0;
  }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return info_.footprint; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return info_.captures; }

  /// Reads info() into the cache the noexcept getters answer from (GIL held).
  void refresh() {
    py::tuple t = names().support.attr("region_info")(impl_.attr("info")());
    cached c;
    c.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(t[0].cast<std::uint64_t>()));
    c.size = t[1].cast<std::size_t>();
    c.device = t[2].cast<int>();
    const auto state = t[3].cast<int>();
    c.state = state == OKIT_REGION_PAUSED    ? region::region_state::paused
              : state == OKIT_REGION_PARTIAL ? region::region_state::partial
                                             : region::region_state::active;
    c.footprint = t[4].cast<std::size_t>();
    c.captures = t[5].cast<std::size_t>();
    info_ = c;
  }
  /// A call after which the cached state is read again (then_refresh).
  template <class F>
  void with_refresh(const char* method, F&& f) {
    call(method, [&] { then_refresh(std::forward<F>(f), [this] { refresh(); }); });
  }

  void do_pause(region::pause_mode mode, stream_ref s) override {
    with_refresh("pause", [&] {
      impl_.attr("pause")(mode == region::pause_mode::discard ? "discard" : "preserve",
                          make_stream(s));
    });
  }
  void do_resume(stream_ref s) override {
    with_refresh("resume", [&] { impl_.attr("resume")(make_stream(s)); });
  }
  region::graph_id do_register_graph(region::capture_fn fn, stream_ref s) override {
    region::graph_id id = 0;
    with_refresh("register_graph", [&] {
      // capture(base, stream) for Python: issues offloadkit's graph body, without the GIL.
      py::cpp_function capture(
          [fn](py::handle base, py::handle stream) {
            void* b = to_address(base);
            const stream_ref sr = to_stream(stream);
            py::gil_scoped_release nogil;
            fn(b, sr);
          },
          py::arg("base"), py::arg("stream"));
      id = impl_.attr("register_graph")(capture, make_stream(s)).cast<region::graph_id>();
    });
    return id;
  }
  void do_replay(region::graph_id g, stream_ref s) override {
    with_refresh("replay", [&] { impl_.attr("replay")(g, make_stream(s)); });
  }
  void do_unregister_graph(region::graph_id g) noexcept override {
    try {
      py::gil_scoped_acquire gil;
      try {
        impl_.attr("unregister_graph")(g);
        refresh();
      } catch (py::error_already_set& e) {
        keep("unregister_graph", e);
      }
    } catch (const std::exception& e) {
      keep("unregister_graph", e);
    }
  }

  struct cached {
    void* data = nullptr;
    std::size_t size = 0;
    int device = 0;
    region::region_state state = region::region_state::active;
    std::size_t footprint = 0;
    std::size_t captures = 0;
  };
  cached info_;
};

// ---- arena ------------------------------------------------------------------------------------

class python_arena final : public arena::offloader, python_object {
 public:
  explicit python_arena(executor& ex) : python_object(ex, start().arena), ex_(&ex) {
    create([] { return py::tuple(); });
    call_python(decl_->owner, "info", [&] { refresh(); });
  }

 private:
  void refresh() {
    py::tuple t = names().support.attr("arena_info")(impl_.attr("info")());
    released_ = t[0].cast<bool>();
    holds_copy_ = t[1].cast<bool>();
    host_bytes_ = t[2].cast<std::size_t>();
  }

  event run(const char* method, arena::tensor_set_view set, stream_ref s) {
    const event_ref e = call(method, [&] {
      py::list tensors;
      for (std::size_t i = 0; i < set.size(); ++i) {
        tensors.append(buffer(set[i].data, set[i].bytes, s.device, s));
      }
      py::object result;
      then_refresh([&] { result = impl_.attr(method)(tensors, make_stream(s)); },
                   [this] { refresh(); });
      py::tuple ev = names().support.attr("event_of")(result);
      return event_ref{
          reinterpret_cast<void*>(static_cast<std::uintptr_t>(ev[0].cast<std::uint64_t>())),
          ev[1].cast<int>()};
    });
    return event(*ex_, e);  // the caller owns the event Python created
  }
  event do_offload(arena::tensor_set_view set, stream_ref s) override {
    return run("offload", set, s);
  }
  event do_reload(arena::tensor_set_view set, stream_ref s) override {
    return run("reload", set, s);
  }
  void do_release() noexcept override {
    try {
      py::gil_scoped_acquire gil;
      try {
        impl_.attr("release")();
        refresh();
      } catch (py::error_already_set& e) {
        keep("release", e);
      }
    } catch (const std::exception& e) {
      keep("release", e);
    }
  }
  [[nodiscard]] bool do_released() const noexcept override { return released_; }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return holds_copy_; }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return host_bytes_; }
  [[nodiscard]] arena::offload_promises do_promises() const noexcept override {
    arena::offload_promises p;
    p.asynchronous = (decl_->capabilities & OKIT_ARENA_CAP_ASYNCHRONOUS) != 0;
    p.pinned_steady_state = (decl_->capabilities & OKIT_ARENA_CAP_PINNED_STEADY_STATE) != 0;
    p.single_host_buffer = (decl_->capabilities & OKIT_ARENA_CAP_SINGLE_HOST_BUFFER) != 0;
    return p;
  }
  [[nodiscard]] std::string do_name() const override { return decl_->implementation; }

  executor* ex_;
  bool released_ = false;
  bool holds_copy_ = false;
  std::size_t host_bytes_ = 0;
};

// ---- activation -------------------------------------------------------------------------------

class python_activation final : public activation::offloader, python_object {
 public:
  python_activation(executor& ex, const activation::offload_options& o)
      : python_object(ex, start().activation) {
    call_python(decl_->owner, "__init__", [&] {
      py::object opts = names().offload_options(
          "keep_threshold"_a = o.keep_threshold, "prefetch_bytes"_a = o.prefetch_bytes,
          "prefetch_layers"_a = o.prefetch_layers, "max_pending_bytes"_a = o.max_pending_bytes);
      executor_ = make_executor(handle_);
      impl_ = decl_->make(executor_, opts);
      keep_threshold_ = names().support.attr("keep_threshold")(impl_, opts).cast<std::size_t>();
      has_forward_layer_end_ = py::hasattr(impl_, "forward_layer_end");
      has_backward_layer_begin_ = py::hasattr(impl_, "backward_layer_begin");
      has_synchronize_ = py::hasattr(impl_, "synchronize");
      has_stats_ = py::hasattr(impl_, "stats");
    });
  }

 private:
  activation::handle do_pack(activation::tensor t, stream_ref s) override {
    auto release = std::make_shared<release_once>();
    release->fn = std::move(t.release);
    try {
      return activation::handle{call("pack", [&] {
        return impl_.attr("pack")(tensor_to_python(t, handle_->kind, s, release), make_stream(s))
            .cast<std::uint64_t>();
      })};
    } catch (...) {
      // Not packed: the caller keeps the tensor, and a release Python may still hold must not
      // give its buffer back. The exception goes on to the caller.
      std::lock_guard<std::mutex> lock(release->mutex);
      release->disowned = true;
      release->fn = nullptr;
      throw;
    }
  }
  activation::tensor do_unpack(activation::handle h, stream_ref s) override {
    return call("unpack", [&] {
      return tensor_from_python(impl_.attr("unpack")(h.id, make_stream(s)),
                                decl_->owner + ".unpack(" + std::to_string(h.id) + ").release",
                                pending_);
    });
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    if (!has_forward_layer_end_) return;
    call("forward_layer_end", [&] { impl_.attr("forward_layer_end")(layer, make_stream(s)); });
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    if (!has_backward_layer_begin_) return;
    call("backward_layer_begin",
         [&] { impl_.attr("backward_layer_begin")(layer, make_stream(s)); });
  }
  void do_synchronize() override {
    if (!has_synchronize_) return;
    call("synchronize", [&] { impl_.attr("synchronize")(); });
  }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override { return keep_threshold_; }
  [[nodiscard]] activation::offload_stats do_stats() const override {
    activation::offload_stats st;
    if (!has_stats_) return st;
    // The C ABI's stats entry has no error channel: an error is kept for the next call.
    py::gil_scoped_acquire gil;
    try {
      py::tuple t = names().support.attr("activation_stats")(impl_.attr("stats")());
      std::size_t* fields[] = {&st.packed,
                               &st.kept,
                               &st.offloaded_bytes,
                               &st.restored_bytes,
                               &st.prefetched,
                               &st.demand_uploads,
                               &st.served_from_source,
                               &st.peak_prefetch_bytes,
                               &st.pinned_allocations,
                               &st.device_allocations,
                               &st.pending_waits};
      for (std::size_t i = 0; i < std::size(fields); ++i) *fields[i] = t[i].cast<std::size_t>();
    } catch (py::error_already_set& e) {
      pending_->store(describe_python_error(decl_->owner + ".stats", e));
    }
    return st;
  }
  [[nodiscard]] std::string do_name() const override { return decl_->implementation; }

  std::size_t keep_threshold_ = 0;
  bool has_forward_layer_end_ = false;
  bool has_backward_layer_begin_ = false;
  bool has_synchronize_ = false;
  bool has_stats_ = false;
};

// ---- the plugin -------------------------------------------------------------------------------

std::unique_ptr<stash::stash_interface> make_stash(executor& ex, const stash::stash_config& c,
                                                   stream_ref s) {
  return std::make_unique<python_stash>(ex, c, s);
}
std::unique_ptr<region::offload_region> make_region(executor& ex, const region::region_config& c) {
  return std::make_unique<python_region>(ex, c);
}
std::unique_ptr<arena::offloader> make_arena(executor& ex) {
  return std::make_unique<python_arena>(ex);
}
std::unique_ptr<activation::offloader> make_activation(executor& ex,
                                                       const activation::offload_options& o) {
  return std::make_unique<python_activation>(ex, o);
}

/// The plugin's release_cached_memory (ABI 1.3): offloadkit._bridge.release_cached_memory, which
/// asks the factory's plugin and PyTorch's caching allocators to give back what they keep.
okit_status release_cached_memory(okit_error* err) noexcept {
  return offloadkit::plugin::guard(err, [] {
    call_python("offloadkit._bridge", "release_cached_memory",
                [] { names().support.attr("release_cached_memory")(); });
  });
}

/// The tables of the features the factory provides. NULL (with the reason on stderr, the only
/// channel an entry point has) when the factory cannot be loaded.
const okit_plugin* load_plugin() noexcept {
  namespace op = offloadkit::plugin;
  try {
    const plugin_decl& d = start();
    static okit_stash_vtable stash{};
    static okit_region_vtable region{};
    static okit_arena_vtable arena{};
    static okit_activation_vtable activation{};
    static okit_plugin plugin{};
    if (d.stash.present) {
      stash = op::stash_vtable<&make_stash>(d.stash.implementation.c_str(), d.stash.capabilities);
      stash.vp_limit = d.stash.key_limits[0];
      stash.layer_limit = d.stash.key_limits[1];
      stash.microbatch_limit = d.stash.key_limits[2];
    }
    if (d.region.present) {
      region =
          op::region_vtable<&make_region>(d.region.implementation.c_str(), d.region.capabilities);
    }
    if (d.arena.present) {
      arena = op::arena_vtable<&make_arena>(d.arena.implementation.c_str(), d.arena.capabilities);
    }
    if (d.activation.present) {
      activation = op::activation_vtable<&make_activation>(d.activation.implementation.c_str(),
                                                           d.activation.capabilities);
    }
    plugin = okit_plugin{OKIT_ABI_VERSION,
                         sizeof(okit_plugin),
                         d.name.c_str(),
                         d.version.c_str(),
                         d.stash.present ? &stash : nullptr,
                         d.region.present ? &region : nullptr,
                         d.arena.present ? &arena : nullptr,
                         d.activation.present ? &activation : nullptr,
                         &release_cached_memory};
    return &plugin;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit python bridge: %s\n", e.what());
    return nullptr;
  }
}

}  // namespace
}  // namespace offloadkit::python_bridge

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  if (host_abi_version != OKIT_ABI_VERSION) return nullptr;
  static const okit_plugin* const plugin = offloadkit::python_bridge::load_plugin();
  return plugin;
}
