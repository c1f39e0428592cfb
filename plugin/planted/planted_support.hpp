// What every planted-bug plugin shares (planted_plugin.cpp, one plugin per OFFLOADKIT_PLANTED):
// the numbers that name the planted bugs, PLANTED (the one this plugin is built with), and the
// reference region behind the region interface that the planted regions wrap.
#pragma once

#include <utility>

#include "offloadkit/executor.hpp"
#include "offloadkit/region/reference_region.hpp"

#define OKIT_PLANTED_stash 1
#define OKIT_PLANTED_region 2
#define OKIT_PLANTED_arena 3
#define OKIT_PLANTED_activation 4
#define OKIT_PLANTED_crash 5
#define OKIT_PLANTED_region_leak 6
#define OKIT_PLANTED_close 7
#define OKIT_PLANTED_close_v1 8
#define OKIT_PLANTED_region_no_caller_wait 9
#define OKIT_PLANTED_region_pinned_per_pause 10
#define OKIT_PLANTED_activation_own_stream 11
#define OKIT_PLANTED_arena_pinned_per_offload 12
#define OKIT_PLANTED_region_own_stream_resume 13
#define OKIT_PLANTED_stash_own_stream_restore 14
#define OKIT_PLANTED_stash_one_tier 15
#define OKIT_PLANTED_stash_one_tier_lenient 16
#define OKIT_PLANTED_PASTE(x) OKIT_PLANTED_##x
#define OKIT_PLANTED_OF(x) OKIT_PLANTED_PASTE(x)
#define PLANTED OKIT_PLANTED_OF(OFFLOADKIT_PLANTED)

namespace offloadkit::planted {

namespace ok = ::offloadkit;

/// The reference region behind the region interface: every entry but pause and resume forwards to
/// it. The planted regions below differ in those two.
class reference_region_wrapper : public ok::region::offload_region {
 public:
  reference_region_wrapper(ok::executor& ex, const ok::region::region_config& c)
      : ex_(&ex), inner_(ex, c) {}

 protected:
  [[nodiscard]] void* do_data() const noexcept override { return inner_.data(); }
  [[nodiscard]] std::size_t do_size() const noexcept override { return inner_.size(); }
  [[nodiscard]] int do_device() const noexcept override { return inner_.device(); }
  [[nodiscard]] ok::region::region_state do_state() const noexcept override {
    return inner_.state();
  }
  [[nodiscard]] bool do_address_stable() const noexcept override { return inner_.address_stable(); }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return inner_.footprint(); }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return inner_.captures(); }
  ok::region::graph_id do_register_graph(ok::region::capture_fn fn, ok::stream_ref s) override {
    return inner_.register_graph(std::move(fn), s);
  }
  void do_replay(ok::region::graph_id g, ok::stream_ref s) override { inner_.replay(g, s); }
  void do_unregister_graph(ok::region::graph_id g) noexcept override { inner_.unregister_graph(g); }

  ok::executor* ex_;
  ok::region::reference_region inner_;
};

}  // namespace offloadkit::planted
