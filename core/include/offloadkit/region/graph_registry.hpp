// The graphs a region keeps for its users: register_graph captures one, replay re-issues it, and
// unregister_graph destroys it. Every region implementation keeps them the same way, so they
// share this registry; an implementation whose address moves re-captures them all (recapture).
#pragma once

#include <cstddef>
#include <map>

#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"

namespace offloadkit::region::detail {

class graph_registry {
 public:
  /// `owner` names the region in messages ("vmm_region"); a string literal.
  graph_registry(executor& ex, const char* owner) noexcept : ex_(&ex), owner_(owner) {}
  graph_registry(const graph_registry&) = delete;
  graph_registry& operator=(const graph_registry&) = delete;
  ~graph_registry() { clear(); }

  /// Captures `fn` on `s` with the region at `base` and keeps it (with `fn`, for recapture).
  graph_id add(capture_fn fn, void* base, stream_ref s);
  /// Replays graph `g` on `s`; throws out_of_range when `g` is not registered.
  void replay(graph_id g, stream_ref s);
  /// Destroys graph `g`; unknown ids are ignored.
  void remove(graph_id g) noexcept;
  /// Captures every graph again with the region at `base`. All or nothing: when a capture fails,
  /// the graphs captured before stay registered and the new ones are destroyed.
  void recapture(void* base, stream_ref s);
  /// Destroys every graph.
  void clear() noexcept;

  /// Graph captures made so far, re-captures included.
  [[nodiscard]] std::size_t captures() const noexcept { return captures_; }
  [[nodiscard]] std::size_t size() const noexcept { return graphs_.size(); }

 private:
  struct registered {
    capture_fn fn;
    graph_ref graph;
  };

  executor* ex_;
  const char* owner_;
  std::map<graph_id, registered> graphs_;
  graph_id next_id_ = 1;
  std::size_t captures_ = 0;
};

}  // namespace offloadkit::region::detail
