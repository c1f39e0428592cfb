// An arena of offloadkit's behind the arena interface, every entry forwarded to it: the planted
// arenas (planted_plugin.cpp, planted_driver_boxes.hpp) and the framework-cache arena
// (framework_cache_plugin.cpp) override only the entries they change, and their name.
#pragma once

#include <cstddef>

#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::planted {

template <class Inner>
class arena_wrapper : public arena::offloader {
 public:
  explicit arena_wrapper(executor& ex) : inner_(ex) {}

 protected:
  event do_offload(arena::tensor_set_view set, stream_ref s) override {
    return inner_.offload(set, s);
  }
  event do_reload(arena::tensor_set_view set, stream_ref s) override {
    return inner_.reload(set, s);
  }
  void do_release() noexcept override { inner_.release(); }
  [[nodiscard]] bool do_released() const noexcept override { return inner_.released(); }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return inner_.holds_copy(); }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return inner_.host_bytes(); }
  [[nodiscard]] arena::offload_promises do_promises() const noexcept override {
    return inner_.promises();
  }

  Inner inner_;
};

}  // namespace offloadkit::planted
