// Stream order: work on other streams ordered by the region's calls, and the caller's late writes.
#include <chrono>
#include <cstdint>

#include "region_properties.hpp"

namespace offloadkit::region::testing {

/// A resume's copies are the region's own work: a pause issued right after it on another stream
/// must not copy out (or unmap) before they land. Delays on the resume's stream (250 to 350 ms,
/// drawn per case) widen the window past any bounded wait shorter than that, however fast or slow
/// the build runs (the other properties' resumes, large ones on a loaded machine included, land
/// well within 200 ms). Then a few rounds of pause and resume on the other stream, each read at
/// once on that stream: a resume whose copies run on a stream of the implementation's own (held
/// back by the driver's delays where the interposer is loaded) must order the caller's stream after
/// them. One round's read is a race its delay can lose by being short; each round draws a delay of
/// its own.
void cross_stream_order(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 3);
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const int delay_us = *rc::gen::inRange(250000, 350000);
  const driver_delays own_work_delays;  // the region's own CUDA work, where interposed
  delay_adaptor dx(ex);
  stream a(dx, 0), b(dx, 0);
  auto r = make_region(impl, dx, region_config{sh.words * word, 0, sh.chunk_bytes});
  write_pattern(dx, r->data(), sh.words, seed, a);
  r->pause(a);
  dx.delay_next(std::chrono::microseconds(delay_us), 64, a);
  r->resume(a);
  r->pause(b);
  dx.clear();
  for (int round = 0; round < 3; ++round) {
    if (round > 0) r->pause(b);
    r->resume(b);
    assert_contents(dx, *r, sh.words, seed, 0, b);
  }
  a.synchronize();
}

/// The caller's last write of the contents is late on the caller's stream: a long hold, then the
/// write, then pause() on that stream. A pause (stream-ordered or synchronous alike) waits for the
/// work queued on the stream it is given, so the copy out must hold the late write; one that
/// copies on a stream of its own without waiting for the caller's moves what the region held
/// before it. The hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
void caller_writes_late(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 3);
  const std::uint32_t before = *rc::gen::arbitrary<std::uint32_t>();
  const std::uint32_t late = *rc::gen::distinctFrom(before);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  delay_adaptor dx(ex);
  stream s(dx, 0);
  auto r = make_region(impl, dx, region_config{sh.words * word, 0, sh.chunk_bytes});
  // A failed check unwinds: the late write must land before the region goes.
  const offloadkit::testing::sync_on_exit guard(dx, {s});
  write_pattern(dx, r->data(), sh.words, before, s);
  s.synchronize();
  RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last write\n";
  dx.delay_next(std::chrono::microseconds(delay_us), 1, s);
  write_pattern(dx, r->data(), sh.words, late, s);
  r->pause(s);
  dx.clear();
  r->resume(s);
  assert_contents(dx, *r, sh.words, late, 0, s);
}

}  // namespace offloadkit::region::testing
