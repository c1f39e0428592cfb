// nccl_region_test: an NCCL all-reduce across two GPUs, captured in a CUDA graph before a region
// is paused and replayed after it is resumed, must give the right sum. The region is
// offloadkit's vmm_region: pause releases its physical memory and resume maps new physical memory
// at the same virtual address, which is what torch_memory_saver does to a KV cache (and where its
// issue #88 saw NCCL graphs hang after a resume).
//
// One process drives both GPUs (ncclCommInitAll over devices 0 and 1), each with its own stream
// from the cuda executor. Each variant runs in a child process of its own, so that a hang or a
// crash in one is one row of the table and the others still run; `--variant NAME` runs one
// in-process. Every wait has a deadline: a step that does not complete in time is reported as a
// hang and the process ends with _exit (NCCL kernels cannot be cancelled).
//
// Variants (NCCL_NVLS_ENABLE=0 in all of them):
//   plain                    in-place all-reduce of the region, NCCL's defaults. The issue's
//                            criterion: the right sum after every resume.
//   plain-nographreg         the same with NCCL_GRAPH_REGISTER=0: a control that tells, should
//                            plain fail, whether NCCL's graph-time registration is the cause.
//   out-of-place             region -> output region, NCCL_GRAPH_REGISTER=1 (NCCL's default):
//                            NCCL may register the output's cuMem memory when the graph is
//                            captured (zero-copy over NVLink) and keep that registration until
//                            the graph is destroyed. Shows whether that survives a remap.
//   out-of-place-nographreg  the same with NCCL_GRAPH_REGISTER=0, the workaround of #88.
//   registered               out of place, both regions registered with ncclCommRegister before
//                            the capture and kept registered across pause and resume.
//   registered-reregister    deregistered before each pause, registered again and the graphs
//                            captured again after each resume.
// The out-of-place variants force NCCL_PROTO=Simple: NCCL registers user buffers for the Simple
// protocol only (src/register/coll_reg.cc), and an in-place ring or tree all-reduce never. The
// registered variants turn graph-time registration off, so that only ncclCommRegister's is at
// work. Whether NCCL held a registration across a pause shows in the device memory the pause
// gives back: memory NCCL mapped for the peer is not released until NCCL unmaps it.
//
// `--executor host` runs the same scenario on the host executor with a host stand-in for NCCL
// (collectives.hpp), optionally planting a hang, a wrong sum, a crash or an error, so that the
// checks and the report are exercised on machines without GPUs.
//
// What NCCL documents (NCCL User Guide, "User Buffer Registration",
// docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/bufferreg.html): a buffer registered
// while a graph is captured stays registered until the graph is destroyed, and one registered
// with ncclCommRegister until ncclCommDeregister; registration requires memory from ncclMemAlloc
// or a cuMem allocator. The guide does not say in so many words that a registered buffer must not
// be remapped, but registration belongs to the allocation: for a peer on the same node NCCL maps
// the buffer's physical allocation (cuMemRetainAllocationHandle) into the peer's address space
// (src/transport/p2p.cc, ipcRegisterBuffer), and that mapping is not told about a later remap.
// So a wrong sum in out-of-place or registered is reported as a finding, not a failure; the
// exit status depends on plain, out-of-place-nographreg and registered-reregister, which must
// give the right sum.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_common.hpp"
#include "collectives.hpp"
#include "markup.hpp"
#include "nccl_api.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::multigpu {
namespace {

using clock_type = std::chrono::steady_clock;

// Exit statuses. A variant child: 0 right sum, 1 wrong sum, 3 error, 4 hang, 77 skipped. The
// runner: 0 every gating variant gave the right sum, 1 one did not, 77 plain was skipped.
constexpr int exit_right = 0;
constexpr int exit_wrong = 1;
constexpr int exit_usage = 2;
constexpr int exit_error = 3;
constexpr int exit_hang = 4;
constexpr int exit_skip = 77;  // ctest's SKIP_RETURN_CODE

constexpr const char* result_prefix = "==> result: ";
constexpr const char* held_prefix = "==> held: ";

// ---- options ------------------------------------------------------------------------------------

struct options {
  std::string variant;  ///< empty: run every variant, each in a child process
  int rounds = 3;       ///< pause/resume rounds after the first replay; the last one discards
  /// Floats per region: about 24 MiB, not a multiple of the 2 MiB granularity, so that the
  /// region's last (and only) chunk is partly used.
  std::size_t elements = std::size_t{6} * 1024 * 1024 + 12345;
  int deadline_s = 60;  ///< per step; NCCL's initialization gets twice as long
  /// cuda: NCCL on GPUs 0 and 1. host: the host executor and the host stand-in for NCCL, the
  /// scenario's dry run on a machine without GPUs.
  std::string executor = "cuda";
  host_fault fault = host_fault::none;  ///< planted by the host stand-in
  std::string fault_name = "none";
  bool list = false;
  bool find_nccl_only = false;
  /// Where the runner writes its table and findings (Markdown) on every outcome, pass, fail or
  /// skip; empty: nowhere but stdout.
  std::string findings;
};

/// Parses the command line into `o`: -1 to go on, or the exit status (0 after --help, 2 after a
/// usage error, on stderr as "nccl_region_test: <option>: <value> ... valid ...").
int parse_options(int argc, char** argv, options& o) {
  namespace tools = offloadkit::tools;
  auto app = tools::make_app(
      "",
      "An NCCL all-reduce across GPUs 0 and 1, captured in a CUDA graph before a vmm_region is\n"
      "paused and replayed after it is resumed. Without --variant, runs every variant in a child\n"
      "process and prints a table; exit 0 when every gating variant gives the right sum, 1 when\n"
      "one does not, 77 when the test cannot run here (no two GPUs, no NCCL).",
      "Environment: OFFLOADKIT_NCCL_LIBRARY (path of libnccl.so.2), OFFLOADKIT_PYTHON (the\n"
      "interpreter whose site-packages hold NCCL's wheel; default python3 on PATH, then\n"
      "/usr/bin/python3). NCCL_NVLS_ENABLE is always 0.\n"
      "Exit status: 0 right sums, 1 a wrong sum, 2 bad usage, 3 error, 4 hang, 77 skipped.",
      "nccl_region_test");
  app->add_option("--variant", o.variant,
                  "run one variant in this process (--list names them); exit 0 right sum, 1 "
                  "wrong sum, 3 error, 4 hang, 77 skipped")
      ->type_name("NAME");
  app->add_option("--rounds", o.rounds,
                  "pause/resume rounds after the first replay, 1..50 (default 3; the last one "
                  "pauses with discard when N >= 2)")
      ->type_name("N")
      ->check(tools::integer_range(1, 50));
  app->add_option("--elements", o.elements,
                  "floats per region, 1..268435456 (default 6303801, about 24 MiB)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, 268435456));
  app->add_option("--deadline", o.deadline_s,
                  "seconds each step may take before it is reported as a hang, 1..3600 (default "
                  "60)")
      ->type_name("S")
      ->check(tools::integer_range(1, 3600));
  tools::add_executor_option(*app, o.executor)
      ->description(
          "cuda (default): NCCL on GPUs 0 and 1; host: the host executor with a host stand-in "
          "for NCCL, a dry run of the scenario without GPUs");
  app->add_option("--host-fault", o.fault_name,
                  "with --executor host, plant a fault at the first replay after a resume: none, "
                  "hang, wrong, crash, error (shows how each is reported)")
      ->type_name("F")
      ->check(tools::one_of({"none", "hang", "wrong", "crash", "error"}));
  app->add_option("--findings", o.findings,
                  "without --variant, also write the table and what each variant's result means "
                  "to FILE (Markdown), whatever the outcome")
      ->type_name("FILE")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.empty() ? std::string("an empty path: name the file to write") : "";
          },
          ""));
  app->add_flag("--list", o.list, "name the variants and whether each gates the verdict");
  app->add_flag("--find-nccl", o.find_nccl_only, "only look for NCCL and say what was tried");
  // Checked once every option is read, and refused like any other bad value.
  app->callback([&o] {
    if (!o.findings.empty() && !o.variant.empty()) {
      throw CLI::ValidationError("--findings", o.findings +
                                                   " needs the runner (no --variant): one variant "
                                                   "prints its own result");
    }
    if (o.fault_name != "none" && o.executor != "host") {
      throw CLI::ValidationError("--host-fault",
                                 o.fault_name + " needs --executor host (NCCL is not faulted)");
    }
  });
  if (const int status = tools::parse_program_arguments(*app, argc, argv, std::cout, std::cerr);
      status >= 0) {
    return status;
  }
  (void)parse_host_fault(o.fault_name, o.fault);
  return -1;
}

// ---- variants -----------------------------------------------------------------------------------

enum class registration { none, kept, redone };

struct variant {
  std::string name;
  bool out_of_place = false;
  registration reg = registration::none;
  bool gates = false;  ///< a wrong sum (or a hang, a crash, an error) fails the test
  std::vector<std::pair<std::string, std::string>> env;  ///< set, overriding, before NCCL loads
  std::string what;                                      ///< one line
};

const std::vector<variant>& all_variants() {
  static const std::vector<variant> variants = {
      {"plain",
       false,
       registration::none,
       true,
       {},
       "in-place all-reduce of the region, NCCL's defaults"},
      {"plain-nographreg",
       false,
       registration::none,
       false,
       {{"NCCL_GRAPH_REGISTER", "0"}},
       "as plain with NCCL's graph-time registration off: a control, should plain fail"},
      {"out-of-place",
       true,
       registration::none,
       false,
       {{"NCCL_GRAPH_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region; NCCL may register the output's memory at capture (its default)"},
      {"out-of-place-nographreg",
       true,
       registration::none,
       true,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region with NCCL's graph-time registration off"},
      {"registered",
       true,
       registration::kept,
       false,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_LOCAL_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region, both registered with ncclCommRegister and kept registered"},
      {"registered-reregister",
       true,
       registration::redone,
       true,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_LOCAL_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "as registered, but deregistered before pause, registered and captured again after "
       "resume"},
  };
  return variants;
}

const variant* find_variant(const std::string& name) {
  for (const variant& v : all_variants()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

// ---- output -------------------------------------------------------------------------------------

std::string mib(long long bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string seconds_since(clock_type::time_point start) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s",
                std::chrono::duration<double>(clock_type::now() - start).count());
  return text;
}

/// Writes straight to stdout: the watchdog thread uses it while the main thread is stuck.
void write_out(const std::string& text) {
  std::fflush(stdout);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

/// The first wrong sum found, if any: a hang or an error after it (in the teardown, say) is
/// reported together with it, so that the wrong sum is not lost from the table.
std::mutex earlier_mutex;
std::string earlier_wrong;

void note_wrong(const std::string& text) {
  const std::lock_guard<std::mutex> lock(earlier_mutex);
  if (earlier_wrong.empty()) earlier_wrong = text;
}

std::string after_earlier_wrong(const std::string& text) {
  const std::lock_guard<std::mutex> lock(earlier_mutex);
  return earlier_wrong.empty() ? text : "wrong sum: " + earlier_wrong + "; then " + text;
}

/// Prints the final result line and ends the process without running destructors or exit
/// handlers: after a hang or an error the CUDA and NCCL state is not one to tear down.
[[noreturn]] void finish(int code, const std::string& result) {
  write_out(std::string(result_prefix) + result + "\n");
  ::_exit(code);
}

[[noreturn]] void hang(const std::string& what, int seconds) {
  const std::string text =
      "hang: " + what + " did not complete within " + std::to_string(seconds) + " s";
  write_out(text + "\n");
  finish(exit_hang, after_earlier_wrong(text));
}

[[noreturn]] void skip(const std::string& reason) {
  write_out("OFFLOADKIT SKIP: " + reason + "\n");
  finish(exit_skip, "skipped: " + reason);
}

// ---- watchdog -----------------------------------------------------------------------------------

/// Bounds the steps that block inside CUDA or NCCL (initialization, capture, pause, teardown):
/// armed with a step's name and limit, it reports a hang and ends the process when the step has
/// not finished in time.
class watchdog {
 public:
  watchdog() = default;
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// Disarms the watchdog when it goes out of scope.
  class step {
   public:
    explicit step(watchdog& w) : w_(&w) {}
    step(const step&) = delete;
    step& operator=(const step&) = delete;
    ~step() { w_->disarm(); }

   private:
    watchdog* w_;
  };

  [[nodiscard]] step arm(std::string what, int seconds) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      what_ = std::move(what);
      seconds_ = seconds;
      deadline_ = clock_type::now() + std::chrono::seconds(seconds);
      armed_ = true;
    }
    wake_.notify_all();
    return step(*this);
  }

  void disarm() {
    const std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      wake_.wait_until(lock, deadline);
      if (armed_ && !stop_ && deadline_ == deadline && clock_type::now() >= deadline) {
        hang(what_, seconds_);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string what_;
  int seconds_ = 0;
  clock_type::time_point deadline_{};
  bool armed_ = false;
  bool stop_ = false;
  std::thread thread_{[this] { run(); }};  // last: starts once the members above exist
};

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

// ---- the runner: every variant in a child process -----------------------------------------------

struct child_outcome {
  enum class end { exited, signaled, timed_out } how = end::exited;
  int code = 0;
  int signal = 0;
  std::string result;  ///< the child's result line, without the prefix
  long long held = -1;
  double seconds = 0;
};

std::string signal_text(int sig) {
  const char* name = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : "");
}

/// Runs `args` (args[0] is this program) with stdout and stderr into a pipe, echoing each line
/// with `prefix` as it arrives (a child that hangs has already shown how far it got), for at most
/// `limit`. The child has a process group of its own and dies with this process.
child_outcome run_child(const std::vector<std::string>& args, const std::string& prefix,
                        std::chrono::seconds limit) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2 failed: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: async-signal-safe calls only until exec. The runner made no CUDA call.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    static const char failed[] = "nccl_region_test: exec of the variant's process failed\n";
    (void)!::write(STDERR_FILENO, failed, sizeof failed - 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  const int out = fds[0];
  ::fcntl(out, F_SETFL, O_NONBLOCK);

  child_outcome outcome;
  std::string pending;
  auto take_line = [&](const std::string& line) {
    std::printf("%s%s\n", prefix.c_str(), line.c_str());
    if (line.rfind(result_prefix, 0) == 0) outcome.result = line.substr(std::strlen(result_prefix));
    if (line.rfind(held_prefix, 0) == 0) {
      outcome.held = std::strtoll(line.c_str() + std::strlen(held_prefix), nullptr, 10);
    }
  };
  // Reads what the pipe has; false at end of file.
  auto drain = [&]() {
    char chunk[8192];
    for (;;) {
      const ssize_t n = ::read(out, chunk, sizeof chunk);
      if (n > 0) {
        pending.append(chunk, static_cast<std::size_t>(n));
        for (std::size_t eol = 0; (eol = pending.find('\n')) != std::string::npos;) {
          take_line(pending.substr(0, eol));
          pending.erase(0, eol + 1);
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0;  // EAGAIN: open, nothing now; 0: end of file
    }
  };

  const auto start = clock_type::now();
  int status = 0;
  for (;;) {
    pollfd p{out, POLLIN, 0};
    (void)::poll(&p, 1, 100);
    drain();
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (clock_type::now() - start > limit) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      outcome.how = child_outcome::end::timed_out;
      break;
    }
  }
  ::kill(-pid, SIGKILL);  // anything the child left in its group
  while (drain()) {
    pollfd p{out, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) break;
  }
  if (!pending.empty()) take_line(pending);
  ::close(out);
  outcome.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  if (outcome.how != child_outcome::end::timed_out) {
    if (WIFSIGNALED(status)) {
      outcome.how = child_outcome::end::signaled;
      outcome.signal = WTERMSIG(status);
    } else {
      outcome.code = WEXITSTATUS(status);
    }
  }
  return outcome;
}

std::string describe(const child_outcome& c, std::chrono::seconds limit) {
  switch (c.how) {
    case child_outcome::end::timed_out:
      return "hang: no result within " + std::to_string(limit.count()) +
             " s; the runner killed it" + (c.result.empty() ? "" : " (last: " + c.result + ")");
    case child_outcome::end::signaled:
      return "crashed: " + signal_text(c.signal);
    case child_outcome::end::exited:
      break;
  }
  const bool known = c.code == exit_right || c.code == exit_wrong || c.code == exit_error ||
                     c.code == exit_hang || c.code == exit_skip;
  if (known && !c.result.empty()) return c.result;
  return "exited with code " + std::to_string(c.code) +
         (c.result.empty() ? " without a result" : ": " + c.result);
}

/// What a variant's outcome means, for the report under the table.
std::string interpretation(const variant& v, const child_outcome& c, const std::string& result) {
  const bool right = c.how == child_outcome::end::exited && c.code == exit_right;
  if (v.name == "plain") {
    return right ? "the graph captured before the first pause gives the right sum after every "
                   "resume (the issue's criterion)."
                 : "FAILS the issue's criterion: " + result;
  }
  if (v.name == "plain-nographreg") {
    return right ? "right sum (the control for plain: NCCL's graph-time registration off)."
                 : "fails (not gating): " + result;
  }
  if (v.name != "out-of-place" && v.name != "registered") {
    if (!right) return "FAILS: " + result;
    return v.name == "registered-reregister"
               ? "right sum: deregistering before the pause, then registering and capturing again "
                 "after the resume, is what a registered region needs."
               : "right sum: without NCCL's graph-time registration the graph reaches the output "
                 "through its address, which resume maps again.";
  }
  // The findings. Whether NCCL kept a mapping of the regions' memory across a pause (its
  // registration) tells whether the registration this variant looks at was in effect.
  const bool graph = v.name == "out-of-place";
  const std::string how = graph ? "NCCL's graph-time registration (NCCL_GRAPH_REGISTER=1, its "
                                  "default)"
                                : "a registration made with ncclCommRegister";
  if (c.held > 0) {
    const std::string kept = "while paused, " + mib(c.held) +
                             " of the regions' device memory stayed mapped elsewhere (NCCL's "
                             "mapping of the memory it had registered)";
    if (right) return "right sum, although " + kept + ".";
    return how + " does not survive a remap: " + kept +
           ". NCCL maps registered physical memory into the peer GPU and keeps that mapping "
           "until " +
           (graph ? "the graph is destroyed" : "ncclCommDeregister") +
           ", so after the resume the peer still reaches the old memory. NCCL documents that a "
           "registration lasts that long (NCCL User Guide, User Buffer Registration) and ties it "
           "to the allocation; it does not promise to follow a remap, so this is a finding, not a "
           "failure. " +
           (graph ? "Under a region that is paused, set NCCL_GRAPH_REGISTER=0 "
                    "(out-of-place-nographreg) or capture again after resume; torch_memory_saver "
                    "#88 saw this as a hang."
                  : "Deregister before the pause, register and capture again after the resume "
                    "(registered-reregister).") +
           " Result: " + result;
  }
  if (c.held == 0) {
    const std::string none =
        "every pause gave all of the regions' device memory back to the driver, so NCCL held no "
        "registration of it across the pause: " +
        how +
        " was not in effect for this all-reduce here (the NCCL INFO REG lines above say what NCCL "
        "did)";
    return right ? "right sum; " + none + ", and this run says nothing about a registered remap."
                 : "FAILS, and not because of a registration: " + none + ". " + result;
  }
  return right ? "right sum." : "FAILS before any pause: " + result;
}

int run_all(const options& o) {
  const std::string self = [] {
    std::string path(4096, '\0');
    const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
    if (n <= 0) {
      throw std::runtime_error(std::string("readlink(/proc/self/exe) failed: ") +
                               std::strerror(errno));
    }
    path.resize(static_cast<std::size_t>(n));
    return path;
  }();
  // A child bounds every step itself; this limit only catches one that cannot end at all.
  const std::chrono::seconds limit(3LL * o.deadline_s + 60);
  std::printf(
      "nccl_region_test: %zu variants, each in a process of its own (executor %s%s; "
      "NCCL_NVLS_ENABLE=0; %d pause/resume rounds; %zu floats per region; %d s per step)\n",
      all_variants().size(), o.executor.c_str(),
      o.fault == host_fault::none ? "" : (", planted fault " + o.fault_name).c_str(), o.rounds,
      o.elements, o.deadline_s);

  struct row {
    const variant* v;
    child_outcome outcome;
    std::string result;
  };
  std::vector<row> rows;
  for (const variant& v : all_variants()) {
    std::printf("\n---- %s: %s\n", v.name.c_str(), v.what.c_str());
    const std::vector<std::string> args = {self,
                                           "--variant",
                                           v.name,
                                           "--rounds",
                                           std::to_string(o.rounds),
                                           "--elements",
                                           std::to_string(o.elements),
                                           "--deadline",
                                           std::to_string(o.deadline_s),
                                           "--executor",
                                           o.executor,
                                           "--host-fault",
                                           o.fault_name};
    child_outcome c = run_child(args, "[" + v.name + "] ", limit);
    std::string result = describe(c, limit);
    std::printf("---- %s: %s (%.1f s)\n", v.name.c_str(), result.c_str(), c.seconds);
    rows.push_back({&v, std::move(c), std::move(result)});
  }

  // The table, what each result means, and the verdict: printed, and written to --findings
  // whatever the verdict, so that a passing run records its findings too.
  const std::string planted = o.fault == host_fault::none ? "" : ", planted fault " + o.fault_name;
  std::string table =
      "nccl_region_test results (executor " + o.executor + planted + ", NCCL_NVLS_ENABLE=0):\n";
  std::string markdown =
      "# nccl_region_test findings\n\nExecutor " + o.executor + planted + "; NCCL_NVLS_ENABLE=0; " +
      std::to_string(o.rounds) + " pause/resume rounds; " + std::to_string(o.elements) +
      " floats per region; " + std::to_string(o.deadline_s) +
      " s per step.\n\n| variant | gates | result | seconds |\n|---|---|---|---|\n";
  char line[64];
  for (const row& r : rows) {
    std::snprintf(line, sizeof line, "  %-24s | %-5s | ", r.v->name.c_str(),
                  r.v->gates ? "yes" : "no");
    table += line + r.result + "\n";
    std::snprintf(line, sizeof line, "%.1f", r.outcome.seconds);
    markdown += "| " + r.v->name + " | " + (r.v->gates ? "yes" : "no") + " | " +
                offloadkit::tools::md_cell(r.result) + " | " + line + " |\n";
  }
  table += "\n";
  markdown += "\n## What each result means\n\n";
  for (const row& r : rows) {
    if (r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_skip) continue;
    const std::string meaning = interpretation(*r.v, r.outcome, r.result);
    table += "  " + r.v->name + ": " + meaning + "\n";
    markdown += "- **" + r.v->name + "**: " + offloadkit::tools::md_cell(meaning) + "\n";
  }

  int code = exit_right;
  std::string verdict;
  const row& plain = rows.front();
  if (plain.outcome.how == child_outcome::end::exited && plain.outcome.code == exit_skip) {
    const std::string& r = plain.result;
    verdict = "OFFLOADKIT SKIP: " + (r.rfind("skipped: ", 0) == 0 ? r.substr(9) : r);
    code = exit_skip;
  } else {
    std::string failed;
    std::string skipped_names;
    for (const row& r : rows) {
      const bool right =
          r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_right;
      const bool skipped =
          r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_skip;
      if (r.v->gates && !right && !skipped) failed += (failed.empty() ? "" : ", ") + r.v->name;
      if (r.v->gates && skipped) skipped_names += (skipped_names.empty() ? "" : ", ") + r.v->name;
    }
    if (!failed.empty()) {
      verdict = "FAIL: " + failed +
                " did not give the right sum (see the table and each variant's output)";
      code = exit_wrong;
    } else {
      verdict = "PASS: every gating variant gives the right sum after resume" +
                (skipped_names.empty() ? "" : " (skipped: " + skipped_names + ")");
    }
  }
  std::printf("\n%s%s\n", table.c_str(), verdict.c_str());
  if (!o.findings.empty()) {
    markdown += "\n" + verdict + "\n";
    std::ofstream out(o.findings, std::ios::binary | std::ios::trunc);
    out << markdown;
    out.close();
    if (!out) {
      std::fprintf(stderr, "nccl_region_test: --findings: %s cannot be written: %s\n",
                   o.findings.c_str(), std::strerror(errno));
      return exit_error;
    }
    std::printf("findings written to %s\n", o.findings.c_str());
  }
  return code;
}

int find_nccl_main() {
  const nccl_search s = find_nccl();
  for (const std::string& a : s.attempts) std::printf("not used: %s\n", a.c_str());
  if (!s.loaded) {
    std::printf("NCCL not found: %s\n", s.summary().c_str());
    return 1;
  }
  std::printf("NCCL %s from %s (ncclCommRegister: %s)\n", s.api.version_text().c_str(),
              s.api.path.c_str(), s.api.comm_register != nullptr ? "yes" : "no");
  return 0;
}

int main_impl(int argc, char** argv) {
  // Line by line, so that a child's output reaches the runner as it goes and nothing is lost
  // when a hang ends the process with _exit.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // NVLink SHARP off, in every process and before NCCL is loaded: forced (overwrite = 1), not
  // defaulted, because NVLS registers buffers with a multicast object, a mechanism of its own
  // that this test does not check, and the issue asks for it off.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  options o;
  if (const int status = parse_options(argc, argv, o); status >= 0) return status;
  if (o.list) {
    for (const variant& v : all_variants()) {
      std::printf("%-24s %-7s %s\n", v.name.c_str(), v.gates ? "gates" : "finding", v.what.c_str());
    }
    return 0;
  }
  if (o.find_nccl_only) return find_nccl_main();
  if (o.variant.empty()) return run_all(o);
  const variant* v = find_variant(o.variant);
  if (v == nullptr) {
    std::string names;
    for (const variant& known : all_variants()) names += (names.empty() ? "" : ", ") + known.name;
    std::fprintf(stderr,
                 "nccl_region_test: --variant: '%s' is not a variant: valid are %s\n"
                 "(nccl_region_test --help shows the usage)\n",
                 o.variant.c_str(), names.c_str());
    return exit_usage;
  }
  scenario(*v, o).run();
}

}  // namespace
}  // namespace offloadkit::multigpu

int main(int argc, char** argv) {
  try {
    return offloadkit::multigpu::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_region_test: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nccl_region_test: an exception that is not a std::exception\n");
  }
  return offloadkit::multigpu::exit_error;
}
