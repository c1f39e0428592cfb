// Schedule files <-> the paged-stash feature, and replay through its implementations.
#include "offloadkit/traces/stash_bridge.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "offloadkit/resources.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "offloadkit/stash/planner.hpp"

namespace offloadkit::traces {
namespace {

std::uint64_t widest_row(const schedule& s) {
  std::uint64_t m = 0;
  for (auto b : s.row_bytes) m = std::max(m, b);
  return m;
}

stash::stash_key key_of(schedule_key k) {
  return stash::make_key(static_cast<std::uint64_t>(k.vp), static_cast<std::uint64_t>(k.layer),
                         static_cast<std::uint64_t>(k.microbatch));
}

inline std::uint64_t pattern_word(std::uint64_t key, std::uint64_t word) {
  std::uint64_t z = key * 0x9E3779B97F4A7C15ull + word + 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_pattern(unsigned char* p, std::uint64_t bytes, std::uint64_t key) {
  for (std::uint64_t w = 0; w * 8 < bytes; ++w) {
    const std::uint64_t v = pattern_word(key, w);
    std::memcpy(p + w * 8, &v, std::min<std::uint64_t>(8, bytes - w * 8));
  }
}

}  // namespace

stash::workload to_workload(const schedule& s) {
  stash::workload w;
  w.sched.vp_stages = static_cast<std::uint32_t>(s.virtual_stages);
  w.sched.layers = static_cast<std::uint32_t>(s.layers);
  w.sched.microbatches = static_cast<std::uint32_t>(s.microbatches);
  w.sched.steps.reserve(s.steps.size());
  for (const auto& st : s.steps) {
    w.sched.steps.push_back(
        {st.op == schedule_op::stash ? stash::step_kind::stash : stash::step_kind::restore,
         key_of(st.key)});
  }
  for (int vp = 0; vp < s.virtual_stages; ++vp) {
    for (int l = 0; l < s.layers; ++l) {
      for (int mb = 0; mb < s.microbatches; ++mb) {
        w.rows.push_back({key_of({vp, l, mb}), s.rows_of({vp, l, mb})});
      }
    }
  }
  w.row_bytes = widest_row(s);
  w.max_rows = s.max_rows;
  return w;
}

schedule from_workload(const stash::workload& w, std::uint32_t page_rows, std::string name) {
  schedule s;
  s.name = std::move(name);
  s.virtual_stages = static_cast<int>(w.sched.vp_stages);
  s.layers = static_cast<int>(w.sched.layers);
  s.microbatches = static_cast<int>(w.sched.microbatches);
  s.row_bytes.assign(static_cast<std::size_t>(s.layers), w.row_bytes);
  s.max_rows = static_cast<std::uint32_t>(w.max_rows);
  s.page_rows = page_rows;
  s.rows.assign(s.key_count(), 0);
  for (const auto& kr : w.rows) {
    const schedule_key k{static_cast<int>(kr.key.vp), static_cast<int>(kr.key.layer),
                         static_cast<int>(kr.key.microbatch)};
    if (k.vp < s.virtual_stages && k.layer < s.layers && k.microbatch < s.microbatches) {
      s.rows[s.key_index(k)] = static_cast<std::uint32_t>(kr.rows);
    }
  }
  for (std::size_t i = 0; i < w.sched.steps.size(); ++i) {
    const auto& st = w.sched.steps[i];
    s.steps.push_back(
        {st.kind == stash::step_kind::stash ? schedule_op::stash : schedule_op::restore,
         {static_cast<int>(st.key.vp), static_cast<int>(st.key.layer),
          static_cast<int>(st.key.microbatch)},
         i});
  }
  validate(s);
  return s;
}

std::unique_ptr<stash::stash_interface> make_stash(const std::string& impl, executor& ex,
                                                   const stash::stash_config& cfg, stream_ref s) {
  if (impl == "reference") return std::make_unique<stash::eager_stash>(ex, cfg, s);
  if (impl == "optimized") return std::make_unique<stash::paged_stash>(ex, cfg, s);
  throw std::invalid_argument("implementation '" + impl + "' is not one of: reference, optimized");
}

replay_result replay_stash(const schedule& s, stash::stash_interface& impl, executor& ex,
                           const replay_options& o) {
  const stash::stash_config& cfg = impl.config();
  const std::optional<schedule_pools> pools = schedule_pools{cfg.device_pages, cfg.pinned_pages};
  replay_result r = plan(s, pools);
  const std::uint64_t row = cfg.row_bytes;
  const std::uint64_t full = std::uint64_t{s.max_rows} * row;
  stream st(ex);
  buffer staging(ex, memory_kind::pinned, std::max<std::uint64_t>(full, 8));
  buffer rows_dev(ex, memory_kind::device, sizeof(std::uint64_t));
  buffer rows_host(ex, memory_kind::pinned, sizeof(std::uint64_t));
  std::vector<unsigned char> expect(full);
  // Keys the planner says overflow hold nothing; their restores are not compared.
  std::vector<bool> dropped(s.key_count(), false);
  {
    std::vector<stash::stash_key> d;
    const auto w = to_workload(s);
    (void)stash::predict_overflow(w, s.page_rows, cfg.device_pages, cfg.pinned_pages, &d);
    for (const auto& k : d) {
      dropped[s.key_index({static_cast<int>(k.vp), static_cast<int>(k.layer),
                           static_cast<int>(k.microbatch)})] = true;
    }
  }
  const std::size_t every = std::max<std::size_t>(1, s.steps.size() / 20);
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const schedule_step& step = s.steps[i];
    const std::size_t ki = s.key_index(step.key);
    const std::uint64_t rows = s.rows_of(step.key);
    const std::uint64_t bytes = rows * row;
    if (step.op == schedule_op::stash) {
      buffer src(ex, memory_kind::device, full);
      fill_pattern(staging.as<unsigned char>(), full, ki);
      ex.copy(src.data(), staging.data(), full, st);
      *rows_host.as<std::uint64_t>() = rows;
      ex.copy(rows_dev.data(), rows_host.data(), sizeof(std::uint64_t), st);
      impl.stash(key_of(step.key), src.data(), rows_dev.as<std::uint64_t>(), st);
      // The framework reuses the buffer right after: restores must come from the stash.
      ex.fill(src.data(), 0x5A, full, st);
      st.synchronize();
    } else {
      buffer dst(ex, memory_kind::device, std::max<std::uint64_t>(full, 1));
      ex.fill(dst.data(), 0xC3, full, st);
      ex.fill(rows_dev.data(), 0xFF, sizeof(std::uint64_t), st);
      impl.restore(key_of(step.key), dst.data(), rows_dev.as<std::uint64_t>(), st);
      ex.copy(staging.data(), dst.data(), full, st);
      ex.copy(rows_host.data(), rows_dev.data(), sizeof(std::uint64_t), st);
      st.synchronize();
      if (!dropped[ki]) {
        fill_pattern(expect.data(), bytes, ki);
        std::uint64_t bad = 0, first = 0;
        for (std::uint64_t b = bytes; b > 0; --b) {
          if (expect[b - 1] != staging.as<unsigned char>()[b - 1]) {
            ++bad;
            first = b - 1;
          }
        }
        const std::uint64_t got_rows = *rows_host.as<std::uint64_t>();
        if ((bad != 0 || got_rows != rows) && r.first_mismatch.empty()) {
          r.first_mismatch = "key " + stash::to_string(key_of(step.key)) + " at /steps/" +
                             std::to_string(step.source_index) + ": " + std::to_string(bad) +
                             " of " + std::to_string(bytes) + " bytes differ" +
                             (bad ? ", first at byte " + std::to_string(first) : "") +
                             "; row count " + std::to_string(got_rows) + " (expected " +
                             std::to_string(rows) + ")";
        }
        r.mismatches += bad + (got_rows != rows ? 1 : 0);
        r.bytes_checked += bytes;
        ++r.keys_checked;
      }
    }
    if (o.progress && ((i + 1) % every == 0 || i + 1 == s.steps.size())) {
      o.progress(i + 1, s.steps.size());
    }
  }
  const stash::stash_status status = impl.status(st);
  if (r.overflow) {
    const bool named = status.code == stash::status_code::overflow &&
                       status.key == key_of(r.overflow->key) &&
                       status.needed == r.overflow->pages_needed;
    if (!named) {
      ++r.mismatches;
      if (r.first_mismatch.empty()) {
        r.first_mismatch = "status word says '" + status.message() +
                           "' but the plan's first overflow is key " +
                           stash::to_string(key_of(r.overflow->key)) + " needing " +
                           std::to_string(r.overflow->pages_needed) + " pages";
      }
    }
  } else if (!status.ok()) {
    ++r.mismatches;
    if (r.first_mismatch.empty()) r.first_mismatch = "unexpected status: " + status.message();
  }
  return r;
}

}  // namespace offloadkit::traces
