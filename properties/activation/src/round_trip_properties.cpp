// Round trips: random layer stacks unpacked bit-exact, the decisions an implementation reports,
// and tensors returned to their device of origin with two devices.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

namespace {

// ---- round trip --------------------------------------------------------------------------------

/// round_trip under an opaque predicate (defined with the checkers below).
void round_trip_reported(executor& ex, offloader& off, training_step& step, const stack_case& c,
                         std::uint64_t seed);

}  // namespace

/// Every tensor comes back bit for bit, and the counters every implementation keeps agree with what
/// was packed: each pack() counted, the tensors below the threshold as kept, the others' bytes as
/// offloaded (checks and benchmarks read them). The threshold is the one the implementation
/// reports (keep_threshold()): the configured one, or 0 for one that has none, such as
/// saved-tensor hooks, which see every tensor.
void round_trip(executor& ex, const activation_implementation& impl) {
  const stack_case c = gen_stack(1);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  if (impl.caps.decision == offloadkit::testing::activation_offload_decision::opaque_predicate) {
    round_trip_reported(ex, *off, step, c, seed);
    return;
  }
  run_steps(ex, *off, step, c, seed);
  const std::size_t threshold = off->keep_threshold();
  std::size_t packed = 0, kept = 0, offloaded = 0;
  for (const layer_spec& l : c.layers) {
    for (const tensor_spec& t : l.saved) {
      packed += 1;
      if (t.bytes() < threshold) {
        kept += 1;
      } else {
        offloaded += t.bytes();
      }
    }
  }
  const auto steps = static_cast<std::size_t>(c.steps);
  const offload_stats st = off->stats();
  if (st.packed != steps * packed || st.kept != steps * kept ||
      st.offloaded_bytes != steps * offloaded) {
    RC_FAIL(off->name() + ": stats() counts packed=" + std::to_string(st.packed) + " kept=" +
            std::to_string(st.kept) + " offloaded_bytes=" + std::to_string(st.offloaded_bytes) +
            ", the steps packed " + std::to_string(steps * packed) + ", kept " +
            std::to_string(steps * kept) + " and offloaded " + std::to_string(steps * offloaded) +
            " bytes at keep_threshold() = " + std::to_string(threshold) + "; " + show(c));
  }
}

// ---- two devices -------------------------------------------------------------------------------

/// Layers on two devices; each case runs one step with unpack on the stream of each tensor's own
/// device, one with it on device 0's and one on device 1's, in a random order. Every tensor must
/// come back where the profile's return device says: on its device of origin (`origin`), also
/// when the stream unpack() is given (and the backward hint before it) belongs to the other
/// device, and when the last work issued before it (the previous layer's compute and checks) ran
/// there; on the device of unpack's stream (`current`), whichever device it was packed from.
void two_devices(executor& ex, const activation_implementation& impl) {
  if (ex.device_count() < 2) {
    RC_SUCCEED("skipped: " + ex.name() + " has " + std::to_string(ex.device_count()) +
               " device(s), needs 2");
  }
  stack_case c = gen_stack(2);
  // The first layer on device 0 and the last on device 1, each with a tensor that is offloaded
  // (not empty, not below the threshold), so that both origins are exercised every case.
  if (c.layers.size() < 2) c.layers.emplace_back();
  c.layers.front().device = 0;
  c.layers.back().device = 1;
  for (layer_spec* l : {&c.layers.front(), &c.layers.back()}) {
    const std::size_t least = std::max<std::size_t>(c.options.keep_threshold, 1);
    const bool offloads = std::any_of(l->saved.begin(), l->saved.end(),
                                      [least](const tensor_spec& t) { return t.bytes() >= least; });
    if (!offloads) {
      tensor_spec t;
      t.shape = {static_cast<std::int64_t>(least + *rc::gen::inRange<std::size_t>(0, 100))};
      l->saved.push_back(t);
    }
  }
  std::vector<int> placements{-1, 0, 1};
  for (int k = *rc::gen::inRange(0, 6); k > 0; --k) {
    std::next_permutation(placements.begin(), placements.end());
  }
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    c.unpack_device = placements[i];
    step_options opt;
    opt.unpack_device = c.unpack_device;
    opt.return_on_unpack_device =
        impl.caps.return_device == offloadkit::testing::activation_return_device::current;
    const step_report rep = step.run(off.get(), seed + i, opt);
    if (!rep.ok()) {
      RC_FAIL(off->name() + " step " + std::to_string(i) + ": " + rep.describe() + "; " + show(c));
    }
  }
}

namespace {

/// Reads the decision an offloader with an opaque predicate reports for each pack() (stats()
/// before and after it) and checks that it holds: the counters move as reported_decision says,
/// and a tensor reported kept was not copied off: its source is not handed back before its
/// unpack(), which returns it in its own buffer. Offloaded ones are left to the step's checks
/// (exact bytes, sources given back once).
class decision_checker final : public forwarding_offloader {
 public:
  explicit decision_checker(offloader& inner) : forwarding_offloader(inner) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  struct packed_entry {
    bool kept = false;
    const void* source = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<bool> given_back;
  };
  void fail(std::string what) {
    if (violation_.empty()) violation_ = std::move(what);
  }
  handle do_pack(tensor t, stream_ref s) override {
    packed_entry e;
    e.source = t.data;
    e.bytes = t.bytes;
    e.given_back = std::make_shared<bool>(false);
    auto owner_release = std::move(t.release);
    t.release = [flag = e.given_back, owner_release] {
      *flag = true;
      if (owner_release) owner_release();
    };
    const offload_stats before = inner_.stats();
    const handle h = inner_.pack(std::move(t), s);
    const std::string wrong = reported_decision(before, inner_.stats(), e.bytes, false, e.kept);
    if (!wrong.empty()) fail("handle " + std::to_string(h.id) + ": " + wrong);
    entries_[h.id] = e;
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    const bool given_back_before = entries_.count(h.id) != 0 && *entries_[h.id].given_back;
    tensor t = inner_.unpack(h, s);
    const auto it = entries_.find(h.id);
    if (it != entries_.end() && it->second.kept && it->second.bytes > 0) {
      if (given_back_before) {
        fail("handle " + std::to_string(h.id) + " (" + std::to_string(it->second.bytes) +
             " bytes) was reported kept, yet its source was handed back before its unpack()");
      } else if (t.data != it->second.source) {
        fail("handle " + std::to_string(h.id) + " (" + std::to_string(it->second.bytes) +
             " bytes) was reported kept, yet unpack() returned it in another buffer");
      }
    }
    if (it != entries_.end()) entries_.erase(it);
    return t;
  }

  std::map<std::uint64_t, packed_entry> entries_;
  std::string violation_;
};

void round_trip_reported(executor& ex, offloader& off, training_step& step, const stack_case& c,
                         std::uint64_t seed) {
  decision_checker checked(off);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
}

}  // namespace

}  // namespace offloadkit::activation::testing
