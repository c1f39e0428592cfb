// with_executor_graphs(): offloadkit's graphs on a region that keeps none of its own.
#include <memory>
#include <utility>

#include "offloadkit/error.hpp"
#include "offloadkit/region/graph_registry.hpp"
#include "offloadkit/region/region.hpp"

namespace offloadkit::region {
namespace {

class executor_graph_region final : public offload_region {
 public:
  executor_graph_region(executor& ex, std::unique_ptr<offload_region> inner)
      : inner_(std::move(inner)), graphs_(ex, "with_executor_graphs") {
    OFFLOADKIT_EXPECTS(inner_ != nullptr, logic_error,
                       "with_executor_graphs: no region to give graphs to");
  }

 private:
  [[nodiscard]] void* do_data() const noexcept override { return inner_->data(); }
  [[nodiscard]] std::size_t do_size() const noexcept override { return inner_->size(); }
  [[nodiscard]] int do_device() const noexcept override { return inner_->device(); }
  [[nodiscard]] region_state do_state() const noexcept override { return inner_->state(); }
  [[nodiscard]] bool do_address_stable() const noexcept override {
    return inner_->address_stable();
  }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return inner_->footprint(); }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return graphs_.captures(); }

  void do_pause(pause_mode mode, stream_ref s) override { inner_->pause(mode, s); }
  void do_resume(stream_ref s) override { inner_->resume(s); }
  // The default swap (pause this, then resume `in`) goes through the calls above, and through
  // `in`'s own when `in` is decorated too.

  /// Captures every graph again where the region moved since they were captured.
  void catch_up(stream_ref s) {
    if (graphs_.size() > 0 && base_ != data()) graphs_.recapture(data(), s);
    base_ = data();
  }
  graph_id do_register_graph(capture_fn fn, stream_ref s) override {
    catch_up(s);
    return graphs_.add(std::move(fn), data(), s);
  }
  void do_replay(graph_id g, stream_ref s) override {
    catch_up(s);
    graphs_.replay(g, s);
  }
  void do_unregister_graph(graph_id g) noexcept override { graphs_.remove(g); }

  std::unique_ptr<offload_region> inner_;
  /// Declared after inner_, so destroyed before it: the graphs go before the memory they use.
  detail::graph_registry graphs_;
  void* base_ = nullptr;  ///< where the registered graphs were captured
};

}  // namespace

std::unique_ptr<offload_region> with_executor_graphs(executor& ex,
                                                     std::unique_ptr<offload_region> inner) {
  return std::make_unique<executor_graph_region>(ex, std::move(inner));
}

}  // namespace offloadkit::region
