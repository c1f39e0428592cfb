// Races: delays injected on the offloader's own streams, a source reused on another stream, and
// the caller's late writes.
#include "activation_properties.hpp"

namespace offloadkit::activation::testing {

namespace {

// ---- races -------------------------------------------------------------------------------------

/// Forwards to an offloader with the interposer's delays on only while a call runs: the
/// implementation's own CUDA work (a black box's uploads on its own stream) is held back, while
/// the step's reads of what unpack returned are not, so they cannot mask a missing wait by being
/// late themselves.
class delayed_during_calls final : public forwarding_offloader {
 public:
  delayed_during_calls(offloader& inner, offloadkit::testing::driver_delays& delays)
      : forwarding_offloader(inner), delays_(delays) {
    delays_.set_active(false);
  }

 private:
  handle do_pack(tensor t, stream_ref s) override {
    return delays_.during([&] { return inner_.pack(std::move(t), s); });
  }
  tensor do_unpack(handle h, stream_ref s) override {
    return delays_.during([&] { return inner_.unpack(h, s); });
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    delays_.during([&] { inner_.forward_layer_end(layer, s); });
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    delays_.during([&] { inner_.backward_layer_begin(layer, s); });
  }
  void do_synchronize() override {
    delays_.during([&] { inner_.synchronize(); });
  }

  offloadkit::testing::driver_delays& delays_;
};

}  // namespace

void races(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check; this one sees timing
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto max_delay = std::chrono::microseconds(*rc::gen::element<int>(100, 500, 1500, 5000));
  training_step step(ex, c.layers, compute_threads);
  // The offloader's own CUDA work (a black box's streams) is held back too, where interposed,
  // inside its calls only.
  offloadkit::testing::driver_delays own_work_delays;
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, max_delay, seed);
  auto off = impl.make(delayed, c.options);
  delayed_during_calls calls(*off, own_work_delays);
  run_steps(ex, calls, step, c, seed);
}

// ---- a released source reused on another stream ----------------------------------------------

/// The owner of a source gives it back to use at once on a stream of its own, another than the one
/// that produced it and handed it to pack(): a random sequence of packs (each buffer from the
/// owner's free list when one fits, overwritten with a poison byte on the reuse stream the moment
/// it comes back), unpacks on either stream, layer hints and synchronizations, with delays on the
/// offloader's own streams. A source given back while its copy may still read it (ordered on the
/// producer's stream only, say) hands the poison to the host copy. Every unpacked tensor holds
/// what was packed once the offloader's and the caller's work is done.
void source_reuse(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  offload_options o;
  o.keep_threshold = *rc::gen::element<std::size_t>(0, 0, 64);
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 0, 1, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 65536, std::size_t{1} << 30);
  o.prefetch_layers = *inRange(0, 3);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  // The offloader's own CUDA work, where interposed, inside its calls only.
  offloadkit::testing::driver_delays own_work_delays;
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, std::chrono::microseconds(*rc::gen::element(300, 1500)), seed);
  stream produce(ex), reuse(ex);

  std::deque<buffer> all;                       // every buffer the owner allocated
  std::multimap<std::size_t, void*> free_list;  // given back, by size
  struct packed_tensor {
    handle h;
    std::vector<unsigned char> contents;
    int layer = 0;
  };
  std::vector<packed_tensor> live;
  struct unpacked_tensor {
    tensor t;
    std::vector<unsigned char> expected;
    stream_ref s;
    buffer check;
  };
  std::vector<unpacked_tensor> done;
  // Destroyed first, also when a check fails: the work queued on both streams ends before the
  // buffers it uses go.
  struct sync_at_exit {
    executor& ex;
    stream_ref a, b;
    ~sync_at_exit() {
      // A destructor reports nothing: the check has already failed or is about to.
      try {
        ex.synchronize(a);
        ex.synchronize(b);
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
  } const drain{ex, produce.ref(), reuse.ref()};
  std::size_t released = 0, packed_count = 0;
  stream_ref caller_stream{};  // set while the caller releases an unpacked tensor
  std::uint64_t pattern = seed;
  int layer = 0;
  bool backward = false;
  {
    auto made = impl.make(delayed, o);
    auto off = std::make_unique<delayed_during_calls>(*made, own_work_delays);
    const auto steps = *rc::gen::resize(100, inRange(1, 40));
    for (int step = 0; step < steps; ++step) {
      const int op = *rc::gen::element(0, 0, 0, 1, 1, 2, 3);
      if (op == 0 && !backward) {  // pack a tensor produced on `produce`
        const std::size_t bytes = *rc::gen::element<std::size_t>(0, 1, 64, 100, 4096, 65536);
        void* p = nullptr;
        const auto it = free_list.find(bytes);
        if (it != free_list.end()) {
          p = it->second;
          free_list.erase(it);
          ex.synchronize(reuse);  // the owner's own poison write on the reuse stream comes first
        } else {
          all.emplace_back(ex, memory_kind::device, bytes);
          p = all.back().data();
        }
        packed_tensor pt;
        pt.layer = layer;
        pt.contents.resize(bytes);
        for (auto& b : pt.contents) {
          pattern = pattern * 6364136223846793005ull + 1442695040888963407ull;
          b = static_cast<unsigned char>(pattern >> 56);
        }
        buffer staging(ex, memory_kind::pinned, std::max<std::size_t>(bytes, 1));
        if (bytes > 0) {
          std::memcpy(staging.data(), pt.contents.data(), bytes);
          ex.copy(p, staging.data(), bytes, produce);
        }
        ex.synchronize(produce);  // the staging buffer goes at the end of this scope
        tensor t;
        t.data = p;
        t.bytes = bytes;
        t.shape = {static_cast<std::int64_t>(bytes)};
        t.release = [&ex, &free_list, &released, &reuse, &caller_stream, p, bytes] {
          // Reused at once, on the owner's other stream. When the caller itself hands the buffer
          // back (a kept tensor is returned as it was packed), its own reads are only issued on
          // the stream it unpacked on, and it reuses the buffer there.
          const stream_ref on = caller_stream.native != nullptr ? caller_stream : reuse.ref();
          if (bytes > 0) ex.fill(p, 0xA5, bytes, on);
          free_list.emplace(bytes, p);
          ++released;
        };
        pt.h = off->pack(std::move(t), produce);
        ++packed_count;
        live.push_back(std::move(pt));
      } else if (op == 1 && !live.empty()) {  // unpack the last packed, on either stream
        if (!backward) {
          off->backward_layer_begin(live.back().layer, produce);
          backward = true;
        }
        packed_tensor pt = std::move(live.back());
        live.pop_back();
        unpacked_tensor u;
        u.s = *rc::gen::arbitrary<bool>() ? produce.ref() : reuse.ref();
        u.t = off->unpack(pt.h, u.s);
        u.expected = std::move(pt.contents);
        u.check = buffer(ex, memory_kind::pinned, std::max<std::size_t>(u.t.bytes, 1));
        if (u.t.bytes > 0) ex.copy(u.check.data(), u.t.data, u.t.bytes, u.s);
        caller_stream = u.s;
        if (u.t.release) u.t.release();  // its reads are issued on u.s
        caller_stream = {};
        u.t.release = nullptr;
        done.push_back(std::move(u));
        if (!live.empty() && live.back().layer != pt.layer) {
          off->backward_layer_begin(live.back().layer, produce);
        }
      } else if (op == 2 && !backward) {  // a layer ends
        off->forward_layer_end(layer++, produce);
      } else if (op == 3) {
        off->synchronize();
      }
    }
    while (!live.empty()) {
      packed_tensor pt = std::move(live.back());
      live.pop_back();
      unpacked_tensor u;
      u.s = produce.ref();
      u.t = off->unpack(pt.h, u.s);
      u.expected = std::move(pt.contents);
      u.check = buffer(ex, memory_kind::pinned, std::max<std::size_t>(u.t.bytes, 1));
      if (u.t.bytes > 0) ex.copy(u.check.data(), u.t.data, u.t.bytes, u.s);
      caller_stream = u.s;
      if (u.t.release) u.t.release();
      caller_stream = {};
      u.t.release = nullptr;
      done.push_back(std::move(u));
    }
    off->synchronize();
    ex.synchronize(produce);
    ex.synchronize(reuse);
    for (std::size_t i = 0; i < done.size(); ++i) {
      const auto* got = done[i].check.as<unsigned char>();
      const auto& want = done[i].expected;
      const auto m = std::mismatch(want.begin(), want.end(), got);
      if (m.first != want.end()) {
        RC_FAIL("unpacked tensor " + std::to_string(i) + " of " + std::to_string(done.size()) +
                " (" + std::to_string(want.size()) + " bytes): byte " +
                std::to_string(m.first - want.begin()) + " is " + std::to_string(int(*m.second)) +
                ", expected " + std::to_string(int(*m.first)) +
                " (0xa5 is the owner's reuse of a source given back)");
      }
    }
  }
  ex.synchronize(reuse);
  RC_ASSERT(released == packed_count);
}

// ---- the producer's last write, late on the caller's stream -------------------------------------

/// The producer's last write of a source is late on the stream pack() is given: a long hold, then
/// the write, then pack() on that stream at once. pack() copies the source in the order of that
/// stream, so the unpacked tensor must hold the late write; an offloader whose copy runs on a
/// stream of its own without waiting for the caller's copies what the source held before it. The
/// hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that (the other
/// properties' writes, large ones on a loaded machine included, land well within it). The tensor
/// is offloaded whatever the options (keep_threshold 0) and has at least 64 bytes, so that the two
/// patterns differ.
void caller_writes_late(executor& ex, const activation_implementation& impl) {
  offload_options o;
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 1, std::size_t{1} << 20);
  o.prefetch_layers = *rc::gen::inRange(0, 3);
  const std::size_t bytes = *rc::gen::inRange<std::size_t>(64, 65536);
  const auto before = *rc::gen::arbitrary<std::uint64_t>();
  const auto late = *rc::gen::distinctFrom(before);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  delay_adaptor delays(ex);
  stream s(ex);
  buffer source(ex, memory_kind::device, bytes);
  buffer written(ex, memory_kind::pinned, bytes), expected(ex, memory_kind::pinned, bytes);
  buffer got(ex, memory_kind::pinned, bytes);
  const auto fill_host = [bytes](buffer& b, std::uint64_t x) {
    auto* p = b.as<unsigned char>();
    for (std::size_t i = 0; i < bytes; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = static_cast<unsigned char>(x >> 56);
    }
  };
  fill_host(written, before);
  fill_host(expected, late);
  ex.copy(source.data(), written.data(), bytes, s);
  ex.synchronize(s);
  std::size_t released = 0;
  {
    auto off = impl.make(delays, o);
    // A failed check unwinds: the late write and the offloader's reads end before the buffers go.
    const offloadkit::testing::sync_on_exit guard(ex, {s});
    tensor t;
    t.data = source.data();
    t.bytes = bytes;
    t.shape = {static_cast<std::int64_t>(bytes)};
    t.release = [&released] { ++released; };
    RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last write\n";
    delays.delay_next(std::chrono::microseconds(delay_us), 1, s);
    delays.copy(source.data(), expected.data(), bytes, s);
    const handle h = off->pack(std::move(t), s);
    delays.clear();
    off->forward_layer_end(0, s);
    off->backward_layer_begin(0, s);
    tensor back = off->unpack(h, s);
    ex.copy(got.data(), back.data, bytes, s);
    if (back.release) back.release();  // its read is issued on s
    off->synchronize();
    ex.synchronize(s);
  }
  RC_ASSERT(released == 1u);
  const auto* want = expected.as<unsigned char>();
  const auto* have = got.as<unsigned char>();
  const auto m = std::mismatch(want, want + bytes, have);
  if (m.first != want + bytes) {
    const std::size_t i = static_cast<std::size_t>(m.first - want);
    RC_FAIL(offloadkit::detail::concat("unpacked tensor (", bytes, " bytes): byte ", i, " is ",
                                       int(*m.second), ", expected ", int(*m.first),
                                       " (the write before the late one left ",
                                       int(written.as<unsigned char>()[i]), ")"));
  }
}

}  // namespace offloadkit::activation::testing
