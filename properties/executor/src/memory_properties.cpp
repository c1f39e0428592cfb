// Memory: copies between every kind of memory, fills, extents of allocations, and managed memory.
#include "executor_properties.hpp"

namespace offloadkit::testing::executor_properties {

// ---- copies -------------------------------------------------------------------------------------

/// Bytes survive a tour through every ordered pair of memory kinds (pageable, pinned, device, each
/// to itself too), each hop into a fresh buffer at a random misalignment, each hop on one of two
/// streams ordered by an event when the stream changes.
void copy_round_trip(executor& ex) {
  // An Euler tour of the complete directed graph with loops on {pageable, pinned, device}.
  constexpr std::array<memory_kind, 10> tour = {
      memory_kind::pageable, memory_kind::pageable, memory_kind::pinned,   memory_kind::pinned,
      memory_kind::device,   memory_kind::device,   memory_kind::pageable, memory_kind::device,
      memory_kind::pinned,   memory_kind::pageable};
  const std::size_t bytes = gen_bytes(4 * mib);
  const std::uint64_t seed = gen_seed();
  const auto on_second_stream = *rc::gen::arbitrary<std::uint32_t>();
  std::array<std::size_t, tour.size()> offsets{};
  for (auto& o : offsets) o = *rc::gen::inRange<std::size_t>(0, 16);

  std::array<stream, 2> streams{stream(ex), stream(ex)};
  std::vector<event> events;
  std::vector<buffer> hops;
  for (std::size_t i = 0; i < tour.size(); ++i) {
    hops.emplace_back(ex, tour[i], bytes + offsets[i]);
  }
  const sync_on_exit guard(ex, {streams[0], streams[1]});

  // Destinations start with bytes unlike the source so that a copy that does nothing is caught.
  write_pattern(at(hops[0], offsets[0]), bytes, seed);
  for (std::size_t i = 1; i < tour.size(); ++i) {
    if (tour[i] == memory_kind::device) {
      ex.fill(hops[i].data(), 0xA5, hops[i].size(), streams[0]);
    } else {
      write_pattern(hops[i].data(), hops[i].size(), ~seed + i);
    }
  }
  ex.synchronize(streams[0]);

  std::size_t previous = 0;
  for (std::size_t i = 1; i < tour.size(); ++i) {
    const std::size_t current = (on_second_stream >> i) & 1u;
    if (current != previous) {
      events.emplace_back(ex);
      ex.record(events.back(), streams[previous]);
      ex.wait(events.back(), streams[current]);
    }
    ex.copy(at(hops[i], offsets[i]), at(hops[i - 1], offsets[i - 1]), bytes, streams[current]);
    previous = current;
  }
  ex.synchronize(streams[0]);
  ex.synchronize(streams[1]);

  const std::vector<unsigned char> original = [&] {
    std::vector<unsigned char> v(bytes);
    write_pattern(v.data(), bytes, seed);
    return v;
  }();
  // Host-visible hops are checked in order, so a failure names the first hop that went wrong.
  for (std::size_t i = 1; i < tour.size(); ++i) {
    if (tour[i] == memory_kind::device) continue;
    expect_bytes(
        at(hops[i], offsets[i]), original.data(), bytes,
        offloadkit::detail::concat("copy_round_trip hop ", i, " (", kind_name(tour[i - 1]), " -> ",
                                   kind_name(tour[i]), ", ", bytes, " bytes, stream ",
                                   (on_second_stream >> i) & 1u, ") or an earlier device hop"));
  }
}

// ---- fill ---------------------------------------------------------------------------------------

/// fill() sets exactly the requested bytes, in every memory kind, and nothing around them.
void fill_property(executor& ex) {
  const memory_kind kind = gen_kind();
  const std::size_t bytes = gen_bytes(1 * mib);
  const std::size_t guard_bytes = 64;
  const auto value = *rc::gen::inRange<int>(0, 256);
  const std::uint64_t seed = gen_seed();
  const std::size_t total = bytes + 2 * guard_bytes;

  stream s(ex);
  buffer target(ex, kind, total);
  buffer staging(ex, memory_kind::pinned, total);
  const sync_on_exit guard(ex, {s});

  write_pattern(staging.data(), total, seed);
  std::vector<unsigned char> expected(staging.as<unsigned char>(),
                                      staging.as<unsigned char>() + total);
  std::fill_n(expected.begin() + static_cast<std::ptrdiff_t>(guard_bytes), bytes,
              static_cast<unsigned char>(value));

  ex.copy(target.data(), staging.data(), total, s);
  ex.fill(at(target, guard_bytes), value, bytes, s);
  const auto actual = read_back(ex, target.data(), total, s);
  expect_bytes(
      actual.data(), expected.data(), total,
      offloadkit::detail::concat("fill of ", bytes, " bytes of ", kind_name(kind), " memory with ",
                                 value, " (", guard_bytes, " guard bytes on each side)"));
}

/// Managed memory keeps its bytes however its pages move: written by the host, prefetched to
/// random devices and to the host on two streams (ordered by events), copied out to device memory,
/// overwritten and copied back in stream order, it reads back as written. classify() knows it for
/// what it is (its extent is extent_of_names_the_allocation's).
void managed_round_trip(executor& ex) {
  const std::size_t bytes = gen_bytes(1 * mib);
  const std::uint64_t seed = gen_seed();
  const int owner = *rc::gen::inRange(0, ex.device_count());
  managed_allocation m(ex, bytes, owner);
  const pointer_info info = ex.classify(m.data());
  if (info.kind != pointer_kind::managed || info.device != owner) {
    RC_FAIL(offloadkit::detail::concat("classify() calls managed memory of device ", owner, " ",
                                       to_string(info.kind), " memory of device ", info.device));
  }

  std::array<stream, 2> streams{stream(ex), stream(ex)};
  buffer staging(ex, memory_kind::device, bytes, owner);
  std::vector<event> events;
  const sync_on_exit guard(ex, {streams[0], streams[1]});
  write_pattern(m.data(), bytes, seed);

  const int hops = *rc::gen::inRange(1, 6);
  std::size_t previous = 0;
  std::string route;
  for (int i = 0; i < hops; ++i) {
    const std::size_t current = *rc::gen::inRange<std::size_t>(0, 2);
    if (current != previous) {
      events.emplace_back(ex);
      ex.record(events.back(), streams[previous]);
      ex.wait(events.back(), streams[current]);
    }
    const int to = *rc::gen::inRange(host_location, ex.device_count());
    ex.prefetch(m.data(), bytes, to, streams[current]);
    route += offloadkit::detail::concat(
        i == 0 ? "" : ", ", to == host_location ? "host" : "device ", to, " on stream ", current);
    if (*rc::gen::arbitrary<bool>()) {
      // Out, overwritten, and back in, all in stream order behind the prefetch.
      ex.copy(staging.data(), m.data(), bytes, streams[current]);
      ex.fill(m.data(), 0xA5, bytes, streams[current]);
      ex.copy(m.data(), staging.data(), bytes, streams[current]);
      route += " (copied out and back)";
    }
    previous = current;
  }
  ex.synchronize(streams[0]);
  ex.synchronize(streams[1]);

  std::vector<unsigned char> expected(bytes);
  write_pattern(expected.data(), bytes, seed);
  expect_bytes(m.data(), expected.data(), bytes,
               offloadkit::detail::concat("managed_round_trip of ", bytes, " bytes of device ",
                                          owner, " prefetched to ", route));
}

// ---- allocation extents
// --------------------------------------------------------------------------

/// extent_of() names the allocation an address lies in: for random allocations of every kind and
/// random addresses inside them, the extent starts at the allocation and covers it. Device memory
/// and mapped ranges must be known on every back end (whoever merges neighbouring device buffers
/// into one copy relies on it); host memory must be known on the host back end, and where the
/// cuda back end knows it, it must be right.
void extent_of_names_the_allocation(executor& ex) {
  const std::size_t count = *rc::gen::inRange<std::size_t>(1, 9);
  std::vector<buffer> bufs;
  for (std::size_t i = 0; i < count; ++i) {
    bufs.emplace_back(ex, gen_kind(), std::max<std::size_t>(1, gen_bytes(4 * mib)));
  }
  for (const buffer& b : bufs) {
    const std::size_t inside = *rc::gen::inRange<std::size_t>(0, b.size());
    const void* p = static_cast<const unsigned char*>(b.data()) + inside;
    const allocation_extent e = ex.extent_of(p);
    const bool must_know = b.kind() == memory_kind::device || ex.kind() == backend::host;
    if (e.bytes == 0) {
      RC_ASSERT(!must_know);
      continue;
    }
    if (e.base != b.data() || e.bytes < b.size() || !e.contains(p)) {
      RC_FAIL(offloadkit::detail::concat("extent_of(", p, ") = [", e.base, ", +", e.bytes,
                                         ") for byte ", inside, " of a ", kind_name(b.kind()),
                                         " allocation [", b.data(), ", +", b.size(), ")"));
    }
  }
  // Managed memory: the extent of any byte covers the whole allocation.
  const std::size_t managed_bytes = std::max<std::size_t>(1, gen_bytes(1 * mib));
  const managed_allocation m(ex, managed_bytes, *rc::gen::inRange(0, ex.device_count()));
  const std::size_t at = *rc::gen::inRange<std::size_t>(0, managed_bytes);
  const allocation_extent me = ex.extent_of(m.data() + at);
  if (!me.contains(m.data()) || !me.contains(m.data() + managed_bytes - 1)) {
    RC_FAIL(offloadkit::detail::concat("extent_of(byte ", at, " of a managed allocation [",
                                       static_cast<const void*>(m.data()), ", +", managed_bytes,
                                       ")) = [", me.base, ", +", me.bytes, ")"));
  }
  // A mapped virtual range is device memory too; its extent lies within the reservation.
  const std::size_t g = ex.granularity(0);
  const std::size_t range_bytes = g * *rc::gen::inRange<std::size_t>(1, 3);
  mapped_range range(ex, range_bytes);
  const std::size_t inside = *rc::gen::inRange<std::size_t>(0, range_bytes);
  const auto* va = static_cast<const unsigned char*>(range.data());
  const allocation_extent e = ex.extent_of(va + inside);
  const auto* base = static_cast<const unsigned char*>(e.base);
  if (!e.contains(va + inside) || base < va || base + e.bytes > va + range_bytes) {
    RC_FAIL(offloadkit::detail::concat(
        "extent_of(", static_cast<const void*>(va + inside), ") = [", e.base, ", +", e.bytes,
        ") for byte ", inside, " of a mapped range [", range.data(), ", +", range_bytes, ")"));
  }
}

}  // namespace offloadkit::testing::executor_properties
