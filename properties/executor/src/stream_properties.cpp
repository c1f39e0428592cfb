// Streams and events: launches, stream order, event ordering across streams, and independent
// streams.
#include "executor_properties.hpp"

namespace offloadkit::testing::executor_properties {

// ---- launch -------------------------------------------------------------------------------------

/// A launched OFFLOADKIT_HD body runs exactly once per index: a device-scope atomic counter ends
/// at n and every index holds its own value.
void launch_count(executor& ex) {
  const std::size_t n = *rc::gen::weightedOneOf<std::size_t>({
      {2, rc::gen::element<std::size_t>(0, 1, 2, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025)},
      {3, rc::gen::inRange<std::size_t>(0, 10000)},
      {1, rc::gen::inRange<std::size_t>(10000, 1 << 20)},
  });
  const unsigned block = *rc::gen::element(32u, 64u, 128u, 256u, 512u, 1024u);
  const std::uint64_t salt = gen_seed();

  stream s(ex);
  buffer counter(ex, memory_kind::device, sizeof(unsigned long long));
  buffer out(ex, memory_kind::device, n * sizeof(std::uint64_t));
  const sync_on_exit guard(ex, {s});

  ex.fill(counter.data(), 0, counter.size(), s);
  ex.fill(out.data(), 0xFF, out.size(), s);
  launch_count_and_write(ex, n, counter.as<unsigned long long>(), out.as<std::uint64_t>(), salt,
                         block, s);
  const auto count_bytes = read_back(ex, counter.data(), counter.size(), s);
  const auto out_bytes = read_back(ex, out.data(), out.size(), s);

  unsigned long long count = 0;
  std::memcpy(&count, count_bytes.data(), sizeof(count));
  RC_ASSERT(count == static_cast<unsigned long long>(n));
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t v = 0;
    std::memcpy(&v, out_bytes.data() + i * sizeof(v), sizeof(v));
    if (v != index_value(i, salt)) {
      RC_FAIL(offloadkit::detail::concat("launch over n = ", n, " with block ", block, ": index ",
                                         i, " holds ", v, ", expected ", index_value(i, salt)));
    }
  }
}

// ---- stream order -------------------------------------------------------------------------------

/// Work issued to one stream runs in issue order: a random sequence of fills, copies and launches
/// over three buffers, with random delays injected on the stream, ends in the same bytes as the
/// same sequence run one step at a time on the host.
void stream_order(executor& base) {
  delay_adaptor ex(base);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 16 * kib);
  const std::size_t bytes = words * 4;
  const std::uint64_t seed = gen_seed();
  const auto steps = *rc::gen::inRange<std::size_t>(1, 24);

  stream s(ex);
  // Buffers 0 and 1 are device memory, buffer 2 pinned memory.
  std::array<buffer, 3> bufs{buffer(ex, memory_kind::device, bytes),
                             buffer(ex, memory_kind::device, bytes),
                             buffer(ex, memory_kind::pinned, bytes)};
  const sync_on_exit guard(ex, {s});
  std::array<std::vector<unsigned char>, 3> model;
  for (auto& m : model) m.assign(bytes, 0);

  write_pattern(bufs[2].data(), bytes, seed);
  std::memcpy(model[2].data(), bufs[2].data(), bytes);
  ex.copy(bufs[0].data(), bufs[2].data(), bytes, s);
  ex.copy(bufs[1].data(), bufs[2].data(), bytes, s);
  model[0] = model[2];
  model[1] = model[2];
  ex.synchronize(s);

  // Both at full size: rapidcheck scales inRange by the case's size, which would leave the early
  // cases with fills only and no delay.
  ex.delay_randomly(s, microseconds(*rc::gen::resize(100, rc::gen::inRange(0, 500))), gen_seed());
  std::ostringstream trace;
  std::size_t first = 0;
  std::size_t count = 0;
  std::size_t dst = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    const int op = *rc::gen::resize(100, rc::gen::inRange(0, 3));
    // Half the steps work on the range the step before worked on: an overtaking op is seen only
    // where two neighbours touch the same bytes, which independent random ranges rarely do.
    const bool same_range = step > 0 && *rc::gen::resize(100, rc::gen::inRange(0, 2)) == 1;
    if (!same_range) {
      // Word-aligned ranges, so that launches over 32-bit words and byte ops mix freely.
      first = *rc::gen::inRange<std::size_t>(0, words);
      count = *rc::gen::inRange<std::size_t>(0, words - first + 1);
      dst = *rc::gen::inRange<std::size_t>(0, 3);
    }
    if (op == 0) {
      const int value = *rc::gen::inRange(0, 256);
      ex.fill(at(bufs[dst], first * 4), value, count * 4, s);
      std::fill_n(model[dst].begin() + static_cast<std::ptrdiff_t>(first * 4), count * 4,
                  static_cast<unsigned char>(value));
      trace << " fill(" << dst << "," << first << "," << count << ")";
    } else if (op == 1) {
      const std::size_t src = (dst + *rc::gen::inRange<std::size_t>(1, 3)) % 3;
      const std::size_t from = *rc::gen::inRange<std::size_t>(0, words - count + 1);
      ex.copy(at(bufs[dst], first * 4), at(bufs[src], from * 4), count * 4, s);
      std::memcpy(model[dst].data() + first * 4, model[src].data() + from * 4, count * 4);
      trace << " copy(" << src << "->" << dst << "," << from << "->" << first << "," << count
            << ")";
    } else {
      const std::size_t device_buf = dst % 2;
      const auto a = *rc::gen::arbitrary<std::uint32_t>();
      const auto b = *rc::gen::arbitrary<std::uint32_t>();
      launch_affine(ex, count, reinterpret_cast<std::uint32_t*>(at(bufs[device_buf], first * 4)), a,
                    b, s);
      for (std::size_t w = first; w < first + count; ++w) {
        std::uint32_t x = 0;
        std::memcpy(&x, model[device_buf].data() + w * 4, 4);
        x = x * a + b;
        std::memcpy(model[device_buf].data() + w * 4, &x, 4);
      }
      trace << " affine(" << device_buf << "," << first << "," << count << ")";
    }
  }
  ex.clear();
  for (std::size_t i = 0; i < 2; ++i) {
    const auto actual = read_back(ex, bufs[i].data(), bytes, s);
    expect_bytes(actual.data(), model[i].data(), bytes,
                 offloadkit::detail::concat("device buffer ", i, " after", trace.str()));
  }
  ex.synchronize(s);
  expect_bytes(bufs[2].data(), model[2].data(), bytes,
               offloadkit::detail::concat("pinned buffer 2 after", trace.str()));
}

namespace {

// ---- events across streams
// ------------------------------------------------------------------------

/// What the producer stream writes in the event properties, and the bytes it leaves behind.
struct production {
  int op = 0;  // 0: copy from pinned, 1: fill, 2: launch
  std::uint64_t seed = 0;
  int value = 0;
};

production gen_production() {
  production p;
  p.op = *rc::gen::inRange(0, 3);
  p.seed = gen_seed();
  p.value = *rc::gen::inRange(0, 256);
  return p;
}

std::vector<unsigned char> produced_bytes(const production& p, std::size_t words) {
  std::vector<unsigned char> v(words * 8);
  if (p.op == 0) {
    write_pattern(v.data(), v.size(), p.seed);
  } else if (p.op == 1) {
    std::fill(v.begin(), v.end(), static_cast<unsigned char>(p.value));
  } else {
    for (std::size_t i = 0; i < words; ++i) {
      const std::uint64_t x = index_value(i, p.seed);
      std::memcpy(v.data() + i * 8, &x, 8);
    }
  }
  return v;
}

/// Issues the production into `target` on `s`; `source` (pinned) and `counter` (device) are
/// scratch buffers of the right sizes.
void produce(executor& ex, const production& p, const buffer& target, const buffer& source,
             const buffer& counter, std::size_t words, stream_ref s) {
  if (p.op == 0) {
    write_pattern(source.data(), words * 8, p.seed);
    ex.copy(target.data(), source.data(), words * 8, s);
  } else if (p.op == 1) {
    ex.fill(target.data(), p.value, words * 8, s);
  } else {
    launch_count_and_write(ex, words, counter.as<unsigned long long>(), target.as<std::uint64_t>(),
                           p.seed, 256, s);
  }
}

const char* production_name(const production& p) {
  return p.op == 0 ? "copy" : p.op == 1 ? "fill" : "launch";
}

/// A producer stream and a consumer stream over one device buffer of `words` words (`shared`)
/// that starts out holding old bytes (`old_data`, from the seed), with what a production needs
/// (`source`, `counter`) and the consumer's host buffer (`out`). The constructor writes the old
/// bytes and waits for them.
struct handoff {
  handoff(executor& ex, std::size_t words, std::uint64_t old_seed)
      : producer(ex),
        consumer(ex),
        shared(ex, memory_kind::device, words * 8),
        source(ex, memory_kind::pinned, words * 8),
        old_data(ex, memory_kind::pinned, words * 8),
        out(ex, memory_kind::pinned, words * 8),
        counter(ex, memory_kind::device, sizeof(unsigned long long)) {
    write_pattern(old_data.data(), words * 8, old_seed);
    ex.copy(shared.data(), old_data.data(), words * 8, producer);
    ex.synchronize(producer);
  }
  stream producer;
  stream consumer;
  buffer shared;
  buffer source;
  buffer old_data;
  buffer out;
  buffer counter;
};

}  // namespace

/// With record on the producer and wait on the consumer, the consumer sees the producer's data
/// however long the producer is held back (injected delays on both streams).
void event_ordering(executor& base) {
  delay_adaptor ex(base);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 64 * kib);
  const std::uint64_t old_seed = gen_seed();
  const production p = gen_production();
  const auto delay = microseconds(*rc::gen::inRange(0, 20000));

  handoff h(ex, words, old_seed);
  event done(ex);
  const sync_on_exit guard(ex, {h.producer, h.consumer});

  ex.delay_next(delay, h.producer);
  ex.delay_randomly(h.consumer, microseconds(*rc::gen::inRange(0, 1000)), gen_seed());
  produce(ex, p, h.shared, h.source, h.counter, words, h.producer);
  ex.record(done, h.producer);
  ex.wait(done, h.consumer);
  ex.copy(h.out.data(), h.shared.data(), words * 8, h.consumer);
  ex.synchronize(h.consumer);

  const auto expected = produced_bytes(p, words);
  expect_bytes(
      h.out.data(), expected.data(), words * 8,
      offloadkit::detail::concat("consumer's copy after wait on the producer's event (producer ",
                                 production_name(p), " delayed by ", delay.count(), " us)"));
}

namespace {

/// Holds a stream at a host function until the check opens the gate (or `limit` passes), and says
/// whether the stream had to give up waiting.
class stream_gate {
 public:
  explicit stream_gate(std::chrono::milliseconds limit) : limit_(limit) {}

  /// Runs on the held stream (from a host function that shares ownership of the gate).
  void hold() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit_, [this] { return open_; })) timed_out_ = true;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  [[nodiscard]] bool timed_out() {
    std::lock_guard<std::mutex> lock(mutex_);
    return timed_out_;
  }

 private:
  std::chrono::milliseconds limit_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
  bool timed_out_ = false;
};

}  // namespace

/// Without the wait, nothing orders the consumer after the producer: while the producer is held
/// back (an injected delay, then a gate the check opens only after the consumer finished), the
/// consumer reads the old bytes. This is what makes a missing wait observable; it fails if the
/// executor serializes its streams. The gate makes the verdict independent of timing, and orders
/// the consumer's read before the producer's write for race detectors.
void missing_wait_is_observable(executor& base) {
  delay_adaptor ex(base);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 16 * kib);
  const std::uint64_t old_seed = gen_seed();
  const production p = gen_production();
  const auto delay = milliseconds(*rc::gen::inRange(0, 40));
  // Long enough for the consumer on a loaded machine; it bounds the wait where streams are
  // serialized and the consumer queues behind the gate.
  const auto gate_limit = milliseconds(2000);

  handoff h(ex, words, old_seed);
  const auto gate = std::make_shared<stream_gate>(gate_limit);
  const sync_on_exit guard(ex, {h.producer, h.consumer});
  // Declared after the guard: on the way out the gate opens first, then the streams drain.
  struct open_on_exit {
    std::shared_ptr<stream_gate> g;
    ~open_on_exit() { g->open(); }
  };
  const open_on_exit opener{gate};

  ex.delay_next(delay, h.producer);
  ex.host_function([gate] { gate->hold(); }, h.producer);
  produce(ex, p, h.shared, h.source, h.counter, words, h.producer);
  ex.copy(h.out.data(), h.shared.data(), words * 8, h.consumer);
  ex.synchronize(h.consumer);
  const bool serialized = gate->timed_out();
  gate->open();
  ex.synchronize(h.producer);

  if (serialized) {
    RC_FAIL(offloadkit::detail::concat(
        "the consumer's copy, issued with no wait, finished only after the ",
        "producer's held work gave up waiting (", gate_limit.count(),
        " ms): the two streams do not run independently"));
  }
  expect_bytes(h.out.data(), h.old_data.data(), words * 8,
               offloadkit::detail::concat("consumer's copy without a wait, while the producer's ",
                                          production_name(p), " was held back (delay ",
                                          delay.count(), " ms, then a gate)"));
  // The producer did write in the end: the old bytes seen above were stale, not a lost write.
  const auto after = read_back(ex, h.shared.data(), words * 8, h.consumer);
  const auto expected = produced_bytes(p, words);
  expect_bytes(after.data(), expected.data(), words * 8, "producer's bytes after its stream ended");
}

}  // namespace offloadkit::testing::executor_properties
