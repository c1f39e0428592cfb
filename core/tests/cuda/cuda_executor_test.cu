// Smoke tests of the cuda back end on a real GPU: memory kinds and classification, copies and
// fills, a cuda::atomic_ref body issued through offloadkit::launch, a programmatic launch (its wait
// for the kernel before it, its captured edge), host functions, events, virtual memory (release
// really frees device memory; a graph captured before unmap replays after remap), graph lifetime,
// failure paths and device restoration. Every suite carries "Cuda", so ctest runs them in the
// .cuda entry, which is skipped where no GPU is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <cuda/atomic>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/detail/cuda_try.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"
#include "testing.hpp"

namespace ok = offloadkit;

namespace {

// Counts its indices with a device-scope atomic and writes a hash of each index. `skip_from`
// plants a bug for the checker's own test: indices at or past it are silently skipped.
struct count_and_write {
  unsigned long long* counter;
  std::uint32_t* out;
  std::size_t skip_from;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    if (i >= skip_from) return;
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> c(*counter);
    c.fetch_add(1, cuda::memory_order_relaxed);
    out[i] = static_cast<std::uint32_t>(i * 2654435761u);
  }
};

// What a correct count_and_write over n leaves behind, or what differs.
std::string check_count_and_write(unsigned long long counter, const std::vector<std::uint32_t>& out,
                                  std::size_t n) {
  if (counter != n)
    return "counter = " + std::to_string(counter) + ", expected " + std::to_string(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i] != static_cast<std::uint32_t>(i * 2654435761u)) {
      return "out[" + std::to_string(i) + "] = " + std::to_string(out[i]);
    }
  }
  return {};
}

struct write_pattern {
  std::uint32_t* p;
  std::uint32_t salt;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    p[i] = static_cast<std::uint32_t>(i) ^ salt;
  }
};

struct increment {
  unsigned long long* counter;
  OFFLOADKIT_HD void operator()(std::size_t) const {
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> c(*counter);
    c.fetch_add(1, cuda::memory_order_relaxed);
  }
};

// Keeps the GPU busy for about `cycles` clock ticks, to hold work in flight.
struct spin {
  long long cycles;
  OFFLOADKIT_HD void operator()(std::size_t) const {
#if defined(__CUDA_ARCH__)
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
#endif
  }
};

// write_pattern that lets the kernel after it start at once (an early trigger) and then spins for
// about `cycles` clock ticks before it writes, so that a kernel after it that does not wait reads
// what was there before.
struct write_pattern_late {
  std::uint32_t* p;
  std::uint32_t salt;
  long long cycles;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
#endif
    p[i] = static_cast<std::uint32_t>(i) ^ salt;
  }
};

// Adds one to each element of `from` into `to`; launched programmatically when `Programmatic`
// (launch.hpp), reading only after wait_for_prior_grids.
template <bool Programmatic>
struct add_one {
  static constexpr bool programmatic_launch = Programmatic;
  const std::uint32_t* from;
  std::uint32_t* to;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    ok::wait_for_prior_grids();
    to[i] = from[i] + 1;
  }
};

std::size_t first_pattern_mismatch(const std::vector<std::uint32_t>& v, std::uint32_t salt) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != (static_cast<std::uint32_t>(i) ^ salt)) return i;
  }
  return v.size();
}

class CudaExecutor : public ::testing::Test {
 protected:
  // Copies `count` elements from anywhere to a host vector through the executor.
  template <class T>
  std::vector<T> read_back(const void* src, std::size_t count) {
    std::vector<T> host(count);
    ex->copy(host.data(), src, count * sizeof(T), s);
    s.synchronize();
    return host;
  }

  std::unique_ptr<ok::executor> ex = ok::testing::cuda_backend::make();
  ok::stream s{*ex};
};

TEST(CudaAvailability, ReasonIsEmptyAndOptionsAreChecked) {
  EXPECT_EQ(ok::cuda_unavailable_reason(), "");
  ok::cuda_executor ex;
  EXPECT_EQ(ex.kind(), ok::backend::cuda);
  EXPECT_GE(ex.device_count(), 1);
  try {
    ok::cuda_executor bad(ok::cuda_executor_options{1000});
    ADD_FAILURE() << "devices = 1000 was accepted";
  } catch (const ok::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
  }
}

TEST(CudaErrorMacros, RuntimeAndDriverStatusesBecomeTypedExceptions) {
  try {
    OFFLOADKIT_CUDA_TRY(cudaErrorMemoryAllocation);
    ADD_FAILURE() << "no throw";
  } catch (const ok::out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorMemoryAllocation"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_executor_test.cu"), std::string::npos) << what;
  }
  try {
    OFFLOADKIT_CUDA_TRY_CTX(cudaErrorInvalidValue, "bytes = ", 12345);
    ADD_FAILURE() << "no throw";
  } catch (const ok::cuda_error& e) {
    EXPECT_EQ(e.code(), static_cast<int>(cudaErrorInvalidValue));
    EXPECT_NE(std::string(e.what()).find("bytes = 12345"), std::string::npos) << e.what();
  }
  EXPECT_THROW(OFFLOADKIT_CU_TRY(CUDA_ERROR_OUT_OF_MEMORY), ok::out_of_memory);
  try {
    OFFLOADKIT_CU_TRY(CUDA_ERROR_INVALID_VALUE);
    ADD_FAILURE() << "no throw";
  } catch (const ok::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_INVALID_VALUE"), std::string::npos)
        << e.what();
  }
  OFFLOADKIT_CUDA_ASSERT_OK(cudaErrorInvalidValue);  // reports at most; never throws
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaExecutor, AllocatesEveryKindAndClassifiesIt) {
  const ok::memory_kind kinds[] = {ok::memory_kind::device, ok::memory_kind::pinned,
                                   ok::memory_kind::pageable};
  const ok::pointer_kind expected[] = {ok::pointer_kind::device, ok::pointer_kind::pinned,
                                       ok::pointer_kind::pageable};
  std::set<void*> seen;
  std::vector<ok::buffer> held;
  for (int k = 0; k < 3; ++k) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{0}, std::size_t{1}, std::size_t{4097}}) {
      held.emplace_back(*ex, kinds[k], bytes);
      void* p = held.back().data();
      ASSERT_NE(p, nullptr) << ok::to_string(kinds[k]) << " " << bytes;
      EXPECT_TRUE(seen.insert(p).second) << "pointer handed out twice";
      const ok::pointer_info info = ex->classify(p);
      EXPECT_EQ(info.kind, expected[k])
          << ok::to_string(kinds[k]) << " classified as " << ok::to_string(info.kind);
      EXPECT_EQ(info.device, kinds[k] == ok::memory_kind::device ? 0 : -1);
    }
  }
  EXPECT_THROW((void)ex->allocate(ok::memory_kind::device, 16, 99), ok::out_of_range);
}

TEST_F(CudaExecutor, CopiesAndFillsBetweenEveryKind) {
  constexpr std::size_t n = (1 << 20) + 13;
  std::vector<unsigned char> pattern(n);
  for (std::size_t i = 0; i < n; ++i) pattern[i] = static_cast<unsigned char>(i * 31 + 7);
  ok::buffer pageable(*ex, ok::memory_kind::pageable, n);
  ok::buffer pinned(*ex, ok::memory_kind::pinned, n);
  ok::buffer dev_a(*ex, ok::memory_kind::device, n);
  ok::buffer dev_b(*ex, ok::memory_kind::device, n);
  std::memcpy(pageable.data(), pattern.data(), n);
  ex->copy(pinned.data(), pageable.data(), n, s);
  ex->copy(dev_a.data(), pinned.data(), n, s);
  ex->copy(dev_b.data(), dev_a.data(), n, s);
  EXPECT_EQ(read_back<unsigned char>(dev_b.data(), n), pattern);

  // Fill part of each kind; the rest keeps the pattern.
  std::vector<unsigned char> filled = pattern;
  std::memset(filled.data() + 100, 0xAB, 5000);
  for (ok::buffer* b : {&dev_b, &pinned, &pageable}) {
    ex->copy(b->data(), dev_a.data(), n, s);
    ex->fill(b->as<unsigned char>() + 100, 0xAB, 5000, s);
    EXPECT_EQ(read_back<unsigned char>(b->data(), n), filled) << ok::to_string(b->kind());
  }
  ex->copy(dev_b.data(), dev_a.data(), 0, s);  // zero bytes: a no-op
  s.synchronize();
}

TEST_F(CudaExecutor, LaunchesAnAtomicRefBodyOverMoreIndicesThanTheGridCap) {
  // Past 65535 blocks of 256 threads, so the grid-stride loop must cover the rest.
  constexpr std::size_t n = 65535u * 256u + 12345u;
  ok::buffer counter(*ex, ok::memory_kind::device, sizeof(unsigned long long));
  ok::buffer out(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  ex->fill(counter.data(), 0, counter.size(), s);
  ok::launch(*ex, n, count_and_write{counter.as<unsigned long long>(), out.as<std::uint32_t>(), n},
             "count_and_write", s);
  const auto count = read_back<unsigned long long>(counter.data(), 1)[0];
  EXPECT_EQ(check_count_and_write(count, read_back<std::uint32_t>(out.data(), n), n), "");
}

TEST_F(CudaExecutor, CheckCatchesABodyThatSkipsAnIndex) {
  // The planted bug: the last index is never run. The checker above must notice.
  constexpr std::size_t n = 4099;
  ok::buffer counter(*ex, ok::memory_kind::device, sizeof(unsigned long long));
  ok::buffer out(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  ex->fill(counter.data(), 0, counter.size(), s);
  ex->fill(out.data(), 0, out.size(), s);
  ok::launch(*ex, n,
             count_and_write{counter.as<unsigned long long>(), out.as<std::uint32_t>(), n - 1}, s);
  const auto count = read_back<unsigned long long>(counter.data(), 1)[0];
  EXPECT_NE(check_count_and_write(count, read_back<std::uint32_t>(out.data(), n), n), "");
}

TEST_F(CudaExecutor, AProgrammaticBodyFollowsAKernelOnAProgrammaticEdgeAndReadsItsWrites) {
  // Each body's kernel writes what the next one reads: a programmatic body launched while the
  // kernel before it finishes must still read all of its writes.
  constexpr std::size_t n = std::size_t{1} << 22;
  ok::buffer a(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  ok::buffer b(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  ok::buffer c(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  auto* pa = a.as<std::uint32_t>();
  auto* pb = b.as<std::uint32_t>();
  auto* pc = c.as<std::uint32_t>();
  const auto issue = [&](std::uint32_t salt) {
    ok::launch(*ex, n, write_pattern{pa, salt}, "write_pattern", s);
    ok::launch(*ex, n, add_one<true>{pa, pb}, "add_one_programmatic", s);
    ok::launch(*ex, n, add_one<false>{pb, pc}, "add_one", s);
  };
  const auto check = [&](std::uint32_t salt) {
    const auto got = read_back<std::uint32_t>(pc, n);
    std::vector<std::uint32_t> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = (static_cast<std::uint32_t>(i) ^ salt) + 2;
    EXPECT_EQ(got, want) << "salt " << salt;
  };
  for (std::uint32_t salt : {0x1234u, 0xbeefu, 0x5a5au}) {
    issue(salt);
    check(salt);
  }
  // A kernel before it that lets it start early and writes late: only the wait keeps the read
  // after the write.
  constexpr std::size_t late = std::size_t{1} << 16;
  ex->fill(pa, 0, late * sizeof(std::uint32_t), s);
  ok::launch(*ex, late, write_pattern_late{pa, 0x3c3cu, 200000}, "write_pattern_late", s);
  ok::launch(*ex, late, add_one<true>{pa, pb}, "add_one_programmatic", s);
  {
    const auto got = read_back<std::uint32_t>(pb, late);
    std::size_t stale = 0;
    for (std::size_t i = 0; i < late; ++i) {
      stale += got[i] != (static_cast<std::uint32_t>(i) ^ 0x3c3cu) + 1 ? 1 : 0;
    }
    EXPECT_EQ(stale, 0u) << "of " << late << " elements read before the kernel before wrote them";
  }

  // Captured: the programmatic body's edge from the kernel before it is programmatic where the
  // device and the compiled code allow it, and the plain body's edge is a full one.
  int device = 0;
  int major = 0;
  OFFLOADKIT_CUDA_TRY(cudaGetDevice(&device));
  OFFLOADKIT_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const bool programmatic = ok::detail::programmatic_launch_allowed_here<add_one<true>>();
  cudaFuncAttributes attributes{};
  OFFLOADKIT_CUDA_TRY(cudaFuncGetAttributes(
      &attributes, reinterpret_cast<const void*>(ok::detail::kernel_for<add_one<true>>())));
  EXPECT_EQ(programmatic, major >= 9 && attributes.ptxVersion >= 90)
      << "compute capability " << major << ", PTX " << attributes.ptxVersion;
  auto native = static_cast<cudaStream_t>(s.ref().native);
  s.synchronize();
  OFFLOADKIT_CUDA_TRY(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal));
  issue(0x77u);
  cudaGraph_t graph = nullptr;
  OFFLOADKIT_CUDA_TRY(cudaStreamEndCapture(native, &graph));
  std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, decltype(&cudaGraphDestroy)> owned(
      graph, &cudaGraphDestroy);
  std::size_t edges = 0;
  OFFLOADKIT_CUDA_TRY(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  ASSERT_EQ(edges, 2u);
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  OFFLOADKIT_CUDA_TRY(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges));
  // The node each edge leads to, by its kernel's first parameter: add_one's `from`.
  for (std::size_t e = 0; e < edges; ++e) {
    cudaKernelNodeParams params{};
    OFFLOADKIT_CUDA_TRY(cudaGraphKernelNodeGetParams(to[e], &params));
    const auto* body = static_cast<const add_one<true>*>(params.kernelParams[0]);
    const bool to_programmatic = body->from == pa;
    EXPECT_EQ(data[e].type, to_programmatic && programmatic ? cudaGraphDependencyTypeProgrammatic
                                                            : cudaGraphDependencyTypeDefault)
        << "edge into the " << (to_programmatic ? "programmatic" : "plain") << " body";
  }
  cudaGraphExec_t exec = nullptr;
  OFFLOADKIT_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
  std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, decltype(&cudaGraphExecDestroy)>
      owned_exec(exec, &cudaGraphExecDestroy);
  OFFLOADKIT_CUDA_TRY(cudaGraphLaunch(exec, native));
  check(0x77u);
}

TEST_F(CudaExecutor, RefusesABodyNotCompiledByNvcc) {
  ok::launch_request r = ok::make_launch(8, increment{nullptr});
  r.device_launch = nullptr;  // what a host-only translation unit produces
  try {
    ex->launch(r, s);
    ADD_FAILURE() << "no throw";
  } catch (const ok::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("nvcc"), std::string::npos) << e.what();
  }
  ok::launch_request bad_block = ok::make_launch(8, increment{nullptr}, "k", 2048);
  EXPECT_THROW(ex->launch(bad_block, s), ok::out_of_range);
}

TEST_F(CudaExecutor, HostFunctionsRunInStreamOrderAndAreFreed) {
  ok::buffer pinned(*ex, ok::memory_kind::pinned, sizeof(std::uint32_t));
  ok::buffer dev(*ex, ok::memory_kind::device, sizeof(std::uint32_t));
  auto token = std::make_shared<int>(0);
  std::atomic<std::uint32_t> seen{0};
  ok::launch(*ex, 1, write_pattern{dev.as<std::uint32_t>(), 0xC0FFEEu}, s);
  ex->copy(pinned.data(), dev.data(), sizeof(std::uint32_t), s);
  const auto* value = pinned.as<std::uint32_t>();
  ex->host_function([token, value, &seen] { seen = *value; }, s);
  s.synchronize();
  EXPECT_EQ(seen.load(), 0xC0FFEEu);
  EXPECT_EQ(token.use_count(), 1) << "the host function was not freed after it ran";
}

TEST_F(CudaExecutor, EventsOrderWorkAcrossStreams) {
  ok::stream other(*ex);
  ok::event done(*ex);
  constexpr std::size_t n = 1 << 20;
  ok::buffer dev(*ex, ok::memory_kind::device, n * sizeof(std::uint32_t));
  ok::launch(*ex, 1, spin{20'000'000}, s);
  ok::launch(*ex, n, write_pattern{dev.as<std::uint32_t>(), 77u}, s);
  ex->record(done, s);
  ex->wait(done, other);
  std::vector<std::uint32_t> host(n);
  ex->copy(host.data(), dev.data(), n * sizeof(std::uint32_t), other);
  other.synchronize();
  EXPECT_TRUE(ex->ready(done));
  EXPECT_EQ(first_pattern_mismatch(host, 77u), n);
  ex->synchronize(ok::event_ref(done));
}

TEST_F(CudaExecutor, DeviceMemoryIsTheDriversFreeMemory) {
  constexpr std::size_t gib = std::size_t{1} << 30;
  const ok::memory_info before = ex->device_memory();
  ASSERT_GT(before.total, 0u);
  ASSERT_GT(before.free, 2 * gib) << "the GPU is too full for this check";
  {
    ok::buffer big(*ex, ok::memory_kind::device, gib);
    const ok::memory_info during = ex->device_memory();
    EXPECT_LT(during.free, before.free - gib * 3 / 4);
  }
  EXPECT_GT(ex->device_memory().free, before.free - gib / 8);
}

TEST_F(CudaExecutor, OutOfMemoryIsTypedAndLeavesTheExecutorUsable) {
  const ok::memory_info m = ex->device_memory();
  try {
    (void)ex->allocate(ok::memory_kind::device, m.total + (std::size_t{1} << 30));
    ADD_FAILURE() << "allocating more than the device holds succeeded";
  } catch (const ok::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorMemoryAllocation"), std::string::npos);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error was left behind";
  ok::buffer fine(*ex, ok::memory_kind::device, 1 << 20);
  ex->fill(fine.data(), 1, fine.size(), s);
  s.synchronize();
}

TEST_F(CudaExecutor, VirtualMemoryKeepsItsAddressAcrossReleaseAndAGraphReplaysAfterRemap) {
  const std::size_t g = ex->granularity();
  ASSERT_GT(g, 0u);
  EXPECT_THROW((void)ex->reserve(g + 1), ok::out_of_range);
  try {
    (void)ex->create_physical(g / 2);
    ADD_FAILURE() << "a size below the granularity was accepted";
  } catch (const ok::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(g / 2)), std::string::npos) << e.what();
  }

  const std::size_t bytes = 32 * g;
  const std::size_t words = bytes / sizeof(std::uint32_t);
  void* va = ex->reserve(bytes);
  ok::physical_handle h = ex->create_physical(bytes);
  EXPECT_THROW(ex->map(static_cast<char*>(va) + 1, g, h), ok::out_of_range);
  ex->map(va, bytes, h);
  ex->set_access(va, bytes);
  EXPECT_EQ(ex->classify(va).kind, ok::pointer_kind::device);
  EXPECT_EQ(ex->classify(va).device, 0);

  ok::launch(*ex, words, write_pattern{static_cast<std::uint32_t*>(va), 1u}, s);
  EXPECT_EQ(first_pattern_mismatch(read_back<std::uint32_t>(va, words), 1u), words);

  // A graph that writes the range and copies it out, captured while it is mapped.
  ok::buffer out(*ex, ok::memory_kind::pinned, bytes);
  ex->begin_capture(s);
  ok::launch(*ex, words, write_pattern{static_cast<std::uint32_t*>(va), 2u}, s);
  ex->copy(out.data(), va, bytes, s);
  ok::graph graph(*ex, ex->end_capture(s));

  // Release: the driver's free memory grows by about the range.
  s.synchronize();
  const std::size_t mapped_free = ex->device_memory().free;
  ex->unmap(va, bytes);
  ex->release_physical(h);
  const std::size_t released_free = ex->device_memory().free;
  EXPECT_GE(released_free, mapped_free + bytes / 2)
      << "unmap + release did not give memory back to the driver";

  // Remap new memory at the same address; the old graph must work on it.
  h = ex->create_physical(bytes);
  ex->map(va, bytes, h);
  ex->set_access(va, bytes);
  graph.replay(s);
  s.synchronize();
  std::vector<std::uint32_t> host(words);
  std::memcpy(host.data(), out.data(), bytes);
  EXPECT_EQ(first_pattern_mismatch(host, 2u), words);

  graph = ok::graph{};
  ex->unmap(va, bytes);
  ex->release_physical(h);
  ex->unreserve(va, bytes);
}

TEST_F(CudaExecutor, CapturedHostFunctionsLiveWithTheGraph) {
  ok::buffer counter(*ex, ok::memory_kind::device, sizeof(unsigned long long));
  ex->fill(counter.data(), 0, counter.size(), s);
  s.synchronize();
  auto token = std::make_shared<int>(0);
  std::atomic<int> calls{0};
  ex->begin_capture(s);
  ok::launch(*ex, 1, increment{counter.as<unsigned long long>()}, s);
  ex->host_function([token, &calls] { calls.fetch_add(1); }, s);
  ok::graph graph(*ex, ex->end_capture(s));
  EXPECT_EQ(calls.load(), 0) << "captured work ran during capture";
  EXPECT_EQ(token.use_count(), 2) << "the graph does not hold its host function";
  for (int i = 0; i < 3; ++i) graph.replay(s);
  s.synchronize();
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(read_back<unsigned long long>(counter.data(), 1)[0], 3u);
  graph = ok::graph{};
  EXPECT_EQ(token.use_count(), 1) << "destroying the graph did not free its host function";
}

TEST_F(CudaExecutor, AGraphDestroyedWhileRunningKeepsItsHostFunctionsUntilDone) {
  auto token = std::make_shared<int>(42);
  std::atomic<int> seen{0};
  ex->begin_capture(s);
  ex->host_function([token, &seen] { seen = *token; }, s);
  ok::graph graph(*ex, ex->end_capture(s));
  ok::event busy(*ex);
  ok::launch(*ex, 1, spin{200'000'000}, s);  // about 0.1 s
  ex->record(busy, s);
  graph.replay(s);
  graph = ok::graph{};
  if (!ex->ready(busy)) EXPECT_EQ(token.use_count(), 2) << "freed while a replay was pending";
  s.synchronize();
  EXPECT_EQ(seen.load(), 42);
  // The next graph destruction frees what was retired.
  ex->begin_capture(s);
  ok::graph empty(*ex, ex->end_capture(s));
  empty = ok::graph{};
  EXPECT_EQ(token.use_count(), 1);
}

// One thread capturing two streams at once (as it does one stream per GPU around an NCCL group)
// ends the captures one after the other: the first graph is instantiated while the second capture
// is still open on the thread.
TEST_F(CudaExecutor, CapturesOpenTogetherOnOneThreadEndOneAfterTheOther) {
  ok::stream other(*ex);
  ok::buffer counter(*ex, ok::memory_kind::device, 2 * sizeof(unsigned long long));
  ex->fill(counter.data(), 0, counter.size(), s);
  s.synchronize();
  ex->begin_capture(s);
  ex->begin_capture(other);
  ok::launch(*ex, 1, increment{counter.as<unsigned long long>()}, s);
  ok::launch(*ex, 1, increment{counter.as<unsigned long long>() + 1}, other);
  ok::graph first(*ex, ex->end_capture(s));
  ok::graph second(*ex, ex->end_capture(other));
  first.replay(s);
  second.replay(other);
  second.replay(other);
  s.synchronize();
  other.synchronize();
  EXPECT_EQ(read_back<unsigned long long>(counter.data(), 2),
            (std::vector<unsigned long long>{1, 2}));
  // The thread's capture mode is its own again: an unsafe call during a capture is refused.
  ex->begin_capture(s);
  EXPECT_THROW(s.synchronize(), ok::cuda_error);
  EXPECT_THROW((void)ex->end_capture(s), ok::cuda_error);
}

TEST_F(CudaExecutor, AFailedCaptureFreesItsHostFunctionsAndLeavesTheStreamUsable) {
  auto token = std::make_shared<int>(0);
  ex->begin_capture(s);
  ex->host_function([token] {}, s);
  EXPECT_THROW(s.synchronize(), ok::cuda_error);  // not allowed while capturing
  EXPECT_THROW((void)ex->end_capture(s), ok::cuda_error);
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_THROW((void)ex->end_capture(s), ok::state_error);  // no capture any more
  ok::buffer dev(*ex, ok::memory_kind::device, 64);
  ex->fill(dev.data(), 5, 64, s);
  EXPECT_EQ(read_back<unsigned char>(dev.data(), 64), std::vector<unsigned char>(64, 5));
}

TEST_F(CudaExecutor, RestoresTheCallersCurrentDevice) {
  const int last = ex->device_count() - 1;
  ASSERT_EQ(cudaSetDevice(last), cudaSuccess);
  {
    ok::stream on0(*ex, 0);
    ok::buffer b(*ex, ok::memory_kind::device, 256, 0);
    ex->fill(b.data(), 0, 256, on0);
    on0.synchronize();
    EXPECT_EQ(ex->classify(b.data()).device, 0);
    (void)ex->device_memory(0);
    (void)ex->granularity(0);
  }
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, last);
  if (ex->device_count() < 2) return;
  ok::buffer b1(*ex, ok::memory_kind::device, 256, 1);
  EXPECT_EQ(ex->classify(b1.data()).device, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
