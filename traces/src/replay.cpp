// Schedule replay: the data replay through a stash implementation, and `offloadkit replay`'s
// planning, replay and report over several ranks' files.
#include "offloadkit/traces/replay.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "offloadkit/executor_choice.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/paged_stash.hpp"

namespace offloadkit::traces {
namespace {

using stash::step_kind;

/// The bytes every key stashes at every offset: distinct per key, so a restore that returns
/// another key's pages or a stale page is caught.
std::uint64_t pattern_word(std::uint64_t key, std::uint64_t word) {
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

std::string u64(std::uint64_t v) { return std::to_string(v); }

}  // namespace

std::unique_ptr<stash::stash_interface> make_stash(const std::string& impl, executor& ex,
                                                   const stash::stash_config& cfg, stream_ref s) {
  if (impl == "reference") return std::make_unique<stash::eager_stash>(ex, cfg, s);
  if (impl == "optimized") return std::make_unique<stash::paged_stash>(ex, cfg, s);
  throw std::invalid_argument("implementation '" + impl + "' is not one of: reference, optimized");
}

stash::stash_config config_for(const schedule_file& f, const stash::tier_pools& pools,
                               std::uint64_t data_row_bytes) {
  stash::stash_config cfg;
  cfg.row_bytes = data_row_bytes != 0 ? data_row_bytes : f.work.row_bytes;
  cfg.rows_per_page = f.page_rows;
  cfg.max_rows = f.work.max_rows;
  cfg.device_pages = pools.device_pages;
  cfg.pinned_pages = pools.pinned_pages;
  cfg.max_keys = std::max<std::size_t>(1, stash::key_count(f.work.sched));
  return cfg;
}

data_check replay_stash(const schedule_file& f, stash::stash_interface& impl, executor& ex,
                        const replay_options& o) {
  const stash::stash_config& cfg = impl.config();
  const stash::schedule& s = f.work.sched;
  // Keys the planner says overflow hold nothing; their restores are not compared.
  std::vector<stash::stash_key> dropped;
  const stash::capacity_plan plan = stash::plan(
      f.work, f.page_rows, stash::tier_pools{cfg.device_pages, cfg.pinned_pages}, &dropped);
  std::vector<bool> is_dropped(stash::key_count(s), false);
  for (const auto& k : dropped) is_dropped[stash::key_index(s, k)] = true;
  const std::vector<std::uint64_t> rows_by_key = stash::dense_rows(f.work);

  data_check r;
  const std::uint64_t row = cfg.row_bytes;
  const std::uint64_t full = f.work.max_rows * row;
  stream st(ex);
  buffer staging(ex, memory_kind::pinned, std::max<std::uint64_t>(full, 8));
  buffer rows_dev(ex, memory_kind::device, sizeof(std::uint64_t));
  buffer rows_host(ex, memory_kind::pinned, sizeof(std::uint64_t));
  std::vector<unsigned char> expect(full);
  const std::size_t every =
      std::max<std::size_t>(1, std::min<std::size_t>(s.steps.size() / 100, 256));
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const stash::schedule_step& step = s.steps[i];
    const std::size_t ki = stash::key_index(s, step.key);
    const std::uint64_t rows = rows_by_key[ki];
    const std::uint64_t bytes = rows * row;
    if (step.kind == step_kind::stash) {
      buffer src(ex, memory_kind::device, std::max<std::uint64_t>(full, 1));
      fill_pattern(staging.as<unsigned char>(), full, ki);
      ex.copy(src.data(), staging.data(), full, st);
      *rows_host.as<std::uint64_t>() = rows;
      ex.copy(rows_dev.data(), rows_host.data(), sizeof(std::uint64_t), st);
      impl.stash(step.key, src.data(), rows_dev.as<std::uint64_t>(), st);
      // The framework reuses the buffer right after: restores must come from the stash.
      ex.fill(src.data(), 0x5A, full, st);
      st.synchronize();
    } else {
      buffer dst(ex, memory_kind::device, std::max<std::uint64_t>(full, 1));
      ex.fill(dst.data(), 0xC3, full, st);
      ex.fill(rows_dev.data(), 0xFF, sizeof(std::uint64_t), st);
      impl.restore(step.key, dst.data(), rows_dev.as<std::uint64_t>(), st);
      ex.copy(staging.data(), dst.data(), full, st);
      ex.copy(rows_host.data(), rows_dev.data(), sizeof(std::uint64_t), st);
      st.synchronize();
      if (!is_dropped[ki]) {
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
          r.first_mismatch = "key " + stash::to_string(step.key) + " at /steps/" +
                             u64(f.source_of(i)) + ": " + u64(bad) + " of " + u64(bytes) +
                             " bytes differ" + (bad ? ", first at byte " + u64(first) : "") +
                             "; row count " + u64(got_rows) + " (expected " + u64(rows) + ")";
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
  if (plan.first_overflow) {
    const auto& ov = *plan.first_overflow;
    const bool named = status.code == stash::status_code::overflow && status.key == ov.key &&
                       status.needed == ov.needed;
    if (!named) {
      ++r.mismatches;
      if (r.first_mismatch.empty()) {
        r.first_mismatch = "status word says '" + status.message() +
                           "' but the plan's first overflow is key " + stash::to_string(ov.key) +
                           " needing " + u64(ov.needed) + " pages";
      }
    }
  } else if (!status.ok()) {
    ++r.mismatches;
    if (r.first_mismatch.empty()) r.first_mismatch = "unexpected status: " + status.message();
  }
  return r;
}

schedule_file random_schedule_file(std::mt19937_64& rng, bool uniform_rows) {
  auto in = [&](std::uint64_t lo, std::uint64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  schedule_file f;
  const auto v = static_cast<std::uint32_t>(in(1, 3));
  const auto l = static_cast<std::uint32_t>(in(1, 3));
  const auto m = static_cast<std::uint32_t>(in(1, 6));
  f.work.sched = stash::random_schedule(v, l, m, rng);
  f.work.max_rows = in(0, 150);
  f.page_rows = static_cast<std::uint32_t>(in(1, 40));
  f.work.row_bytes = in(1, 200);
  if (!uniform_rows && l > 1) {
    f.work.layer_row_bytes.resize(l);
    for (auto& b : f.work.layer_row_bytes) b = in(1, f.work.row_bytes);
    f.work.row_bytes =
        *std::max_element(f.work.layer_row_bytes.begin(), f.work.layer_row_bytes.end());
    if (std::all_of(f.work.layer_row_bytes.begin(), f.work.layer_row_bytes.end(),
                    [&](std::uint64_t b) { return b == f.work.row_bytes; })) {
      f.work.layer_row_bytes.clear();
    }
  }
  for (std::uint32_t a = 0; a < v; ++a) {
    for (std::uint32_t b = 0; b < l; ++b) {
      for (std::uint32_t c = 0; c < m; ++c) {
        // Both ends of the range often: empty keys and keys that fill the oversized buffer.
        const std::uint64_t pick = in(0, 4);
        const std::uint64_t r = pick == 0   ? 0
                                : pick == 1 ? f.work.max_rows
                                            : in(0, f.work.max_rows);
        f.work.rows.push_back({{a, b, c}, r});
      }
    }
  }
  if (in(0, 1) == 1) {
    const std::uint64_t need = stash::plan(f.work, f.page_rows).peak_pages;
    f.pools = stash::tier_pools{in(0, need + 1), in(0, need + 1)};
  }
  return f;
}

// ---- offloadkit replay ------------------------------------------------------------------------

std::string format_bytes(std::uint64_t b) {
  if (b == UINT64_MAX) return ">= 16 EiB";
  if (b < 1024) return std::to_string(b) + " B";
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b) / 1024;
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& p : inputs) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      throw input_error(p + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    if (DIR* d = ::opendir(p.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) {
          found.push_back(p);
          if (p.back() != '/') found.back() += '/';
          found.back() += n;
        }
      }
      ::closedir(d);
    } else {
      throw input_error(p + ": " + std::strerror(errno));
    }
    if (found.empty()) throw input_error(p + ": the folder holds no schedule files (*.json)");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

replay_report replay_files(const std::vector<std::string>& inputs, const replay_request& req) {
  if (req.executor != "host" && req.executor != "cuda") {
    throw std::invalid_argument("executor '" + req.executor + "' is not one of: host, cuda");
  }
  const std::vector<std::string> paths = expand_inputs(inputs);
  replay_report rep;
  rep.executor = req.executor;
  std::vector<schedule_file> files;
  files.reserve(paths.size());
  // Every file is read and planned before any data moves, so that a bad one is named at once.
  for (const std::string& p : paths) {
    try {
      files.push_back(read_schedule(p));
    } catch (const schedule_error& e) {
      throw input_error(p + ": invalid schedule at " + (e.where().empty() ? "/" : e.where()) +
                        ": " + e.reason());
    } catch (const runtime_error& e) {
      throw input_error(p + ": " + e.what());
    }
    const schedule_file& f = files.back();
    rank_report r;
    r.path = p;
    r.name = f.name;
    r.pipeline_size = f.pipeline_size;
    r.pipeline_rank = f.pipeline_rank;
    r.steps = f.work.sched.steps.size();
    r.keys = stash::key_count(f.work.sched);
    r.page_rows = f.page_rows;
    r.pools = req.pools ? req.pools : f.pools;
    r.plan = stash::plan(f.work, f.page_rows, r.pools);
    if (r.plan.first_overflow) r.first_overflow_entry = f.source_of(r.plan.first_overflow->step);
    rep.ranks.push_back(std::move(r));
  }
  std::optional<testing::stash_implementation> from_plugin;
  std::string impl = req.impl;
  if (!req.plan_only) {
    // The plugin is loaded before the executor is made, so that a broken one is named at once.
    if (!req.plugin.empty()) {
      try {
        from_plugin = plugin::stash_of(plugin::library::open(req.plugin));
      } catch (const plugin::plugin_error& e) {
        throw plugin_unusable(e.what());
      }
      if (!from_plugin) throw plugin_unusable("plugin " + req.plugin + " provides no paged stash");
      if (!from_plugin->support.runs_on(req.executor == "cuda" ? backend::cuda : backend::host)) {
        throw plugin_unusable("plugin " + req.plugin + " declares no support for the " +
                              req.executor + " executor (capability OKIT_CAP_" +
                              (req.executor == "cuda" ? "CUDA" : "HOST") + "_EXECUTOR)");
      }
      impl = "plugin " + from_plugin->name;
    } else if (impl != "reference" && impl != "optimized") {
      throw std::invalid_argument("implementation '" + impl +
                                  "' is not one of: reference, optimized");
    }
    // unavailable_error where --executor cuda cannot run here.
    const std::unique_ptr<executor> ex = make_executor(req.executor);
    for (std::size_t i = 0; i < files.size(); ++i) {
      const schedule_file& f = files[i];
      rank_report& r = rep.ranks[i];
      const stash::tier_pools pools = r.pools ? *r.pools : stash::tier_pools{r.plan.peak_pages, 0};
      const stash::stash_config cfg = config_for(f, pools, req.data_row_bytes);
      const auto t0 = std::chrono::steady_clock::now();
      replay_options o;
      o.data_row_bytes = req.data_row_bytes;
      if (req.progress) {
        o.progress = [&](std::size_t done, std::size_t total) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          req.progress({i, files.size(), done, total, s});
        };
      }
      try {
        stream setup(*ex);
        std::unique_ptr<stash::stash_interface> st =
            from_plugin ? from_plugin->make(*ex, cfg, setup) : make_stash(impl, *ex, cfg, setup);
        setup.synchronize();
        r.data = replay_stash(f, *st, *ex, o);
      } catch (const std::bad_alloc& e) {
        throw unavailable_error(
            r.path + ": the pools (" + u64(pools.device_pages) + " device + " +
            u64(pools.pinned_pages) + " pinned pages of " +
            format_bytes(stash::saturating_mul(cfg.rows_per_page, cfg.row_bytes)) +
            ") do not fit in memory here: " + e.what());
      }
      r.replayed = true;
      r.implementation = impl;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  std::stable_sort(
      rep.ranks.begin(), rep.ranks.end(),
      [](const rank_report& a, const rank_report& b) { return a.pipeline_rank < b.pipeline_rank; });
  for (const rank_report& r : rep.ranks) {
    auto& m = rep.max;
    const auto& p = r.plan;
    m.peak_pages = std::max(m.peak_pages, p.peak_pages);
    m.device_pages = std::max(m.device_pages, p.device_pages);
    m.pinned_pages = std::max(m.pinned_pages, p.pinned_pages);
    m.device_bytes = std::max(m.device_bytes, p.device_bytes);
    m.pinned_bytes = std::max(m.pinned_bytes, p.pinned_bytes);
    m.peak_stash_bytes = std::max(m.peak_stash_bytes, p.peak_stash_bytes);
    m.peak_page_bytes = std::max(m.peak_page_bytes, p.peak_page_bytes);
    m.oversized_bytes = std::max(m.oversized_bytes, p.oversized_bytes);
    m.peak_live_keys = std::max(m.peak_live_keys, p.peak_live_keys);
    m.page_bytes = std::max(m.page_bytes, p.page_bytes);
    m.overflow_count = std::max(m.overflow_count, p.overflow_count);
    rep.overflows += p.overflow_count;
    rep.mismatches += r.data.mismatches;
  }
  return rep;
}

namespace {

/// A text table with right-aligned columns except the first two.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w;
  for (const auto& r : rows) {
    w.resize(std::max(w.size(), r.size()), 0);
    for (std::size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      const std::string pad(w[c] - r[c].size(), ' ');
      line += c == 0 ? "" : "  ";
      line += c < 2 ? r[c] + pad : pad + r[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string render_report(const replay_report& rep) {
  std::ostringstream os;
  for (const rank_report& r : rep.ranks) {
    os << "schedule " << r.path << (r.name.empty() ? "" : " (" + r.name + ")") << ": rank "
       << r.pipeline_rank << " of " << r.pipeline_size << ", " << r.steps << " steps, " << r.keys
       << " keys, page = " << r.page_rows << " rows (" << format_bytes(r.plan.page_bytes) << ")";
    if (r.pools) {
      os << ", pool " << r.pools->device_pages << " device + " << r.pools->pinned_pages
         << " pinned pages";
    }
    os << "\n";
    const auto& p = r.plan;
    os << "  peak bytes: " << format_bytes(p.peak_stash_bytes) << " stashed rows, "
       << format_bytes(p.peak_page_bytes) << " in pages, " << format_bytes(p.oversized_bytes)
       << " as oversized static buffers";
    if (p.peak_stash_bytes != 0 && p.oversized_bytes != UINT64_MAX) {
      char buf[32];
      std::snprintf(
          buf, sizeof buf, " (%.2fx)",
          static_cast<double>(p.oversized_bytes) / static_cast<double>(p.peak_stash_bytes));
      os << buf;
    }
    os << "\n";
    if (r.pools) {
      os << "  peak use under the pool: " << p.peak_device_pages << " device, "
         << p.peak_pinned_pages << " pinned pages\n";
    }
    if (p.first_overflow) {
      const auto& ov = *p.first_overflow;
      os << "  OVERFLOW at /steps/" << r.first_overflow_entry << " (step " << ov.step << "): key "
         << stash::to_string(ov.key) << " with " << ov.rows << " rows needs " << ov.needed
         << " pages; " << ov.free_device << " device + " << ov.free_pinned << " pinned pages free; "
         << p.overflow_count << " of the rank's stashes overflow\n";
    }
    if (r.replayed) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.2f s", r.seconds);
      os << "  data check (" << r.implementation << " on " << rep.executor
         << " executor): " << r.data.keys_checked << " keys, " << format_bytes(r.data.bytes_checked)
         << " restored and compared, " << r.data.mismatches << " mismatching bytes, " << secs
         << "\n";
      if (r.data.mismatches != 0) os << "  MISMATCH: " << r.data.first_mismatch << "\n";
    }
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "file", "peak pages", "device pages", "pinned pages", "device bytes",
                  "pinned bytes", "peak stashed", "oversized", "overflows"});
  auto name_of = [](const std::string& path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  };
  for (const rank_report& r : rep.ranks) {
    const auto& p = r.plan;
    rows.push_back({std::to_string(r.pipeline_rank), name_of(r.path), u64(p.peak_pages),
                    u64(p.device_pages), u64(p.pinned_pages), format_bytes(p.device_bytes),
                    format_bytes(p.pinned_bytes), format_bytes(p.peak_stash_bytes),
                    format_bytes(p.oversized_bytes), u64(p.overflow_count)});
  }
  const auto& m = rep.max;
  rows.push_back({"max", "", u64(m.peak_pages), u64(m.device_pages), u64(m.pinned_pages),
                  format_bytes(m.device_bytes), format_bytes(m.pinned_bytes),
                  format_bytes(m.peak_stash_bytes), format_bytes(m.oversized_bytes),
                  u64(m.overflow_count)});
  os << "\n" << table(rows);
  os << "\nno rank overflows with " << m.device_pages << " device + " << m.pinned_pages
     << " pinned pages per rank (" << format_bytes(m.device_bytes) << " + "
     << format_bytes(m.pinned_bytes) << ")";
  if (rep.overflows != 0) {
    os << "; with the pools given, " << rep.overflows << " stashes overflow";
  }
  os << "\n";
  return os.str();
}

std::function<void(const replay_progress&)> progress_printer(std::FILE* out, bool terminal,
                                                             double interval_s) {
  auto last = std::make_shared<double>(-1e9);
  return [out, terminal, interval_s, last](const replay_progress& p) {
    const bool end = p.done == p.total;
    if (!end && p.seconds - *last < (terminal ? 0.2 : interval_s)) return;
    *last = p.seconds;
    const double frac =
        p.total == 0 ? 1.0 : static_cast<double>(p.done) / static_cast<double>(p.total);
    char left[48];
    if (end) {
      std::snprintf(left, sizeof left, "done in %.1f s", p.seconds);
    } else if (frac > 0) {
      std::snprintf(left, sizeof left, "about %.0f s left", p.seconds * (1 - frac) / frac);
    } else {
      std::snprintf(left, sizeof left, "time left unknown");
    }
    std::fprintf(out, "%sreplay file %zu/%zu: step %zu / %zu (%3.0f %%), %s%s",
                 terminal ? "\r" : "", p.file + 1, p.files, p.done, p.total, 100.0 * frac, left,
                 terminal && !end ? "   " : "\n");
    std::fflush(out);
  };
}

}  // namespace offloadkit::traces
