// Bounds: the prefetch memory bound, the bound on sources held while their copies are in flight,
// and every option at its edges.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

namespace {

/// Forwards to an offloader and checks after every call that the device memory it allocated
/// never exceeded the prefetch bound plus the restored tensors the caller holds at that moment.
class bound_checker final : public forwarding_offloader {
 public:
  bound_checker(offloader& inner, device_bytes_tracker& tracker, std::size_t bound)
      : forwarding_offloader(inner), tracker_(tracker), bound_(bound) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  /// The caller's holding may change within a call; the peak may use the larger of the two.
  void check(const char* where, std::size_t held_before) {
    const std::size_t peak = tracker_.peak_since_reset();
    const std::size_t held = std::max(held_before, held_by_caller_);
    // Compared without adding, so that a bound at the largest size_t does not wrap.
    if (peak > held && peak - held > bound_ && violation_.empty()) {
      std::ostringstream os;
      os << "after " << where << ": device bytes held by the offloader peaked at " << peak
         << " > bound " << bound_ << " + restored tensors held by the caller " << held;
      violation_ = os.str();
    }
    tracker_.reset_peak();
  }
  handle do_pack(tensor t, stream_ref s) override {
    void* src = t.data;
    const handle h = inner_.pack(std::move(t), s);
    sources_[h.id] = src;
    check("pack", held_by_caller_);
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    tensor t = inner_.unpack(h, s);
    // A tensor handed back in its own source buffer is the caller's memory, not the offloader's.
    const std::size_t counted = t.data != sources_[h.id] ? t.bytes : 0;
    sources_.erase(h.id);
    held_by_caller_ += counted;
    check("unpack", held_by_caller_);
    auto inner_release = std::move(t.release);
    t.release = [this, inner_release, counted] {
      const std::size_t before = held_by_caller_;
      if (inner_release) inner_release();
      held_by_caller_ -= counted;
      check("release", before);
    };
    return t;
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    inner_.forward_layer_end(layer, s);
    check("forward_layer_end", held_by_caller_);
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    inner_.backward_layer_begin(layer, s);
    check("backward_layer_begin", held_by_caller_);
  }
  void do_synchronize() override {
    inner_.synchronize();
    check("synchronize", held_by_caller_);
  }

  device_bytes_tracker& tracker_;
  std::size_t bound_;
  std::size_t held_by_caller_ = 0;
  std::map<std::uint64_t, void*> sources_;
  std::string violation_;
};

void check_memory_bound(executor& ex, const activation_implementation& impl, const stack_case& c,
                        std::uint64_t seed) {
  training_step step(ex, c.layers, compute_threads);
  device_bytes_tracker tracker(ex);
  auto off = impl.make(tracker, c.options);
  bound_checker checked(*off, tracker, c.options.prefetch_bytes);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
  RC_ASSERT(off->stats().peak_prefetch_bytes <= c.options.prefetch_bytes);
}

/// A layer of one-dimensional u8 tensors of the given sizes, in pack order.
layer_spec bytes_layer(std::initializer_list<std::size_t> sizes) {
  layer_spec l;
  for (const std::size_t b : sizes) {
    tensor_spec t;
    t.shape = {static_cast<std::int64_t>(b)};
    l.saved.push_back(t);
  }
  return l;
}

/// Inputs that reuse a larger cached buffer for a smaller tensor while a prefetch is decided near
/// the bound. Layer 1's tensor (r bytes) is prefetched, lent, given back and cached; in layer 0 the
/// last packed tensor (q < r bytes, at least half of r less 4 KiB, so the buffer serves it) reuses
/// that buffer, and the next one (p bytes, q < p <= r) may be prefetched only if the r - q bytes
/// the lent buffer holds beyond its tensor count against the bound, which lies in [r, r + p - q).
/// A small top layer keeps layer 1 from being the last one packed (whose sources may be served in
/// place); two or more steps, so that buffers cached in one step meet the next.
stack_case near_bound_reuse_case(std::size_t r, std::size_t q, std::size_t p, std::size_t bound,
                                 int steps) {
  stack_case c;
  c.layers = {bytes_layer({p, q}), bytes_layer({r}), bytes_layer({64})};
  c.options.keep_threshold = 0;
  c.options.prefetch_layers = 1;
  c.options.prefetch_bytes = bound;
  c.steps = steps;
  return c;
}

stack_case gen_near_bound_reuse() {
  using rc::gen::inRange;
  const auto full = [](auto gen) { return *rc::gen::resize(100, std::move(gen)); };
  const std::size_t r = full(inRange<std::size_t>(4096, 65536));
  const std::size_t q = full(inRange<std::size_t>((r - 4096 + 1) / 2 + 1, r));
  const std::size_t p = full(inRange<std::size_t>(q + 1, r + 1));
  const std::size_t bound = full(inRange<std::size_t>(r, r + p - q));
  return near_bound_reuse_case(r, q, p, bound, *rc::gen::element(2, 3));
}

}  // namespace

/// Device memory held for prefetch and cache stays within prefetch_bytes plus what the caller
/// holds. Every case first runs one fixed input that reuses a larger cached buffer near the bound
/// (so every run reaches that edge), then a drawn one: a quarter of them from the same family.
void memory_bound(executor& ex, const activation_implementation& impl) {
  check_memory_bound(ex, impl, near_bound_reuse_case(8192, 5000, 7000, 8192, 2), 1);
  const bool near = *rc::gen::element(0, 1, 2, 3) == 0;
  const stack_case c = near ? gen_near_bound_reuse() : gen_stack(1);
  check_memory_bound(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
}

namespace {

// ---- pending-source bound ----------------------------------------------------------------------

/// Forwards to an offloader and checks after every pack() that the sources it still holds while
/// their copies are in flight (packed, above the keep threshold, not given back, not unpacked)
/// stay within max_pending_bytes per device, or that a single source is in flight there.
/// Whether a tensor is kept is read from the threshold the offloader reports, or, for one that
/// decides by an opaque predicate (`reported`), from the stats() it reports around the pack().
class pending_checker final : public forwarding_offloader {
 public:
  pending_checker(offloader& inner, std::size_t bound, bool reported = false)
      : forwarding_offloader(inner), bound_(bound), reported_(reported) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  struct held {
    std::size_t bytes = 0;
    int device = 0;
    bool given_back = false;
  };
  handle do_pack(tensor t, stream_ref s) override {
    bool kept = t.bytes < inner_.keep_threshold();
    auto entry = std::make_shared<held>(held{t.bytes, t.device, false});
    auto owner_release = std::move(t.release);
    t.release = [entry, owner_release] {
      entry->given_back = true;
      if (owner_release) owner_release();
    };
    const std::size_t kept_before = reported_ ? inner_.stats().kept : 0;
    const handle h = inner_.pack(std::move(t), s);
    if (reported_) kept = inner_.stats().kept > kept_before;
    if (!kept) entries_[h.id] = entry;
    std::size_t pending = 0, count = 0;
    for (const auto& [id, e] : entries_) {
      if (e->given_back || e->device != entry->device) continue;
      pending += e->bytes;
      ++count;
    }
    if (pending > bound_ && count > 1 && violation_.empty()) {
      std::ostringstream os;
      os << "after pack of handle " << h.id << " (" << entry->bytes << " bytes, device "
         << entry->device << (kept ? ", kept" : "") << "): " << count
         << " sources held with copies in flight total " << pending << " bytes > max_pending_bytes "
         << bound_;
      violation_ = os.str();
    }
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    tensor t = inner_.unpack(h, s);
    entries_.erase(h.id);  // the caller's now, whichever buffer it came back in
    return t;
  }

  std::size_t bound_;
  bool reported_;
  std::map<std::uint64_t, std::shared_ptr<held>> entries_;
  std::string violation_;
};

}  // namespace

/// With copies held back by delays, sources in flight stay within max_pending_bytes after every
/// pack, and results stay exact.
void pending_bound(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check
  c.options.max_pending_bytes =
      *rc::gen::element<std::size_t>(1, 256, 4096, 65536, std::size_t{1} << 20);
  // Half the cases take the bound from the stack: one byte less than two tensors packed one after
  // the other on one device, so that each fits alone and the two together do not.
  struct offloaded {
    std::size_t bytes;
    int device;
  };
  std::vector<offloaded> order;
  for (const layer_spec& l : c.layers) {
    for (const tensor_spec& t : l.saved) {
      if (t.bytes() > 0 && t.bytes() >= c.options.keep_threshold) {
        order.push_back({t.bytes(), l.device});
      }
    }
  }
  std::vector<std::size_t> pairs;  // sums of neighbours on one device
  if (order.size() < 2) {  // small cases: a last layer of two tensors gives the stack a pair
    const std::size_t a =
        std::max<std::size_t>(c.options.keep_threshold, 1 + *rc::gen::element(0, 99, 4095));
    const std::size_t b =
        std::max<std::size_t>(c.options.keep_threshold, 1 + *rc::gen::element(0, 99, 4095));
    c.layers.push_back(bytes_layer({a, b}));
    order.push_back({a, 0});
    order.push_back({b, 0});
  }
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i].device == order[i + 1].device)
      pairs.push_back(order[i].bytes + order[i + 1].bytes);
  }
  if (!pairs.empty() && *rc::gen::arbitrary<bool>()) {
    c.options.max_pending_bytes = pairs[*rc::gen::inRange<std::size_t>(0, pairs.size())] - 1;
  }
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, std::chrono::microseconds(300), seed);
  auto off = impl.make(delayed, c.options);
  pending_checker checked(*off, c.options.max_pending_bytes, reports_decisions(impl));
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
}

// ---- configuration edges -----------------------------------------------------------------------

/// Every configuration field at its edges (0, 1 and the largest value), all combinations, on a
/// fixed stack of tensors of 0, 1, 63, 64, 4096 and 70000 bytes over three layers and two steps:
/// every result exact, the prefetch and pending bounds held where the implementation honours
/// them, and with prefetch_layers = 0 no tensor uploaded ahead of its unpack().
void config_edges(executor& ex, const activation_implementation& impl) {
  const std::size_t big = std::numeric_limits<std::size_t>::max();
  stack_case base;
  base.layers = {bytes_layer({0, 70000, 1}), bytes_layer({4096, 63}), bytes_layer({64, 4096})};
  base.steps = 2;
  int combination = 0;
  for (const std::size_t keep : {std::size_t{0}, std::size_t{1}, big}) {
    for (const std::size_t prefetch_bytes : {std::size_t{0}, std::size_t{1}, big}) {
      for (const int layers : {0, 1, std::numeric_limits<int>::max()}) {
        for (const std::size_t pending : {std::size_t{0}, std::size_t{1}, big}) {
          stack_case c = base;
          c.options.keep_threshold = keep;
          c.options.prefetch_bytes = prefetch_bytes;
          c.options.prefetch_layers = layers;
          c.options.max_pending_bytes = pending;
          const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(combination++);
          training_step step(ex, c.layers, compute_threads);
          device_bytes_tracker tracker(ex);
          upload_log log(tracker);
          auto off = impl.make(log, c.options);
          bound_checker bounded(*off, tracker, impl.caps.prefetch_bound ? prefetch_bytes : big);
          pending_checker pended(bounded, impl.caps.pending_bound && pending != 0 ? pending : big,
                                 reports_decisions(impl));
          upload_watcher watched(pended, log);
          run_steps(ex, watched, step, c, seed);
          if (!bounded.violation().empty()) RC_FAIL(bounded.violation() + "; " + show(c));
          if (!pended.violation().empty()) RC_FAIL(pended.violation() + "; " + show(c));
          if (layers == 0) {
            for (const auto& a : watched.arrivals()) {
              if (a.prefetched) {
                RC_FAIL("prefetch_layers = 0, yet handle " + std::to_string(a.id) +
                        " was uploaded before its unpack(); " + show(c));
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace offloadkit::activation::testing
