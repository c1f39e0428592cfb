// The adaptors: recovery from injected faults, and the counting adaptor's figures.
#include "executor_properties.hpp"

namespace offloadkit::testing::executor_properties {

namespace {

// ---- fault injection
// ------------------------------------------------------------------------------

/// One pass of an operation sequence that touches every armed kind: allocations of each memory
/// kind, copies through pinned and device memory, and a VMM range (create, map, set access) that
/// the data goes through. Returns normally only when the data came back intact.
void fault_sequence(executor& ex, std::size_t bytes, std::uint64_t seed) {
  stream s(ex);
  buffer host(ex, memory_kind::pageable, bytes);
  write_pattern(host.data(), bytes, seed);
  buffer pin(ex, memory_kind::pinned, bytes);
  // A GPU's driver reports free memory in granules and cudaMalloc sub-allocates small buffers, so
  // a small leaked buffer would not show in it: there the device buffer spans two granules.
  const std::size_t g = ex.granularity(0);
  const std::size_t dev_bytes = ex.kind() == backend::host ? bytes : std::max(bytes, 2 * g);
  buffer dev(ex, memory_kind::device, dev_bytes);
  buffer back(ex, memory_kind::pinned, bytes);
  const sync_on_exit outer(ex, {s});
  ex.copy(pin.data(), host.data(), bytes, s);
  ex.copy(dev.data(), pin.data(), bytes, s);
  {
    mapped_range range(ex, std::max<std::size_t>(1, (bytes + g - 1) / g) * g);
    const sync_on_exit inner(ex, {s});
    ex.copy(range.data(), dev.data(), bytes, s);
    ex.copy(back.data(), range.data(), bytes, s);
    ex.synchronize(s);
  }
  expect_bytes(back.data(), host.data(), bytes, "fault sequence round trip");
}

/// Free device memory is back to `start`. A GPU's driver may hold memory a little longer and other
/// processes move the figure, so there it is polled with a tolerance of one granule.
void expect_memory_back(executor& ex, std::size_t start, const std::string& when) {
  std::size_t free = ex.device_memory(0).free;
  const std::size_t tolerance = ex.kind() == backend::host ? 0 : ex.granularity(0);
  for (int i = 0; i < 20 && free + tolerance < start && ex.kind() != backend::host; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    free = ex.device_memory(0).free;
  }
  if (free + tolerance < start) {
    RC_FAIL(offloadkit::detail::concat("device memory leaked ", when, ": ", start - free,
                                       " bytes fewer free than before"));
  }
  if (ex.kind() == backend::host && free != start) {
    RC_FAIL(offloadkit::detail::concat("device memory accounting moved ", when, ": ", free,
                                       " bytes free, ", start, " before"));
  }
}

}  // namespace

/// Countdown fault injection (abseil's model): for N = 0, 1, 2, ... the N-th allocation, copy,
/// create_physical, map or set_access of the sequence fails; after each injected failure a clean
/// run of the sequence still works and no device memory is lost.
void fault_injection_leaves_executor_usable(executor& base) {
  const std::size_t bytes = gen_bytes(1 * mib);
  const std::uint64_t seed = gen_seed();
  fault_injection_adaptor ex(base);
  const std::vector<op_kind> kinds = {op_kind::allocate_device,   op_kind::allocate_pinned,
                                      op_kind::allocate_pageable, op_kind::copy,
                                      op_kind::create_physical,   op_kind::map,
                                      op_kind::set_access};
  // A first clean run creates whatever the platform creates lazily; that is not a leak.
  fault_sequence(ex, bytes, seed);
  const std::size_t start = ex.device_memory(0).free;

  std::size_t n = 0;
  for (;; ++n) {
    RC_ASSERT(n < 1000);
    const auto [threw, fired, calls, what] =
        run_armed(ex, kinds, n, [&] { fault_sequence(ex, bytes, seed + n); });
    if (!threw) {
      // The sequence made fewer than n + 1 armed calls: every position has been failed once.
      RC_ASSERT(!fired);
      RC_ASSERT(calls == n);
      break;
    }
    RC_ASSERT(fired);
    fault_sequence(ex, bytes, seed ^ n);
    expect_memory_back(ex, start,
                       offloadkit::detail::concat("after injected fault #", n, " (", what, ")"));
  }
  RC_ASSERT(n > 0);
}

// ---- counting adaptor
// -----------------------------------------------------------------------------

/// The counting adaptor's figures equal a model's for a random sequence of allocations, copies
/// between every kind of memory, fills, launches, host functions and event waits.
void counting_adaptor_counts(executor& base) {
  counting_adaptor ex(base);
  counting_adaptor::counts model;
  auto count_call = [&model](op_kind k) { ++model.calls[static_cast<std::size_t>(k)]; };

  stream s0(ex);
  stream s1(ex);
  std::vector<buffer> bufs;
  auto allocate = [&](memory_kind kind, std::size_t size) {
    bufs.emplace_back(ex, kind, size);
    count_call(allocation_op(kind));
    ++model.allocations[static_cast<std::size_t>(kind)];
    model.allocated_bytes[static_cast<std::size_t>(kind)] += size;
  };
  allocate(memory_kind::device, 8 * sizeof(std::uint64_t) + sizeof(unsigned long long));
  auto* const scratch = bufs.front().as<unsigned char>();
  std::vector<event> events;
  const sync_on_exit guard(ex, {s0, s1});
  // Fresh events for every record keep this property about counting, not about event reuse.
  auto order = [&](stream_ref from, stream_ref to) {
    events.emplace_back(ex);
    ex.record(events.back(), from);
    ex.wait(events.back(), to);
    count_call(op_kind::record);
    count_call(op_kind::wait);
  };

  const auto steps = *rc::gen::inRange(1, 40);
  for (int step = 0; step < steps; ++step) {
    const int op = bufs.size() < 3 ? 0 : *rc::gen::inRange(0, 6);
    const stream_ref s = *rc::gen::arbitrary<bool>() ? s0.ref() : s1.ref();
    if (op == 0) {
      allocate(gen_kind(), *rc::gen::inRange<std::size_t>(0, 64 * kib));
    } else if (op == 1) {
      const std::size_t i = *rc::gen::inRange<std::size_t>(1, bufs.size());
      std::size_t j = *rc::gen::inRange<std::size_t>(1, bufs.size() - 1);
      if (j >= i) ++j;
      const std::size_t size = std::min(bufs[i].size(), bufs[j].size());
      ex.copy(bufs[j].data(), bufs[i].data(), size, s);
      count_call(op_kind::copy);
      model.copied_bytes[static_cast<std::size_t>(pointer_kind_of(bufs[i].kind()))]
                        [static_cast<std::size_t>(pointer_kind_of(bufs[j].kind()))] += size;
    } else if (op == 2) {
      const std::size_t i = *rc::gen::inRange<std::size_t>(1, bufs.size());
      ex.fill(bufs[i].data(), 0, bufs[i].size(), s);
      count_call(op_kind::fill);
    } else if (op == 3) {
      launch_count_and_write(ex, 8, reinterpret_cast<unsigned long long*>(scratch + 64),
                             reinterpret_cast<std::uint64_t*>(scratch), 1, 64, s);
      count_call(op_kind::launch);
    } else if (op == 4) {
      ex.host_function([] {}, s);
      count_call(op_kind::host_function);
    } else {
      order(s0, s1);
    }
    // Work on the two streams shares buffers; keeping them in step avoids racing copies.
    order(s, s == s0.ref() ? s1.ref() : s0.ref());
  }

  const counting_adaptor::counts actual = ex.snapshot();
  for (std::size_t k = 0; k < model.calls.size(); ++k) {
    if (actual.calls[k] != model.calls[k]) {
      RC_FAIL(offloadkit::detail::concat("calls of ", to_string(static_cast<op_kind>(k)),
                                         ": counted ", actual.calls[k], ", made ", model.calls[k]));
    }
  }
  for (std::size_t k = 0; k < 3; ++k) {
    RC_ASSERT(actual.allocations[k] == model.allocations[k]);
    RC_ASSERT(actual.allocated_bytes[k] == model.allocated_bytes[k]);
  }
  for (std::size_t from = 0; from < 4; ++from) {
    for (std::size_t to = 0; to < 4; ++to) {
      if (actual.copied_bytes[from][to] != model.copied_bytes[from][to]) {
        RC_FAIL(offloadkit::detail::concat(
            "bytes copied ", to_string(static_cast<pointer_kind>(from)), " -> ",
            to_string(static_cast<pointer_kind>(to)), ": counted ", actual.copied_bytes[from][to],
            ", copied ", model.copied_bytes[from][to]));
      }
    }
  }
  RC_ASSERT(actual.pageable_bytes() == model.pageable_bytes());
  RC_ASSERT(actual.allocations_of(memory_kind::pinned) ==
            model.allocations[static_cast<std::size_t>(memory_kind::pinned)]);
}

}  // namespace offloadkit::testing::executor_properties
