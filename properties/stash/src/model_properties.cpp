// The stateful model: random stash / restore / reset / clear_status sequences on two streams
// against a model of freelists, page table and status word; and the caller's late writes.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

namespace {

// ---- model-based ------------------------------------------------------------------------------

struct model_state {
  offloadkit::testing::stash_capabilities caps;  ///< the declared policies the model follows
  std::map<stash_key, std::uint64_t> rows;       // stashed keys
  std::map<stash_key, std::uint64_t> dev_pages, pin_pages;
  std::uint64_t free_dev = 0, free_pin = 0;
  std::uint64_t dev_total = 0, pin_total = 0;
  stash_status status;
  std::uint64_t row_bytes = 0, rows_per_page = 1, max_rows = 0;
  std::uint32_t salt = 1;
  void fail(status_code c, const stash_key& k, std::uint64_t r, std::uint64_t need) {
    if (status.ok()) status = stash_status{c, k, r, need, free_dev, free_pin};
  }
  [[nodiscard]] bool sticky() const noexcept {
    return caps.overflow == offloadkit::testing::stash_overflow_report::sticky_flag;
  }
  /// A sticky flag is up: stash() and restore() do nothing until reset() or clear_status().
  [[nodiscard]] bool stopped() const noexcept { return sticky() && !status.ok(); }
  /// stash() of a key that does not fit throws out_of_memory and records nothing.
  [[nodiscard]] bool overflow_throws() const noexcept {
    return caps.overflow == offloadkit::testing::stash_overflow_report::exception;
  }
  /// restore() of `key` throws: it holds nothing and the profile says that is an error.
  [[nodiscard]] bool restore_throws(const stash_key& key) const {
    return !stopped() && rows.count(key) == 0 &&
           caps.unknown_restore == offloadkit::testing::stash_unknown_restore::error;
  }
};

/// The stash under test, driven from two streams; it was made on a third. The harness orders the
/// caller's side as a caller must: each call's stream waits for the previous call's stream, and
/// the source and row count are written on the call's own stream without a host wait, delayed, so
/// that a stash that works on any other stream than the one it is given reads them too early.
struct model_sut {
  stash_interface* st = nullptr;
  device_io* io = nullptr;
  bool page_ids = false;
  delay_adaptor* dx = nullptr;
  stream_ref streams[2] = {};
  event* after_call = nullptr;  ///< recorded on the stream of the previous call
  int last = 0;
  /// The interposer's delays, on only while a call into the stash runs (as activation's
  /// races_with_delays): the stash's own work is held back, the harness's reads are not, so a read
  /// cannot mask a missing wait by being late itself.
  offloadkit::testing::driver_delays* own_work = nullptr;

  /// Stream i, ordered after the previous call.
  stream_ref use(int i) {
    if (i != last) io->ex->wait(after_call->ref(), streams[i]);
    last = i;
    io->s = streams[i];
    return streams[i];
  }
  void called() { io->ex->record(after_call->ref(), streams[last]); }
};

stash_key gen_small_key() {
  return stash_key{*rc::gen::inRange<std::uint32_t>(0, 2), *rc::gen::inRange<std::uint32_t>(0, 2),
                   *rc::gen::inRange<std::uint32_t>(0, 2)};
}

void compare_with_model(const model_state& m, const model_sut& sut) {
  const stash_snapshot snap = sut.st->snapshot(sut.io->s);
  const std::string err = check_conservation(snap, sut.st->config(), sut.page_ids);
  if (!err.empty()) RC_FAIL(err);
  RC_ASSERT(snap.free.device == m.free_dev);
  RC_ASSERT(snap.free.pinned == m.free_pin);
  RC_ASSERT(snap.entries.size() == m.rows.size());
  for (const auto& e : snap.entries) {
    auto it = m.rows.find(e.key);
    RC_ASSERT(it != m.rows.end());
    RC_ASSERT(e.rows == it->second);
    RC_ASSERT(e.device_pages == m.dev_pages.at(e.key));
  }
  if (m.sticky()) {
    // One flag: whether something failed, not which key.
    RC_ASSERT(snap.status.ok() == m.status.ok());
    return;
  }
  RC_ASSERT(snap.status.code == m.status.code);
  if (!m.status.ok()) {
    RC_ASSERT(snap.status.key == m.status.key);
    RC_ASSERT(snap.status.needed == m.status.needed);
    RC_ASSERT(snap.status.free_device == m.status.free_device);
    RC_ASSERT(snap.status.free_pinned == m.status.free_pinned);
  }
}

int gen_model_stream() { return *rc::gen::inRange(0, 2); }

std::ostream& show_model_stream(std::ostream& os, int i) {
  return os << " on stream " << (i == 0 ? 'a' : 'b');
}

struct stash_command : rc::state::Command<model_state, model_sut> {
  stash_key key = gen_small_key();
  std::uint64_t rows = 0;
  int on = gen_model_stream();
  int delay_us =
      *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {2, rc::gen::inRange(50, 400)}});
  stash_command() = default;
  explicit stash_command(const model_state& m)
      : rows(*rc::gen::inRange<std::uint64_t>(0, m.max_rows + 2)) {}
  /// The key does not fit and the profile says that is an exception.
  [[nodiscard]] bool throws(const model_state& m) const {
    const std::uint64_t need = (rows + m.rows_per_page - 1) / m.rows_per_page;
    return m.overflow_throws() && !m.stopped() && rows <= m.max_rows && m.rows.count(key) == 0 &&
           !key_fits(m.caps, need, m.free_dev, m.free_pin);
  }
  void apply(model_state& m) const override {
    if (m.stopped() || throws(m)) return;
    const std::uint64_t need = (rows + m.rows_per_page - 1) / m.rows_per_page;
    if (rows > m.max_rows) return m.fail(status_code::rows_too_large, key, rows, 0);
    if (m.rows.count(key) != 0) return m.fail(status_code::double_stash, key, rows, need);
    if (!key_fits(m.caps, need, m.free_dev, m.free_pin)) {
      return m.fail(status_code::overflow, key, rows, need);
    }
    const std::uint64_t d = device_share(m.caps, need, m.free_dev);
    m.free_dev -= d;
    m.free_pin -= need - d;
    m.rows[key] = rows;
    m.dev_pages[key] = d;
    m.pin_pages[key] = need - d;
  }
  void run(const model_state& m, model_sut& sut) const override {
    device_io& io = *sut.io;
    const stream_ref s = sut.use(on);
    // The source and the row count go in on the call's stream with no host wait (the staging
    // area is not touched again before the call's snapshot synchronizes).
    auto* h = io.staging.as<unsigned char>();
    for (std::size_t o = 0; o < io.bytes; ++o) h[o] = pattern_byte(pattern_code(key), m.salt, o);
    std::memcpy(h + io.bytes, &rows, sizeof rows);
    if (delay_us > 0) sut.dx->delay_next(std::chrono::microseconds(delay_us), 1, s);
    if (io.bytes > 0) io.ex->copy(io.src.data(), h, io.bytes, s);
    io.ex->copy(io.rows.data(), h + io.bytes, sizeof rows, s);
    const auto call = [&] { sut.st->stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s); };
    if (throws(m)) {
      RC_ASSERT_THROWS_AS(sut.own_work->during(call), out_of_memory);
    } else {
      sut.own_work->during(call);
    }
    sut.called();
    sut.dx->clear();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override {
    show_model_stream(os << "stash " << to_string(key) << " rows " << rows, on);
    if (delay_us > 0) os << " delayed " << delay_us << " us";
  }
};

struct restore_command : rc::state::Command<model_state, model_sut> {
  stash_key key = gen_small_key();
  int on = gen_model_stream();
  void apply(model_state& m) const override {
    if (m.stopped() || m.restore_throws(key)) return;
    auto it = m.rows.find(key);
    if (it == m.rows.end()) return m.fail(status_code::restore_empty, key, 0, 0);
    m.free_dev += m.dev_pages[key];
    m.free_pin += m.pin_pages[key];
    m.rows.erase(it);
    m.dev_pages.erase(key);
    m.pin_pages.erase(key);
  }
  void run(const model_state& m, model_sut& sut) const override {
    device_io& io = *sut.io;
    const stream_ref s = sut.use(on);
    io.clear(io.dst.data());
    const auto call = [&] {
      sut.st->restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
    };
    if (m.restore_throws(key)) {
      RC_ASSERT_THROWS_AS(sut.own_work->during(call), state_error);
      sut.called();
      RC_ASSERT(first_mismatch(io.read(io.dst.data()), pattern_code(key), m.salt, 0) == -1);
      compare_with_model(m, sut);
      return;
    }
    sut.own_work->during(call);
    sut.called();
    auto it = m.rows.find(key);
    const std::uint64_t rows = it == m.rows.end() || m.stopped() ? 0 : it->second;
    const auto got = io.read(io.dst.data());
    RC_ASSERT(first_mismatch(got, pattern_code(key), m.salt, rows * m.row_bytes) == -1);
    RC_ASSERT(io.read_u64(io.rows_out.data()) == rows);
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override {
    show_model_stream(os << "restore " << to_string(key), on);
  }
};

struct reset_command : rc::state::Command<model_state, model_sut> {
  int on = gen_model_stream();
  void apply(model_state& m) const override {
    m.rows.clear();
    m.dev_pages.clear();
    m.pin_pages.clear();
    m.status = {};
    m.free_dev = m.dev_total;
    m.free_pin = m.pin_total;
  }
  void run(const model_state& m, model_sut& sut) const override {
    const stream_ref s = sut.use(on);
    sut.own_work->during([&] { sut.st->reset(s); });
    sut.called();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override { show_model_stream(os << "reset", on); }
};

struct clear_status_command : rc::state::Command<model_state, model_sut> {
  int on = gen_model_stream();
  void apply(model_state& m) const override { m.status = {}; }
  void run(const model_state& m, model_sut& sut) const override {
    const stream_ref s = sut.use(on);
    sut.own_work->during([&] { sut.st->clear_status(s); });
    sut.called();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override { show_model_stream(os << "clear_status", on); }
};

using model_config = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>;

/// (row_bytes, rows_per_page, max_rows, device_pages, pinned_pages) of the model: every field
/// at its minimum and at its maximum (the others in the middle), all at their minima and all at
/// their maxima first; random ones after.
rc::Gen<model_config> gen_model_config() {
  const model_config mid{8, 2, 6, 3, 3}, lo{1, 1, 0, 0, 0}, hi{24, 4, 11, 5, 5};
  std::vector<model_config> fixed{lo, hi};
  auto with = [&](int field, const model_config& from) {
    model_config c = mid;
    switch (field) {
      case 0:
        std::get<0>(c) = std::get<0>(from);
        break;
      case 1:
        std::get<1>(c) = std::get<1>(from);
        break;
      case 2:
        std::get<2>(c) = std::get<2>(from);
        break;
      case 3:
        std::get<3>(c) = std::get<3>(from);
        break;
      default:
        std::get<4>(c) = std::get<4>(from);
        break;
    }
    return c;
  };
  for (int f = 0; f < 5; ++f) {
    fixed.push_back(with(f, lo));
    fixed.push_back(with(f, hi));
  }
  return offloadkit::testing::fixed_then_random(
      "stash.model.config", std::move(fixed),
      rc::gen::tuple(rc::gen::elementOf(std::vector<std::size_t>{1, 3, 8, 16, 24}),
                     rc::gen::inRange<std::size_t>(1, 5), rc::gen::inRange<std::size_t>(0, 12),
                     rc::gen::inRange<std::size_t>(0, 6), rc::gen::inRange<std::size_t>(0, 6)));
}

}  // namespace

/// The caller's last write of a key's source and of its row count is late on the call's stream: a
/// long hold, then both writes, then stash() on that stream at once. stash() reads both in the
/// order of the stream it is given, so restore() must give back the late count and rows; a stash
/// that works on a stream of its own without waiting for the caller's reads what they held
/// before (the two counts always differ). model_based writes on the call's stream too, held back
/// by at most 400 us: it catches a stash that does not order the caller's stream at all; the hold
/// here (300 to 400 ms, drawn per case) also outlasts a bounded host wait for it shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
void prop_caller_writes_late(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::element<std::size_t>(1, 8, 24, 64);
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(2, 17);
  cfg.max_keys = 1;
  // The key fits whole in one tier, whatever the placement policy.
  const std::size_t pages = (cfg.max_rows + cfg.rows_per_page - 1) / cfg.rows_per_page;
  const bool on_device = *rc::gen::arbitrary<bool>();
  std::tie(cfg.device_pages, cfg.pinned_pages) =
      tiers_for(impl.caps, on_device ? pages : 0, on_device ? 0 : pages);
  const std::uint64_t late_rows = *rc::gen::inRange<std::uint64_t>(1, cfg.max_rows + 1);
  const std::uint64_t early_rows =
      *rc::gen::distinctFrom(rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1), late_rows);
  const auto early_salt = *rc::gen::arbitrary<std::uint32_t>();
  const auto late_salt = *rc::gen::distinctFrom(early_salt);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  const stash_key key{0, 0, 0};
  const std::uint32_t code = pattern_code(key);
  delay_adaptor dx(ex);
  stream made_on(dx), s(dx);
  device_io io(dx, s, cfg.max_rows * cfg.row_bytes);
  buffer late(dx, memory_kind::pinned, io.bytes + sizeof(std::uint64_t));
  auto* h = late.as<unsigned char>();
  for (std::size_t o = 0; o < io.bytes; ++o) h[o] = pattern_byte(code, late_salt, o);
  std::memcpy(h + io.bytes, &late_rows, sizeof late_rows);
  io.write_source(io.src.data(), code, early_salt);
  io.write_u64(io.rows.data(), early_rows);
  auto st = impl.make(dx, cfg, made_on);
  made_on.synchronize();
  // A failed check unwinds: the late writes must land before the buffers go.
  const offloadkit::testing::sync_on_exit guard(dx, {s, made_on});
  RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last writes\n";
  dx.delay_next(std::chrono::microseconds(delay_us), 1, s);
  dx.copy(io.src.data(), h, io.bytes, s);
  dx.copy(io.rows.data(), h + io.bytes, sizeof late_rows, s);
  st->stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s);
  dx.clear();
  io.clear(io.dst.data());
  st->restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
  const std::uint64_t got_rows = io.read_u64(io.rows_out.data());
  if (got_rows != late_rows) {
    RC_FAIL(offloadkit::detail::concat("restore gave ", got_rows, " rows, the late write said ",
                                       late_rows, " (the write before it ", early_rows, ")"));
  }
  const long long at =
      first_mismatch(io.read(io.dst.data()), code, late_salt, late_rows * cfg.row_bytes);
  if (at >= 0) {
    RC_FAIL(offloadkit::detail::concat("restored byte ", at, " of ", late_rows, " rows of ",
                                       cfg.row_bytes, " bytes is not the late write's"));
  }
}

/// Model-based: random stash/restore/reset/clear sequences (double stashes, empty restores and
/// overflows included) against a plain model of the freelists, page table and status word.
void prop_model(executor& ex, const stash_implementation& impl) {
  const model_config mc = *gen_model_config();
  stash_config cfg;
  std::tie(cfg.row_bytes, cfg.rows_per_page, cfg.max_rows, cfg.device_pages, cfg.pinned_pages) = mc;
  std::tie(cfg.device_pages, cfg.pinned_pages) =
      tiers_for(impl.caps, cfg.device_pages, cfg.pinned_pages);
  cfg.max_keys = 8;  // every key gen_small_key() can draw: the limit is reached, never passed
  // The stash's own CUDA work (a black box's streams) is held back too, where interposed, inside
  // its calls only: armed throughout, the delays also held back the harness's own reads of what
  // restore() gave back (cudaMemcpyAsync on the caller's stream), so on a GPU a read landed after
  // an unordered upload on the stash's stream and the race went unseen.
  offloadkit::testing::driver_delays own_work_delays;
  own_work_delays.set_active(false);
  delay_adaptor dx(ex);
  stream made_on(dx), a(dx), b(dx);
  event after_call(dx);
  // Before the stash, so that the stash goes first at the end: an upload of its own still in
  // flight into io's buffers (the race this property catches) ends before they are freed.
  device_io io(dx, a, cfg.max_rows * cfg.row_bytes);
  auto st = impl.make(dx, cfg, made_on);
  made_on.synchronize();
  model_state m;
  m.caps = impl.caps;
  m.free_dev = cfg.device_pages;
  m.free_pin = cfg.pinned_pages;
  m.dev_total = cfg.device_pages;
  m.pin_total = cfg.pinned_pages;
  m.row_bytes = cfg.row_bytes;
  m.rows_per_page = cfg.rows_per_page;
  m.max_rows = cfg.max_rows;
  model_sut sut{st.get(),    &io, impl.caps.page_ids, &dx, {a.ref(), b.ref()},
                &after_call, 0,   &own_work_delays};
  rc::state::check(
      m, sut,
      rc::state::gen::execOneOfWithArgs<stash_command, stash_command, restore_command,
                                        restore_command, clear_status_command, reset_command>());
  dx.clear();
  a.synchronize();
  b.synchronize();
}

}  // namespace offloadkit::stash::testing
