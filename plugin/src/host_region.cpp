// A plugin's graph-stable region behind offload_region.
#include <functional>

#include "host_common.hpp"

namespace offloadkit::plugin {
namespace {

class plugin_region final : public region::offload_region {
 public:
  plugin_region(std::shared_ptr<const library> lib, executor& ex, const region::region_config& cfg)
      : obj_(std::move(lib), ex, "region"), t_(obj_.lib->description().region) {
    okit_region_config c{};
    c.bytes = cfg.bytes;
    c.device = cfg.device;
    c.chunk_bytes = cfg.chunk_bytes;
    c.pause_mode = !cfg.fixed_mode                                  ? -1
                   : *cfg.fixed_mode == region::pause_mode::discard ? OKIT_PAUSE_DISCARD
                                                                    : OKIT_PAUSE_PRESERVE;
    call_checked(obj_.context, "create", t_->create, obj_.table.get(), &c, &obj_.self);
    obj_.set_teardown(*t_, OKIT_REGION_HAS(t_, close));
  }

 private:
  [[nodiscard]] okit_region_info info() const noexcept {
    okit_region_info i{};
    t_->info(obj_.self, &i);
    return i;
  }
  [[nodiscard]] void* do_data() const noexcept override { return info().data; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return info().size; }
  [[nodiscard]] int do_device() const noexcept override { return info().device; }
  [[nodiscard]] region::region_state do_state() const noexcept override {
    switch (info().state) {
      case OKIT_REGION_ACTIVE:
        return region::region_state::active;
      case OKIT_REGION_PAUSED:
        return region::region_state::paused;
      default:
        return region::region_state::partial;
    }
  }
  [[nodiscard]] bool do_address_stable() const noexcept override {
    return region_capabilities_of(t_->capabilities).address_stable;
  }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return info().footprint; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return info().captures; }
  void do_pause(region::pause_mode mode, stream_ref s) override {
    const std::int32_t m =
        mode == region::pause_mode::discard ? OKIT_PAUSE_DISCARD : OKIT_PAUSE_PRESERVE;
    call_checked_self(obj_.context, "pause", t_->pause, obj_.self, m, to_c(s));
  }
  void do_resume(stream_ref s) override {
    call_checked_self(obj_.context, "resume", t_->resume, obj_.self, to_c(s));
  }
  // A swap crosses the table when both regions are this table's objects and it has swap.
  void do_swap(region::offload_region& in, region::pause_mode mode, stream_ref s) override {
    auto* other = dynamic_cast<plugin_region*>(&in);
    if (other == nullptr || other->t_ != t_ || !OKIT_REGION_HAS(t_, swap)) {
      offload_region::do_swap(in, mode, s);
      return;
    }
    const std::int32_t m =
        mode == region::pause_mode::discard ? OKIT_PAUSE_DISCARD : OKIT_PAUSE_PRESERVE;
    call_checked_self(obj_.context, "swap", t_->swap, obj_.self, other->obj_.self, m, to_c(s));
  }
  region::graph_id do_register_graph(region::capture_fn fn, stream_ref s) override {
    // A table without graphs declares OKIT_REGION_CAP_NO_GRAPHS, and its regions reach callers
    // inside with_executor_graphs, which never calls these.
    expect_graphs("register_graph");
    okit_capture c{};
    c.ctx = new region::capture_fn(std::move(fn));
    c.call = [](void* ctx, okit_error* err, void* base, okit_stream st) noexcept {
      return guard(err, [&] { (*static_cast<region::capture_fn*>(ctx))(base, from_c(st)); });
    };
    c.drop = [](void* ctx) noexcept { delete static_cast<region::capture_fn*>(ctx); };
    std::uint64_t id = 0;
    // The plugin owns c from here, also when registration fails.
    call_checked_self(obj_.context, "register_graph", t_->register_graph, obj_.self, c, &id,
                      to_c(s));
    return id;
  }
  void do_replay(region::graph_id g, stream_ref s) override {
    expect_graphs("replay");
    call_checked_self(obj_.context, "replay", t_->replay, obj_.self, g, to_c(s));
  }
  void do_unregister_graph(region::graph_id g) noexcept override {
    if (t_->unregister_graph != nullptr) t_->unregister_graph(obj_.self, g);
  }
  void expect_graphs(const char* entry) const {
    if (region_capabilities_of(t_->capabilities).graphs != testing::region_graphs::none) return;
    OFFLOADKIT_FAIL(unsupported_error, obj_.context, ": ", entry,
                    ": the table declares OKIT_REGION_CAP_NO_GRAPHS (wrap its regions with "
                    "region::with_executor_graphs)");
  }

  detail::plugin_object obj_;
  const okit_region_vtable* t_;
};

}  // namespace

std::optional<testing::region_implementation> region_of(const std::shared_ptr<const library>& lib) {
  const okit_region_vtable* t = lib->description().region;
  if (t == nullptr) return std::nullopt;
  testing::region_implementation impl;
  impl.name = detail::implementation_name(*lib, t->implementation);
  impl.caps = region_capabilities_of(t->capabilities);
  impl.support = support_of(t->capabilities);
  impl.make = [lib](executor& ex, region::region_config c) {
    return std::unique_ptr<region::offload_region>(std::make_unique<plugin_region>(lib, ex, c));
  };
  return impl;
}

}  // namespace offloadkit::plugin
