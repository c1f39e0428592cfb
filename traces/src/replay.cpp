// Schedule replay: page planning, the data replay on an executor, and `offloadkit replay`.
#include "offloadkit/traces/replay.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/traces/cli.hpp"
#include "offloadkit/traces/stash_bridge.hpp"
#include "tier_accounting.hpp"

namespace offloadkit::traces {
namespace {

using detail::key_text;
using detail::max_row_bytes_of;
using detail::placement;
using detail::tier_accounting;

/// The byte every key stashes at every offset: distinct per key, so a restore that returns
/// another key's pages or a stale page is caught.
inline std::uint64_t pattern_word(std::uint64_t key, std::uint64_t word) {
  std::uint64_t z = key * 0x9E3779B97F4A7C15ull + word + 0x632BE59BD9B4E019ull;
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

replay_result replay_model(const schedule& s, executor& ex, const replay_options& o) {
  replay_result r;
  const std::optional<schedule_pools> pools = o.pools ? o.pools : s.pools;
  const std::uint64_t data_row_max = o.data_row_bytes != 0 ? o.data_row_bytes : max_row_bytes_of(s);
  auto data_row = [&](int layer) {
    return o.data_row_bytes != 0 ? o.data_row_bytes : s.row_bytes[static_cast<std::size_t>(layer)];
  };
  const std::uint64_t page_bytes = std::uint64_t{s.page_rows} * data_row_max;
  // Tier sizes: the pools, or what the planner says an unbounded device tier needs.
  const replay_result need = plan(s, pools);
  const std::uint64_t device_pages = pools ? pools->device_pages : need.peak_device_pages;
  const std::uint64_t pinned_pages = pools ? pools->pinned_pages : 0;
  r.page_bytes = std::uint64_t{s.page_rows} * max_row_bytes_of(s);

  stream st(ex);
  buffer device_pool(ex, memory_kind::device, device_pages * page_bytes);
  buffer pinned_pool(ex, memory_kind::pinned, pinned_pages * page_bytes);
  buffer staging(ex, memory_kind::pinned, std::uint64_t{s.max_rows} * data_row_max);
  std::vector<std::uint64_t> device_free, pinned_free;
  for (std::uint64_t p = device_pages; p > 0; --p) device_free.push_back(p - 1);
  for (std::uint64_t p = pinned_pages; p > 0; --p) pinned_free.push_back(p - 1);
  // Per key, its pages in order: (is pinned, page id).
  std::vector<std::vector<std::pair<bool, std::uint64_t>>> pages(s.key_count());
  std::vector<unsigned char> expect(staging.size());
  auto page_ptr = [&](std::pair<bool, std::uint64_t> pg) {
    auto* base = static_cast<unsigned char*>(pg.first ? pinned_pool.data() : device_pool.data());
    return base + pg.second * page_bytes;
  };

  tier_accounting acc(s, pools);
  const std::size_t every = std::max<std::size_t>(1, s.steps.size() / 20);
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const schedule_step& step = s.steps[i];
    const std::size_t ki = s.key_index(step.key);
    const std::uint64_t bytes = std::uint64_t{s.rows_of(step.key)} * data_row(step.key.layer);
    const placement pl = acc.apply(i, r);
    // A page holds page_rows rows of this key's layer (pages are sized for the widest row).
    const std::uint64_t chunk = std::uint64_t{s.page_rows} * data_row(step.key.layer);
    if (!pl.held) {
      // Overflowed stash (nothing written) or the restore of one: nothing to compare.
    } else if (step.op == schedule_op::stash) {
      for (std::uint64_t p = 0; p < pl.device; ++p) {
        pages[ki].push_back({false, device_free.back()});
        device_free.pop_back();
      }
      for (std::uint64_t p = 0; p < pl.pinned; ++p) {
        pages[ki].push_back({true, pinned_free.back()});
        pinned_free.pop_back();
      }
      buffer src(ex, memory_kind::device, bytes);
      fill_pattern(staging.as<unsigned char>(), bytes, ki);
      ex.copy(src.data(), staging.data(), bytes, st);
      for (std::uint64_t p = 0; p < pages[ki].size(); ++p) {
        const std::uint64_t off = p * chunk;
        ex.copy(page_ptr(pages[ki][p]), src.as<unsigned char>() + off, std::min(chunk, bytes - off),
                st);
      }
      // Scribble over the source as a framework would reuse it: restores must come from pages.
      ex.fill(src.data(), 0xA5, bytes, st);
      st.synchronize();
    } else {
      buffer dst(ex, memory_kind::device, bytes);
      for (std::uint64_t p = 0; p < pages[ki].size(); ++p) {
        const std::uint64_t off = p * chunk;
        ex.copy(dst.as<unsigned char>() + off, page_ptr(pages[ki][p]), std::min(chunk, bytes - off),
                st);
      }
      ex.copy(staging.data(), dst.data(), bytes, st);
      st.synchronize();
      fill_pattern(expect.data(), bytes, ki);
      if (bytes != 0 && std::memcmp(expect.data(), staging.data(), bytes) != 0) {
        std::uint64_t bad = 0, first = 0;
        for (std::uint64_t b = bytes; b > 0; --b) {
          if (expect[b - 1] != staging.as<unsigned char>()[b - 1]) {
            ++bad;
            first = b - 1;
          }
        }
        r.mismatches += bad;
        if (r.first_mismatch.empty()) {
          r.first_mismatch = "key " + key_text(step.key) + " at /steps/" +
                             std::to_string(step.source_index) + ": " + std::to_string(bad) +
                             " of " + std::to_string(bytes) + " bytes differ, first at byte " +
                             std::to_string(first);
        }
      }
      r.bytes_checked += bytes;
      ++r.keys_checked;
      for (const auto& pg : pages[ki]) (pg.first ? pinned_free : device_free).push_back(pg.second);
      pages[ki].clear();
    }
    if (o.progress && ((i + 1) % every == 0 || i + 1 == s.steps.size())) {
      o.progress(i + 1, s.steps.size());
    }
  }
  r.peak_paged_bytes = r.peak_pages * r.page_bytes;
  return r;
}

// ---- offloadkit replay ------------------------------------------------------------------------

namespace {

std::string human(std::uint64_t b) {
  char buf[64];
  if (b >= (std::uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  } else if (b >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  }
  return buf;
}

const char* replay_usage =
    "usage: offloadkit replay FILE [--impl model|reference|optimized | --plugin PATH]\n"
    "                         [--executor host|cuda] [--pool-pages DEVICE,PINNED]\n"
    "                         [--data-row-bytes N] [--plan-only] [--quiet]\n"
    "  --plugin PATH   replay through the paged stash of a plugin library (offloadkit/plugin.h)\n"
    "exit: 0 ok, 1 restored bytes differ or the file is invalid, 2 bad usage, 3 the pool\n"
    "overflows, 4 the plugin cannot be loaded, has no stash or none for this executor, 77 "
    "skipped\n";

}  // namespace

int replay_main(int argc, char** argv) {
  std::string path, impl = "model", exec_name = "host", plugin_path;
  bool impl_given = false;
  replay_options ro;
  bool plan_only = false, quiet = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "-h" || a == "--help") {
        std::printf("%s", replay_usage);
        return 0;
      } else if (a == "--impl") {
        impl = value();
        impl_given = true;
      } else if (a == "--plugin") {
        plugin_path = value();
        if (plugin_path.empty()) throw std::invalid_argument("--plugin needs a library path");
      } else if (a == "--executor") {
        exec_name = value();
      } else if (a == "--pool-pages") {
        const std::string v = value();
        const auto comma = v.find(',');
        if (comma == std::string::npos)
          throw std::invalid_argument("--pool-pages takes DEVICE,PINNED");
        ro.pools =
            schedule_pools{std::stoull(v.substr(0, comma)), std::stoull(v.substr(comma + 1))};
      } else if (a == "--data-row-bytes") {
        ro.data_row_bytes = std::stoull(value());
      } else if (a == "--plan-only") {
        plan_only = true;
      } else if (a == "--quiet") {
        quiet = true;
      } else if (!a.empty() && a[0] == '-') {
        throw std::invalid_argument("unknown option '" + a + "'");
      } else if (path.empty()) {
        path = a;
      } else {
        throw std::invalid_argument("more than one schedule file given");
      }
    }
    if (path.empty()) throw std::invalid_argument("missing the schedule FILE");
    if (!plugin_path.empty() && impl_given) {
      throw std::invalid_argument("--plugin and --impl choose the same thing: give one of them");
    }
    if (impl != "model" && impl != "reference" && impl != "optimized") {
      throw std::invalid_argument("--impl '" + impl +
                                  "' is not one of: model, reference, optimized");
    }
    if (exec_name != "host" && exec_name != "cuda") {
      throw std::invalid_argument("--executor '" + exec_name + "' is not one of: host, cuda");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit replay: %s\n%s", e.what(), replay_usage);
    return 2;
  }
  schedule s;
  try {
    s = read_schedule(path);
  } catch (const schedule_error& e) {
    std::printf("invalid schedule %s: at %s: %s\n", path.c_str(), e.where().c_str(),
                e.reason().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::printf("invalid schedule %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  std::printf(
      "schedule: %s%s%s\n  %zu steps, %zu keys, %d virtual stages x %d layers x %d "
      "microbatches, page = %u rows\n",
      path.c_str(), s.name.empty() ? "" : " — ", s.name.c_str(), s.steps.size(), s.key_count(),
      s.virtual_stages, s.layers, s.microbatches, s.page_rows);
  const std::optional<schedule_pools> pools = ro.pools ? ro.pools : s.pools;
  const replay_result p = plan(s, pools);
  const replay_result unbounded = plan(s, schedule_pools{~std::uint64_t{0} / 2, 0});
  std::printf("pages needed: %llu in one tier (%s of pages)\n",
              static_cast<unsigned long long>(unbounded.peak_pages),
              human(unbounded.peak_pages * unbounded.page_bytes).c_str());
  if (pools) {
    // Overflow depends only on the pages in use versus both tiers together (a key may span
    // them), so the pinned tier needs whatever the peak exceeds the device tier by.
    const std::uint64_t pinned_needed =
        unbounded.peak_pages > pools->device_pages ? unbounded.peak_pages - pools->device_pages : 0;
    std::printf(
        "pool: %llu device + %llu pinned pages; peak use %llu device, %llu pinned; with "
        "%llu device pages the pinned tier needs %llu\n",
        static_cast<unsigned long long>(pools->device_pages),
        static_cast<unsigned long long>(pools->pinned_pages),
        static_cast<unsigned long long>(p.peak_device_pages),
        static_cast<unsigned long long>(p.peak_pinned_pages),
        static_cast<unsigned long long>(pools->device_pages),
        static_cast<unsigned long long>(pinned_needed));
  }
  std::printf("peak bytes: %s stashed rows, %s in pages, %s as oversized static buffers (%.2fx)\n",
              human(unbounded.peak_stashed_bytes).c_str(),
              human(unbounded.peak_pages * unbounded.page_bytes).c_str(),
              human(unbounded.peak_oversized_bytes).c_str(),
              unbounded.peak_stashed_bytes == 0
                  ? 0.0
                  : static_cast<double>(unbounded.peak_oversized_bytes) /
                        static_cast<double>(unbounded.peak_stashed_bytes));
  if (p.overflow) {
    const auto& ov = *p.overflow;
    std::printf(
        "OVERFLOW at /steps/%zu (step %zu): key %s needs %llu pages; %llu device and %llu "
        "pinned pages free\n",
        ov.source_index, ov.step, key_text(ov.key).c_str(),
        static_cast<unsigned long long>(ov.pages_needed),
        static_cast<unsigned long long>(ov.device_free),
        static_cast<unsigned long long>(ov.pinned_free));
  } else if (pools) {
    std::printf("overflow: none\n");
  }
  if (plan_only) return p.overflow ? 3 : 0;
  // The plugin is loaded before the executor is made, so that a broken one is named at once.
  std::optional<testing::stash_implementation> from_plugin;
  if (!plugin_path.empty()) {
    try {
      from_plugin = plugin::stash_of(plugin::library::open(plugin_path));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "offloadkit replay: %s\n", e.what());
      return 4;
    }
    if (!from_plugin) {
      std::fprintf(stderr, "offloadkit replay: plugin %s provides no paged stash\n",
                   plugin_path.c_str());
      return 4;
    }
    if (!from_plugin->support.runs_on(exec_name == "cuda" ? backend::cuda : backend::host)) {
      std::fprintf(stderr,
                   "offloadkit replay: plugin %s declares no support for the %s executor "
                   "(capability OKIT_CAP_%s_EXECUTOR)\n",
                   plugin_path.c_str(), exec_name.c_str(), exec_name == "cuda" ? "CUDA" : "HOST");
      return 4;
    }
    impl = "plugin " + from_plugin->name;
  }
  std::unique_ptr<executor> ex;
  if (exec_name == "cuda") {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) {
      std::printf("skipped: cuda executor unavailable: %s\n", why.c_str());
      return 77;
    }
    ex = std::make_unique<cuda_executor>();
  } else {
    ex = std::make_unique<host_executor>();
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  if (!quiet) {
    ro.progress = [&](std::size_t done, std::size_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (done == total || now - last > std::chrono::milliseconds(500)) {
        std::fprintf(stderr, "\rreplay: step %zu / %zu (%3.0f %%)", done, total,
                     100.0 * static_cast<double>(done) / static_cast<double>(total));
        if (done == total) std::fprintf(stderr, "\n");
        last = now;
      }
    };
  }
  replay_result r;
  try {
    if (from_plugin || impl != "model") {
      stash::stash_config cfg;
      cfg.row_bytes = ro.data_row_bytes != 0 ? ro.data_row_bytes : max_row_bytes_of(s);
      cfg.rows_per_page = s.page_rows;
      cfg.max_rows = s.max_rows;
      cfg.device_pages = pools ? pools->device_pages : unbounded.peak_pages;
      cfg.pinned_pages = pools ? pools->pinned_pages : 0;
      cfg.max_keys = s.key_count();
      stream setup(*ex);
      std::unique_ptr<stash::stash_interface> st;
      st = from_plugin ? from_plugin->make(*ex, cfg, setup) : make_stash(impl, *ex, cfg, setup);
      setup.synchronize();
      r = replay_stash(s, *st, *ex, ro);
    } else {
      r = replay_model(s, *ex, ro);
    }
  } catch (const std::exception& e) {
    std::printf("replay failed: %s\n", e.what());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "data check (%s on %s executor): %zu keys, %s restored and compared, %llu "
      "mismatching bytes, %.2f s\n",
      impl.c_str(), exec_name.c_str(), r.keys_checked, human(r.bytes_checked).c_str(),
      static_cast<unsigned long long>(r.mismatches), secs);
  if (r.mismatches != 0) {
    std::printf("MISMATCH: %s\n", r.first_mismatch.c_str());
    return 1;
  }
  return r.overflow ? 3 : 0;
}

}  // namespace offloadkit::traces
