// A plugin's activation offloader behind activation::offloader.
#include <algorithm>

#include "host_common.hpp"

namespace offloadkit::plugin {
namespace {

class plugin_activation final : public activation::offloader {
 public:
  plugin_activation(std::shared_ptr<const library> lib, executor& ex,
                    const activation::offload_options& o)
      : obj_(std::move(lib), ex, "activation"), t_(obj_.lib->description().activation) {
    okit_offload_options c{};
    c.keep_threshold = o.keep_threshold;
    c.prefetch_bytes = o.prefetch_bytes;
    c.prefetch_layers = o.prefetch_layers;
    c.max_pending_bytes = o.max_pending_bytes;
    call_checked(obj_.context, "create", t_->create, obj_.table.get(), &c, &obj_.self);
    obj_.set_teardown(*t_, OKIT_ACTIVATION_HAS(t_, close));
    name_ = detail::implementation_name(*obj_.lib, t_->implementation);
  }

 private:
  activation::handle do_pack(activation::tensor t, stream_ref s) override {
    OFFLOADKIT_EXPECTS(t.shape.size() <= OKIT_MAX_DIMS, out_of_range, obj_.context,
                       " pack: a tensor of ", t.shape.size(),
                       " dimensions is outside what the ABI carries, [0, ", OKIT_MAX_DIMS, "]");
    okit_activation_tensor c{};
    c.data = t.data;
    c.bytes = t.bytes;
    c.device = t.device;
    c.dtype = static_cast<std::int32_t>(t.type);
    c.ndim = static_cast<std::uint32_t>(t.shape.size());
    std::copy(t.shape.begin(), t.shape.end(), c.shape);
    c.release = to_c_callback(std::move(t.release));
    std::uint64_t h = 0;
    okit_error err{};
    const okit_status st = t_->pack(obj_.self, &err, &c, &h, to_c(s));
    if (st != OKIT_OK) {
#if defined(OFFLOADKIT_PLANTED_WRAPPER_RELEASE_ON_FAILED_PACK)
      // A planted bug, compiled only into plugin/tests' planted host: the source goes back to
      // its owner although the pack failed and the caller still owns it.
      if (c.release.call != nullptr) c.release.call(c.release.ctx);
#endif
      // The plugin did not take the release callback: drop our copy without calling it (the
      // caller's tensor still owns the buffer).
      if (c.release.drop != nullptr) c.release.drop(c.release.ctx);
      if (err.code == OKIT_OK) err.code = st;
      throw_error(err, obj_.context + " pack");
    }
    return activation::handle{h};
  }
  activation::tensor do_unpack(activation::handle h, stream_ref s) override {
    okit_activation_tensor c{};
    call_checked_self(obj_.context, "unpack", t_->unpack, obj_.self, h.id, &c, to_c(s));
    activation::tensor t;
    t.release = from_c_callback(c.release);
    OFFLOADKIT_EXPECTS(c.ndim <= OKIT_MAX_DIMS, out_of_range, obj_.context, " unpack: ndim ",
                       c.ndim, " is outside [0, ", OKIT_MAX_DIMS, "]");
    OFFLOADKIT_EXPECTS(c.dtype >= OKIT_DTYPE_U8 && c.dtype <= OKIT_DTYPE_I64, out_of_range,
                       obj_.context, " unpack: dtype ", c.dtype, " is outside [0, 7]");
    t.data = c.data;
    t.bytes = c.bytes;
    t.device = c.device;
    t.type = static_cast<activation::dtype>(c.dtype);
    t.shape.assign(c.shape, c.shape + c.ndim);
    return t;
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    call_checked_self(obj_.context, "forward_layer_end", t_->forward_layer_end, obj_.self, layer,
                      to_c(s));
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    call_checked_self(obj_.context, "backward_layer_begin", t_->backward_layer_begin, obj_.self,
                      layer, to_c(s));
  }
  void do_synchronize() override {
    call_checked_self(obj_.context, "synchronize", t_->synchronize, obj_.self);
  }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return t_->keep_threshold(obj_.self);
  }
  [[nodiscard]] activation::offload_stats do_stats() const override {
    okit_offload_stats c{};
    t_->stats(obj_.self, &c);
    activation::offload_stats st;
    st.packed = c.packed;
    st.kept = c.kept;
    st.offloaded_bytes = c.offloaded_bytes;
    st.restored_bytes = c.restored_bytes;
    st.prefetched = c.prefetched;
    st.demand_uploads = c.demand_uploads;
    st.served_from_source = c.served_from_source;
    st.peak_prefetch_bytes = c.peak_prefetch_bytes;
    st.pinned_allocations = c.pinned_allocations;
    st.device_allocations = c.device_allocations;
    st.pending_waits = c.pending_waits;
    return st;
  }
  [[nodiscard]] std::string do_name() const override { return name_; }

  detail::plugin_object obj_;
  const okit_activation_vtable* t_;
  std::string name_;
};

}  // namespace

std::optional<testing::activation_implementation> activation_of(
    const std::shared_ptr<const library>& lib) {
  const okit_activation_vtable* t = lib->description().activation;
  if (t == nullptr) return std::nullopt;
  testing::activation_implementation impl;
  impl.name = detail::implementation_name(*lib, t->implementation);
  impl.caps = activation_capabilities_of(t->capabilities);
  impl.support = support_of(t->capabilities);
  impl.make = [lib](executor& ex, const activation::offload_options& o) {
    return std::unique_ptr<activation::offloader>(std::make_unique<plugin_activation>(lib, ex, o));
  };
  return impl;
}

}  // namespace offloadkit::plugin
