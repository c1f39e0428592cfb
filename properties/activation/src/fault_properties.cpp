// The fault countdown over a forward and backward pass.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

// ---- fault countdown ---------------------------------------------------------------------------

/// For N = 0, 1, 2, ... the Nth allocation, copy, fill, launch, host function, event record or
/// wait the offloader makes fails, in a random forward and backward pass over a few layers. Each
/// failure reaches the caller as a typed error; a failed pack() leaves the source with the caller
/// (not given back, its bytes untouched), a failed unpack() leaves the tensor packed, and the
/// failed call, retried once, succeeds. Then every unpacked tensor holds what was packed on its
/// device of origin; stats() counts the packs that succeeded, not the attempts (every run counts
/// what the run without a failure counts); tensors left packed go back to their owner when the
/// offloader is destroyed; every source is given back exactly once; and once the offloader is
/// gone it holds nothing (the resource ledger: allocations, streams, events).
void fault_countdown(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  struct planned {
    std::size_t bytes;
    int layer;
  };
  std::vector<planned> plan;
  // At full size: rapidcheck scales inRange by the case's size, which would leave the first cases
  // without tensors. The first layer has at least one.
  const int layers = *rc::gen::resize(100, inRange(1, 4));
  for (int l = 0; l < layers; ++l) {
    for (int k = *rc::gen::resize(100, inRange(l == 0 ? 1 : 0, 4)); k > 0; --k) {
      plan.push_back({*rc::gen::element<std::size_t>(0, 1, 64, 3000, 65536), l});
    }
  }
  offload_options o;
  o.keep_threshold = *rc::gen::element<std::size_t>(0, 0, 64, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 8192, std::size_t{1} << 20);
  o.prefetch_layers = *inRange(0, 3);
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 1, std::size_t{1} << 20);
  // The last tensors of the backward pass are never unpacked: destruction gives them back.
  const std::size_t left_packed =
      plan.empty() ? 0 : *rc::gen::element<std::size_t>(0, 0, 0, 1, plan.size());
  RC_TAG(offloadkit::detail::concat(plan.size(), " tensors"));
  RC_LOG() << "keep_threshold=" << o.keep_threshold << " prefetch_bytes=" << o.prefetch_bytes
           << " prefetch_layers=" << o.prefetch_layers
           << " max_pending_bytes=" << o.max_pending_bytes << " left_packed=" << left_packed
           << " tensors (layer:bytes):";
  for (const planned& p : plan) RC_LOG() << " " << p.layer << ":" << p.bytes;
  RC_LOG() << "\n";

  stream s(ex);
  std::vector<buffer> sources;
  sources.reserve(plan.size());
  for (const planned& p : plan) {
    sources.emplace_back(ex, memory_kind::device, std::max<std::size_t>(p.bytes, 1));
  }
  std::size_t largest = 1;
  for (const planned& p : plan) largest = std::max(largest, p.bytes);
  buffer check(ex, memory_kind::pinned, largest);
  const offloadkit::testing::sync_on_exit drain(ex, {s});
  // The bytes of `p` (device memory) at the end of s's work, against the value tensor i holds.
  const auto holds = [&](const void* p, std::size_t bytes, int value) -> std::string {
    if (bytes == 0) return {};
    ex.copy(check.data(), p, bytes, s);
    ex.synchronize(s);
    const auto* got = check.as<unsigned char>();
    for (std::size_t b = 0; b < bytes; ++b) {
      if (got[b] != static_cast<unsigned char>(value)) {
        return offloadkit::detail::concat("byte ", b, " of ", bytes, " is ", int(got[b]),
                                          ", expected ", value);
      }
    }
    return {};
  };
  // Per run: the call that failed (empty in the last run, where none did) and what stats() said.
  struct counted {
    std::string failed_call;
    offload_stats stats;
  };
  std::vector<counted> runs;

  offloadkit::testing::run_fault_countdown(
      ex, offloadkit::testing::offload_fault_kinds(), [&](offloadkit::testing::countdown_run run) {
        const auto value_of = [&run](std::size_t i) {
          return static_cast<int>((i * 37 + run.n * 11) % 255 + 1);
        };
        std::vector<int> released(plan.size(), 0);
        std::string failed_call;  // the call that failed in this run, for messages
        // Runs `call`; on an injected failure checks it with `after_failure`, disarms and runs it
        // once more, which must succeed.
        const auto retried = [&](const std::string& what, auto&& call, auto&& after_failure) {
          try {
            return call();
          } catch (const std::exception& e) {
            offloadkit::testing::expect_injected(e, what);
            if (!failed_call.empty()) {
              RC_FAIL(what + " failed after " + failed_call + " had failed, with one fault armed");
            }
            failed_call = what;
            after_failure();
            run.faults.disarm();
            return call();
          }
        };
        const auto nothing = [] {};
        {
          auto off = impl.make(run.ex, o);
          // A layer hint (forward_layer_end or backward_layer_begin), retried like any call.
          const auto hint = [&](const char* name, void (offloader::*call)(int, stream_ref),
                                int layer) {
            retried(
                offloadkit::detail::concat(name, "(", layer, ")"),
                [&] {
                  ((*off).*call)(layer, s);
                  return 0;
                },
                nothing);
          };
          std::vector<handle> handles(plan.size());
          for (std::size_t i = 0; i < plan.size(); ++i) {
            const planned& p = plan[i];
            void* data = sources[i].data();
            ex.fill(data, value_of(i), std::max<std::size_t>(p.bytes, 1), s);
            const auto pack_once = [&] {
              tensor t;
              t.data = data;
              t.bytes = p.bytes;
              t.shape = {static_cast<std::int64_t>(p.bytes)};
              t.release = [&released, &ex, &s, i, data, bytes = p.bytes] {
                ++released[i];
                ex.fill(data, 0xEE, std::max<std::size_t>(bytes, 1), s);  // reused at once
              };
              return off->pack(std::move(t), s);
            };
            handles[i] = retried("pack of tensor " + std::to_string(i), pack_once, [&] {
              if (released[i] != 0) {
                RC_FAIL(offloadkit::detail::concat(
                    "a failed pack of tensor ", i, " gave its source back ", released[i],
                    " time(s): the caller still owns it and will pack it again"));
              }
              const std::string diff = holds(data, p.bytes, value_of(i));
              if (!diff.empty()) {
                RC_FAIL(offloadkit::detail::concat("a failed pack of tensor ", i,
                                                   " changed its source: ", diff));
              }
            });
            if (i + 1 == plan.size() || plan[i + 1].layer != p.layer) {
              hint("forward_layer_end", &offloader::forward_layer_end, p.layer);
            }
          }
          const std::size_t unpacked = plan.size() - left_packed;
          for (std::size_t j = 0; j < unpacked; ++j) {
            const std::size_t i = plan.size() - 1 - j;
            const planned& p = plan[i];
            if (j == 0 || plan[i + 1].layer != p.layer) {
              hint("backward_layer_begin", &offloader::backward_layer_begin, p.layer);
            }
            tensor back = retried(
                "unpack of tensor " + std::to_string(i), [&] { return off->unpack(handles[i], s); },
                nothing);
            if (back.device != 0 || back.bytes != p.bytes) {
              RC_FAIL(offloadkit::detail::concat("tensor ", i, " came back with ", back.bytes,
                                                 " bytes on device ", back.device, ", packed ",
                                                 p.bytes, " bytes on device 0"));
            }
            const std::string diff = holds(back.data, back.bytes, value_of(i));
            if (!diff.empty()) {
              RC_FAIL(offloadkit::detail::concat(
                  "unpacked tensor ", i, ": ", diff,
                  failed_call.empty() ? std::string() : " (" + failed_call + " had failed)"));
            }
            if (back.release) back.release();
          }
          retried(
              "synchronize()",
              [&] {
                off->synchronize();
                return 0;
              },
              nothing);
          runs.push_back({failed_call, off->stats()});
          run.faults.disarm();  // destruction has no caller to report to
        }
        ex.synchronize(s);
        for (std::size_t i = 0; i < plan.size(); ++i) {
          if (released[i] != 1) {
            RC_FAIL(offloadkit::detail::concat(
                "tensor ", i, "'s source was given back ", released[i], " times, not once",
                failed_call.empty() ? std::string() : " (" + failed_call + " had failed)",
                i >= plan.size() - left_packed ? "; it was left packed at destruction" : ""));
          }
        }
      });
  // The packs that succeeded are counted, not the attempts: every run, whatever failed in it,
  // counts what the last run, where nothing failed, counts.
  const offload_stats& clean = runs.back().stats;
  for (const counted& r : runs) {
    if (r.stats.packed != clean.packed || r.stats.kept != clean.kept ||
        r.stats.offloaded_bytes != clean.offloaded_bytes) {
      RC_FAIL(offloadkit::detail::concat(
          "with ", r.failed_call, " failing once, stats() counts packed=", r.stats.packed,
          " kept=", r.stats.kept, " offloaded_bytes=", r.stats.offloaded_bytes,
          "; with no call failing it counts ", clean.packed, ", ", clean.kept, " and ",
          clean.offloaded_bytes));
    }
  }
}

}  // namespace offloadkit::activation::testing
