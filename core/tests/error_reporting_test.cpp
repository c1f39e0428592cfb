// Errors that happen on a failure or cleanup path reach the caller: a failed prefetch inside
// unpack() is counted and kept while the tensor it was for is uploaded on demand, a source release
// that throws is reported by the call that handed the source back without keeping the other
// sources from their owners, and a failure that is already being reported is not replaced by a
// second one from the cleanup after it. Faults are injected on the host executor. Also the names
// errors are reported with: every operation, pointer kind and dtype has its own, and context
// added to an error keeps its type.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::activation;

constexpr std::size_t tensor_bytes = 4096;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized_allocator = true;
#else
constexpr bool sanitized_allocator = false;
#endif

/// The bytes at `p` (any memory kind), read back through the executor.
std::vector<unsigned char> read_back(executor& ex, const void* p, std::size_t bytes, stream_ref s) {
  buffer host(ex, memory_kind::pageable, bytes);
  ex.copy(host.data(), p, bytes, s);
  ex.synchronize(s);
  std::vector<unsigned char> out(bytes);
  std::memcpy(out.data(), host.data(), bytes);
  return out;
}

TEST(ErrorReporting, FailedPrefetchIsCountedAndItsTensorComesOnDemand) {
  host_executor host;
  fault_injection_adaptor ex(host);
  stream s(ex);
  offload_options o;
  o.prefetch_layers = 2;
  o.prefetch_bytes = tensor_bytes;  // room for one prefetched tensor at a time
  async_offloader off(ex, o);

  std::vector<buffer> sources;
  std::vector<handle> handles;
  for (int layer = 0; layer < 2; ++layer) {
    sources.emplace_back(ex, memory_kind::device, tensor_bytes);
    ex.fill(sources.back().data(), 0x10 + layer, tensor_bytes, s);
    handles.push_back(off.pack({sources.back().data(),
                                tensor_bytes,
                                0,
                                dtype::u8,
                                {static_cast<std::int64_t>(tensor_bytes)},
                                nullptr},
                               s));
    off.forward_layer_end(layer, s);
  }
  off.synchronize();  // every source is handed back: backward reads the host copies
  off.backward_layer_begin(1, s);
  ASSERT_EQ(off.stats().prefetched, 1u) << "the bound leaves room for layer 1's tensor only";

  // Unpacking layer 1 frees the room; the prefetch of layer 0 it then issues fails at its copy.
  ex.arm({op_kind::copy}, 0);
  tensor t1 = off.unpack(handles[1], s);
  EXPECT_TRUE(ex.fired());
  ex.disarm();
  EXPECT_EQ(read_back(ex, t1.data, tensor_bytes, s),
            std::vector<unsigned char>(tensor_bytes, 0x11));
  EXPECT_EQ(off.stats().failed_prefetches, 1u);
  ASSERT_TRUE(off.last_prefetch_error());
  EXPECT_THROW(std::rethrow_exception(off.last_prefetch_error()), injected_fault);
  EXPECT_EQ(off.stats().prefetched, 1u);

  // The tensor the failed prefetch was for is still packed and comes back on demand.
  tensor t0 = off.unpack(handles[0], s);
  EXPECT_EQ(read_back(ex, t0.data, tensor_bytes, s),
            std::vector<unsigned char>(tensor_bytes, 0x10));
  EXPECT_EQ(off.stats().demand_uploads, 1u);
  EXPECT_EQ(off.stats().failed_prefetches, 1u);
  t1.release();
  t0.release();
  off.synchronize();
}

TEST(ErrorReporting, PrefetchThatSucceedsRecordsNoError) {
  host_executor ex;
  stream s(ex);
  async_offloader off(ex, {});
  buffer b(ex, memory_kind::device, tensor_bytes);
  const handle h =
      off.pack({b.data(), tensor_bytes, 0, dtype::u8, {std::int64_t{tensor_bytes}}, nullptr}, s);
  off.forward_layer_end(0, s);
  off.synchronize();
  off.backward_layer_begin(0, s);
  tensor t = off.unpack(h, s);
  EXPECT_EQ(off.stats().failed_prefetches, 0u);
  EXPECT_FALSE(off.last_prefetch_error());
  t.release();
  off.synchronize();
}

TEST(ErrorReporting, ReleaseErrorReachesTheCallerAndTheOtherSourcesStillGoBack) {
  host_executor ex;
  stream s(ex);
  async_offloader off(ex, {});
  buffer a(ex, memory_kind::device, tensor_bytes);
  buffer b(ex, memory_kind::device, tensor_bytes);
  buffer c(ex, memory_kind::device, tensor_bytes);
  int released = 0;
  int reported = 0;
  auto counted = [&released] { ++released; };
  // Sources go back from whichever call sees their copy complete (a later pack, or synchronize):
  // that call reports the failed release; a pack that reports it has packed nothing (retried).
  auto reports_release_error = [&reported](auto&& call) {
    try {
      call();
      return false;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("owner of tensor a"), std::string::npos) << e.what();
      ++reported;
      return true;
    }
  };
  auto pack = [&](buffer& src, std::function<void()> release) {
    const tensor t{src.data(),        tensor_bytes, 0, dtype::u8, {std::int64_t{tensor_bytes}},
                   std::move(release)};
    while (reports_release_error([&] { (void)off.pack(t, s); })) {
    }
  };
  // The first source in copy order fails to go back; the two after it must still go back.
  pack(a, [] { throw std::runtime_error("owner of tensor a: release failed"); });
  pack(b, counted);
  pack(c, counted);
  (void)reports_release_error([&] { off.synchronize(); });
  EXPECT_EQ(reported, 1) << "the failed release is reported once";
  EXPECT_EQ(released, 2);
  EXPECT_NO_THROW(off.synchronize());
  EXPECT_EQ(released, 2) << "no source goes back twice";
}

TEST(ErrorReporting, CaptureFunctionErrorIsNotReplacedByTheCleanupAfterIt) {
  host_executor host;
  fault_injection_adaptor ex(host);
  stream s(ex);
  buffer b(ex, memory_kind::device, 64);
  // The capture's own end fails too: the caller still learns why the capture failed.
  ex.arm({op_kind::end_capture}, 0);
  try {
    (void)region::detail::capture_graph(
        ex, [](void*, stream_ref) { throw std::runtime_error("graph body: bad launch"); }, b.data(),
        s);
    ADD_FAILURE() << "capture_graph returned";
  } catch (const injected_fault& e) {
    ADD_FAILURE() << "the cleanup's error replaced the capture's: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "graph body: bad launch");
  }
  EXPECT_TRUE(ex.fired());
  ex.disarm();
  // The stream is not left capturing: a later capture works.
  const graph_ref g = region::detail::capture_graph(
      ex, [&ex](void* base, stream_ref st) { ex.fill(base, 7, 64, st); }, b.data(), s);
  ex.replay(g, s);
  EXPECT_EQ(read_back(ex, b.data(), 64, s), std::vector<unsigned char>(64, 7));
  ex.destroy_graph(g);
}

TEST(ErrorReporting, FailedResumeReachesTheCallerAndARetryRestoresTheContents) {
  host_executor host;
  fault_injection_adaptor ex(host);
  stream s(ex);
  const std::size_t gran = ex.granularity(0);
  region::vmm_region r(ex, {3 * gran, 0, gran});
  ex.fill(r.data(), 0x5a, r.size(), s);
  r.pause(s);
  // The second chunk's access cannot be set: the caller gets that error, and nothing is lost.
  ex.arm({op_kind::set_access}, 1);
  EXPECT_THROW(r.resume(s), injected_fault);
  EXPECT_TRUE(ex.fired());
  ex.disarm();
  EXPECT_EQ(r.state(), region::region_state::partial);
  r.resume(s);
  EXPECT_EQ(r.state(), region::region_state::active);
  EXPECT_EQ(read_back(ex, r.data(), r.size(), s), std::vector<unsigned char>(r.size(), 0x5a));
}

TEST(ErrorReporting, HostFunctionThatThrowsANonStandardExceptionIsReportedByTheNextWait) {
  host_executor ex;
  stream s(ex);
  ex.host_function([] { throw 42; }, s);
  try {
    s.synchronize();
    ADD_FAILURE() << "the host function's failure was not reported";
  } catch (const runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("host_function"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a std::exception"), std::string::npos) << e.what();
  }
}

/// The type of what rethrow_with_context throws for `original`, and its message.
template <class Expected, class Original>
void expect_context_keeps_type(const Original& original) {
  try {
    try {
      throw original;
    } catch (...) {
      arena::detail::rethrow_with_context("while reloading tensor 3");
    }
  } catch (const Expected& e) {
    EXPECT_EQ(std::string(e.what()).rfind("while reloading tensor 3: ", 0), 0u) << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "came back as another type: " << e.what();
    return;
  }
  ADD_FAILURE() << "nothing was thrown";
}

TEST(ErrorReporting, ContextIsAddedWithoutChangingTheErrorsType) {
  expect_context_keeps_type<out_of_memory>(out_of_memory("no memory"));
  expect_context_keeps_type<injected_fault>(injected_fault("planted"));
  expect_context_keeps_type<state_error>(state_error("paused"));
  expect_context_keeps_type<out_of_range>(out_of_range("index 9"));
  expect_context_keeps_type<logic_error>(logic_error("misuse"));
  expect_context_keeps_type<runtime_error>(runtime_error("platform"));
  expect_context_keeps_type<out_of_memory>(std::bad_alloc());
  expect_context_keeps_type<runtime_error>(std::runtime_error("other"));
  try {
    try {
      throw cuda_error("cudaMemcpyAsync failed", 700);
    } catch (...) {
      arena::detail::rethrow_with_context("ctx");
    }
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.code(), 700);
  }
  try {
    try {
      throw bad_alloc("address range");
    } catch (...) {
      arena::detail::rethrow_with_context("ctx");
    }
  } catch (const out_of_memory& e) {
    ADD_FAILURE() << "a bad_alloc that is not out_of_memory became one: " << e.what();
  } catch (const bad_alloc& e) {
    EXPECT_STREQ(e.what(), "ctx: address range");
  }
}

TEST(ErrorReporting, EveryOperationAndMemoryKindHasItsOwnName) {
  std::set<std::string> ops;
  for (unsigned k = 0; k < static_cast<unsigned>(op_kind::count_); ++k) {
    const std::string n = to_string(static_cast<op_kind>(k));
    EXPECT_NE(n, "unknown") << "op_kind " << k;
    ops.insert(n);
  }
  EXPECT_EQ(ops.size(), static_cast<std::size_t>(op_kind::count_));
  EXPECT_STREQ(to_string(op_kind::count_), "unknown");
  const std::set<std::string> pointers = {
      to_string(pointer_kind::device), to_string(pointer_kind::pinned),
      to_string(pointer_kind::pageable), to_string(pointer_kind::managed)};
  EXPECT_EQ(pointers.size(), 4u);
  EXPECT_EQ(pointers.count("unknown"), 0u);
  EXPECT_EQ(allocation_op(memory_kind::device), op_kind::allocate_device);
  EXPECT_EQ(allocation_op(memory_kind::pinned), op_kind::allocate_pinned);
  EXPECT_EQ(allocation_op(memory_kind::pageable), op_kind::allocate_pageable);
}

TEST(ErrorReporting, CountingAdaptorCountsCaptureAndReplay) {
  host_executor host;
  counting_adaptor ex(host);
  stream s(ex);
  buffer b(ex, memory_kind::device, 64);
  ex.begin_capture(s);
  ex.fill(b.data(), 3, 64, s);
  const graph_ref g = ex.end_capture(s);
  ex.replay(g, s);
  ex.replay(g, s);
  s.synchronize();
  ex.destroy_graph(g);
  const auto c = ex.snapshot();
  EXPECT_EQ(c.calls_of(op_kind::begin_capture), 1u);
  EXPECT_EQ(c.calls_of(op_kind::end_capture), 1u);
  EXPECT_EQ(c.calls_of(op_kind::replay), 2u);
  EXPECT_EQ(read_back(ex, b.data(), 64, s), std::vector<unsigned char>(64, 3));
}

TEST(ErrorReporting, EveryDtypeHasItsSizeAndName) {
  struct expected {
    dtype t;
    std::size_t size;
    const char* name;
  };
  for (const expected& e : {expected{dtype::u8, 1, "u8"}, expected{dtype::i8, 1, "i8"},
                            expected{dtype::f16, 2, "f16"}, expected{dtype::bf16, 2, "bf16"},
                            expected{dtype::f32, 4, "f32"}, expected{dtype::i32, 4, "i32"},
                            expected{dtype::f64, 8, "f64"}, expected{dtype::i64, 8, "i64"}}) {
    EXPECT_EQ(dtype_size(e.t), e.size) << e.name;
    EXPECT_STREQ(to_string(e.t), e.name);
  }
  // A pack of a 64-bit tensor checks its bytes against 8 per element.
  host_executor ex;
  stream s(ex);
  async_offloader off(ex, {});
  buffer b(ex, memory_kind::device, 64);
  EXPECT_THROW((void)off.pack({b.data(), 32, 0, dtype::i64, {8}, nullptr}, s), out_of_range);
  tensor t = off.unpack(off.pack({b.data(), 64, 0, dtype::i64, {8}, nullptr}, s), s);
  EXPECT_EQ(t.bytes, 64u);
  if (t.release) t.release();
  off.synchronize();
}

TEST(ErrorReporting, MemoryTheHostCannotProvideIsOutOfMemoryNamingTheRequest) {
  host_executor ex;
  EXPECT_EQ(ex.options().devices, host_executor_options{}.devices);
  const std::size_t huge = std::size_t{1} << 62;  // no machine has this much
  // The sanitizers' allocators stop the process on such a request instead of failing it.
  for (const memory_kind kind : {memory_kind::pinned, memory_kind::pageable}) {
    if (sanitized_allocator) break;
    try {
      (void)ex.allocate(kind, huge);
      ADD_FAILURE() << to_string(kind) << ": " << huge << " bytes were provided";
    } catch (const out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find("could not provide " + std::to_string(huge)),
                std::string::npos)
          << e.what();
    }
  }
  // An address range larger than the address space.
  const std::size_t gran = ex.granularity(0);
  const std::size_t range = (std::size_t{1} << 62) / gran * gran;
  try {
    (void)ex.reserve(range, 0);
    ADD_FAILURE() << "an address range of " << range << " bytes was reserved";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("no address range of " + std::to_string(range)),
              std::string::npos)
        << e.what();
  }
  // The executor still works after each refusal.
  buffer b(ex, memory_kind::pageable, 64);
  EXPECT_NE(b.data(), nullptr);
}

TEST(ErrorReporting, ARegionThatCannotBeBuiltGivesEveryChunkBack) {
  host_executor host;
  fault_injection_adaptor ex(host);
  const std::size_t gran = ex.granularity(0);
  const std::size_t free_before = ex.device_memory(0).free;
  // Each of the calls that build a three-chunk region fails in turn; the error reaches the
  // caller with its type and nothing the failed constructor made stays behind.
  for (const op_kind kind :
       {op_kind::reserve, op_kind::create_physical, op_kind::map, op_kind::set_access}) {
    for (std::size_t n = 0;; ++n) {
      ex.arm({kind}, n);
      bool threw = false;
      try {
        region::vmm_region r(ex, {3 * gran, 0, gran});
      } catch (const injected_fault&) {
        threw = true;
      } catch (const out_of_memory&) {
        threw = true;
      }
      const bool fired = ex.fired();
      ex.disarm();
      EXPECT_EQ(threw, fired) << to_string(kind) << " call " << n;
      EXPECT_EQ(ex.device_memory(0).free, free_before)
          << to_string(kind) << " call " << n << " failed: device memory was not given back";
      if (!fired) break;
    }
  }
}

}  // namespace
