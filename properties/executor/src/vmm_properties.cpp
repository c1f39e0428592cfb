// Virtual memory and graphs: a mapped range remapped at a fixed address, and a graph replayed
// after a remap.
#include "executor_properties.hpp"

namespace offloadkit::testing::executor_properties {

// ---- virtual memory
// -------------------------------------------------------------------------------

/// Reserve, create, map, set access, write; then any number of cycles of copy out, unmap and
/// release, create and map again at the same address, copy back: the data and the address survive,
/// and the device memory is really given back while unmapped.
void vmm_remap(executor& ex) {
  const std::size_t g = ex.granularity(0);
  RC_ASSERT(g > 0);
  const std::size_t bytes = g * *rc::gen::inRange<std::size_t>(1, 4);
  const std::size_t words = bytes / 4;
  const std::uint64_t seed = gen_seed();
  const auto cycles = *rc::gen::inRange(1, 4);

  stream s(ex);
  buffer backup(ex, memory_kind::pinned, bytes);
  buffer check(ex, memory_kind::pinned, bytes);
  std::vector<unsigned char> expected(bytes);
  write_pattern(expected.data(), bytes, seed);
  mapped_range range(ex, bytes);
  const sync_on_exit guard(ex, {s});
  void* const address = range.data();
  if (ex.classify(address).kind != pointer_kind::device) {
    RC_FAIL(offloadkit::detail::concat("classify() calls a mapped range ",
                                       to_string(ex.classify(address).kind),
                                       " memory, expected device memory"));
  }

  std::memcpy(backup.data(), expected.data(), bytes);
  ex.copy(address, backup.data(), bytes, s);
  ex.synchronize(s);

  for (int cycle = 0; cycle < cycles; ++cycle) {
    // A kernel on the mapped range changes the contents, so each cycle carries new bytes.
    const auto a = *rc::gen::arbitrary<std::uint32_t>() | 1u;
    const auto b = *rc::gen::arbitrary<std::uint32_t>();
    launch_affine(ex, words, static_cast<std::uint32_t*>(address), a, b, s);
    for (std::size_t w = 0; w < words; ++w) {
      std::uint32_t x = 0;
      std::memcpy(&x, expected.data() + w * 4, 4);
      x = x * a + b;
      std::memcpy(expected.data() + w * 4, &x, 4);
    }
    ex.copy(backup.data(), address, bytes, s);
    ex.synchronize(s);

    const std::size_t free_mapped = ex.device_memory(0).free;
    range.unmap_and_release();
    const std::size_t free_released = ex.device_memory(0).free;
    // The host back end accounts exactly; a GPU's free memory also moves with other processes, so
    // there only a gain is required.
    if (ex.kind() == backend::host) {
      RC_ASSERT(free_released >= free_mapped + bytes);
    } else {
      RC_ASSERT(free_released > free_mapped);
    }
    write_pattern(check.data(), bytes, ~seed);

    range.map_new();
    if (range.data() != address) RC_FAIL("the range moved: remapping changed its address");
    const pointer_info info = ex.classify(address);
    if (info.kind != pointer_kind::device || info.device != 0) {
      RC_FAIL(offloadkit::detail::concat("after a remap, classify() calls the range ",
                                         to_string(info.kind), " memory of device ", info.device,
                                         ", expected device memory of 0"));
    }
    ex.copy(address, backup.data(), bytes, s);
    ex.copy(check.data(), address, bytes, s);
    ex.synchronize(s);
    expect_bytes(check.data(), expected.data(), bytes,
                 offloadkit::detail::concat("contents after remap cycle ", cycle + 1, " of ",
                                            cycles, " (", bytes, " bytes)"));
  }
}

/// A graph captured on a mapped range (copy in, kernel, copy out) replays correctly after the
/// range was unmapped, released, created and mapped again at the same address.
void graph_replay_after_remap(executor& ex) {
  const std::size_t g = ex.granularity(0);
  const std::size_t bytes = g * *rc::gen::inRange<std::size_t>(1, 3);
  const std::size_t words = bytes / 4;
  const auto a = *rc::gen::arbitrary<std::uint32_t>();
  const auto b = *rc::gen::arbitrary<std::uint32_t>();
  const auto remaps = *rc::gen::inRange(1, 3);

  stream s(ex);
  buffer src(ex, memory_kind::pinned, bytes);
  buffer dst(ex, memory_kind::pinned, bytes);
  mapped_range range(ex, bytes);
  const sync_on_exit guard(ex, {s});

  graph captured = capture_graph(ex, s, [&] {
    ex.copy(range.data(), src.data(), bytes, s);
    launch_affine(ex, words, static_cast<std::uint32_t*>(range.data()), a, b, s);
    ex.copy(dst.data(), range.data(), bytes, s);
  });

  auto replay_and_check = [&](const std::string& when) {
    const std::uint64_t seed = gen_seed();
    write_pattern(src.data(), bytes, seed);
    std::memset(dst.data(), 0, bytes);
    std::vector<unsigned char> expected(bytes);
    write_pattern(expected.data(), bytes, seed);
    for (std::size_t w = 0; w < words; ++w) {
      std::uint32_t x = 0;
      std::memcpy(&x, expected.data() + w * 4, 4);
      x = x * a + b;
      std::memcpy(expected.data() + w * 4, &x, 4);
    }
    captured.replay(s);
    ex.synchronize(s);
    expect_bytes(dst.data(), expected.data(), bytes, "graph replay " + when);
  };

  replay_and_check("before any remap");
  for (int i = 0; i < remaps; ++i) {
    range.unmap_and_release();
    range.map_new();
    replay_and_check(offloadkit::detail::concat("after remap ", i + 1, " of ", remaps));
  }
}

}  // namespace offloadkit::testing::executor_properties
