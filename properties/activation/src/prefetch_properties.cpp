// Prefetch: uploads in backward order, and none left inside unpack() in the steady state.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

namespace {

std::string show_arrivals(const std::vector<upload_watcher::arrival>& arrivals) {
  std::ostringstream os;
  os << "unpacks in backward order (step/layer/handle: how):";
  for (const auto& a : arrivals) {
    os << " " << a.step << "/" << a.layer << "/" << a.id << ":"
       << (a.prefetched ? "prefetch#" + std::to_string(a.order)
           : a.demand   ? "demand"
                        : "none");
  }
  return os.str();
}

/// Runs `c` through an upload_watcher on a fresh implementation; returns what it saw.
std::vector<upload_watcher::arrival> watch_uploads(executor& ex,
                                                   const activation_implementation& impl,
                                                   const stack_case& c, std::uint64_t seed) {
  training_step step(ex, c.layers, compute_threads);
  upload_log log(ex);
  auto off = impl.make(log, c.options);
  upload_watcher watched(*off, log);
  step_options opt;
  opt.unpack_device = c.unpack_device;
  for (int i = 0; i < c.steps; ++i) {
    const step_report rep = step.run(&watched, seed + static_cast<std::uint64_t>(i), opt);
    if (!rep.ok()) RC_FAIL(off->name() + " step " + std::to_string(i) + ": " + rep.describe());
    watched.next_step();
  }
  return watched.arrivals();
}

}  // namespace

/// Prefetch copies are issued in backward order: among the tensors that arrived by prefetch, in
/// the order backward unpacks them, the uploads that brought them were issued in that same order.
/// A prefetch in another order keeps every byte right and loses the overlap: the tensor needed
/// next waits behind one needed later. Decided exactly from the copies the executor was asked for.
void prefetch_order(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check
  const auto arrivals = watch_uploads(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
  const upload_watcher::arrival* last = nullptr;
  for (const auto& a : arrivals) {
    if (!a.prefetched) continue;
    if (last != nullptr && a.order < last->order) {
      RC_FAIL("handle " + std::to_string(a.id) + " is unpacked after handle " +
              std::to_string(last->id) + " but its prefetch was issued before (upload #" +
              std::to_string(a.order) + " < #" + std::to_string(last->order) + "); " +
              show_arrivals(arrivals) + "; " + show(c));
    }
    last = &a;
  }
}

/// For a schedule that fits the bound (prefetch_bytes above everything offloaded, at least the
/// layer whose backward begins in the window), steps after the first upload nothing on demand:
/// every tensor that is uploaded at all was prefetched before its unpack().
void steady_demand_uploads(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;
  c.options.prefetch_bytes = std::size_t{1} << 30;
  c.options.prefetch_layers = *rc::gen::inRange(1, 4);
  c.steps = *rc::gen::inRange(2, 4);
  const auto arrivals = watch_uploads(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
  for (const auto& a : arrivals) {
    if (a.step > 0 && a.demand) {
      RC_FAIL("step " + std::to_string(a.step) + ": handle " + std::to_string(a.id) + " of layer " +
              std::to_string(a.layer) + " was uploaded on demand in steady state; " +
              show_arrivals(arrivals) + "; " + show(c));
    }
  }
}

}  // namespace offloadkit::activation::testing
