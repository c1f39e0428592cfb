// The graph registry shared by the region implementations.
#include "offloadkit/region/graph_registry.hpp"

#include <utility>
#include <vector>

#include "offloadkit/error.hpp"

namespace offloadkit::region::detail {

graph_id graph_registry::add(capture_fn fn, void* base, stream_ref s) {
  const graph_ref g = capture_graph(*ex_, fn, base, s);
  ++captures_;
  const graph_id id = next_id_++;
  graphs_.emplace(id, registered{std::move(fn), g});
  return id;
}

void graph_registry::replay(graph_id g, stream_ref s) {
  auto it = graphs_.find(g);
  OFFLOADKIT_EXPECTS(it != graphs_.end(), out_of_range, owner_, "::replay: graph ", g,
                     " is not registered (ids are in [1, ", next_id_, "))");
  ex_->replay(it->second.graph, s);
}

void graph_registry::remove(graph_id g) noexcept {
  auto it = graphs_.find(g);
  if (it == graphs_.end()) return;
  ex_->destroy_graph(it->second.graph);
  graphs_.erase(it);
}

void graph_registry::recapture(void* base, stream_ref s) {
  std::vector<std::pair<registered*, graph_ref>> fresh;
  // Reserved first, so that keeping a graph just captured never fails.
  fresh.reserve(graphs_.size());
  try {
    for (auto& [id, r] : graphs_) {
      fresh.emplace_back(&r, capture_graph(*ex_, r.fn, base, s));
      ++captures_;
    }
  } catch (...) {
    // Nothing replaced yet: the graphs on the old address stay, the new ones go, and the caller
    // hears of the failure.
    for (auto& [r, g] : fresh) ex_->destroy_graph(g);
    throw;
  }
  for (auto& [r, g] : fresh) {
    ex_->destroy_graph(r->graph);
    r->graph = g;
  }
}

void graph_registry::clear() noexcept {
  for (auto& [id, r] : graphs_) ex_->destroy_graph(r.graph);
  graphs_.clear();
}

}  // namespace offloadkit::region::detail
