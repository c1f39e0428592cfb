// The per-feature scenarios of `offloadkit check --driver-faults` (scenarios.hpp). Each call into
// the implementation is a step: it runs with the interposer's window open; when it throws, the
// error is recorded, the object's state is checked, and the step is tried once more. The
// scenario's own work (patterns, read-backs) runs with the window closed.
#include "offloadkit/interpose/scenarios.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/interpose/control.h"
#include "offloadkit/resources.hpp"
#include "offloadkit/teardown.hpp"

namespace offloadkit::interpose {
namespace {

/// The interposer's control functions; null where it is not loaded.
struct interposer_control {
  okit_interpose_set_window_fn set_window = nullptr;
  okit_interpose_failures_fn failures = nullptr;

  [[nodiscard]] bool loaded() const { return set_window != nullptr && failures != nullptr; }
  static interposer_control find() {
    interposer_control c;
    c.set_window = reinterpret_cast<okit_interpose_set_window_fn>(
        dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_WINDOW_SYMBOL));
    c.failures = reinterpret_cast<okit_interpose_failures_fn>(
        dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_FAILURES_SYMBOL));
    return c;
  }
};

/// The scenario's own setup failed before the implementation was involved: the case says nothing.
class setup_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "cuda_error: ..." for offloadkit's typed errors; `typed` false for anything else.
std::string describe_error(std::exception_ptr error, bool& typed) {
  typed = true;
  try {
    std::rethrow_exception(std::move(error));
  } catch (const cuda_error& e) {
    return std::string("cuda_error: ") + e.what();
  } catch (const injected_fault& e) {
    return std::string("injected_fault: ") + e.what();
  } catch (const runtime_error& e) {
    return std::string("runtime_error: ") + e.what();
  } catch (const out_of_range& e) {
    return std::string("out_of_range: ") + e.what();
  } catch (const state_error& e) {
    return std::string("state_error: ") + e.what();
  } catch (const logic_error& e) {
    return std::string("logic_error: ") + e.what();
  } catch (const out_of_memory& e) {
    return std::string("out_of_memory: ") + e.what();
  } catch (const bad_alloc& e) {
    return std::string("bad_alloc: ") + e.what();
  } catch (const std::exception& e) {
    typed = false;
    return std::string("std::exception: ") + e.what();
  } catch (...) {
    typed = false;
    return "an exception that is not a std::exception";
  }
}

/// Steps of one scenario, recorded into its result.
class scenario_run {
 public:
  scenario_run(const interposer_control& c, scenario_result& r) : c_(c), r_(r) {}

  /// Runs `op` with the window open. On an error: records it (the first one is the case's),
  /// runs `after_error` (state checks), and tries `op` once more. Returns whether it succeeded.
  bool step(const std::string& name, const std::function<void()>& op,
            const std::function<void()>& after_error = {}) {
    touched_ = true;
    const std::uint64_t before = c_.failures();
    std::string error;
    bool typed = true;
    if (attempt(op, error, typed)) {
      // The implementation absorbed the failure (an internal fallback or retry).
      if (c_.failures() > before && r_.failed_step.empty()) r_.failed_step = name;
      return true;
    }
    if (c_.failures() == before) {
      problem(name + " failed without an injected fault: " + error);
    }
    if (r_.failed_step.empty() || r_.error.empty()) {
      r_.failed_step = name;
      r_.error = error;
      r_.typed_error = typed;
    }
    if (after_error) own("checking the state after the failed " + name, after_error);
    r_.retried = true;
    std::string retry_error;
    if (attempt(op, retry_error, typed)) return true;
    r_.retry_ok = false;
    r_.retry_error = retry_error;
    return false;
  }

  /// A call that cannot be retried (destruction, a release): window open, errors are problems.
  void last(const std::string& name, const std::function<void()>& op) {
    touched_ = true;
    std::string error;
    bool typed = true;
    if (!attempt(op, error, typed)) problem(name + " failed: " + error);
  }

  /// The scenario's own work, window closed. Before the implementation was touched a failure
  /// means the case cannot say anything (throws setup_failure); after, it is the implementation's
  /// doing (a region that reads back wrong, a sticky error it left behind): a data problem.
  bool own(const std::string& what, const std::function<void()>& f) {
    try {
      f();
      return true;
    } catch (...) {
      bool typed = true;
      const std::string error = describe_error(std::current_exception(), typed);
      if (!touched_) throw setup_failure(what + " failed: " + error);
      r_.data_ok = false;
      r_.problems.push_back(what + " failed: " + error);
      return false;
    }
  }

  /// A state the implementation's contract rules out.
  void problem(const std::string& p) {
    r_.consistent = false;
    r_.problems.push_back(p);
  }
  /// Bytes that differ from what was handed over.
  void data_problem(const std::string& p) {
    r_.data_ok = false;
    r_.problems.push_back(p);
  }

 private:
  bool attempt(const std::function<void()>& op, std::string& error, bool& typed) {
    c_.set_window(1);
    try {
      op();
      c_.set_window(0);
      return true;
    } catch (...) {
      c_.set_window(0);
      error = describe_error(std::current_exception(), typed);
      return false;
    }
  }

  const interposer_control& c_;
  scenario_result& r_;
  bool touched_ = false;
};

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> p(bytes);
  std::uint32_t x = 2463534242u ^ seed;
  for (auto& b : p) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<unsigned char>(x);
  }
  return p;
}

/// Copies `bytes` from device memory at `src` and compares them with `expected`; a difference is a
/// data problem naming `what` and the first differing offset.
void expect_bytes(executor& ex, stream_ref s, scenario_run& run, const std::string& what,
                  const void* src, const std::vector<unsigned char>& expected, std::size_t bytes) {
  std::vector<unsigned char> back(bytes);
  if (!run.own("reading back " + what, [&] {
        ex.copy(back.data(), src, bytes, s);
        ex.synchronize(s);
      })) {
    return;
  }
  for (std::size_t i = 0; i < bytes; ++i) {
    if (back[i] != expected[i]) {
      run.data_problem(what + " differs at byte " + std::to_string(i) + " of " +
                       std::to_string(bytes) + " (" + std::to_string(back[i]) + " instead of " +
                       std::to_string(expected[i]) + ")");
      return;
    }
  }
}

// ---- region -------------------------------------------------------------------------------------

void region_scenario(const testing::region_implementation& impl, executor& ex, scenario_run& run) {
  stream s(ex, 0);
  const std::size_t g = ex.granularity(0);
  region::region_config cfg;
  cfg.bytes = 2 * g + g / 2;  // three chunks, the last one partly used
  cfg.device = 0;
  cfg.chunk_bytes = g;
  // A region whose mode is fixed when it is created is made for preserving pauses, and is not
  // asked to discard.
  const bool both_modes = impl.caps.pause_modes == testing::region_pause_modes::both;
  if (!both_modes) cfg.fixed_mode = region::pause_mode::preserve;
  const std::vector<unsigned char> contents = pattern(cfg.bytes, 1);

  std::unique_ptr<region::offload_region> r;
  if (!run.step("create", [&] { r = impl.make(ex, cfg); })) return;
  void* const base = r->data();
  if (run.own("writing the pattern", [&] {
        ex.copy(base, contents.data(), cfg.bytes, s);
        ex.synchronize(s);
      })) {
    auto expect_state = [&](const char* after, std::initializer_list<region::region_state> ok) {
      const region::region_state st = r->state();
      for (auto v : ok) {
        if (st == v) return;
      }
      run.problem(std::string("after ") + after + " the region is " + region::to_string(st));
    };
    const bool paused = run.step(
        "pause", [&] { r->pause(region::pause_mode::preserve, s); },
        [&] {
          expect_state("a failed pause",
                       {region::region_state::active, region::region_state::partial});
        });
    if (paused) {
      expect_state("pause", {region::region_state::paused});
      const bool resumed = run.step(
          "resume", [&] { r->resume(s); },
          [&] {
            expect_state("a failed resume",
                         {region::region_state::paused, region::region_state::partial});
          });
      if (resumed) {
        expect_state("resume", {region::region_state::active});
        if (impl.caps.address_stable && r->data() != base) {
          run.problem("the address moved from " +
                      std::to_string(reinterpret_cast<std::uintptr_t>(base)) + " to " +
                      std::to_string(reinterpret_cast<std::uintptr_t>(r->data())) +
                      " although the region declares a stable address");
        }
        expect_bytes(ex, s, run, "the region's contents after pause and resume", r->data(),
                     contents, cfg.bytes);
        // The rest of the state machine the profile allows: a discarding cycle, then a pause
        // that destruction finds still in place.
        if (both_modes && run.step(
                              "pause(discard)", [&] { r->pause(region::pause_mode::discard, s); },
                              [&] {
                                expect_state(
                                    "a failed pause(discard)",
                                    {region::region_state::active, region::region_state::partial});
                              })) {
          expect_state("pause(discard)", {region::region_state::paused});
          if (run.step(
                  "resume after discard", [&] { r->resume(s); },
                  [&] {
                    expect_state("a failed resume after discard",
                                 {region::region_state::paused, region::region_state::partial});
                  })) {
            expect_state("resume after discard", {region::region_state::active});
          }
        }
        if (r->state() == region::region_state::active &&
            run.step("pause before destroy", [&] { r->pause(region::pause_mode::preserve, s); })) {
          expect_state("pause before destroy", {region::region_state::paused});
        }
      }
    }
  }
  // Destroyed in whatever state the steps left it: paused where they all worked.
  run.last("destroy", [&] { r.reset(); });
}

// ---- arena --------------------------------------------------------------------------------------

void arena_scenario(const testing::arena_implementation& impl, executor& ex, scenario_run& run) {
  stream s(ex, 0);
  const std::vector<std::size_t> sizes = {(std::size_t{1} << 20) + 17, 4096, 1};
  std::vector<buffer> tensors;
  std::vector<std::vector<unsigned char>> contents;
  std::vector<arena::device_tensor> set;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    tensors.emplace_back(ex, memory_kind::device, sizes[i], 0);
    contents.push_back(pattern(sizes[i], 10 + static_cast<unsigned>(i)));
    ex.copy(tensors.back().data(), contents.back().data(), sizes[i], s);
    set.push_back({tensors.back().data(), sizes[i]});
  }
  ex.synchronize(s);

  std::unique_ptr<arena::offloader> a;
  if (!run.step("create", [&] { a = impl.make(ex); })) return;
  // One cycle: offload, clear the tensors, reload, verify. Returns whether every step worked.
  auto cycle = [&](const std::string& which) {
    const bool offloaded = run.step("offload" + which, [&] {
      event done = a->offload(set, s);
      ex.synchronize(done.ref());
    });
    if (!offloaded || !run.own("clearing the tensors", [&] {
          for (const auto& t : set) ex.fill(t.data, 0, t.bytes, s);
          ex.synchronize(s);
        })) {
      return false;
    }
    const bool reloaded = run.step(
        "reload" + which,
        [&] {
          event done = a->reload(set, s);
          ex.synchronize(done.ref());
        },
        [&] {
          if (!a->holds_copy()) run.problem("a failed reload" + which + " dropped the host copy");
        });
    if (!reloaded) return false;
    for (std::size_t i = 0; i < set.size(); ++i) {
      expect_bytes(ex, s, run, "tensor " + std::to_string(i) + " after reload" + which, set[i].data,
                   contents[i], sizes[i]);
    }
    return true;
  };
  // Two cycles (the second reuses what the first set up), a release (final: no offload after
  // it), destruction.
  if (cycle("") && cycle(" again")) run.step("release", [&] { a->release(); });
  run.last("destroy", [&] { a.reset(); });
  // A second offloader, destroyed while it holds its copy.
  if (!run.step("create a second", [&] { a = impl.make(ex); })) return;
  run.step("offload into the second", [&] {
    event done = a->offload(set, s);
    ex.synchronize(done.ref());
  });
  run.last("destroy the second while it holds the copy", [&] { a.reset(); });
}

// ---- stash --------------------------------------------------------------------------------------

void stash_scenario(const testing::stash_implementation& impl, executor& ex, scenario_run& run) {
  stream s(ex, 0);
  stash::stash_config cfg;
  cfg.row_bytes = 256;
  cfg.rows_per_page = 4;
  cfg.max_rows = 64;
  cfg.device_pages = 8;
  cfg.pinned_pages = 16;
  if (impl.caps.single_tier()) {
    // The same 24 pages, all in the tier it has (pages in the other one are a bad config).
    const bool device = impl.caps.tier == testing::stash_tier::device;
    cfg.device_pages = device ? 24 : 0;
    cfg.pinned_pages = device ? 0 : 24;
  }
  cfg.max_keys = 8;
  cfg.device = 0;
  struct key_io {
    stash::stash_key key;
    std::uint64_t rows = 0;
    buffer src, dst, rows_in, rows_out;
    std::vector<unsigned char> contents;
  };
  // 3 pages, then 10 (the second key spills from the device tier into the pinned one, or takes
  // the pinned tier whole, or joins the first in a single-tier stash's one tier), then 16: more
  // than the tiers have left, the overflow; then 1 page,
  // stashed in a batch after the overflow was cleared.
  std::vector<key_io> keys;
  const std::uint64_t rows[] = {10, 40, 64, 4};
  for (unsigned i = 0; i < 4; ++i) {
    key_io k;
    k.key = stash::stash_key{0, i, 0};
    k.rows = rows[i];
    const std::size_t bytes = cfg.max_rows * cfg.row_bytes;
    k.src = buffer(ex, memory_kind::device, bytes, 0);
    k.dst = buffer(ex, memory_kind::device, bytes, 0);
    k.rows_in = buffer(ex, memory_kind::device, sizeof(std::uint64_t), 0);
    k.rows_out = buffer(ex, memory_kind::device, sizeof(std::uint64_t), 0);
    k.contents = pattern(bytes, 20 + i);
    ex.copy(k.src.data(), k.contents.data(), bytes, s);
    ex.copy(k.rows_in.data(), &k.rows, sizeof k.rows, s);
    ex.fill(k.dst.data(), 0, bytes, s);
    ex.synchronize(s);
    keys.push_back(std::move(k));
  }
  // The restored rows and row count of key i, compared with what was stashed.
  auto verify = [&](std::size_t i) {
    const std::size_t bytes = keys[i].rows * cfg.row_bytes;
    expect_bytes(ex, s, run, "the rows of key " + std::to_string(i) + " after restore",
                 keys[i].dst.data(), keys[i].contents, bytes);
    std::uint64_t restored_rows = 0;
    if (run.own("reading the restored row count",
                [&] {
                  ex.copy(&restored_rows, keys[i].rows_out.data(), sizeof restored_rows, s);
                  ex.synchronize(s);
                }) &&
        restored_rows != keys[i].rows) {
      run.data_problem("key " + std::to_string(i) + " restored " + std::to_string(restored_rows) +
                       " rows instead of " + std::to_string(keys[i].rows));
    }
  };

  std::unique_ptr<stash::stash_interface> st;
  if (!run.step("create", [&] { st = impl.make(ex, cfg, s); })) return;
  // A call, then check() as a step of its own: a check that fails after the call went through
  // (its own read of the status failed) is retried alone, never by repeating the call (a second
  // stash of a stored key, a restore of a restored one).
  auto step_then_check = [&](const std::string& name, const std::function<void()>& call) {
    return run.step(name, call) && run.step("check after " + name, [&] { st->check(s); });
  };
  bool ok = true;
  for (std::size_t i = 0; ok && i < 2; ++i) {
    ok = step_then_check("stash key " + std::to_string(i), [&] {
      st->stash(keys[i].key, keys[i].src.data(), keys[i].rows_in.as<std::uint64_t>(), s);
    });
  }
  // The overflow: reported (a status word or flag, or an exception, as the profile declares) and
  // never silent; then cleared, after which the stash goes on.
  if (ok) {
    bool reported = false;
    ok = run.step("stash key 2 (overflows)", [&] {
      reported = false;
      try {
        st->stash(keys[2].key, keys[2].src.data(), keys[2].rows_in.as<std::uint64_t>(), s);
        st->check(s);
      } catch (const stash::stash_overflow&) {
        reported = true;  // a status word or flag, read by check()
      } catch (const out_of_memory&) {
        reported = true;  // thrown by stash() itself (the overflow_exception policy)
      }
    });
    if (ok && !reported) {
      run.problem("stashing 64 rows (16 pages) with 11 pages free in both tiers was not reported");
    }
    ok = ok && run.step("clear_status after the overflow", [&] { st->clear_status(s); });
  }
  if (ok) {
    ok = step_then_check("restore key 0", [&] {
      st->restore(keys[0].key, keys[0].dst.data(), keys[0].rows_out.as<std::uint64_t>(), s);
    });
    if (ok) verify(0);
  }
  // A batch: key 0 again and key 3, stashed and restored together.
  if (ok) {
    ok = step_then_check("stash_batch keys 0 and 3", [&] {
      st->stash_batch({{keys[0].key, keys[0].src.data(), keys[0].rows_in.as<std::uint64_t>()},
                       {keys[3].key, keys[3].src.data(), keys[3].rows_in.as<std::uint64_t>()}},
                      s);
    });
  }
  if (ok) {
    for (std::size_t i : {std::size_t{0}, std::size_t{3}}) {
      run.own("clearing the destination of key " + std::to_string(i), [&] {
        ex.fill(keys[i].dst.data(), 0, cfg.max_rows * cfg.row_bytes, s);
        ex.synchronize(s);
      });
    }
    ok = step_then_check("restore_batch keys 0 and 3", [&] {
      st->restore_batch({{keys[0].key, keys[0].dst.data(), keys[0].rows_out.as<std::uint64_t>()},
                         {keys[3].key, keys[3].dst.data(), keys[3].rows_out.as<std::uint64_t>()}},
                        s);
    });
    if (ok) {
      verify(0);
      verify(3);
    }
  }
  if (ok) {
    run.last("snapshot", [&] {
      const std::string broken =
          stash::check_conservation(st->snapshot(s), cfg, impl.caps.page_ids);
      if (!broken.empty()) run.problem("with key 1 held at the end: " + broken);
    });
  }
  // Destroyed with key 1 still held (whatever the steps left).
  run.last("destroy", [&] { st.reset(); });
}

// ---- activation ---------------------------------------------------------------------------------

void activation_scenario(const testing::activation_implementation& impl, executor& ex,
                         scenario_run& run) {
  stream s(ex, 0);
  activation::offload_options o;
  o.keep_threshold = 0;
  o.prefetch_bytes = std::size_t{8} << 20;
  o.prefetch_layers = 2;
  o.max_pending_bytes = 0;
  const std::vector<std::size_t> sizes = {(std::size_t{256} << 10) + 5, std::size_t{64} << 10,
                                          4096};
  const std::size_t n = sizes.size();
  std::vector<buffer> sources;
  std::vector<std::vector<unsigned char>> contents;
  // How often each source was handed back: exactly once by the end, whichever way it went.
  auto handed_back = std::make_shared<std::vector<int>>(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    sources.emplace_back(ex, memory_kind::device, sizes[i], 0);
    contents.push_back(pattern(sizes[i], 30 + static_cast<unsigned>(i)));
    ex.copy(sources.back().data(), contents.back().data(), sizes[i], s);
  }
  ex.synchronize(s);
  auto tensor_of = [&](std::size_t i) {
    activation::tensor t;
    t.data = sources[i].data();
    t.bytes = sizes[i];
    t.device = 0;
    t.type = activation::dtype::u8;
    t.shape = {static_cast<std::int64_t>(sizes[i])};
    t.release = [handed_back, i] { ++(*handed_back)[i]; };
    return t;
  };

  std::unique_ptr<activation::offloader> off;
  if (!run.step("create", [&] { off = impl.make(ex, o); })) return;
  std::vector<activation::handle> handles(n);
  std::vector<bool> packed(n, false);
  bool ok = true;
  for (std::size_t i = 0; ok && i < n; ++i) {
    const int layer = static_cast<int>(i);
    ok = run.step("pack tensor " + std::to_string(i),
                  [&] { handles[i] = off->pack(tensor_of(i), s); });
    packed[i] = ok;
    ok = ok && run.step("forward_layer_end " + std::to_string(layer),
                        [&] { off->forward_layer_end(layer, s); });
  }
  ok = ok && run.step("synchronize", [&] { off->synchronize(); });
  // Backward over every layer but the first: tensor 0 is still packed when the offloader is
  // destroyed, which must hand its source back once.
  for (std::size_t k = n; ok && k-- > 1;) {
    const int layer = static_cast<int>(k);
    ok = run.step("backward_layer_begin " + std::to_string(layer),
                  [&] { off->backward_layer_begin(layer, s); });
    activation::tensor back;
    ok = ok &&
         run.step("unpack tensor " + std::to_string(k), [&] { back = off->unpack(handles[k], s); });
    if (!ok) break;
    packed[k] = false;
    if (back.device != 0 || back.bytes != sizes[k]) {
      run.data_problem("tensor " + std::to_string(k) + " came back with " +
                       std::to_string(back.bytes) + " bytes on device " +
                       std::to_string(back.device) + " (packed: " + std::to_string(sizes[k]) +
                       " bytes on device 0)");
    } else {
      expect_bytes(ex, s, run, "tensor " + std::to_string(k) + " after unpack", back.data,
                   contents[k], sizes[k]);
    }
    run.last("releasing unpacked tensor " + std::to_string(k), [&] {
      if (back.release) back.release();
    });
  }
  run.last("destroy", [&] { off.reset(); });
  for (std::size_t i = 0; i < n; ++i) {
    // A tensor still packed when the scenario stopped early is given back by destroy, once.
    const int times = (*handed_back)[i];
    if (times != 1) {
      run.problem("the source of tensor " + std::to_string(i) + " was handed back " +
                  std::to_string(times) + " time(s) instead of once");
    }
  }
}

}  // namespace

std::vector<std::string> scenario_features() { return {"stash", "region", "arena", "activation"}; }

std::optional<std::string> subject_name(const fault_subjects& subjects,
                                        const std::string& feature) {
  if (feature == "stash" && subjects.stash) return subjects.stash->name;
  if (feature == "region" && subjects.region) return subjects.region->name;
  if (feature == "arena" && subjects.arena) return subjects.arena->name;
  if (feature == "activation" && subjects.activation) return subjects.activation->name;
  return std::nullopt;
}

bool subject_runs_on_cuda(const fault_subjects& subjects, const std::string& feature) {
  if (feature == "stash") return subjects.stash && subjects.stash->support.cuda;
  if (feature == "region") return subjects.region && subjects.region->support.cuda;
  if (feature == "arena") return subjects.arena && subjects.arena->support.cuda;
  if (feature == "activation") return subjects.activation && subjects.activation->support.cuda;
  return false;
}

scenario_result run_scenario(const std::string& feature, const fault_subjects& subjects,
                             executor& ex) {
  scenario_result r;
  r.feature = feature;
  r.implementation = subject_name(subjects, feature).value_or("");
  const interposer_control c = interposer_control::find();
  if (!c.loaded()) {
    r.unusable =
        "the interposer is not loaded in this process (offloadkit check --driver-faults "
        "preloads " OKIT_INTERPOSE_LIBRARY_NAME ")";
    return r;
  }
  if (r.implementation.empty()) {
    r.unusable = "the plugin provides no " + feature + " implementation";
    return r;
  }
  c.set_window(0);
  scenario_run run(c, r);
  try {
    if (feature == "stash") {
      stash_scenario(*subjects.stash, ex, run);
    } else if (feature == "region") {
      region_scenario(*subjects.region, ex, run);
    } else if (feature == "arena") {
      arena_scenario(*subjects.arena, ex, run);
    } else if (feature == "activation") {
      activation_scenario(*subjects.activation, ex, run);
    } else {
      r.unusable = "no scenario for feature '" + feature + "'";
    }
  } catch (const setup_failure& e) {
    r.unusable = std::string("the scenario's own setup failed: ") + e.what();
  } catch (const std::exception& e) {
    // The scenario's own work outside a step (its buffers, its stream) failed.
    r.unusable = std::string("the scenario failed outside the implementation's calls: ") + e.what();
  }
  c.set_window(0);
  // What the implementation's objects failed to tear down (a plugin's close that returned an
  // error): recorded by their wrappers' destructors in this process, so this case's.
  r.close_error = join_teardown_errors(take_teardown_errors());
  return r;
}

}  // namespace offloadkit::interpose
