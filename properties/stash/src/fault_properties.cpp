// The fault countdown: every allocation, copy, fill and launch failed in turn.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

/// Countdown fault injection (abseil style): fail the Nth allocation, copy, fill or launch the
/// stash issues, for N = 0, 1, 2, ... until a whole step runs without a fault. Every injected
/// fault surfaces as a typed exception; afterwards the pages are conserved and, after reset(), the
/// same stash runs the whole step correctly.
void prop_injected_faults(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload(true);
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const auto [dev, pin] = pool_for_peak(impl, plan.peak_pages,
                                        *rc::gen::inRange<std::uint64_t>(0, plan.peak_pages + 1));
  const stash_config cfg = config_for(r, dev, pin);
  fault_injection_adaptor faulty(ex);
  stream s(ex);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  for (std::size_t n = 0; n < 10000; ++n) {
    std::unique_ptr<stash_interface> st;
    const offloadkit::testing::armed_outcome o = offloadkit::testing::run_armed(
        faulty,
        {op_kind::allocate_device, op_kind::allocate_pinned, op_kind::copy, op_kind::fill,
         op_kind::launch},
        n, [&] {
          st = impl.make(faulty, cfg, s);
          for (const schedule_step& step : r.w.sched.steps) {
            if (step.kind == step_kind::stash) {
              io.write_u64(io.rows.data(), rows_of(r.w, step.key));
              st->stash(step.key, io.src.data(), io.rows.as<std::uint64_t>(), s);
            } else {
              st->restore(step.key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
            }
          }
        });
    if (o.threw != o.fired) {
      RC_FAIL(detail::concat(
          "fault number ", n,
          o.threw ? " was not injected but a call threw" : " was injected but nothing threw"));
    }
    if (st) {
      const std::string err = check_conservation(st->snapshot(s), cfg, impl.caps.page_ids);
      if (!err.empty()) RC_FAIL(detail::concat("after fault number ", n, ": ", err));
      st->reset(s);
      run_workload(*st, io, r.w, {}, false, impl.caps.page_ids, static_cast<std::uint32_t>(n + 1));
      RC_ASSERT(st->status(s).ok());
    }
    if (!o.fired) return;
  }
  RC_FAIL("the step never completed without a fault");
}

}  // namespace offloadkit::stash::testing
