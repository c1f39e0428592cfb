// Graph capture: a captured step replayed with other row counts.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

// ---- graph capture ----------------------------------------------------------------------------

/// A captured step (two stashes, two restores) replays correctly with different row counts
/// written to the device before each replay, overflow included; the host never reads a row count.
void prop_graph_replay(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::elementOf(std::vector<std::size_t>{1, 6, 16, std::size_t{2} * 64});
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 6);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 30);
  const std::uint64_t per_key = pages_for(cfg.max_rows, cfg.rows_per_page);
  std::tie(cfg.device_pages, cfg.pinned_pages) =
      tiers_for(impl.caps, *rc::gen::inRange<std::uint64_t>(0, 2 * per_key + 1),
                *rc::gen::inRange<std::uint64_t>(0, 2 * per_key + 1));
  cfg.max_keys = 2;
  stream s(ex);
  auto st = impl.make(ex, cfg, s);
  RC_ASSERT(st->capturable());
  device_io a(ex, s, cfg.max_rows * cfg.row_bytes), b(ex, s, cfg.max_rows * cfg.row_bytes);
  const stash_key ka{0, 0, 0}, kb{0, 1, 0};
  ex.synchronize(s);
  ex.begin_capture(s);
  st->stash(ka, a.src.data(), a.rows.as<std::uint64_t>(), s);
  st->stash(kb, b.src.data(), b.rows.as<std::uint64_t>(), s);
  st->restore(kb, b.dst.data(), b.rows_out.as<std::uint64_t>(), s);
  st->restore(ka, a.dst.data(), a.rows_out.as<std::uint64_t>(), s);
  graph g(ex, ex.end_capture(s));
  const int replays = *rc::gen::inRange(1, 5);
  for (int k = 0; k < replays; ++k) {
    const std::uint64_t ra = *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
    const std::uint64_t rb = *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
    const auto salt = static_cast<std::uint32_t>(k + 1);
    a.write_u64(a.rows.data(), ra);
    b.write_u64(b.rows.data(), rb);
    a.write_source(a.src.data(), pattern_code(ka), salt);
    b.write_source(b.src.data(), pattern_code(kb), salt);
    a.clear(a.dst.data());
    b.clear(b.dst.data());
    st->clear_status(s);
    g.replay(s);
    ex.synchronize(s);
    const std::uint64_t na = pages_for(ra, cfg.rows_per_page),
                        nb = pages_for(rb, cfg.rows_per_page);
    const std::uint64_t total = cfg.device_pages + cfg.pinned_pages;
    const bool a_fits = na <= total, b_fits = a_fits ? nb <= total - na : nb <= total;
    RC_ASSERT(first_mismatch(a.read(a.dst.data()), pattern_code(ka), salt,
                             a_fits ? ra * cfg.row_bytes : 0) == -1);
    RC_ASSERT(first_mismatch(b.read(b.dst.data()), pattern_code(kb), salt,
                             b_fits ? rb * cfg.row_bytes : 0) == -1);
    const stash_snapshot snap = st->snapshot(s);
    RC_ASSERT(snap.free.device == cfg.device_pages);
    RC_ASSERT(snap.free.pinned == cfg.pinned_pages);
    if (!a_fits || !b_fits) {
      RC_ASSERT(snap.status.code == status_code::overflow);
      RC_ASSERT(snap.status.key == (a_fits ? kb : ka));
    } else {
      RC_ASSERT(snap.status.ok());
    }
  }
}

}  // namespace offloadkit::stash::testing
