// A plugin's coalesced arena behind arena::offloader.
#include "host_common.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::plugin {
namespace {

class plugin_arena final : public arena::offloader {
 public:
  plugin_arena(std::shared_ptr<const library> lib, executor& ex)
      : obj_(std::move(lib), ex, "arena"), t_(obj_.lib->description().arena), ex_(&ex) {
    call_checked(obj_.context, "create", t_->create, obj_.table.get(), &obj_.self);
    obj_.set_teardown(*t_, OKIT_ARENA_HAS(t_, close));
    name_ = detail::implementation_name(*obj_.lib, t_->implementation);
  }

 private:
  static const okit_tensor* tensors_of(arena::tensor_set_view set) {
    static_assert(sizeof(okit_tensor) == sizeof(arena::device_tensor),
                  "okit_tensor and arena::device_tensor share one layout");
    return reinterpret_cast<const okit_tensor*>(set.tensors);
  }
  event do_offload(arena::tensor_set_view set, stream_ref s) override {
    return move_set("offload", t_->offload, set, s);
  }
  event do_reload(arena::tensor_set_view set, stream_ref s) override {
    return move_set("reload", t_->reload, set, s);
  }
  /// offload and reload: the set out, the completion event back, created through the lent
  /// executor (which is ex_) and adopted here.
  event move_set(const char* entry, decltype(okit_arena_vtable::offload) fn,
                 arena::tensor_set_view set, stream_ref s) {
    okit_event done{};
    call_checked_self(obj_.context, entry, fn, obj_.self, tensors_of(set), set.count, &done,
                      to_c(s));
    return event(*ex_, from_c(done));
  }
  void do_release() noexcept override { t_->release(obj_.self); }
  [[nodiscard]] okit_arena_info info() const noexcept {
    okit_arena_info i{};
    t_->info(obj_.self, &i);
    return i;
  }
  [[nodiscard]] bool do_released() const noexcept override { return info().released != 0; }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return info().holds_copy != 0; }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return info().host_bytes; }
  [[nodiscard]] arena::offload_promises do_promises() const noexcept override {
    return arena_promises_of(t_->capabilities);
  }
  [[nodiscard]] std::string do_name() const override { return name_; }

  detail::plugin_object obj_;
  const okit_arena_vtable* t_;
  executor* ex_;
  std::string name_;
};

}  // namespace

std::optional<testing::arena_implementation> arena_of(const std::shared_ptr<const library>& lib) {
  const okit_arena_vtable* t = lib->description().arena;
  if (t == nullptr) return std::nullopt;
  testing::arena_implementation impl;
  impl.name = detail::implementation_name(*lib, t->implementation);
  impl.caps = arena_promises_of(t->capabilities);
  impl.support = support_of(t->capabilities);
  impl.make = [lib](executor& ex) {
    return std::unique_ptr<arena::offloader>(std::make_unique<plugin_arena>(lib, ex));
  };
  return impl;
}

}  // namespace offloadkit::plugin
