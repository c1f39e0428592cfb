// Two devices: each stash keeps its pages and copies on its own device.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

namespace {

// ---- devices ------------------------------------------------------------------------------------

/// Bytes of the rows a snapshot's entries hold in the device tier: the least device memory a
/// stash holding them can have taken.
std::uint64_t device_tier_bytes(const stash_snapshot& snap, const stash_config& cfg) {
  std::uint64_t n = 0;
  for (const entry_view& e : snap.entries) {
    n += std::min<std::uint64_t>(e.rows, e.device_pages * cfg.rows_per_page) * cfg.row_bytes;
  }
  return n;
}

/// One stash driven through a random valid order of its keys' stashes and restores (each key
/// stashed once, restored once after it), every restore checked against the key's pattern.
struct key_driver {
  stash_interface* st;
  device_io* io;
  std::vector<std::pair<stash_key, std::uint64_t>> keys;  ///< each key and its row count
  std::uint32_t salt;
  std::size_t next = 0;           ///< keys[next..] are not stashed yet
  std::vector<std::size_t> held;  ///< keys stashed and not yet restored

  key_driver(stash_interface& stash, device_io& inputs,
             std::vector<std::pair<stash_key, std::uint64_t>> rows, std::uint32_t contents)
      : st(&stash), io(&inputs), keys(std::move(rows)), salt(contents) {}

  [[nodiscard]] bool done() const { return next == keys.size() && held.empty(); }
  /// Starts another round of the same keys with other contents.
  void restart(std::uint32_t new_salt) {
    salt = new_salt;
    next = 0;
    held.clear();
  }
  /// Stashes the next key or restores a held one, at random; `between` runs right before the
  /// stash's own call (after the harness wrote its inputs). Says what it did.
  std::string step(const std::function<void()>& between) {
    const bool stash_next = next < keys.size() && (held.empty() || *rc::gen::arbitrary<bool>());
    const int device = st->config().device;
    if (stash_next) {
      const auto& [key, rows] = keys[next];
      io->write_u64(io->rows.data(), rows);
      io->write_source(io->src.data(), pattern_code(key), salt);
      between();
      st->stash(key, io->src.data(), io->rows.as<std::uint64_t>(), io->s);
      held.push_back(next++);
      return detail::concat("stash of ", to_string(key), " (", rows, " rows) on device ", device);
    }
    const std::size_t at = *rc::gen::inRange<std::size_t>(0, held.size());
    const auto& [key, rows] = keys[held[at]];
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
    io->clear(io->dst.data());
    io->write_u64(io->rows_out.data(), 0xDEADBEEFull);
    between();
    st->restore(key, io->dst.data(), io->rows_out.as<std::uint64_t>(), io->s);
    const long long bad = first_mismatch(io->read(io->dst.data()), pattern_code(key), salt,
                                         rows * st->config().row_bytes);
    if (bad >= 0) {
      RC_FAIL(detail::concat("restore of ", to_string(key), " (", rows, " rows) on device ", device,
                             ": byte ", bad, " differs"));
    }
    RC_ASSERT(io->read_u64(io->rows_out.data()) == rows);
    return detail::concat("restore of ", to_string(key), " on device ", device);
  }
};

}  // namespace

/// A stash on a device other than the first (config.device = d >= 1), with work issued on device
/// 0 right before each of its calls: restores give back the stashed bytes, its device memory is
/// d's (d's free memory drops by at least the device-tier bytes it holds, device 0's never moves),
/// and once destroyed every device's free memory is back. Then a stash on device 0 joins it and
/// the two are driven interleaved from one thread, both right. On a GPU the figures hold within
/// two granules and the rows are large enough for a pool to show.
void prop_multi_device(executor& ex, const stash_implementation& impl) {
  const int devices = ex.device_count();
  if (devices < 2) RC_SUCCEED("one device: nothing to check");
  const int d = *rc::gen::inRange(1, devices);
  const bool gpu = ex.kind() == backend::cuda;
  stash_config cfg;
  cfg.row_bytes = gpu ? (std::size_t{64} << 10) * *rc::gen::inRange<std::size_t>(1, 3)
                      : *rc::gen::elementOf(std::vector<std::size_t>{1, 3, 8, 16, 40, 128});
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 25);
  std::vector<std::pair<stash_key, std::uint64_t>> keys;
  std::uint64_t pages = 0;
  const auto count = *rc::gen::inRange<std::uint32_t>(1, 5);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint64_t rows = *rc::gen::weightedOneOf<std::uint64_t>(
        {{1, rc::gen::just(std::uint64_t{0})},
         {2, rc::gen::just(std::uint64_t{cfg.max_rows})},
         {3, rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1)}});
    keys.emplace_back(stash_key{0, k, 0}, rows);
    pages += pages_for(rows, cfg.rows_per_page);
  }
  // Room for every key at once, mostly in device pages (which are what this property is about).
  std::tie(cfg.device_pages, cfg.pinned_pages) = pool_for_peak(
      impl, pages,
      *rc::gen::weightedOneOf<std::uint64_t>(
          {{2, rc::gen::just(pages)}, {1, rc::gen::inRange<std::uint64_t>(0, pages + 1)}}),
      *rc::gen::inRange<std::uint64_t>(0, 2));
  cfg.max_keys = keys.size();
  stash_config on_d = cfg, on_0 = cfg;
  on_d.device = d;
  on_0.device = 0;
  RC_TAG(detail::concat("device ", d));

  const std::size_t bytes = cfg.max_rows * cfg.row_bytes;
  stream sd(ex, d), s0(ex, 0);
  device_io io_d(ex, sd, bytes, d), io_0(ex, s0, bytes, 0);
  buffer busy(ex, memory_kind::device, 4096, 0);
  const offloadkit::testing::sync_on_exit guard(ex, {sd, s0});
  // Work on device 0, as the rest of a program issues it between the stash's calls.
  int busy_value = 0;
  const auto device_0_work = [&] { ex.fill(busy.data(), ++busy_value & 0xff, busy.size(), s0); };
  // One untimed round on each device first: a GPU loads the stash's kernels (and their device
  // memory) on each device at their first use there, which would read as memory a stash kept.
  for (device_io* io : {&io_0, &io_d}) {
    const stash_config& c = io == &io_d ? on_d : on_0;
    auto warm = impl.make(ex, c, io->s);
    key_driver w(*warm, *io, keys, 0);
    while (!w.done()) (void)w.step([] {});
    ex.synchronize(io->s);
  }
  ex.synchronize(s0);
  const std::vector<std::size_t> before = offloadkit::testing::free_per_device(ex);
  const std::size_t slack_d = offloadkit::testing::memory_slack(ex, d);
  const auto check_memory = [&](const std::string& after, stash_interface& st) {
    const std::string moved = offloadkit::testing::other_devices_moved(ex, before, d);
    if (!moved.empty()) RC_FAIL(detail::concat("after ", after, ": ", moved));
    const std::uint64_t held = device_tier_bytes(st.snapshot(sd), on_d);
    const std::size_t free_d = ex.device_memory(d).free;
    if (free_d + held > before[static_cast<std::size_t>(d)] + slack_d) {
      RC_FAIL(detail::concat("after ", after, ": device ", d, " has ", free_d, " bytes free of ",
                             before[static_cast<std::size_t>(d)],
                             " before the stash, yet it holds ", held,
                             " bytes of rows in device pages"));
    }
  };

  auto on_device = impl.make(ex, on_d, sd);
  RC_ASSERT(on_device->config().device == d);
  check_memory("making the stash", *on_device);
  key_driver b(*on_device, io_d, keys, 1);
  while (!b.done()) check_memory(b.step(device_0_work), *on_device);
  RC_ASSERT(on_device->status(sd).ok());

  // A stash on device 0 beside it, the two driven interleaved.
  auto on_first = impl.make(ex, on_0, s0);
  key_driver a(*on_first, io_0, keys, 2);
  b.restart(3);
  while (!a.done() || !b.done()) {
    key_driver& next = a.done() ? b : b.done() ? a : *rc::gen::arbitrary<bool>() ? a : b;
    (void)next.step(device_0_work);
  }
  for (auto* st : {on_first.get(), on_device.get()}) {
    const stream_ref s = st == on_device.get() ? sd.ref() : s0.ref();
    const std::string err = check_conservation(st->snapshot(s), st->config(), impl.caps.page_ids);
    if (!err.empty()) RC_FAIL(detail::concat("stash on device ", st->config().device, ": ", err));
    RC_ASSERT(st->status(s).ok());
  }
  on_first.reset();
  on_device.reset();
  ex.synchronize(s0);
  for (int dev = 0; dev < devices; ++dev) {
    const auto i = static_cast<std::size_t>(dev);
    if (!offloadkit::testing::free_memory_settles_near(
            ex, dev, before[i], offloadkit::testing::memory_slack(ex, dev))) {
      RC_FAIL(detail::concat("with both stashes gone, device ", dev, " has ",
                             ex.device_memory(dev).free, " bytes free, ", before[i], " before"));
    }
  }
}

}  // namespace offloadkit::stash::testing
