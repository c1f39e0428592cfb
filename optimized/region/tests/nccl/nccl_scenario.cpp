// nccl_region_test's scenario: one variant, in this process (nccl_region_test.cpp says what each
// variant checks). Two devices, each with its own stream, region (and output region), graph and
// NCCL communicator; fill, capture, then pause and resume rounds with a replay and a check after
// each; every blocking step under the watchdog.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "nccl_api.hpp"
#include "nccl_test.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::multigpu {
namespace {

// ---- the scenario (one variant, in this process) -----------------------------------------------

/// Element i of device d's region in round r: small integers, so that every sum is exact in fp32.
float value(int device, int round, std::size_t i) {
  return static_cast<float>(device + 1 + static_cast<int>(i % 97) + 128 * round);
}

float expected_sum(int round, std::size_t i) { return value(0, round, i) + value(1, round, i); }

constexpr unsigned char poison_byte = 0xFF;   // 0xFFFFFFFF: a NaN, never a sum
constexpr unsigned char scratch_byte = 0x5A;  // what another user writes into the released memory

std::uint32_t bits_of(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::string float_text(float f) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g (0x%08x)", static_cast<double>(f),
                static_cast<unsigned>(bits_of(f)));
  return text;
}

struct per_device {
  int device = 0;
  stream s;
  event done;
  buffer host;                                 // pinned staging for fills and read-backs
  std::unique_ptr<region::vmm_region> region;  // all-reduced; in place, it also holds the sum
  std::unique_ptr<region::vmm_region> output;  // out of place: the sum
  void* region_address = nullptr;              // as created: resume must map it there again
  void* output_address = nullptr;
  graph g;
  void* region_handle = nullptr;  // ncclCommRegister's handles (null: not registered)
  void* output_handle = nullptr;

  [[nodiscard]] std::size_t footprint() const {
    return region->footprint() + (output ? output->footprint() : 0);
  }
};

class scenario {
 public:
  scenario(const variant& v, const options& o) : v_(v), o_(o), bytes_(o.elements * sizeof(float)) {}

  /// Runs the variant and ends the process with its result: an error is caught here, before the
  /// scenario's members (regions, graphs, the executor) would be torn down by unwinding.
  [[noreturn]] void run();

 private:
  [[noreturn]] void steps();
  void header() const;
  void init_cuda();
  void init_nccl();
  void create_resources();
  void wait_all(const std::string& what);
  void record_all();
  void fill(int round);
  void poison_outputs();
  void register_buffers();
  void deregister_buffers();
  void warm_up();
  void capture();
  void destroy_graphs();
  void pause_all(region::pause_mode mode, int round);
  void resume_all(int round);
  void replay(const std::string& what);
  bool check(int round, const std::string& when);
  void teardown();

  const variant& v_;
  const options& o_;
  std::size_t bytes_;
  watchdog wd_;
  std::unique_ptr<executor> ex_;
  std::unique_ptr<collective> coll_;
  std::array<per_device, 2> dev_;
  std::size_t held_max_ = 0;  // device memory a pause did not give back, largest seen
  std::string first_wrong_;   // the first wrong element found, as reported
};

void scenario::record_all() {
  for (per_device& d : dev_) ex_->record(d.done.ref(), d.s.ref());
}

// Polls both devices' events until they complete; past the deadline the step is a hang.
void scenario::wait_all(const std::string& what) {
  record_all();
  const auto deadline = clock_type::now() + std::chrono::seconds(o_.deadline_s);
  for (;;) {
    bool all = true;
    for (per_device& d : dev_) all = ex_->ready(d.done.ref()) && all;
    if (all) return;
    coll_->check_async_errors(what);
    if (clock_type::now() >= deadline) hang(what, o_.deadline_s);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void scenario::fill(int round) {
  for (per_device& d : dev_) {
    auto* host = d.host.as<float>();
    for (std::size_t i = 0; i < o_.elements; ++i) host[i] = value(d.device, round, i);
    ex_->copy(d.region->data(), host, bytes_, d.s.ref());
  }
  wait_all("copying round " + std::to_string(round) + "'s values into the regions");
}

void scenario::poison_outputs() {
  if (!v_.out_of_place) return;
  for (per_device& d : dev_) ex_->fill(d.output->data(), poison_byte, bytes_, d.s.ref());
  wait_all("setting the output regions to NaN before the replay");
}

void scenario::register_buffers() {
  const auto step = wd_.arm("ncclCommRegister of the regions", o_.deadline_s);
  for (per_device& d : dev_) {
    d.region_handle = coll_->register_buffer(d.device, d.region->data(), bytes_);
    d.output_handle = coll_->register_buffer(d.device, d.output->data(), bytes_);
    std::printf("  registered with NCCL on device %d: region %p handle %p, output %p handle %p%s\n",
                d.device, d.region->data(), d.region_handle, d.output->data(), d.output_handle,
                d.region_handle == nullptr || d.output_handle == nullptr
                    ? " (a null handle: NCCL declined to register, see NCCL_LOCAL_REGISTER)"
                    : "");
  }
}

void scenario::deregister_buffers() {
  const auto step = wd_.arm("ncclCommDeregister of the regions", o_.deadline_s);
  for (per_device& d : dev_) {
    coll_->deregister_buffer(d.device, d.region_handle);
    coll_->deregister_buffer(d.device, d.output_handle);
    d.region_handle = nullptr;
    d.output_handle = nullptr;
  }
  std::printf("  deregistered both regions on both devices\n");
}

void scenario::warm_up() {
  poison_outputs();
  {
    const auto step = wd_.arm("issuing the warm-up all-reduce", o_.deadline_s);
    coll_->group_start();
    for (per_device& d : dev_) {
      void* out = v_.out_of_place ? d.output->data() : d.region->data();
      coll_->all_reduce(d.device, d.region->data(), out, o_.elements, d.s.ref());
    }
    coll_->group_end();
  }
  wait_all("the warm-up all-reduce (not captured)");
}

// Both streams are captured at once and the two all-reduces issued in one NCCL group, the way a
// single thread drives several GPUs (NCCL's group semantics; nccl-tests does the same with -G).
void scenario::capture() {
  const auto start = clock_type::now();
  const auto step =
      wd_.arm("capturing the all-reduce into CUDA graphs on both devices", o_.deadline_s);
  for (per_device& d : dev_) ex_->begin_capture(d.s.ref());
  coll_->group_start();
  for (per_device& d : dev_) {
    void* out = v_.out_of_place ? d.output->data() : d.region->data();
    coll_->all_reduce(d.device, d.region->data(), out, o_.elements, d.s.ref());
  }
  coll_->group_end();
  for (per_device& d : dev_) d.g = graph(*ex_, ex_->end_capture(d.s.ref()));
  std::printf("  captured the all-reduce (%s) into one graph per device (%s)\n",
              v_.out_of_place ? "region -> output" : "in place", seconds_since(start).c_str());
}

void scenario::destroy_graphs() {
  const auto step = wd_.arm("destroying the graphs", o_.deadline_s);
  for (per_device& d : dev_) d.g = graph();
}

void scenario::pause_all(region::pause_mode mode, int round) {
  std::array<memory_info, 2> before{};
  for (per_device& d : dev_)
    before[static_cast<std::size_t>(d.device)] = ex_->device_memory(d.device);
  {
    const auto step = wd_.arm(std::string("pausing the regions (") + region::to_string(mode) + ")",
                              o_.deadline_s);
    for (per_device& d : dev_) {
      d.region->pause(mode, d.s.ref());
      if (d.output) d.output->pause(mode, d.s.ref());
    }
  }
  std::string line = "  round " + std::to_string(round) + ": paused (";
  line += region::to_string(mode);
  line += "):";
  for (per_device& d : dev_) {
    const memory_info after = ex_->device_memory(d.device);
    const auto released = static_cast<long long>(after.free) -
                          static_cast<long long>(before[static_cast<std::size_t>(d.device)].free);
    const auto footprint = static_cast<long long>(d.footprint());
    line += d.device == 0 ? " device 0" : ", device 1";
    line += " gave back ";
    line += mib(released);
    line += " of ";
    line += mib(footprint);
    // What the driver did not get back is still mapped somewhere else: NCCL's registration.
    const long long held = footprint - released;
    const auto granule = static_cast<long long>(ex_->granularity(d.device));
    if (held >= granule) {
      line += " (";
      line += mib(held);
      line += " still mapped elsewhere, e.g. by NCCL)";
      held_max_ = std::max(held_max_, static_cast<std::size_t>(held));
    }
  }
  std::printf("%s\n", line.c_str());
  write_out(std::string(held_prefix) + std::to_string(held_max_) + "\n");
}

void scenario::resume_all(int round) {
  // While paused, another user takes the memory that was released and writes into it, as the
  // KV cache's neighbours do in a training step.
  std::vector<buffer> scratch;
  {
    const auto step = wd_.arm("allocating scratch memory while paused", o_.deadline_s);
    for (per_device& d : dev_) {
      scratch.emplace_back(*ex_, memory_kind::device, d.footprint(), d.device);
      ex_->fill(scratch.back().data(), scratch_byte, scratch.back().size(), d.s.ref());
    }
  }
  wait_all("writing scratch memory while paused");
  {
    const auto step = wd_.arm("resuming the regions", o_.deadline_s);
    for (per_device& d : dev_) {
      d.region->resume(d.s.ref());
      if (d.output) d.output->resume(d.s.ref());
    }
  }
  wait_all("the resume's copies (round " + std::to_string(round) + ")");
  {
    const auto step = wd_.arm("freeing the scratch memory", o_.deadline_s);
    scratch.clear();
  }
  for (per_device& d : dev_) {
    if (d.region->data() != d.region_address ||
        (d.output && d.output->data() != d.output_address)) {
      finish(exit_wrong, "wrong sum: the region on device " + std::to_string(d.device) +
                             " moved on resume: it is no longer where the graph was captured");
    }
  }
  std::printf("  round %d: resumed at the same addresses\n", round);
}

void scenario::replay(const std::string& what) {
  {
    const auto step = wd_.arm("launching the graphs", o_.deadline_s);
    for (per_device& d : dev_) d.g.replay(d.s.ref());
  }
  wait_all(what);
}

// Reads every element back and compares it with the sum; prints what it found and returns
// whether every element on both devices is right.
bool scenario::check(int round, const std::string& when) {
  struct finding {
    std::size_t wrong = 0, poison = 0, stale = 0, scratch = 0, unreduced = 0;
    std::size_t first = 0;
    float expected = 0;
    float got = 0;
  };
  bool all_right = true;
  std::uint32_t scratch_bits = 0;
  std::memset(&scratch_bits, scratch_byte, sizeof scratch_bits);
  for (per_device& d : dev_) {
    // The sum (the output, or the region in place), then, out of place, the untouched region.
    const int passes = v_.out_of_place ? 2 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      const bool sum_pass = pass == 0;
      const region::vmm_region& r = sum_pass && v_.out_of_place ? *d.output : *d.region;
      ex_->copy(d.host.data(), r.data(), bytes_, d.s.ref());
      wait_all("copying the result back (round " + std::to_string(round) + ")");
      const auto* host = d.host.as<const float>();
      finding f;
      for (std::size_t i = 0; i < o_.elements; ++i) {
        const float want = sum_pass ? expected_sum(round, i) : value(d.device, round, i);
        const float got = host[i];
        if (got == want) continue;
        if (f.wrong++ == 0) {
          f.first = i;
          f.expected = want;
          f.got = got;
        }
        const std::uint32_t b = bits_of(got);
        if (b == 0xFFFFFFFFu) ++f.poison;
        if (b == scratch_bits) ++f.scratch;
        if (round > 0 && got == expected_sum(round - 1, i)) ++f.stale;
        if (got == value(d.device, round, i)) ++f.unreduced;
      }
      const char* what = sum_pass ? (v_.out_of_place ? "output" : "region") : "region (input)";
      if (f.wrong == 0) continue;
      all_right = false;
      char text[1024];
      std::snprintf(text, sizeof text,
                    "round %d (%s): device %d %s element %zu of %zu: expected %s, got %s; %zu "
                    "elements differ (%zu never written: still NaN, %zu the previous round's sum, "
                    "%zu the scratch pattern of the memory's other user, %zu this device's own "
                    "value, not reduced)",
                    round, when.c_str(), d.device, what, f.first, o_.elements,
                    float_text(f.expected).c_str(), float_text(f.got).c_str(), f.wrong, f.poison,
                    f.stale, f.scratch, f.unreduced);
      std::printf("  WRONG: %s\n", text);
      if (first_wrong_.empty()) first_wrong_ = text;
      note_wrong(text);
    }
  }
  if (all_right) {
    std::printf("  round %d (%s): right sum on both devices (%zu elements each)\n", round,
                when.c_str(), o_.elements);
  }
  return all_right;
}

void scenario::teardown() {
  destroy_graphs();
  if (v_.reg != registration::none) deregister_buffers();
  {
    const auto step = wd_.arm("finalizing and destroying the NCCL communicators", o_.deadline_s);
    coll_->finalize();
  }
  const auto step = wd_.arm("releasing the regions, streams and staging buffers", o_.deadline_s);
  for (per_device& d : dev_) {
    d.output.reset();
    d.region.reset();
    d.host.reset();
  }
}

void scenario::init_cuda() {
  ex_ = std::make_unique<cuda_executor>();
  if (ex_->device_count() < 2) {
    skip("needs 2 GPUs, found " + std::to_string(ex_->device_count()) +
         " (cudaGetDeviceCount; CUDA_VISIBLE_DEVICES may hide some)");
  }
  for (int d = 0; d < 2; ++d) {
    cudaDeviceProp prop{};
    if (const cudaError_t e = cudaGetDeviceProperties(&prop, d); e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaGetDeviceProperties(") + std::to_string(d) +
                               ") failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
    }
    int peer = 0;
    if (cudaDeviceCanAccessPeer(&peer, d, 1 - d) != cudaSuccess) peer = -1;
    std::printf("  device %d: %s (sm_%d%d, %s), peer access to device %d: %s\n", d, prop.name,
                prop.major, prop.minor, mib(static_cast<long long>(prop.totalGlobalMem)).c_str(),
                1 - d,
                peer == 1   ? "yes"
                : peer == 0 ? "no"
                            : "unknown (query failed)");
  }
  (void)cudaGetLastError();
}

void scenario::init_nccl() {
  nccl_search search;
  {
    const auto step = wd_.arm("looking for NCCL (dlopen, python3's sys.path)", o_.deadline_s);
    search = find_nccl();
  }
  if (!search.loaded) skip("NCCL cannot be loaded: " + search.summary());
  for (const std::string& a : search.attempts) std::printf("    (not used: %s)\n", a.c_str());
  coll_ = make_nccl_collective(search.api);
}

void scenario::create_resources() {
  for (int d = 0; d < 2; ++d) {
    per_device& p = dev_[static_cast<std::size_t>(d)];
    p.device = d;
    p.s = stream(*ex_, d);
    p.done = event(*ex_, d);
    p.host = buffer(*ex_, memory_kind::pinned, bytes_);
    p.region = std::make_unique<region::vmm_region>(*ex_, region::region_config{bytes_, d, 0});
    p.region_address = p.region->data();
    if (v_.out_of_place) {
      p.output = std::make_unique<region::vmm_region>(*ex_, region::region_config{bytes_, d, 0});
      p.output_address = p.output->data();
    }
    std::printf(
        "  device %d: region at %p: %zu floats (%zu bytes) in %zu bytes of physical "
        "memory, chunks of %zu bytes (granularity %zu)\n",
        d, p.region->data(), o_.elements, bytes_, p.region->footprint(), p.region->chunk_bytes(),
        ex_->granularity(d));
    if (p.output)
      std::printf("  device %d: output region at %p, the same size\n", d, p.output->data());
  }
}

void scenario::header() const {
  std::printf("nccl_region_test --variant %s: %s\n", v_.name.c_str(), v_.what.c_str());
  std::string env = "  environment:";
  for (const char* name : {"NCCL_NVLS_ENABLE", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER",
                           "NCCL_PROTO", "NCCL_ALGO", "NCCL_CUMEM_ENABLE", "NCCL_P2P_DISABLE",
                           "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "CUDA_VISIBLE_DEVICES"}) {
    const char* value = std::getenv(name);
    env += std::string(" ") + name + "=" + (value != nullptr ? value : "(unset)");
  }
  std::printf("%s\n", env.c_str());
}

void scenario::run() {
  try {
    steps();
  } catch (const std::exception& e) {
    write_out(std::string("error: ") + e.what() + "\n");
    finish(exit_error, after_earlier_wrong(std::string("error: ") + e.what()));
  } catch (...) {
    finish(exit_error, after_earlier_wrong("error: an exception that is not a std::exception"));
  }
}

void scenario::steps() {
  // Before NCCL is loaded: it reads its environment once. NCCL_NVLS_ENABLE was forced in main().
  for (const auto& [name, value] : v_.env) ::setenv(name.c_str(), value.c_str(), 1);
  // NCCL's registration messages show whether it registered the regions, and its tuning ones
  // which algorithm and protocol each all-reduce used; a setting of the caller's own is kept.
  ::setenv("NCCL_DEBUG", "INFO", 0);
  ::setenv("NCCL_DEBUG_SUBSYS", "REG,TUNING", 0);
  header();

  if (o_.executor == "host") {
    ex_ = std::make_unique<host_executor>();
    coll_ = make_host_collective(*ex_, o_.fault);
    std::printf("  executor: host (a dry run: no GPU, no NCCL)\n");
  } else {
    if (const std::string reason = cuda_unavailable_reason(); !reason.empty()) {
      skip("no usable GPU: " + reason);
    }
    {
      const auto step = wd_.arm("initializing CUDA on the devices", o_.deadline_s);
      init_cuda();
    }
    init_nccl();
  }
  std::printf("  collective: %s\n", coll_->describe().c_str());
  if (v_.reg != registration::none && !coll_->can_register()) {
    skip(coll_->describe() +
         " has no ncclCommRegister/ncclCommDeregister (they came with NCCL 2.19)");
  }

  {
    const auto step = wd_.arm("creating the streams, regions and staging buffers", o_.deadline_s);
    create_resources();
  }

  const auto start = clock_type::now();
  {
    const auto step = wd_.arm("ncclCommInitAll over devices 0 and 1", 2 * o_.deadline_s);
    coll_->init();
  }
  std::printf("  ncclCommInitAll: 2 ranks on devices 0 and 1 (%s)\n", seconds_since(start).c_str());

  std::vector<int> wrong_rounds;
  auto checked = [&](int round, const std::string& when) {
    const bool right = check(round, when);
    if (!right && (wrong_rounds.empty() || wrong_rounds.back() != round)) {
      wrong_rounds.push_back(round);
    }
  };
  fill(0);
  if (v_.reg != registration::none) register_buffers();
  // Not captured, as frameworks warm up before they capture: NCCL connects the ranks here, and
  // the sum of an all-reduce outside any graph is the baseline for the rest.
  warm_up();
  checked(0, "warm-up all-reduce, not captured");
  fill(0);
  capture();
  poison_outputs();
  std::printf("  round 0: replaying the graphs\n");
  replay("the replay before any pause");
  checked(0, "before any pause");

  for (int round = 1; round <= o_.rounds; ++round) {
    const bool discard = o_.rounds >= 2 && round == o_.rounds;
    const auto mode = discard ? region::pause_mode::discard : region::pause_mode::preserve;
    const std::string when =
        discard ? "after pause (discard), resume and refill" : "after pause (preserve) and resume";
    if (!discard) fill(round);  // the values must come back through the pause
    if (v_.reg == registration::redone) {
      destroy_graphs();
      deregister_buffers();
    }
    pause_all(mode, round);
    resume_all(round);
    if (discard) fill(round);
    if (v_.reg == registration::redone) {
      register_buffers();
      capture();
    }
    poison_outputs();
    std::printf("  round %d: replaying the graphs captured %s\n", round,
                v_.reg == registration::redone ? "after this resume" : "before the first pause");
    replay("the replay after resume");
    checked(round, when);
  }

  teardown();
  const int replays = o_.rounds + 1;
  if (!wrong_rounds.empty()) {
    std::string rounds;
    for (const int r : wrong_rounds) rounds += (rounds.empty() ? "" : ",") + std::to_string(r);
    finish(exit_wrong, "wrong sum: " + first_wrong_ + "; wrong in round(s) " + rounds + " of 0.." +
                           std::to_string(o_.rounds));
  }
  std::string text =
      "right sum in the warm-up and in all " + std::to_string(replays) + " replays of the graphs";
  if (held_max_ > 0) text += "; " + mib(static_cast<long long>(held_max_)) + " held across pause";
  finish(exit_right, text);
}

}  // namespace

void run_scenario(const variant& v, const options& o) { scenario(v, o).run(); }

}  // namespace offloadkit::multigpu
