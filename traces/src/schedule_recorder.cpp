// The schedule recorder: collects steps and row counts reported during a run.
#include "offloadkit/traces/schedule_recorder.hpp"

#include <cstdint>

namespace offloadkit::traces {

schedule_recorder::schedule_recorder(schedule_shape shape) {
  s_.name = std::move(shape.name);
  s_.pipeline_size = shape.pipeline_size;
  s_.pipeline_rank = shape.pipeline_rank;
  s_.virtual_stages = shape.virtual_stages;
  s_.layers = shape.layers;
  s_.microbatches = shape.microbatches;
  s_.max_rows = shape.max_rows;
  s_.page_rows = shape.page_rows;
  if (shape.row_bytes.size() == 1 && shape.layers > 1 && shape.layers <= max_layers) {
    s_.row_bytes.assign(static_cast<std::size_t>(shape.layers), shape.row_bytes.front());
  } else {
    s_.row_bytes = std::move(shape.row_bytes);
  }
  // Validate the shape alone (no steps yet): sizes first, so key_count() is safe to allocate.
  schedule probe = s_;
  if (probe.virtual_stages >= 1 && probe.layers >= 1 && probe.microbatches >= 1 &&
      probe.virtual_stages <= max_virtual_stages && probe.layers <= max_layers &&
      probe.microbatches <= max_microbatches && probe.key_count() <= max_keys) {
    s_.rows.assign(s_.key_count(), 0);
    probe.rows = s_.rows;
  }
  try {
    validate(probe);
  } catch (const schedule_error& e) {
    // An empty step list fails only with "never stashed"; anything else is a bad shape.
    if (e.where() != "/steps") throw;
  }
}

void schedule_recorder::check_key(schedule_key k) const {
  OFFLOADKIT_EXPECTS(k.vp >= 0 && k.vp < s_.virtual_stages, out_of_range, "vp = ", k.vp,
                     " is outside [0, ", s_.virtual_stages, ")");
  OFFLOADKIT_EXPECTS(k.layer >= 0 && k.layer < s_.layers, out_of_range, "layer = ", k.layer,
                     " is outside [0, ", s_.layers, ")");
  OFFLOADKIT_EXPECTS(k.microbatch >= 0 && k.microbatch < s_.microbatches, out_of_range,
                     "microbatch = ", k.microbatch, " is outside [0, ", s_.microbatches, ")");
}

void schedule_recorder::record_stash(schedule_key k) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  s_.steps.push_back({schedule_op::stash, k, s_.steps.size()});
}

void schedule_recorder::record_restore(schedule_key k) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  s_.steps.push_back({schedule_op::restore, k, s_.steps.size()});
}

void schedule_recorder::set_rows(schedule_key k, std::uint32_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  OFFLOADKIT_EXPECTS(rows <= s_.max_rows, out_of_range, "rows = ", rows,
                     " exceeds max_rows = ", s_.max_rows);
  s_.rows[s_.key_index(k)] = rows;
}

void schedule_recorder::set_pools(std::uint64_t device_pages, std::uint64_t pinned_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.pools = schedule_pools{device_pages, pinned_pages};
}

schedule schedule_recorder::finish() const {
  std::lock_guard<std::mutex> lock(mu_);
  validate(s_);
  return s_;
}

void schedule_recorder::write(const std::string& path) const { write_schedule(finish(), path); }

std::size_t schedule_recorder::steps_recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_.steps.size();
}

}  // namespace offloadkit::traces
