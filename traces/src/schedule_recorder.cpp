// The schedule recorder: collects steps and row counts reported during a run.
#include "offloadkit/traces/schedule_recorder.hpp"

#include <algorithm>
#include <cstdint>

namespace offloadkit::traces {

schedule_recorder::schedule_recorder(schedule_shape shape) {
  f_.name = std::move(shape.name);
  f_.pipeline_size = shape.pipeline_size;
  f_.pipeline_rank = shape.pipeline_rank;
  stash::schedule& s = f_.work.sched;
  s.vp_stages = shape.virtual_stages;
  s.layers = shape.layers;
  s.microbatches = shape.microbatches;
  f_.work.max_rows = shape.max_rows;
  f_.page_rows = shape.page_rows;
  // The shape alone (no steps yet) must be valid; "never stashed" is the only complaint an empty
  // step list may cause.
  if (auto e = stash::validate(s); e && e->where() != "/steps") throw *e;
  if (shape.row_bytes.empty()) throw schedule_error("/row_bytes", "no row size given");
  if (shape.row_bytes.size() != 1 && shape.row_bytes.size() != s.layers) {
    throw schedule_error("/row_bytes", "has " + std::to_string(shape.row_bytes.size()) +
                                           " entries; expected one per layer (" +
                                           std::to_string(s.layers) + ") or one for all");
  }
  f_.work.row_bytes = *std::max_element(shape.row_bytes.begin(), shape.row_bytes.end());
  if (shape.row_bytes.size() > 1 &&
      std::any_of(shape.row_bytes.begin(), shape.row_bytes.end(),
                  [&](std::uint64_t b) { return b != shape.row_bytes.front(); })) {
    f_.work.layer_row_bytes = shape.row_bytes;
  }
  rows_.assign(stash::key_count(s), 0);
  schedule_file probe = f_;
  for (std::uint32_t v = 0; v < s.vp_stages; ++v) {
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      probe.work.rows.push_back({{v, l, 0}, 0});
    }
  }
  // Validate sizes (row bytes, max_rows, page rows, pipeline) on a one-microbatch probe whose
  // every key is stashed and restored, so that only the sizes can fail.
  probe.work.sched.microbatches = 1;
  for (const auto& kr : probe.work.rows)
    probe.work.sched.steps.push_back({stash::step_kind::stash, kr.key});
  for (std::size_t i = probe.work.rows.size(); i-- > 0;) {
    probe.work.sched.steps.push_back({stash::step_kind::restore, probe.work.rows[i].key});
  }
  validate(probe);
}

void schedule_recorder::check_key(stash::stash_key k) const {
  const stash::schedule& s = f_.work.sched;
  OFFLOADKIT_EXPECTS(k.vp < s.vp_stages, out_of_range, "vp = ", k.vp, " is outside [0, ",
                     s.vp_stages, ")");
  OFFLOADKIT_EXPECTS(k.layer < s.layers, out_of_range, "layer = ", k.layer, " is outside [0, ",
                     s.layers, ")");
  OFFLOADKIT_EXPECTS(k.microbatch < s.microbatches, out_of_range, "microbatch = ", k.microbatch,
                     " is outside [0, ", s.microbatches, ")");
}

void schedule_recorder::record_stash(stash::stash_key k) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  f_.work.sched.steps.push_back({stash::step_kind::stash, k});
}

void schedule_recorder::record_restore(stash::stash_key k) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  f_.work.sched.steps.push_back({stash::step_kind::restore, k});
}

void schedule_recorder::set_rows(stash::stash_key k, std::uint64_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  OFFLOADKIT_EXPECTS(rows <= f_.work.max_rows, out_of_range, "rows = ", rows,
                     " is outside [0, max_rows = ", f_.work.max_rows, "]");
  rows_[stash::key_index(f_.work.sched, k)] = rows;
}

void schedule_recorder::set_pools(std::uint64_t device_pages, std::uint64_t pinned_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto lim = stash::schedule_limits::pool_pages;
  if (device_pages > lim || pinned_pages > lim - device_pages) {
    throw schedule_error("/pools", "device_pages + pinned_pages = " + std::to_string(device_pages) +
                                       " + " + std::to_string(pinned_pages) + " is outside [0, " +
                                       std::to_string(lim) + "]");
  }
  f_.pools = stash::tier_pools{device_pages, pinned_pages};
}

schedule_file schedule_recorder::finish() const {
  std::lock_guard<std::mutex> lock(mu_);
  schedule_file out = f_;
  const stash::schedule& s = f_.work.sched;
  std::size_t i = 0;
  out.work.rows.reserve(rows_.size());
  for (std::uint32_t v = 0; v < s.vp_stages; ++v) {
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      for (std::uint32_t m = 0; m < s.microbatches; ++m)
        out.work.rows.push_back({{v, l, m}, rows_[i++]});
    }
  }
  validate(out);
  return out;
}

void schedule_recorder::write(const std::string& path) const { write_schedule(finish(), path); }

std::size_t schedule_recorder::steps_recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return f_.work.sched.steps.size();
}

}  // namespace offloadkit::traces
