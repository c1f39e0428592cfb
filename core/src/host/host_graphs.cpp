// The host executor's graphs: capture records the operations issued to a stream, replay
// re-issues them.
#include "host_executor_impl.hpp"

namespace offloadkit {

// ---- graphs ------------------------------------------------------------------------------------

void host_executor::do_begin_capture(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("begin_capture");
  auto s = m.find_stream(ref, "begin_capture");
  std::lock_guard<std::mutex> lk(s->mu);
  OFFLOADKIT_EXPECTS(!s->capture, state_error, "host_executor::begin_capture: stream ", ref.native,
                     " is already capturing");
  s->capture = std::make_unique<graph_state>();
  s->capture->device = s->device;
}

graph_ref host_executor::do_end_capture(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("end_capture");
  auto s = m.find_stream(ref, "end_capture");
  std::unique_ptr<graph_state> g;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    OFFLOADKIT_EXPECTS(s->capture != nullptr, state_error, "host_executor::end_capture: stream ",
                       ref.native, " is not capturing");
    g = std::move(s->capture);
  }
  graph_ref out{g.get()};
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.graphs[g.get()] = std::move(g);
  return out;
}

void host_executor::do_replay(graph_ref g, stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("replay");
  std::vector<op> ops;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    auto it = m.graphs.find(g.native);
    OFFLOADKIT_EXPECTS(it != m.graphs.end(), logic_error, "host_executor::replay: graph ", g.native,
                       " is not a live graph of this executor");
    OFFLOADKIT_EXPECTS(it->second->device == ref.device, logic_error,
                       "host_executor::replay: the graph was captured on device ",
                       it->second->device, " and cannot run on a stream of device ", ref.device);
    ops = it->second->ops;  // queued copies: the graph may be destroyed right after replay
  }
  auto s = m.find_stream(ref, "replay");
  // One lock for the whole graph, so its operations stay contiguous on the stream.
  std::lock_guard<std::mutex> lk(s->mu);
  for (auto& o : ops) m.issue_locked(*s, std::move(o), "replay");
}

void host_executor::do_destroy_graph(graph_ref g) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.handle_mu);
  auto it = m.graphs.find(g.native);
  const bool destroy_graph_of_a_live_graph = it != m.graphs.end();
  OFFLOADKIT_ASSERT_NOEXCEPT(destroy_graph_of_a_live_graph);
  if (!destroy_graph_of_a_live_graph) return;
  m.graphs.erase(it);
}

}  // namespace offloadkit
