// The plugin side of the four feature tables: each object created through a table holds an
// abi_executor over the lent okit_executor and the C++ implementation running on it; every entry
// turns exceptions into codes (guard), so nothing but plain C crosses the boundary.
#include "offloadkit/plugin/export.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/teardown.hpp"
#include "stash_conversions.hpp"

namespace offloadkit::plugin::detail {
namespace {

/// One object behind a table: the executor first, so that it outlives the implementation.
template <class Interface>
struct object {
  explicit object(const okit_executor* t) : ex(t) {}
  abi_executor ex;
  std::unique_ptr<Interface> impl;
};

template <class Interface>
Interface& impl_of(void* self) {
  return *static_cast<object<Interface>*>(self)->impl;
}

/// The table's close (ABI 1.2): deletes the object as destroy does and returns, as
/// OKIT_ERR_RUNTIME, the teardown failures its destructors recorded (teardown.hpp) while it went: a
/// C++ implementation cannot throw from a destructor, so it records them there.
template <class Object>
okit_status close_object(void* self, okit_error* err) noexcept {
  // Failures recorded on this thread before are not this object's: set aside, and put back.
  std::vector<std::string> earlier = take_teardown_errors();
  delete static_cast<Object*>(self);
  std::vector<std::string> own = take_teardown_errors();
  for (std::string& e : earlier) record_teardown_error(std::move(e));
  if (own.empty()) return OKIT_OK;
  return guard(err, [&] { throw runtime_error(join_teardown_errors(own)); });
}

/// The table's destroy: the same teardown, whose failures nothing can return; each is printed as it
/// happens (a host that calls destroy predates close).
template <class Object>
void destroy_object(void* self) noexcept {
  std::vector<std::string> earlier = take_teardown_errors();
  delete static_cast<Object*>(self);
  for (const std::string& e : take_teardown_errors()) {
    std::fprintf(stderr, "offloadkit plugin: destroy cannot report a teardown failure: %s\n",
                 e.c_str());
  }
  for (std::string& e : earlier) record_teardown_error(std::move(e));
}

void expect_out(const void* out, const char* entry) {
  OFFLOADKIT_EXPECTS(out != nullptr, logic_error, entry, ": the output pointer is NULL");
}

/// A create entry's frame: checks the output pointer and the entry's input (`in`, with
/// `in_is_null` the error when it is NULL; nullptr for an entry that takes none), makes the object
/// on `ex`, has `build` make its implementation on the object's executor, and hands it out.
template <class Object, class Build>
okit_status create_object(okit_error* err, const okit_executor* ex, void** out, const char* entry,
                          const void* in, const char* in_is_null, const Build& build) noexcept {
  return guard(err, [&] {
    expect_out(out, entry);
    OFFLOADKIT_EXPECTS(in_is_null == nullptr || in != nullptr, logic_error, entry, ": ",
                       in_is_null);
    auto o = std::make_unique<Object>(ex);
    o->impl = build(o->ex);
    *out = o.release();
  });
}

// ---- stash ------------------------------------------------------------------------------------

struct stash_object : object<stash::stash_interface> {
  using object::object;
  // snapshot() hands out arrays owned here, valid until the next call.
  std::vector<std::uint32_t> free_ids;
  std::vector<std::vector<std::uint32_t>> entry_ids;
  std::vector<okit_stash_entry> entries;
};

// ---- region -----------------------------------------------------------------------------------

/// A C capture callback as a capture_fn; the context is dropped with the last copy.
region::capture_fn capture_of(okit_capture fn) {
  struct holder {
    explicit holder(okit_capture f) : fn(f) {}
    holder(const holder&) = delete;
    holder& operator=(const holder&) = delete;
    ~holder() {
      if (fn.drop != nullptr) fn.drop(fn.ctx);
    }
    okit_capture fn;
  };
  auto h = std::make_shared<holder>(fn);
  return [h](void* base, stream_ref s) {
    call_checked_self("offloadkit's graph body", "capture", h->fn.call, h->fn.ctx, base, to_c(s));
  };
}

// ---- activation -------------------------------------------------------------------------------

activation::dtype dtype_of(std::int32_t t) {
  OFFLOADKIT_EXPECTS(t >= OKIT_DTYPE_U8 && t <= OKIT_DTYPE_I64, out_of_range, "dtype ", t,
                     " is outside [0, 7] (okit_dtype)");
  return static_cast<activation::dtype>(t);
}

}  // namespace

// ---- stash table ----------------------------------------------------------------------------

okit_status create_stash(stash_maker make, okit_error* err, const okit_executor* ex,
                         const okit_stash_config* cfg, void** out, okit_stream s) noexcept {
  // Reads the config only once create_object has checked it.
  const auto build = [&](executor& on) {
    stash::stash_config c;
    c.row_bytes = cfg->row_bytes;
    c.rows_per_page = cfg->rows_per_page;
    c.max_rows = cfg->max_rows;
    c.device_pages = cfg->device_pages;
    c.pinned_pages = cfg->pinned_pages;
    c.max_keys = cfg->max_keys;
    c.device = cfg->device;
    return make(on, c, from_c(s));
  };
  return create_object<stash_object>(err, ex, out, "stash.create", cfg, "the config is NULL",
                                     build);
}

okit_stash_vtable stash_vtable(const char* implementation, std::uint64_t capabilities,
                               okit_status (*create)(okit_error*, const okit_executor*,
                                                     const okit_stash_config*, void**,
                                                     okit_stream)) {
  using I = stash::stash_interface;
  okit_stash_vtable t{};
  t.struct_size = sizeof(okit_stash_vtable);
  t.capabilities = capabilities;
  t.implementation = implementation;
  t.create = create;
  t.destroy = &destroy_object<stash_object>;
  t.close = &close_object<stash_object>;
  t.stash = [](void* self, okit_error* err, okit_stash_key key, const void* src,
               const std::uint64_t* rows, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).stash(key_of(key), src, rows, from_c(s)); });
  };
  t.restore = [](void* self, okit_error* err, okit_stash_key key, void* dst,
                 std::uint64_t* rows_out, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).restore(key_of(key), dst, rows_out, from_c(s)); });
  };
  t.stash_batch = [](void* self, okit_error* err, const okit_stash_item* items, std::size_t count,
                     okit_stream s) noexcept {
    return guard(err, [&] {
      OFFLOADKIT_EXPECTS(items != nullptr || count == 0, logic_error, "stash.stash_batch of ",
                         count, " items: the item array is NULL");
      std::vector<stash::stash_item> v(count);
      for (std::size_t i = 0; i < count; ++i) {
        v[i] = stash::stash_item{key_of(items[i].key), items[i].src, items[i].rows};
      }
      impl_of<I>(self).stash_batch(v, from_c(s));
    });
  };
  t.restore_batch = [](void* self, okit_error* err, const okit_restore_item* items,
                       std::size_t count, okit_stream s) noexcept {
    return guard(err, [&] {
      OFFLOADKIT_EXPECTS(items != nullptr || count == 0, logic_error, "stash.restore_batch of ",
                         count, " items: the item array is NULL");
      std::vector<stash::restore_item> v(count);
      for (std::size_t i = 0; i < count; ++i) {
        v[i] = stash::restore_item{key_of(items[i].key), items[i].dst, items[i].rows_out};
      }
      impl_of<I>(self).restore_batch(v, from_c(s));
    });
  };
  t.reset = [](void* self, okit_error* err, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).reset(from_c(s)); });
  };
  t.clear_status = [](void* self, okit_error* err, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).clear_status(from_c(s)); });
  };
  t.snapshot = [](void* self, okit_error* err, okit_stash_snapshot* out, okit_stream s) noexcept {
    return guard(err, [&] {
      expect_out(out, "stash.snapshot");
      auto& o = *static_cast<stash_object*>(self);
      const stash::stash_snapshot snap = o.impl->snapshot(from_c(s));
      o.free_ids = snap.free_ids;
      o.entry_ids.clear();
      o.entries.clear();
      for (const auto& e : snap.entries) o.entry_ids.push_back(e.page_ids);
      for (std::size_t i = 0; i < snap.entries.size(); ++i) {
        const auto& e = snap.entries[i];
        okit_stash_entry c{};
        c.key = key_to_c(e.key);
        c.rows = e.rows;
        c.device_pages = e.device_pages;
        c.pinned_pages = e.pinned_pages;
        c.page_ids = o.entry_ids[i].empty() ? nullptr : o.entry_ids[i].data();
        c.page_id_count = o.entry_ids[i].size();
        o.entries.push_back(c);
      }
      *out = okit_stash_snapshot{};
      out->status = status_to_c(snap.status);
      out->free_device = snap.free.device;
      out->free_pinned = snap.free.pinned;
      out->free_ids = o.free_ids.empty() ? nullptr : o.free_ids.data();
      out->free_id_count = o.free_ids.size();
      out->entries = o.entries.empty() ? nullptr : o.entries.data();
      out->entry_count = o.entries.size();
    });
  };
  return t;
}

// ---- region table ---------------------------------------------------------------------------

okit_status create_region(region_maker make, okit_error* err, const okit_executor* ex,
                          const okit_region_config* cfg, void** out) noexcept {
  const auto build = [&](executor& on) {
    region::region_config c;
    c.bytes = cfg->bytes;
    c.device = cfg->device;
    c.chunk_bytes = cfg->chunk_bytes;
    // A plugin built with this SDK is loaded by an offloadkit of this version or later, which
    // fills the field in (-1 where no mode is fixed).
    if (cfg->pause_mode == OKIT_PAUSE_PRESERVE) c.fixed_mode = region::pause_mode::preserve;
    if (cfg->pause_mode == OKIT_PAUSE_DISCARD) c.fixed_mode = region::pause_mode::discard;
    return make(on, c);
  };
  return create_object<object<region::offload_region>>(err, ex, out, "region.create", cfg,
                                                       "the config is NULL", build);
}

namespace {
region::pause_mode pause_mode_of(std::int32_t mode) {
  OFFLOADKIT_EXPECTS(mode == OKIT_PAUSE_PRESERVE || mode == OKIT_PAUSE_DISCARD, out_of_range,
                     "pause mode ", mode,
                     " is not OKIT_PAUSE_PRESERVE (0) or OKIT_PAUSE_DISCARD (1)");
  return mode == OKIT_PAUSE_DISCARD ? region::pause_mode::discard : region::pause_mode::preserve;
}
}  // namespace

okit_region_vtable region_vtable(const char* implementation, std::uint64_t capabilities,
                                 okit_status (*create)(okit_error*, const okit_executor*,
                                                       const okit_region_config*, void**)) {
  using I = region::offload_region;
  okit_region_vtable t{};
  t.struct_size = sizeof(okit_region_vtable);
  t.capabilities = capabilities;
  t.implementation = implementation;
  t.create = create;
  t.destroy = &destroy_object<object<I>>;
  t.close = &close_object<object<I>>;
  t.info = [](void* self, okit_region_info* out) noexcept {
    const I& r = impl_of<I>(self);
    out->data = r.data();
    out->size = r.size();
    out->device = r.device();
    out->state = r.state() == region::region_state::active   ? OKIT_REGION_ACTIVE
                 : r.state() == region::region_state::paused ? OKIT_REGION_PAUSED
                                                             : OKIT_REGION_PARTIAL;
    out->footprint = r.footprint();
    out->captures = r.captures();
  };
  t.pause = [](void* self, okit_error* err, std::int32_t mode, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).pause(pause_mode_of(mode), from_c(s)); });
  };
  t.resume = [](void* self, okit_error* err, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).resume(from_c(s)); });
  };
  t.swap = [](void* self, okit_error* err, void* in, std::int32_t mode, okit_stream s) noexcept {
    return guard(err, [&] {
      OFFLOADKIT_EXPECTS(in != nullptr, logic_error, "region.swap: the region to resume is NULL");
      impl_of<I>(self).swap_with(impl_of<I>(in), pause_mode_of(mode), from_c(s));
    });
  };
  t.register_graph = [](void* self, okit_error* err, okit_capture fn, std::uint64_t* id,
                        okit_stream s) noexcept {
    // The callback is owned from here: capture_of drops it with the last copy, also on failure.
    region::capture_fn f = capture_of(fn);
    return guard(err, [&] {
      expect_out(id, "region.register_graph");
      *id = impl_of<I>(self).register_graph(std::move(f), from_c(s));
    });
  };
  t.replay = [](void* self, okit_error* err, std::uint64_t id, okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).replay(id, from_c(s)); });
  };
  t.unregister_graph = [](void* self, std::uint64_t id) noexcept {
    impl_of<I>(self).unregister_graph(id);
  };
  return t;
}

// ---- arena table ----------------------------------------------------------------------------

okit_status create_arena(arena_maker make, okit_error* err, const okit_executor* ex,
                         void** out) noexcept {
  return create_object<object<arena::offloader>>(err, ex, out, "arena.create", nullptr, nullptr,
                                                 [&](executor& on) { return make(on); });
}

namespace {
arena::tensor_set_view view_of(const okit_tensor* tensors, std::size_t count) {
  static_assert(sizeof(okit_tensor) == sizeof(arena::device_tensor) &&
                    offsetof(okit_tensor, bytes) == offsetof(arena::device_tensor, bytes),
                "okit_tensor and arena::device_tensor share one layout");
  OFFLOADKIT_EXPECTS(tensors != nullptr || count == 0, logic_error,
                     "the tensor array is NULL with ", count, " tensors");
  return arena::tensor_set_view(reinterpret_cast<const arena::device_tensor*>(tensors), count);
}

/// offload() and reload() share one shape: a tensor set in, an event out that the caller owns.
okit_status move_set(event (arena::offloader::*op)(arena::tensor_set_view, stream_ref),
                     const char* entry, void* self, okit_error* err, const okit_tensor* tensors,
                     std::size_t count, okit_event* done, okit_stream s) noexcept {
  return guard(err, [&] {
    expect_out(done, entry);
    event e = (impl_of<arena::offloader>(self).*op)(view_of(tensors, count), from_c(s));
    *done = to_c(e.release());
  });
}
}  // namespace

okit_arena_vtable arena_vtable(const char* implementation, std::uint64_t capabilities,
                               okit_status (*create)(okit_error*, const okit_executor*, void**)) {
  using I = arena::offloader;
  okit_arena_vtable t{};
  t.struct_size = sizeof(okit_arena_vtable);
  t.capabilities = capabilities;
  t.implementation = implementation;
  t.create = create;
  t.destroy = &destroy_object<object<I>>;
  t.close = &close_object<object<I>>;
  t.offload = [](void* self, okit_error* err, const okit_tensor* tensors, std::size_t count,
                 okit_event* done, okit_stream s) noexcept {
    return move_set(&I::offload, "arena.offload", self, err, tensors, count, done, s);
  };
  t.reload = [](void* self, okit_error* err, const okit_tensor* tensors, std::size_t count,
                okit_event* done, okit_stream s) noexcept {
    return move_set(&I::reload, "arena.reload", self, err, tensors, count, done, s);
  };
  t.release = [](void* self) noexcept { impl_of<I>(self).release(); };
  t.info = [](void* self, okit_arena_info* out) noexcept {
    const I& a = impl_of<I>(self);
    out->released = a.released() ? 1 : 0;
    out->holds_copy = a.holds_copy() ? 1 : 0;
    out->host_bytes = a.host_bytes();
  };
  return t;
}

// ---- activation table -----------------------------------------------------------------------

okit_status create_activation(activation_maker make, okit_error* err, const okit_executor* ex,
                              const okit_offload_options* o, void** out) noexcept {
  const auto build = [&](executor& on) {
    activation::offload_options opt;
    opt.keep_threshold = o->keep_threshold;
    opt.prefetch_bytes = o->prefetch_bytes;
    opt.prefetch_layers = o->prefetch_layers;
    opt.max_pending_bytes = o->max_pending_bytes;
    return make(on, opt);
  };
  return create_object<object<activation::offloader>>(err, ex, out, "activation.create", o,
                                                      "the options are NULL", build);
}

okit_activation_vtable activation_vtable(const char* implementation, std::uint64_t capabilities,
                                         okit_status (*create)(okit_error*, const okit_executor*,
                                                               const okit_offload_options*,
                                                               void**)) {
  using I = activation::offloader;
  okit_activation_vtable t{};
  t.struct_size = sizeof(okit_activation_vtable);
  t.capabilities = capabilities;
  t.implementation = implementation;
  t.create = create;
  t.destroy = &destroy_object<object<I>>;
  t.close = &close_object<object<I>>;
  t.pack = [](void* self, okit_error* err, const okit_activation_tensor* t, std::uint64_t* handle,
              okit_stream s) noexcept {
    // The release callback becomes ours only when pack succeeds: until then `armed` stays false
    // and dropping the holder leaves the caller's context alone.
    struct holder {
      explicit holder(okit_callback c) : cb(c) {}
      holder(const holder&) = delete;
      holder& operator=(const holder&) = delete;
      ~holder() {
        if (armed && cb.drop != nullptr) cb.drop(cb.ctx);
      }
      okit_callback cb;
      bool armed = false;
    };
    std::shared_ptr<holder> h;
    return guard(err, [&] {
      OFFLOADKIT_EXPECTS(t != nullptr, logic_error, "activation.pack: the tensor is NULL");
      expect_out(handle, "activation.pack");
      OFFLOADKIT_EXPECTS(t->ndim <= OKIT_MAX_DIMS, out_of_range, "activation.pack: ndim ", t->ndim,
                         " is outside [0, ", OKIT_MAX_DIMS, "]");
      activation::tensor x;
      x.data = t->data;
      x.bytes = t->bytes;
      x.device = t->device;
      x.type = dtype_of(t->dtype);
      x.shape.assign(t->shape, t->shape + t->ndim);
      h = std::make_shared<holder>(t->release);
      x.release = [h] {
        if (h->cb.call != nullptr) h->cb.call(h->cb.ctx);
      };
      *handle = impl_of<I>(self).pack(std::move(x), from_c(s)).id;
      h->armed = true;
    });
  };
  t.unpack = [](void* self, okit_error* err, std::uint64_t handle, okit_activation_tensor* out,
                okit_stream s) noexcept {
    return guard(err, [&] {
      expect_out(out, "activation.unpack");
      activation::tensor x = impl_of<I>(self).unpack(activation::handle{handle}, from_c(s));
      *out = okit_activation_tensor{};
      out->data = x.data;
      out->bytes = x.bytes;
      out->device = x.device;
      out->dtype = static_cast<std::int32_t>(x.type);
      // pack() accepted at most OKIT_MAX_DIMS extents, and unpack returns the packed shape.
      out->ndim = static_cast<std::uint32_t>(std::min<std::size_t>(x.shape.size(), OKIT_MAX_DIMS));
      std::copy_n(x.shape.begin(), out->ndim, out->shape);
      out->release = to_c_callback(std::move(x.release));
    });
  };
  t.forward_layer_end = [](void* self, okit_error* err, std::int32_t layer,
                           okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).forward_layer_end(layer, from_c(s)); });
  };
  t.backward_layer_begin = [](void* self, okit_error* err, std::int32_t layer,
                              okit_stream s) noexcept {
    return guard(err, [&] { impl_of<I>(self).backward_layer_begin(layer, from_c(s)); });
  };
  t.synchronize = [](void* self, okit_error* err) noexcept {
    return guard(err, [&] { impl_of<I>(self).synchronize(); });
  };
  t.keep_threshold = [](void* self) noexcept { return impl_of<I>(self).keep_threshold(); };
  t.stats = [](void* self, okit_offload_stats* out) noexcept {
    // stats() copies counters; it does not fail in practice, and this entry has no error channel.
    const activation::offload_stats st = impl_of<I>(self).stats();
    out->packed = st.packed;
    out->kept = st.kept;
    out->offloaded_bytes = st.offloaded_bytes;
    out->restored_bytes = st.restored_bytes;
    out->prefetched = st.prefetched;
    out->demand_uploads = st.demand_uploads;
    out->served_from_source = st.served_from_source;
    out->peak_prefetch_bytes = st.peak_prefetch_bytes;
    out->pinned_allocations = st.pinned_allocations;
    out->device_allocations = st.device_allocations;
    out->pending_waits = st.pending_waits;
  };
  return t;
}

}  // namespace offloadkit::plugin::detail

namespace offloadkit::plugin {

void check_stash_config(const stash::stash_config& c, int device_count,
                        std::uint64_t capabilities) {
  stash::check_config(c, device_count);
  const bool device_only = (capabilities & OKIT_STASH_CAP_DEVICE_TIER_ONLY) != 0;
  const bool pinned_only = (capabilities & OKIT_STASH_CAP_PINNED_TIER_ONLY) != 0;
  OFFLOADKIT_EXPECTS(!device_only || c.pinned_pages == 0, out_of_range,
                     "stash_config.pinned_pages = ", c.pinned_pages,
                     " is outside [0, 0] (the stash has device pages only)");
  OFFLOADKIT_EXPECTS(!pinned_only || c.device_pages == 0, out_of_range,
                     "stash_config.device_pages = ", c.device_pages,
                     " is outside [0, 0] (the stash has pinned pages only)");
}

}  // namespace offloadkit::plugin
