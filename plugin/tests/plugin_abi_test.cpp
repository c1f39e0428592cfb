// The plugin ABI: the loader refuses every broken plugin with a clear message, errors keep their
// type across the boundary in both directions, the executor survives the round trip (table, then
// abi_executor) with faults passing through, a dogfood plugin's stash works on both executors, and
// objects go through close where a table has it (ABI 1.2), its failure recorded for the case, and
// through destroy where it does not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/plugin/capabilities.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/region/unified_region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/key.hpp"
#include "offloadkit/teardown.hpp"
#include "testing.hpp"

namespace {

namespace ok = offloadkit;
namespace op = offloadkit::plugin;

std::string load_error(const std::string& path) {
  try {
    op::library::open(path);
  } catch (const op::plugin_error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

struct broken_case {
  const char* path;
  std::vector<const char*> expected;  // substrings of the message
};

TEST(PluginLoader, RefusesBrokenPluginsWithClearMessages) {
  const std::vector<broken_case> cases = {
      {"/nonexistent/libnothing.so", {"/nonexistent/libnothing.so", "cannot be loaded"}},
      {BROKEN_no_entry, {"does not export the entry point okit_plugin_entry"}},
      {BROKEN_returns_null, {"returned NULL", "ABI version 1"}},
      {BROKEN_old_abi, {"built for ABI version 0", "speaks version 1"}},
      {BROKEN_small_table, {"plugin 'broken'", "arena", "okit_arena_vtable.struct_size is 8"}},
      {BROKEN_null_entry, {"plugin 'broken'", "arena", "null entries: reload"}},
      {BROKEN_no_executor, {"neither OKIT_CAP_CUDA_EXECUTOR nor OKIT_CAP_HOST_EXECUTOR"}},
      {BROKEN_no_feature, {"provides no feature"}},
  };
  for (const auto& c : cases) {
    const std::string message = load_error(c.path);
    for (const char* want : c.expected) {
      EXPECT_NE(message.find(want), std::string::npos)
          << "loading " << c.path << ": expected '" << want << "' in: " << message;
    }
  }
}

TEST(PluginErrors, KeepTheirTypeAcrossTheBoundary) {
  auto round_trip = [](auto thrower) {
    okit_error err{};
    const okit_status st = op::guard(&err, thrower);
    EXPECT_NE(st, OKIT_OK);
    op::throw_error(err, "ctx");
  };
  EXPECT_THROW(round_trip([] { throw ok::out_of_range("x"); }), ok::out_of_range);
  EXPECT_THROW(round_trip([] { throw ok::state_error("x"); }), ok::state_error);
  EXPECT_THROW(round_trip([] { throw ok::out_of_memory("x"); }), ok::out_of_memory);
  EXPECT_THROW(round_trip([] { throw ok::injected_fault("x"); }), ok::injected_fault);
  EXPECT_THROW(round_trip([] { throw ok::cuda_error("x", 2); }), ok::cuda_error);
  EXPECT_THROW(round_trip([] { throw 42; }), ok::runtime_error);
  try {
    round_trip([] { throw ok::cuda_error("boom", 700); });
  } catch (const ok::cuda_error& e) {
    EXPECT_EQ(e.code(), 700);
    EXPECT_STREQ(e.what(), "ctx: boom");
  }
  // A code outside the enumeration is named as such.
  okit_error err{};
  err.code = 99;
  std::strcpy(err.message, "odd");
  try {
    op::throw_error(err, "ctx");
  } catch (const ok::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("status code 99"), std::string::npos) << e.what();
  }
}

TEST(PluginExecutor, RoundTripThroughTheTable) {
  ok::host_executor host;
  ok::fault_injection_adaptor faults(host);
  op::executor_table table(faults);
  op::abi_executor ex(table.get());
  EXPECT_EQ(ex.kind(), ok::backend::host);
  EXPECT_EQ(ex.device_count(), host.device_count());

  ok::stream s(ex);
  constexpr std::size_t n = 4096;
  auto* d = static_cast<unsigned char*>(ex.allocate(ok::memory_kind::device, n));
  auto* h = static_cast<unsigned char*>(ex.allocate(ok::memory_kind::pinned, n));
  EXPECT_EQ(ex.classify(d).kind, ok::pointer_kind::device);
  EXPECT_EQ(ex.extent_of(d + 10).base, d);
  ex.fill(d, 7, n, s);
  ok::launch(
      ex, n, [d] OFFLOADKIT_HD(std::size_t i) { d[i] = static_cast<unsigned char>(d[i] + i % 3); },
      s);
  int ran = 0;
  ex.host_function([&ran] { ++ran; }, s);
  ex.copy(h, d, n, s);
  ok::event e(ex);
  ex.record(e, s);
  ex.synchronize(e.ref());
  EXPECT_TRUE(ex.ready(e.ref()));
  EXPECT_EQ(ran, 1);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], 7 + i % 3) << "byte " << i;

  // A fault injected on the host side arrives with its type (an allocation fails as out of
  // memory) and its message on the plugin side.
  faults.arm({ok::op_kind::allocate_device}, 0);
  try {
    (void)ex.allocate(ok::memory_kind::device, 16);
    ADD_FAILURE() << "the armed allocation did not fail";
  } catch (const ok::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
  }
  faults.arm({ok::op_kind::copy}, 0);
  EXPECT_THROW(ex.copy(h, d, n, s), ok::injected_fault);
  faults.disarm();
  EXPECT_THROW((void)ex.allocate(ok::memory_kind::device, std::size_t{1} << 62), ok::bad_alloc);
  ex.deallocate(ok::memory_kind::pinned, h, n);
  ex.deallocate(ok::memory_kind::device, d, n);
}

TEST(PluginErrors, EveryStatusHasItsOwnNameAndLogicErrorsKeepTheirKind) {
  const std::vector<okit_status> codes = {
      OKIT_OK,          OKIT_ERR_OUT_OF_RANGE,  OKIT_ERR_STATE,
      OKIT_ERR_LOGIC,   OKIT_ERR_OUT_OF_MEMORY, OKIT_ERR_CUDA,
      OKIT_ERR_RUNTIME, OKIT_ERR_INJECTED,      OKIT_ERR_UNSUPPORTED};
  std::set<std::string> names;
  for (const okit_status c : codes) {
    const std::string name = op::status_name(c);
    EXPECT_NE(name, op::status_name(99)) << "status " << c << " has no name of its own";
    names.insert(name);
  }
  EXPECT_EQ(names.size(), codes.size()) << "two status codes share a name";
  EXPECT_STREQ(op::status_name(99), "unknown status code");

  auto status_of = [](auto thrower) {
    okit_error err{};
    return op::guard(&err, thrower);
  };
  EXPECT_EQ(status_of([] { throw ok::logic_error("x"); }), OKIT_ERR_LOGIC);
  EXPECT_EQ(status_of([] { throw std::logic_error("x"); }), OKIT_ERR_LOGIC);
  EXPECT_EQ(status_of([] { throw std::bad_alloc(); }), OKIT_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(status_of([] { throw std::runtime_error("x"); }), OKIT_ERR_RUNTIME);
  EXPECT_EQ(status_of([] {}), OKIT_OK);

  auto thrown = [](okit_status code) {
    okit_error err{};
    err.code = code;
    std::strcpy(err.message, "what the plugin said");
    op::throw_error(err, "ctx");
  };
  EXPECT_THROW(thrown(OKIT_ERR_RUNTIME), ok::runtime_error);
  try {
    thrown(OKIT_ERR_LOGIC);
    ADD_FAILURE() << "OKIT_ERR_LOGIC did not throw";
  } catch (const ok::out_of_range& e) {
    ADD_FAILURE() << "OKIT_ERR_LOGIC came back as out_of_range: " << e.what();
  } catch (const ok::logic_error& e) {
    EXPECT_STREQ(e.what(), "ctx: what the plugin said");
  }
  try {
    thrown(OKIT_ERR_UNSUPPORTED);
    ADD_FAILURE() << "OKIT_ERR_UNSUPPORTED did not throw";
  } catch (const ok::unsupported_error& e) {
    EXPECT_STREQ(e.what(), "ctx: what the plugin said (operation not supported)");
  }
  EXPECT_EQ(status_of([] { throw ok::unsupported_error("x"); }), OKIT_ERR_UNSUPPORTED);
  // An empty message is named as such rather than left blank.
  okit_error empty{};
  empty.code = OKIT_ERR_STATE;
  try {
    op::throw_error(empty, "ctx");
  } catch (const ok::state_error& e) {
    EXPECT_STREQ(e.what(), "ctx: (no message)");
  }
}

TEST(PluginExecutor, MemoryQueriesAndPointerKindsSurviveTheTable) {
  ok::host_executor host;
  op::executor_table table(host);
  op::abi_executor ex(table.get());
  EXPECT_EQ(ex.name(), host.name());
  const ok::memory_info direct = host.device_memory(0);
  const ok::memory_info through = ex.device_memory(0);
  EXPECT_EQ(through.total, direct.total);
  EXPECT_LE(through.free, through.total);
  for (const auto kind :
       {ok::memory_kind::device, ok::memory_kind::pinned, ok::memory_kind::pageable}) {
    void* p = ex.allocate(kind, 256);
    EXPECT_EQ(ex.classify(p).kind, host.classify(p).kind)
        << "memory kind " << static_cast<int>(kind);
    ex.deallocate(kind, p, 256);
  }
  // An error of the executor behind the table arrives with its type and the table's context.
  EXPECT_THROW((void)ex.device_memory(host.device_count()), ok::out_of_range);
}

TEST(PluginExecutor, ManagedMemoryCrossesTheTableBothWays) {
  ok::host_executor host;
  ok::counting_adaptor counting(host);
  ok::fault_injection_adaptor faults(counting);
  op::executor_table table(faults);
  ASSERT_TRUE(OKIT_EXECUTOR_HAS(table.get(), allocate_managed));
  ASSERT_TRUE(OKIT_EXECUTOR_HAS(table.get(), deallocate_managed));
  ASSERT_TRUE(OKIT_EXECUTOR_HAS(table.get(), prefetch));
  op::abi_executor ex(table.get());
  ok::stream s(ex);

  constexpr std::size_t n = 4096;
  auto* p = static_cast<unsigned char*>(ex.allocate_managed(n, 1));
  EXPECT_EQ(ex.classify(p).kind, ok::pointer_kind::managed);
  EXPECT_EQ(ex.classify(p).device, 1);
  std::memset(p, 5, n);
  ex.prefetch(p, n, 1, s);
  ex.prefetch(p, n, ok::host_location, s);
  s.synchronize();
  EXPECT_EQ(p[n - 1], 5);
  // Errors keep their type, and faults injected on the host side arrive as they were planted.
  EXPECT_THROW(ex.prefetch(p, n, 7, s), ok::out_of_range);
  faults.arm({ok::op_kind::prefetch}, 0);
  EXPECT_THROW(ex.prefetch(p, n, 0, s), ok::injected_fault);
  faults.arm({ok::op_kind::allocate_managed}, 0);
  EXPECT_THROW((void)ex.allocate_managed(n, 0), ok::out_of_memory);
  faults.disarm();
  ex.deallocate_managed(p, n);

  // A region implemented on the plugin side reaches them through the table too: the host side
  // counts the unified region's allocation and both prefetches of a pause and a resume.
  const ok::counting_adaptor::counts before = counting.snapshot();
  {
    ok::region::unified_region r(ex, ok::region::region_config{2 * n, 0, 0});
    std::memset(r.data(), 7, 2 * n);
    r.pause(s);
    r.resume(s);
    s.synchronize();
    EXPECT_EQ(static_cast<unsigned char*>(r.data())[2 * n - 1], 7);
  }
  const ok::counting_adaptor::counts after = counting.snapshot();
  EXPECT_EQ(after.calls_of(ok::op_kind::allocate_managed) -
                before.calls_of(ok::op_kind::allocate_managed),
            1u);
  EXPECT_EQ(after.calls_of(ok::op_kind::prefetch) - before.calls_of(ok::op_kind::prefetch), 2u);
}

TEST(PluginExecutor, AVersionOneTableStillWorksAndLacksOnlyTheNewEntries) {
  ok::host_executor host;
  op::executor_table table(host);
  // What an older offloadkit lends: the table ends where the appended entries begin. Copied into
  // storage of exactly that size, so that reading past it would be a detectable overflow.
  std::vector<unsigned char> storage(OKIT_EXECUTOR_V1_SIZE);
  std::memcpy(storage.data(), table.get(), storage.size());
  auto* old = reinterpret_cast<okit_executor*>(storage.data());
  old->struct_size = static_cast<std::uint32_t>(OKIT_EXECUTOR_V1_SIZE);
  EXPECT_FALSE(OKIT_EXECUTOR_HAS(old, allocate_managed));
  EXPECT_FALSE(OKIT_EXECUTOR_HAS(old, prefetch));

  op::abi_executor ex(old);
  ok::stream s(ex);
  ok::buffer d(ex, ok::memory_kind::device, 64);
  ex.fill(d.data(), 1, 64, s);
  s.synchronize();
  try {
    (void)ex.allocate_managed(64, 0);
    ADD_FAILURE() << "a version-1 table allocated managed memory";
  } catch (const ok::logic_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("has no allocate_managed entry"), std::string::npos) << m;
    EXPECT_NE(m.find("struct_size is " + std::to_string(OKIT_EXECUTOR_V1_SIZE)), std::string::npos)
        << m;
  }
  EXPECT_THROW(ex.prefetch(d.data(), 64, 0, s), ok::logic_error);
  ex.deallocate_managed(nullptr, 0);  // nothing to give back, nothing called

  // Shorter than version 1: not an executor table at all.
  old->struct_size = static_cast<std::uint32_t>(OKIT_EXECUTOR_V1_SIZE - sizeof(void*));
  EXPECT_THROW({ op::abi_executor bad(old); }, ok::logic_error);
}

/// Creates and destroys one object of every feature `lib` provides, on `ex`.
void make_and_destroy_each(const std::shared_ptr<const op::library>& lib, ok::executor& ex) {
  ok::stream s(ex);
  if (auto impl = op::stash_of(lib)) {
    ok::stash::stash_config cfg;
    cfg.row_bytes = 16;
    cfg.rows_per_page = 4;
    cfg.max_rows = 8;
    cfg.device_pages = 4;
    cfg.pinned_pages = 4;
    cfg.max_keys = 2;
    (void)impl->make(ex, cfg, s);
  }
  if (auto impl = op::region_of(lib)) {
    (void)impl->make(ex, ok::region::region_config{ex.granularity(0), 0, 0});
  }
  if (auto impl = op::arena_of(lib)) (void)impl->make(ex);
  if (auto impl = op::activation_of(lib)) (void)impl->make(ex, ok::activation::offload_options{});
}

TEST(PluginErrors, CreateRefusesANullOutputOrInputNamingTheEntry) {
  ok::host_executor host;
  const op::executor_table table(host);
  const auto lib = op::library::open(OPTIMIZED_PLUGIN);
  const okit_plugin& d = lib->description();
  const okit_stash_config stash_cfg{};
  const okit_region_config region_cfg{};
  const okit_offload_options options{};
  void* out = nullptr;
  // The message without the place in the source that follows it.
  auto refusal = [](okit_status st, const okit_error& err) {
    EXPECT_EQ(st, OKIT_ERR_LOGIC);
    const std::string m = err.message;
    return m.substr(0, m.rfind(" ("));
  };
  okit_error err{};
  EXPECT_EQ(refusal(d.stash->create(&err, table.get(), &stash_cfg, nullptr, okit_stream{}), err),
            "stash.create: the output pointer is NULL");
  EXPECT_EQ(refusal(d.stash->create(&err, table.get(), nullptr, &out, okit_stream{}), err),
            "stash.create: the config is NULL");
  EXPECT_EQ(refusal(d.region->create(&err, table.get(), &region_cfg, nullptr), err),
            "region.create: the output pointer is NULL");
  EXPECT_EQ(refusal(d.region->create(&err, table.get(), nullptr, &out), err),
            "region.create: the config is NULL");
  EXPECT_EQ(refusal(d.arena->create(&err, table.get(), nullptr), err),
            "arena.create: the output pointer is NULL");
  EXPECT_EQ(refusal(d.activation->create(&err, table.get(), &options, nullptr), err),
            "activation.create: the output pointer is NULL");
  EXPECT_EQ(refusal(d.activation->create(&err, table.get(), nullptr, &out), err),
            "activation.create: the options are NULL");
  EXPECT_EQ(out, nullptr);
}

TEST(PluginTeardown, ATableWithCloseIsClosedAndAnOlderOneIsDestroyed) {
  ok::host_executor ex;
  (void)ok::take_teardown_errors();
  // The dogfood plugin's tables have close (1.2); the same implementations built as a 1.0 plugin
  // end before it, and their close past struct_size fails if called: neither records anything.
  const auto current = op::library::open(OPTIMIZED_PLUGIN);
  const okit_plugin& d = current->description();
  EXPECT_TRUE(OKIT_STASH_HAS(d.stash, close));
  EXPECT_TRUE(OKIT_REGION_HAS(d.region, close));
  EXPECT_TRUE(OKIT_ARENA_HAS(d.arena, close));
  EXPECT_TRUE(OKIT_ACTIVATION_HAS(d.activation, close));
  const auto old = op::library::open(OPTIMIZED_ABI_1_0_PLUGIN);
  const okit_plugin& o = old->description();
  EXPECT_FALSE(OKIT_STASH_HAS(o.stash, close));
  EXPECT_FALSE(OKIT_REGION_HAS(o.region, close));
  EXPECT_FALSE(OKIT_ARENA_HAS(o.arena, close));
  EXPECT_FALSE(OKIT_ACTIVATION_HAS(o.activation, close));
  EXPECT_EQ(o.arena->struct_size, OKIT_ARENA_V1_SIZE);
  EXPECT_EQ(o.activation->struct_size, OKIT_ACTIVATION_V1_SIZE);
  // A description of version 1.0 loads; its release_cached_memory past struct_size is not
  // called, and the current one has none.
  EXPECT_EQ(o.struct_size, OKIT_PLUGIN_V1_SIZE);
  EXPECT_FALSE(OKIT_PLUGIN_HAS(&o, release_cached_memory));
  EXPECT_FALSE(old->release_cached_memory());
  EXPECT_FALSE(current->release_cached_memory());
  for (const auto& lib : {current, old}) {
    make_and_destroy_each(lib, ex);
    EXPECT_EQ(ok::join_teardown_errors(ok::take_teardown_errors()), "") << lib->path();
  }
}

TEST(PluginTeardown, AFailedCloseIsRecordedAndDestroyOnlyPrintsIt) {
  ok::host_executor ex;
  (void)ok::take_teardown_errors();
  // The planted arena gives its staging slot back twice: close returns the pool's refusal.
  const auto impl = op::arena_of(op::library::open(PLANTED_CLOSE_PLUGIN));
  ASSERT_TRUE(impl.has_value());
  (void)impl->make(ex);
  const std::vector<std::string> errors = ok::take_teardown_errors();
  ASSERT_EQ(errors.size(), 1u) << ok::join_teardown_errors(errors);
  for (const char* want : {"plugin 'planted-close'", "arena: close failed (runtime error): ",
                           "staging slot 0 released twice"}) {
    EXPECT_NE(errors[0].find(want), std::string::npos) << want << " in: " << errors[0];
  }
  // The same arena in a table built before close: destroy is called, which cannot report.
  const auto lib = op::library::open(PLANTED_CLOSE_V1_PLUGIN);
  EXPECT_FALSE(OKIT_ARENA_HAS(lib->description().arena, close));
  const auto v1 = op::arena_of(lib);
  ASSERT_TRUE(v1.has_value());
  testing::internal::CaptureStderr();
  (void)v1->make(ex);
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(ok::take_teardown_errors().empty());
  EXPECT_NE(printed.find("destroy cannot report a teardown failure"), std::string::npos) << printed;
  EXPECT_NE(printed.find("released twice"), std::string::npos) << printed;
}

// The suite name is part of the test names (PluginDogfood/...).
template <class Backend>
// NOLINTNEXTLINE(readability-identifier-naming)
class PluginDogfood : public ::testing::Test {};
TYPED_TEST_SUITE_P(PluginDogfood);

/// A small stash of 16-byte rows, 4 to a page, 32 rows a key.
ok::stash::stash_config small_stash(std::size_t pages_per_tier, std::size_t max_keys) {
  ok::stash::stash_config cfg;
  cfg.row_bytes = 16;
  cfg.rows_per_page = 4;
  cfg.max_rows = 32;
  cfg.device_pages = pages_per_tier;
  cfg.pinned_pages = pages_per_tier;
  cfg.max_keys = max_keys;
  return cfg;
}

TYPED_TEST_P(PluginDogfood, DogfoodRoundTripAndErrorsNameThePlugin) {
  if (std::string(TypeParam::name) == "cuda") {
    const std::string reason = ok::cuda_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "no usable GPU: " << reason;
  }
  auto ex = TypeParam::make();
  for (const char* path : {REFERENCE_PLUGIN, OPTIMIZED_PLUGIN}) {
    auto lib = op::library::open(path);
    auto impl = op::stash_of(lib);
    ASSERT_TRUE(impl.has_value()) << path;
    const ok::stash::stash_config cfg = small_stash(16, 4);
    ok::stream s(*ex);
    auto st = impl->make(*ex, cfg, s);
    const std::size_t bytes = cfg.row_bytes * cfg.max_rows;
    ok::buffer src(*ex, ok::memory_kind::device, bytes), dst(*ex, ok::memory_kind::device, bytes),
        rows(*ex, ok::memory_kind::device, sizeof(std::uint64_t));
    std::vector<unsigned char> host(bytes);
    for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 31 + 1);
    const std::uint64_t nrows = 13;
    ex->copy(src.data(), host.data(), bytes, s);
    ex->copy(rows.data(), &nrows, sizeof nrows, s);
    ex->fill(dst.data(), 0, bytes, s);
    st->stash(ok::stash::make_key(0, 1, 2), src.data(),
              static_cast<const std::uint64_t*>(rows.data()), s);
    st->restore(ok::stash::make_key(0, 1, 2), dst.data(), nullptr, s);
    std::vector<unsigned char> back(bytes);
    ex->copy(back.data(), dst.data(), bytes, s);
    ex->synchronize(static_cast<ok::stream_ref>(s));
    for (std::size_t i = 0; i < nrows * cfg.row_bytes; ++i)
      ASSERT_EQ(back[i], host[i]) << path << " byte " << i;
    EXPECT_TRUE(st->status(s).ok());
    // Past max_keys: out_of_range, named after the plugin and the entry.
    try {
      for (std::uint32_t k = 0; k < 8; ++k) {
        st->stash(ok::stash::make_key(1, k, 0), src.data(),
                  static_cast<const std::uint64_t*>(rows.data()), s);
        st->restore(ok::stash::make_key(1, k, 0), dst.data(), nullptr, s);
      }
      ADD_FAILURE() << path << ": more keys than max_keys were accepted";
    } catch (const ok::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("plugin 'offloadkit-"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("stash stash"), std::string::npos) << e.what();
    }
  }
}

// A batch crosses the table when the plugin's stash table has the batch entries (ABI 1.1) and is
// issued per key when it ends before them (a plugin built against 1.0, whose entries past its
// struct_size fail if called); both restore what was stashed, and a batch's error names the entry.
TYPED_TEST_P(PluginDogfood, BatchesCrossTheTableOrFallBackToPerKeyCalls) {
  if (std::string(TypeParam::name) == "cuda") {
    const std::string reason = ok::cuda_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "no usable GPU: " << reason;
  }
  auto ex = TypeParam::make();
  for (const char* path : {OPTIMIZED_PLUGIN, OPTIMIZED_ABI_1_0_PLUGIN}) {
    auto impl = op::stash_of(op::library::open(path));
    ASSERT_TRUE(impl.has_value()) << path;
    const ok::stash::stash_config cfg = small_stash(8, 3);
    ok::stream s(*ex);
    auto st = impl->make(*ex, cfg, s);
    const std::size_t bytes = cfg.row_bytes * cfg.max_rows;
    std::vector<ok::buffer> src, dst, rows;
    std::vector<ok::stash::stash_item> in;
    std::vector<ok::stash::restore_item> out;
    std::vector<unsigned char> host(bytes);
    for (std::uint32_t k = 0; k < 3; ++k) {
      src.emplace_back(*ex, ok::memory_kind::device, bytes);
      dst.emplace_back(*ex, ok::memory_kind::device, bytes);
      rows.emplace_back(*ex, ok::memory_kind::device, sizeof(std::uint64_t));
      for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + k + 1);
      const std::uint64_t nrows = 5 + 9 * k;
      ex->copy(src[k].data(), host.data(), bytes, s);
      ex->copy(rows[k].data(), &nrows, sizeof nrows, s);
      ex->fill(dst[k].data(), 0, bytes, s);
      ex->synchronize(static_cast<ok::stream_ref>(s));
      in.push_back({ok::stash::make_key(0, 0, k), src[k].data(), rows[k].as<std::uint64_t>()});
      out.push_back({ok::stash::make_key(0, 0, k), dst[k].data(), nullptr});
    }
    st->stash_batch(in, s);
    EXPECT_EQ(st->snapshot(s).entries.size(), 3u) << path;
    st->restore_batch(out, s);
    std::vector<unsigned char> back(bytes);
    for (std::uint32_t k = 0; k < 3; ++k) {
      ex->copy(back.data(), dst[k].data(), bytes, s);
      ex->synchronize(static_cast<ok::stream_ref>(s));
      for (std::size_t i = 0; i < (5 + 9 * k) * cfg.row_bytes; ++i) {
        ASSERT_EQ(back[i], static_cast<unsigned char>(i * 7 + k + 1)) << path << " key " << k;
      }
    }
    EXPECT_TRUE(st->status(s).ok()) << path;
    // A fourth key is past max_keys: the batch's error comes back named after its entry.
    in.push_back({ok::stash::make_key(0, 1, 0), src[0].data(), rows[0].as<std::uint64_t>()});
    try {
      st->stash_batch(in, s);
      ADD_FAILURE() << path << ": a key past max_keys was accepted";
    } catch (const ok::out_of_range& e) {
      const bool per_key = std::string(path) == OPTIMIZED_ABI_1_0_PLUGIN;
      EXPECT_NE(std::string(e.what()).find(per_key ? "stash stash:" : "stash stash_batch"),
                std::string::npos)
          << e.what();
    }
  }
}

// A swap crosses the table when the region table has swap (ABI 1.1) and is a pause and a resume
// when it ends before it (a plugin built against 1.0, whose swap past its struct_size fails if
// called); either way the resumed region holds its bytes at its address.
TYPED_TEST_P(PluginDogfood, RegionSwapCrossesTheTableOrFallsBackToPauseAndResume) {
  if (std::string(TypeParam::name) == "cuda") {
    const std::string reason = ok::cuda_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "no usable GPU: " << reason;
  }
  auto ex = TypeParam::make();
  for (const char* path : {OPTIMIZED_PLUGIN, OPTIMIZED_ABI_1_0_PLUGIN}) {
    auto impl = op::region_of(op::library::open(path));
    ASSERT_TRUE(impl.has_value()) << path;
    const std::size_t bytes = 3 * ex->granularity(0) + 5;
    auto a = impl->make(*ex, ok::region::region_config{bytes, 0, 0});
    auto b = impl->make(*ex, ok::region::region_config{bytes, 0, 0});
    ok::stream s(*ex);
    std::vector<unsigned char> host(bytes), back(bytes);
    for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 13 + 7);
    ex->copy(b->data(), host.data(), bytes, s);
    b->pause(s);
    void* const address = b->data();
    a->swap_with(*b, ok::region::pause_mode::preserve, s);
    EXPECT_EQ(a->state(), ok::region::region_state::paused) << path;
    EXPECT_EQ(b->state(), ok::region::region_state::active) << path;
    EXPECT_EQ(b->data(), address) << path;
    ex->copy(back.data(), b->data(), bytes, s);
    ex->synchronize(static_cast<ok::stream_ref>(s));
    EXPECT_EQ(back, host) << path;
  }
}

REGISTER_TYPED_TEST_SUITE_P(PluginDogfood, DogfoodRoundTripAndErrorsNameThePlugin,
                            RegionSwapCrossesTheTableOrFallsBackToPauseAndResume,
                            BatchesCrossTheTableOrFallBackToPerKeyCalls);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, PluginDogfood, ok::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, PluginDogfood, ok::testing::cuda_backend);

// ---- the capability table is the one source of the names, bits and descriptors -----------------

/// What each feature's descriptor says, as text, for comparing two decodings.
std::string decoded(const std::string& feature, std::uint64_t bits) {
  const auto s = op::support_of(bits);
  std::string out = std::to_string(s.cuda) + std::to_string(s.host) +
                    std::to_string(s.executor_allocations) + "/";
  if (feature == "stash") {
    const auto c = op::stash_capabilities_of(bits);
    out += std::to_string(c.capturable) + std::to_string(c.page_ids) +
           ok::testing::to_string(c.overflow) + ok::testing::to_string(c.placement) +
           ok::testing::to_string(c.tier) + ok::testing::to_string(c.unknown_restore) +
           ok::testing::to_string(c.validation);
  } else if (feature == "region") {
    const auto c = op::region_capabilities_of(bits);
    out += std::to_string(c.address_stable) + std::to_string(c.releases_memory) +
           std::to_string(c.multi_device) + std::to_string(c.managed_memory) +
           ok::testing::to_string(c.pause_modes) + ok::testing::to_string(c.streams) +
           ok::testing::to_string(c.graphs);
  } else if (feature == "arena") {
    const auto c = op::arena_promises_of(bits);
    out += std::to_string(c.asynchronous) + std::to_string(c.pinned_steady_state) +
           std::to_string(c.single_host_buffer);
  } else if (feature == "activation") {
    const auto c = op::activation_capabilities_of(bits);
    out += ok::testing::to_string(c.return_device) + std::to_string(c.prefetch_bound) +
           std::to_string(c.pending_bound) + std::to_string(c.backward_prefetch) +
           ok::testing::to_string(c.decision) + ok::testing::to_string(c.dedup);
  }
  return out;
}

TEST(CapabilityTable, EveryBitIsOneNameAndChangesItsDescriptor) {
  const std::vector<std::string> features = {"stash", "region", "arena", "activation"};
  for (const std::string& feature : features) {
    std::set<std::string> names;
    std::uint64_t all = 0;
    for (const op::capability& c : op::capability_table()) {
      if (c.feature != feature && std::string(c.feature) != "common") continue;
      EXPECT_TRUE(names.insert(c.name).second) << feature << " has two " << c.name;
      EXPECT_EQ(all & c.bit, 0u) << feature << ": " << c.name << " shares a bit";
      all |= c.bit;
      EXPECT_EQ(op::capability_bit(feature, c.name), c.bit);
      EXPECT_EQ(op::capability_names(feature, c.bit), std::vector<std::string>{c.name});
      // The host decodes every bit of the table into the descriptor the batteries read.
      EXPECT_NE(decoded(feature, c.bit), decoded(feature, 0))
          << feature << ": " << c.name << " is not decoded";
    }
    try {
      (void)op::capability_bit(feature, "no_such_capability");
      ADD_FAILURE() << "an unknown name has a bit";
    } catch (const ok::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("no_such_capability"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda_executor"), std::string::npos) << e.what();
    }
  }
}

TEST(CapabilityTable, NoBitOutsideTheTableIsDecoded) {
  // A bit that a decoder reads but the table does not name would reach the batteries from C and
  // never from Python.
  for (const std::string feature : {"stash", "region", "arena", "activation"}) {
    std::uint64_t named = 0;
    for (const op::capability& c : op::capability_table()) {
      if (c.feature == feature || std::string(c.feature) == "common") named |= c.bit;
    }
    for (int b = 0; b < 64; ++b) {
      const std::uint64_t bit = std::uint64_t{1} << b;
      if ((named & bit) != 0) continue;
      EXPECT_EQ(decoded(feature, bit), decoded(feature, 0)) << feature << ": bit " << b;
    }
  }
}

TEST(CapabilityTable, EveryDeclaredPolicyIsReachableFromTheBits) {
  // Every value of every stash, region and activation policy of the descriptor is what some word
  // decodes to: a value added to a descriptor without its bit fails here.
  std::set<std::string> overflow, placement, tier, unknown_restore, validation, pause_modes,
      streams, graphs;
  std::set<std::string> return_device, decision, dedup;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 9); ++bits) {
    const std::uint64_t word = bits << 8;  // feature bits start at 8
    const auto st = op::stash_capabilities_of(word);
    overflow.insert(ok::testing::to_string(st.overflow));
    placement.insert(ok::testing::to_string(st.placement));
    if (st.single_tier()) tier.insert(ok::testing::to_string(st.tier));
    unknown_restore.insert(ok::testing::to_string(st.unknown_restore));
    validation.insert(ok::testing::to_string(st.validation));
    const auto rg = op::region_capabilities_of(word);
    pause_modes.insert(ok::testing::to_string(rg.pause_modes));
    streams.insert(ok::testing::to_string(rg.streams));
    graphs.insert(ok::testing::to_string(rg.graphs));
    const auto ac = op::activation_capabilities_of(word);
    return_device.insert(ok::testing::to_string(ac.return_device));
    decision.insert(ok::testing::to_string(ac.decision));
    dedup.insert(ok::testing::to_string(ac.dedup));
  }
  using ok::testing::to_string;
  namespace t = ok::testing;
  EXPECT_EQ(overflow, (std::set<std::string>{to_string(t::stash_overflow_report::status_word),
                                             to_string(t::stash_overflow_report::sticky_flag),
                                             to_string(t::stash_overflow_report::exception)}));
  EXPECT_EQ(placement, (std::set<std::string>{to_string(t::stash_placement::split_within_key),
                                              to_string(t::stash_placement::whole_key_per_tier),
                                              to_string(t::stash_placement::single_tier)}));
  EXPECT_EQ(tier, (std::set<std::string>{to_string(t::stash_tier::device),
                                         to_string(t::stash_tier::pinned)}));
  EXPECT_EQ(unknown_restore,
            (std::set<std::string>{to_string(t::stash_unknown_restore::status_word),
                                   to_string(t::stash_unknown_restore::error)}));
  EXPECT_EQ(validation, (std::set<std::string>{to_string(t::stash_config_validation::construction),
                                               to_string(t::stash_config_validation::first_use)}));
  EXPECT_EQ(pause_modes,
            (std::set<std::string>{to_string(t::region_pause_modes::both),
                                   to_string(t::region_pause_modes::fixed_per_allocation)}));
  EXPECT_EQ(streams, (std::set<std::string>{to_string(t::region_streams::stream_ordered),
                                            to_string(t::region_streams::synchronous)}));
  EXPECT_EQ(graphs, (std::set<std::string>{to_string(t::region_graphs::own),
                                           to_string(t::region_graphs::none)}));
  EXPECT_EQ(return_device,
            (std::set<std::string>{to_string(t::activation_return_device::origin),
                                   to_string(t::activation_return_device::current)}));
  EXPECT_EQ(decision,
            (std::set<std::string>{to_string(t::activation_offload_decision::size_threshold),
                                   to_string(t::activation_offload_decision::opaque_predicate)}));
  EXPECT_EQ(dedup, (std::set<std::string>{to_string(t::activation_dedup::none),
                                          to_string(t::activation_dedup::by_storage)}));
}

TEST(CapabilityTable, ActivationPoliciesDecodeFromTheirBits) {
  namespace t = ok::testing;
  // No bit: what a plugin built before the policies declared reads as it did then, except the
  // device of return, whose bit keeps its meaning (set: origin; not set: current).
  auto c = op::activation_capabilities_of(0);
  EXPECT_EQ(c.return_device, t::activation_return_device::current);
  EXPECT_EQ(c.decision, t::activation_offload_decision::size_threshold);
  EXPECT_EQ(c.dedup, t::activation_dedup::none);
  c = op::activation_capabilities_of(OKIT_ACTIVATION_CAP_ORIGIN_DEVICE);
  EXPECT_EQ(c.return_device, t::activation_return_device::origin);
  EXPECT_EQ(c.decision, t::activation_offload_decision::size_threshold);
  c = op::activation_capabilities_of(OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE);
  EXPECT_EQ(c.decision, t::activation_offload_decision::opaque_predicate);
  EXPECT_EQ(c.dedup, t::activation_dedup::none);
  c = op::activation_capabilities_of(OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE);
  EXPECT_EQ(c.dedup, t::activation_dedup::by_storage);
  EXPECT_EQ(c.decision, t::activation_offload_decision::size_threshold);
  EXPECT_EQ(op::capability_names("activation", OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE |
                                                   OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE),
            (std::vector<std::string>{"opaque_predicate", "dedup_by_storage"}));
  // The bits of ABI 1.3 keep their values.
  EXPECT_EQ(OKIT_ACTIVATION_CAP_ORIGIN_DEVICE, 1ull << 8);
  EXPECT_EQ(OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH, 1ull << 11);
}

TEST(CapabilityTable, StashKeyLimitsTravelInTheTable) {
  okit_stash_vtable t{};
  t.struct_size = sizeof t;
  t.implementation = "decimal";
  t.capabilities = OKIT_STASH_CAP_OVERFLOW_EXCEPTION;
  t.vp_limit = 1000 / 4;  // within the codec's 256
  t.layer_limit = 1000;
  t.microbatch_limit = 0;  // the codec's
  auto c = op::stash_capabilities_of(t);
  EXPECT_EQ(c.overflow, ok::testing::stash_overflow_report::exception);
  EXPECT_EQ(c.vp_limit, 250u);
  EXPECT_EQ(c.layer_limit, 1000u);
  EXPECT_EQ(c.microbatch_limit, ok::stash::key_limits::microbatch);
  // A table of ABI 1.2 ends before the limits: whatever lies past it is not read.
  t.struct_size = offsetof(okit_stash_vtable, vp_limit);
  c = op::stash_capabilities_of(t);
  EXPECT_EQ(c.layer_limit, ok::stash::key_limits::layer);
  // A limit past the codec's, or two overflow reports, is refused, naming what is wrong.
  t.struct_size = sizeof t;
  t.layer_limit = ok::stash::key_limits::layer + 1;
  try {
    (void)op::stash_capabilities_of(t);
    ADD_FAILURE() << "a layer limit past the codec's was accepted";
  } catch (const ok::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("layer_limit = 4097"), std::string::npos) << e.what();
  }
  t.layer_limit = 0;
  t.capabilities |= OKIT_STASH_CAP_STICKY_FLAG;
  EXPECT_THROW((void)op::stash_capabilities_of(t), ok::out_of_range);
}

TEST(CapabilityTable, StashSingleTierAndFirstUseValidationDecodeFromTheirBits) {
  namespace t = ok::testing;
  auto c = op::stash_capabilities_of(0);
  EXPECT_EQ(c.placement, t::stash_placement::split_within_key);
  EXPECT_EQ(c.validation, t::stash_config_validation::construction);
  EXPECT_TRUE(c.has_tier(t::stash_tier::device) && c.has_tier(t::stash_tier::pinned));
  c = op::stash_capabilities_of(OKIT_STASH_CAP_DEVICE_TIER_ONLY);
  EXPECT_EQ(c.placement, t::stash_placement::single_tier);
  EXPECT_EQ(c.tier, t::stash_tier::device);
  EXPECT_FALSE(c.has_tier(t::stash_tier::pinned));
  EXPECT_TRUE(c.default_overflow_policy());  // a status word, keys fitting in the one tier
  c = op::stash_capabilities_of(OKIT_STASH_CAP_PINNED_TIER_ONLY | OKIT_STASH_CAP_STICKY_FLAG);
  EXPECT_EQ(c.placement, t::stash_placement::single_tier);
  EXPECT_EQ(c.tier, t::stash_tier::pinned);
  EXPECT_FALSE(c.has_tier(t::stash_tier::device));
  EXPECT_FALSE(c.default_overflow_policy());
  c = op::stash_capabilities_of(OKIT_STASH_CAP_CONFIG_AT_FIRST_USE);
  EXPECT_EQ(c.validation, t::stash_config_validation::first_use);
  EXPECT_EQ(c.placement, t::stash_placement::split_within_key);
  // The bits of ABI 1.4 keep their values.
  EXPECT_EQ(OKIT_STASH_CAP_OVERFLOW_EXCEPTION, 1ull << 13);
  // Two placements in one table are refused, naming them.
  okit_stash_vtable table{};
  table.struct_size = sizeof table;
  table.implementation = "two_placements";
  for (const std::uint64_t two :
       {OKIT_STASH_CAP_DEVICE_TIER_ONLY | OKIT_STASH_CAP_PINNED_TIER_ONLY,
        OKIT_STASH_CAP_WHOLE_KEY_PER_TIER | OKIT_STASH_CAP_PINNED_TIER_ONLY}) {
    table.capabilities = two;
    try {
      (void)op::stash_capabilities_of(table);
      ADD_FAILURE() << "two placements were accepted: " << two;
    } catch (const ok::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("2 placements"), std::string::npos) << e.what();
    }
  }
  table.capabilities = OKIT_STASH_CAP_PINNED_TIER_ONLY | OKIT_STASH_CAP_CONFIG_AT_FIRST_USE;
  c = op::stash_capabilities_of(table);
  EXPECT_EQ(c.tier, t::stash_tier::pinned);
  EXPECT_EQ(c.validation, t::stash_config_validation::first_use);
}

TEST(CapabilityTable, SdkConfigCheckRefusesPagesInTheMissingTier) {
  ok::stash::stash_config cfg;
  cfg.row_bytes = 4;
  cfg.rows_per_page = 2;
  cfg.max_rows = 4;
  cfg.device_pages = 3;
  cfg.pinned_pages = 0;
  op::check_stash_config(cfg, 1, 0);
  op::check_stash_config(cfg, 1, OKIT_STASH_CAP_DEVICE_TIER_ONLY);
  const auto refusal = [&](std::uint64_t caps) -> std::string {
    try {
      op::check_stash_config(cfg, 1, caps);
    } catch (const ok::out_of_range& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(OKIT_STASH_CAP_PINNED_TIER_ONLY).find("device_pages = 3 is outside [0, 0]"),
            std::string::npos)
      << refusal(OKIT_STASH_CAP_PINNED_TIER_ONLY);
  cfg.pinned_pages = 1;
  EXPECT_NE(refusal(OKIT_STASH_CAP_DEVICE_TIER_ONLY).find("pinned_pages = 1 is outside [0, 0]"),
            std::string::npos)
      << refusal(OKIT_STASH_CAP_DEVICE_TIER_ONLY);
  cfg.rows_per_page = 0;  // check_config's rules first, whatever the tier
  EXPECT_NE(refusal(OKIT_STASH_CAP_CONFIG_AT_FIRST_USE).find("rows_per_page"), std::string::npos);
}

TEST(CapabilityTable, PythonProtocolNamesAreTheTables) {
  const std::string command = std::string("PYTHONPATH='") + OFFLOADKIT_PYTHON_PACKAGE_DIR +
                              "' python3 -c 'from offloadkit import protocol as p\n"
                              "for n in p.COMMON_CAPABILITIES: print(\"common\", n)\n"
                              "for f, ns in p.FEATURE_CAPABILITIES.items():\n"
                              "    for n in ns: print(f, n)' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char line[256];
  while (std::fgets(line, sizeof line, pipe) != nullptr) text += line;
  const int status = ::pclose(pipe);
  if (status != 0 && text.find("not found") != std::string::npos) {
    GTEST_SKIP() << "no python3 here: " << text;
  }
  ASSERT_EQ(status, 0) << text;
  std::set<std::string> python;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    python.insert(text.substr(start, end - start));
    start = end == std::string::npos ? text.size() : end + 1;
  }
  std::set<std::string> table;
  for (const op::capability& c : op::capability_table()) {
    table.insert(std::string(c.feature) + " " + c.name);
  }
  EXPECT_EQ(python, table);
}

}  // namespace
