// liboffloadkit_interpose.so: counts, and fails on request, the allocation and mapping calls that
// the code in a process makes itself (offloadkit/interpose/control.h has the interface).
//
// How the calls are reached. LD_PRELOAD puts this library first in the global symbol scope, which
// catches calls bound by name: a program or library that links libcudart.so or libcuda.so
// (PyTorch, Triton's launchers) calls cudaMalloc or cuMemCreate through its PLT and gets the
// wrapper here. It does not catch the calls that matter most: a statically linked CUDA runtime
// (offloadkit itself, its plugins, most binaries built by nvcc) never binds a driver symbol by
// name. CUDA 12+ runtimes, static or shared, dlopen("libcuda.so.1"), take cuGetProcAddress_v2 from
// that handle with dlsym() and obtain every other driver function through it;
// cudaGetDriverEntryPoint(ByVersion), which offloadkit's executor uses for cuMem*, ends in the same
// cuGetProcAddress. A lookup on the driver's own handle ignores LD_PRELOAD, so this library
// replaces dlsym() itself: a lookup on a real handle whose answer lies in libcuda (or libcudart)
// and names a function counted here returns the wrapper instead, and the wrapper for
// cuGetProcAddress(_v2) does the same for the pointers it hands out.
//
// Of the two ways others take (a dlsym() hook, as GPU sharing layers such as HAMi-core's libvgpu
// do, or a stand-in libcuda.so.1 that forwards every driver function to the real one found by
// absolute path), the hook is the smaller: the shim would have to export and forward several
// hundred driver functions, track their versions, and shadow the driver for every library in the
// process. The hook's known trap is dlsym(RTLD_NEXT, ...): glibc resolves "next" relative to the
// caller's return address, so a C wrapper that forwards the call makes every RTLD_NEXT lookup in
// the process look as if it came from this library (another interposer's malloc wrapper would then
// find itself). dlsym() is therefore a few instructions of assembly that jump, rather than call,
// to glibc's dlsym for RTLD_NEXT and RTLD_DEFAULT, so that glibc sees the original caller; only
// lookups on explicit handles reach the C++ code. (Elsewhere than x86-64 the forward is a C tail
// call, which compilers usually but not always emit as a jump.)
//
// Constraints. The library may be entered before its constructor has run, from any thread, from
// inside the loader (dlsym) and from code that holds allocator or driver locks, so it keeps to:
// no heap allocation after initialization, no C++ runtime (it links without libstdc++), only
// constant-initialized globals (no static-initialization order), spin locks held for a few
// instructions, and the report formatted into a static buffer and written with open/write.
// The environment is read once, at load, and never written.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "offloadkit/interpose/control.h"

// cuda.h maps cuGetProcAddress to its _v2; the library exports both ABIs under their own names.
#undef cuGetProcAddress

#define OKIT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---- the functions counted ---------------------------------------------------------------------

enum fn_id : int {
  f_cu_mem_alloc,
  f_cu_mem_free,
  f_cu_mem_alloc_host,
  f_cu_mem_host_alloc,
  f_cu_mem_free_host,
  f_cu_mem_address_reserve,
  f_cu_mem_address_free,
  f_cu_mem_create,
  f_cu_mem_release,
  f_cu_mem_map,
  f_cu_mem_unmap,
  f_cu_mem_set_access,
  f_cuda_malloc,
  f_cuda_free,
  f_cuda_host_alloc,
  f_cuda_malloc_host,
  f_cuda_free_host,
  fn_count
};

// What the ledger holds: each function's wrapper files what it creates or releases under one.
enum resource : int {
  r_physical_handle,
  r_reservation,
  r_mapping,
  r_device,
  r_pinned,
  resource_count
};

struct fn_info {
  const char* name;    ///< in reports and OFFLOADKIT_FAULT_KINDS: the name cuGetProcAddress takes
  const char* symbol;  ///< the exported symbol of this ABI
  int since;           ///< the cuGetProcAddress version from which `name` has this ABI
  bool runtime;        ///< a runtime (libcudart) function
  bool acquire;        ///< obtains something (fails with out-of-memory); otherwise releases
};

constexpr fn_info fns[fn_count] = {
    {"cuMemAlloc", "cuMemAlloc_v2", 3020, false, true},
    {"cuMemFree", "cuMemFree_v2", 3020, false, false},
    {"cuMemAllocHost", "cuMemAllocHost_v2", 3020, false, true},
    {"cuMemHostAlloc", "cuMemHostAlloc", 2020, false, true},
    {"cuMemFreeHost", "cuMemFreeHost", 2000, false, false},
    {"cuMemAddressReserve", "cuMemAddressReserve", 10020, false, true},
    {"cuMemAddressFree", "cuMemAddressFree", 10020, false, false},
    {"cuMemCreate", "cuMemCreate", 10020, false, true},
    {"cuMemRelease", "cuMemRelease", 10020, false, false},
    {"cuMemMap", "cuMemMap", 10020, false, true},
    {"cuMemUnmap", "cuMemUnmap", 10020, false, false},
    {"cuMemSetAccess", "cuMemSetAccess", 10020, false, true},
    {"cudaMalloc", "cudaMalloc", 0, true, true},
    {"cudaFree", "cudaFree", 0, true, false},
    {"cudaHostAlloc", "cudaHostAlloc", 0, true, true},
    {"cudaMallocHost", "cudaMallocHost", 0, true, true},
    {"cudaFreeHost", "cudaFreeHost", 0, true, false},
};

// Report keys of the resources, for "created"/"released" and "outstanding".
constexpr const char* resource_created_key[resource_count] = {
    "physical_handles", "reservations", "mappings", "device_allocations", "pinned_allocations"};

bool same(const char* a, const char* b) noexcept { return a != nullptr && strcmp(a, b) == 0; }

// ---- spin lock ---------------------------------------------------------------------------------

class spin_lock {
 public:
  void lock() noexcept {
    while (busy_.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  void unlock() noexcept { busy_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> busy_{false};
};

class locked {
 public:
  explicit locked(spin_lock& l) noexcept : l_(l) { l_.lock(); }
  ~locked() { l_.unlock(); }
  locked(const locked&) = delete;
  locked& operator=(const locked&) = delete;

 private:
  spin_lock& l_;
};

// ---- settings ----------------------------------------------------------------------------------

constexpr std::uint32_t all_kinds = (1u << fn_count) - 1;

std::uint32_t acquire_kinds() noexcept {
  std::uint32_t m = 0;
  for (int i = 0; i < fn_count; ++i) {
    if (fns[i].acquire) m |= 1u << i;
  }
  return m;
}

struct settings {
  bool armed = false;  ///< a call number was given
  std::uint64_t fail_call = 0;
  std::uint32_t kinds = 0;
  char kinds_text[256] = {};
  char report_path[4096] = {};
  char claim_path[4104] = {};  ///< report_path + ".owner"
};

settings config;
std::atomic<int> init_state{0};  // 0: not yet, 1: running, 2: done
std::atomic<bool> window_open{false};

// Armed by OFFLOADKIT_DELAY_* at load or okit_interpose_set_delays(); max 0 is off. The n-th delay
// since arming lasts mix(seed, n) % (max + 1) microseconds: the same seed gives the same durations
// in the same order.
std::atomic<std::uint64_t> delay_seed{0};
std::atomic<std::uint32_t> delay_max_us{0};
std::atomic<std::uint64_t> delay_sequence{0};
std::atomic<std::uint64_t> delays_added{0};
constexpr std::uint32_t delay_limit_us = 1000000;

void say(const char* a, const char* b = "", const char* c = "", const char* d = "") noexcept {
  // Diagnostics go straight to the descriptor: stdio may not be usable from every caller.
  const char* parts[] = {"offloadkit-interpose: ", a, b, c, d, "\n"};
  for (const char* p : parts) {
    std::size_t left = strlen(p);
    while (left > 0) {
      const ssize_t n = write(STDERR_FILENO, p, left);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
}

void copy_text(char* dst, std::size_t cap, const char* src) noexcept {
  std::size_t i = 0;
  for (; src[i] != '\0' && i + 1 < cap; ++i) dst[i] = src[i];
  dst[i] = '\0';
}

bool parse_call(const char* text, std::uint64_t& out) noexcept {
  if (text == nullptr || *text == '\0') return false;
  std::uint64_t n = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    const std::uint64_t digit = static_cast<std::uint64_t>(*p - '0');
    if (n > (UINT64_MAX - digit) / 10) return false;
    n = n * 10 + digit;
  }
  out = n;
  return true;
}

// OFFLOADKIT_FAULT_KINDS: a comma-separated list of acquire, release, all and function names.
std::uint32_t parse_kinds(const char* text) noexcept {
  std::uint32_t mask = 0;
  char token[64];
  const char* p = text;
  while (*p != '\0') {
    std::size_t n = 0;
    while (*p == ' ' || *p == ',') ++p;
    while (*p != '\0' && *p != ',' && *p != ' ') {
      if (n + 1 < sizeof token) token[n++] = *p;
      ++p;
    }
    token[n] = '\0';
    if (n == 0) continue;
    if (same(token, "acquire")) {
      mask |= acquire_kinds();
    } else if (same(token, "release")) {
      mask |= all_kinds & ~acquire_kinds();
    } else if (same(token, "all")) {
      mask |= all_kinds;
    } else {
      bool known = false;
      for (int i = 0; i < fn_count; ++i) {
        if (same(token, fns[i].name) || same(token, fns[i].symbol)) {
          mask |= 1u << i;
          known = true;
        }
      }
      if (!known) {
        say(OKIT_INTERPOSE_ENV_KINDS ": unknown kind '", token,
            "' (valid: acquire, release, all, or a function name such as cuMemMap or "
            "cudaHostAlloc); ignored");
      }
    }
  }
  return mask;
}

void initialize() noexcept {
  if (const char* call = getenv(OKIT_INTERPOSE_ENV_CALL); call != nullptr && *call != '\0') {
    if (parse_call(call, config.fail_call)) {
      config.armed = true;
    } else if (!same(call, "none")) {
      say(OKIT_INTERPOSE_ENV_CALL "='", call,
          "' is not a call number (an integer >= 0, or none); counting only");
    }
  }
  const char* kinds = getenv(OKIT_INTERPOSE_ENV_KINDS);
  if (kinds == nullptr || *kinds == '\0') kinds = "acquire";
  config.kinds = parse_kinds(kinds);
  copy_text(config.kinds_text, sizeof config.kinds_text, kinds);
  // Empty is unset: a claim file of "" + ".owner" would land in the working folder.
  if (const char* report = getenv(OKIT_INTERPOSE_ENV_REPORT);
      report != nullptr && *report != '\0') {
    if (strlen(report) >= sizeof config.report_path) {
      say(OKIT_INTERPOSE_ENV_REPORT " is longer than 4095 characters; no report is written");
    } else {
      copy_text(config.report_path, sizeof config.report_path, report);
      copy_text(config.claim_path, sizeof config.claim_path, report);
      copy_text(config.claim_path + strlen(config.claim_path), 8, OKIT_INTERPOSE_CLAIM_SUFFIX);
    }
  }
  bool open = true;
  if (const char* window = getenv(OKIT_INTERPOSE_ENV_WINDOW);
      window != nullptr && *window != '\0') {
    if (same(window, "closed")) {
      open = false;
    } else if (!same(window, "open")) {
      say(OKIT_INTERPOSE_ENV_WINDOW "='", window, "' is neither open nor closed; open");
    }
  }
  window_open.store(open, std::memory_order_release);
  std::uint64_t seed = 0;
  if (const char* text = getenv(OKIT_INTERPOSE_ENV_DELAY_SEED); text != nullptr && *text != '\0') {
    if (!parse_call(text, seed)) {
      say(OKIT_INTERPOSE_ENV_DELAY_SEED "='", text, "' is not an integer >= 0; seed 0");
      seed = 0;
    }
  }
  std::uint64_t max = 0;
  if (const char* text = getenv(OKIT_INTERPOSE_ENV_DELAY_MAX_US);
      text != nullptr && *text != '\0') {
    if (!parse_call(text, max)) {
      say(OKIT_INTERPOSE_ENV_DELAY_MAX_US "='", text,
          "' is not a number of microseconds (an integer in 0..1000000); delays stay off");
      max = 0;
    } else if (max > delay_limit_us) {
      say(OKIT_INTERPOSE_ENV_DELAY_MAX_US "='", text, "' is above 1000000; 1000000 is used");
      max = delay_limit_us;
    }
  }
  delay_seed.store(seed, std::memory_order_relaxed);
  delay_max_us.store(static_cast<std::uint32_t>(max), std::memory_order_release);
}

void ensure_init() noexcept {
  if (init_state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    initialize();
    init_state.store(2, std::memory_order_release);
    return;
  }
  while (init_state.load(std::memory_order_acquire) != 2) sched_yield();
}

// ---- which process counts
// ------------------------------------------------------------------------

// Every process started under the variables loads the library: a shell or `timeout` in front of
// the program, the program, the workers it starts, a fork of it. One of them must count and write
// the report, the others pass every call through untouched. The counted one is the first to make
// a counted call (or to ask for the report), so that launchers which never call CUDA do not take
// the part: it creates <report>.owner exclusively and writes its pid there. A process that finds
// the file naming another live process stays passive; a file naming a process that is gone (a
// case that crashed) is stale and taken over. Without a report path there is nothing to share:
// every process counts for itself.
std::atomic<int> ownership{0};  // 0: undecided, 1: this process counts, 2: passive
pid_t owner_pid = 0;
spin_lock claim_lock;

int format_pid(pid_t pid, char* out) noexcept {
  char digits[24];
  int n = 0;
  for (pid_t v = pid; v > 0 && n < 20; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int i = 0;
  while (n > 0) out[i++] = digits[--n];
  out[i] = '\0';
  return i;
}

pid_t read_claim(const char* path) noexcept {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[24] = {};
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  pid_t pid = 0;
  for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9'; ++i)
    pid = pid * 10 + (text[i] - '0');
  return pid;
}

bool try_claim(pid_t self) noexcept {
  if (config.claim_path[0] == '\0') return true;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = open(config.claim_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      char text[24];
      const int n = format_pid(self, text);
      const bool written = write(fd, text, static_cast<std::size_t>(n)) == n;
      close(fd);
      return written;
    }
    if (errno != EEXIST) {
      say("cannot create ", config.claim_path, " to claim the count; this process counts");
      return true;
    }
    const pid_t other = read_claim(config.claim_path);
    if (other == self) return true;  // this process, after an exec
    if (other > 0 && (kill(other, 0) == 0 || errno == EPERM)) return false;
    // Empty (being written right now) or naming a process that is gone.
    if (other == 0 && attempt == 0) {
      sched_yield();
      continue;
    }
    unlink(config.claim_path);
  }
  return false;
}

/// Whether this process is the counted one, deciding it now if nobody has.
bool claim() noexcept {
  const int state = ownership.load(std::memory_order_acquire);
  if (state != 0) return state == 1 && getpid() == owner_pid;  // a fork is never the owner
  locked hold(claim_lock);
  if (ownership.load(std::memory_order_acquire) == 0) {
    owner_pid = getpid();
    ownership.store(try_claim(owner_pid) ? 1 : 2, std::memory_order_release);
  }
  return ownership.load(std::memory_order_acquire) == 1 && getpid() == owner_pid;
}

/// Whether this process counts, without deciding it.
bool owns() noexcept {
  return ownership.load(std::memory_order_acquire) == 1 && getpid() == owner_pid;
}

// ---- counters and the ledger -------------------------------------------------------------------

struct fn_stats {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> errors{0};
};
fn_stats stats[fn_count];
std::atomic<std::uint64_t> counted_calls{0};
std::atomic<std::uint64_t> failures{0};

constexpr int max_injections = 8;
struct injection {
  std::uint64_t call;
  int fn;
  int error;
};
injection injections[max_injections];
int injection_count = 0;  // under ledger_lock

// The live resources, keyed by kind and handle or address: a fixed open-addressing table, so that
// no call allocates.
struct slot {
  std::uint64_t key;
  std::uint64_t bytes;
  std::int32_t kind;
  std::int32_t used;
};
constexpr std::size_t ledger_capacity = std::size_t{1} << 15;
constexpr std::size_t ledger_limit = ledger_capacity / 4 * 3;
slot ledger[ledger_capacity];
std::size_t ledger_used = 0;

struct ledger_totals {
  std::uint64_t created[resource_count];
  std::uint64_t released[resource_count];
  std::int64_t live[resource_count];
  std::int64_t live_bytes[resource_count];
  std::uint64_t untracked_releases;
  std::uint64_t table_full;
};
ledger_totals totals;
spin_lock ledger_lock;

std::size_t home(std::uint64_t key, std::int32_t kind) noexcept {
  std::uint64_t h = (key ^ (static_cast<std::uint64_t>(kind) << 56)) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return static_cast<std::size_t>(h) & (ledger_capacity - 1);
}

std::size_t find_slot(std::int32_t kind, std::uint64_t key) noexcept {
  for (std::size_t i = home(key, kind);; i = (i + 1) & (ledger_capacity - 1)) {
    if (!ledger[i].used) return ledger_capacity;
    if (ledger[i].kind == kind && ledger[i].key == key) return i;
  }
}

// Deletes slot i, moving later entries of its probe run back so that every lookup still finds them.
void erase_slot(std::size_t i) noexcept {
  std::size_t j = i;
  for (;;) {
    j = (j + 1) & (ledger_capacity - 1);
    if (!ledger[j].used) break;
    const std::size_t k = home(ledger[j].key, ledger[j].kind);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    ledger[i] = ledger[j];
    i = j;
  }
  ledger[i].used = 0;
  --ledger_used;
}

void ledger_add(resource kind, std::uint64_t key, std::uint64_t bytes) noexcept {
  locked hold(ledger_lock);
  ++totals.created[kind];
  const std::size_t at = find_slot(kind, key);
  if (at != ledger_capacity) {
    // Created again without a release the ledger saw: keep one entry, with the newer size.
    totals.live_bytes[kind] +=
        static_cast<std::int64_t>(bytes) - static_cast<std::int64_t>(ledger[at].bytes);
    ledger[at].bytes = bytes;
    return;
  }
  ++totals.live[kind];
  totals.live_bytes[kind] += static_cast<std::int64_t>(bytes);
  if (ledger_used >= ledger_limit) {
    ++totals.table_full;
    return;
  }
  std::size_t i = home(key, kind);
  while (ledger[i].used) i = (i + 1) & (ledger_capacity - 1);
  ledger[i] = slot{key, bytes, kind, 1};
  ++ledger_used;
}

void forget(std::size_t at) noexcept {
  const std::int32_t kind = ledger[at].kind;
  ++totals.released[kind];
  --totals.live[kind];
  totals.live_bytes[kind] -= static_cast<std::int64_t>(ledger[at].bytes);
  erase_slot(at);
}

void ledger_remove(resource kind, std::uint64_t key) noexcept {
  locked hold(ledger_lock);
  const std::size_t at = find_slot(kind, key);
  if (at == ledger_capacity) {
    ++totals.untracked_releases;
    return;
  }
  forget(at);
}

// cuMemUnmap takes a range that may cover several mappings.
void ledger_remove_range(resource kind, std::uint64_t begin, std::uint64_t bytes) noexcept {
  locked hold(ledger_lock);
  bool any = false;
  for (;;) {
    std::size_t at = ledger_capacity;
    for (std::size_t i = 0; i < ledger_capacity; ++i) {
      if (ledger[i].used && ledger[i].kind == kind && ledger[i].key >= begin &&
          ledger[i].key - begin < bytes) {
        at = i;
        break;
      }
    }
    if (at == ledger_capacity) break;
    forget(at);
    any = true;
  }
  if (!any) ++totals.untracked_releases;
}

// ---- the report --------------------------------------------------------------------------------

class json_out {
 public:
  json_out(char* buf, std::size_t cap) noexcept : buf_(buf), cap_(cap) {}
  void raw(const char* s) noexcept {
    while (*s != '\0') put(*s++);
  }
  void str(const char* s) noexcept {
    put('"');
    for (; *s != '\0'; ++s) {
      const unsigned char c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        put('\\');
        put(*s);
      } else if (c < 0x20) {
        put('?');
      } else {
        put(*s);
      }
    }
    put('"');
  }
  void u64(std::uint64_t v) noexcept {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
  }
  void i64(std::int64_t v) noexcept {
    if (v < 0) {
      put('-');
      u64(static_cast<std::uint64_t>(-(v + 1)) + 1);
    } else {
      u64(static_cast<std::uint64_t>(v));
    }
  }
  void key(const char* k) noexcept {
    str(k);
    put(':');
  }
  [[nodiscard]] std::size_t size() const noexcept { return len_; }

 private:
  void put(char c) noexcept {
    if (len_ + 1 < cap_) buf_[len_++] = c;
  }
  char* buf_;
  std::size_t cap_;
  std::size_t len_ = 0;
};

char report_text[1 << 16];
spin_lock report_lock;

std::size_t format_report(const char* reason) noexcept {
  ledger_totals t{};
  injection inj[max_injections];
  int n_inj = 0;
  {
    locked hold(ledger_lock);
    t = totals;
    n_inj = injection_count;
    for (int i = 0; i < n_inj; ++i) inj[i] = injections[i];
  }
  json_out o(report_text, sizeof report_text);
  o.raw("{");
  o.key("format");
  o.str(OKIT_INTERPOSE_REPORT_FORMAT);
  o.raw(",");
  o.key("version");
  o.u64(1);
  o.raw(",");
  o.key("pid");
  o.u64(static_cast<std::uint64_t>(getpid()));
  o.raw(",");
  o.key("reason");
  o.str(reason);
  o.raw(",");
  o.key("armed_call");
  if (config.armed) {
    o.u64(config.fail_call);
  } else {
    o.raw("null");
  }
  o.raw(",");
  o.key("kinds");
  o.str(config.kinds_text);
  o.raw(",");
  o.key("window_open");
  o.raw(window_open.load() ? "true" : "false");
  o.raw(",");
  o.key("counted_calls");
  o.u64(counted_calls.load());
  o.raw(",");
  o.key("injected");
  o.raw("[");
  for (int i = 0; i < n_inj; ++i) {
    if (i > 0) o.raw(",");
    o.raw("{");
    o.key("call");
    o.u64(inj[i].call);
    o.raw(",");
    o.key("function");
    o.str(fns[inj[i].fn].name);
    o.raw(",");
    o.key("error");
    o.u64(static_cast<std::uint64_t>(inj[i].error));
    o.raw("}");
  }
  o.raw("],");
  o.key("functions");
  o.raw("{");
  bool first = true;
  for (int i = 0; i < fn_count; ++i) {
    const std::uint64_t calls = stats[i].calls.load();
    if (calls == 0) continue;
    if (!first) o.raw(",");
    first = false;
    o.key(fns[i].name);
    o.raw("{");
    o.key("calls");
    o.u64(calls);
    o.raw(",");
    o.key("failed");
    o.u64(stats[i].failed.load());
    o.raw(",");
    o.key("errors");
    o.u64(stats[i].errors.load());
    o.raw("}");
  }
  o.raw("},");
  const char* const sections[] = {"created", "released"};
  for (const char* which : sections) {
    o.key(which);
    o.raw("{");
    for (int r = 0; r < resource_count; ++r) {
      if (r > 0) o.raw(",");
      o.key(resource_created_key[r]);
      o.u64(which[0] == 'c' ? t.created[r] : t.released[r]);
    }
    o.raw("},");
  }
  o.key("outstanding");
  o.raw("{");
  o.key("physical_handles");
  o.i64(t.live[r_physical_handle]);
  o.raw(",");
  o.key("reservations");
  o.i64(t.live[r_reservation]);
  o.raw(",");
  o.key("mapped_bytes");
  o.i64(t.live_bytes[r_mapping]);
  o.raw(",");
  o.key("device_allocations");
  o.i64(t.live[r_device]);
  o.raw(",");
  o.key("device_bytes");
  o.i64(t.live_bytes[r_device]);
  o.raw(",");
  o.key("pinned_allocations");
  o.i64(t.live[r_pinned]);
  o.raw(",");
  o.key("pinned_bytes");
  o.i64(t.live_bytes[r_pinned]);
  o.raw("},");
  o.key("untracked");
  o.raw("{");
  o.key("releases");
  o.u64(t.untracked_releases);
  o.raw(",");
  o.key("table_full");
  o.u64(t.table_full);
  o.raw("}}\n");
  return o.size();
}

/// Writes the report of the counted process. At exit a process that never decided writes nothing:
/// it made no counted call, and a launcher exiting after its program must not overwrite the
/// program's report.
int write_report(const char* reason, bool decide) noexcept {
  ensure_init();
  if (config.report_path[0] == '\0') return ENOENT;
  if (decide ? !claim() : !owns()) return EPERM;
  locked hold(report_lock);
  const std::size_t size = format_report(reason);
  const int fd = open(config.report_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int result = 0;
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = write(fd, report_text + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      result = errno;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (close(fd) != 0 && result == 0) result = errno;
  return result;
}

// ---- one call ----------------------------------------------------------------------------------

// Calls nested in a counted call on the same thread (the runtime's cudaMalloc calling the driver's
// cuMemAlloc) are passed through: the outer call is the one the code under test made.
// initial-exec: static TLS, no __tls_get_addr (which may allocate) on first use.
[[gnu::tls_model("initial-exec")]] thread_local int call_depth = 0;

constexpr int error_out_of_memory = 2;  // CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation
constexpr int error_unknown = 999;      // CUDA_ERROR_UNKNOWN, cudaErrorUnknown

class counted_call {
 public:
  /// `noop` marks a call that does nothing (freeing a null pointer): passed through uncounted.
  explicit counted_call(fn_id id, bool noop = false) noexcept : id_(id) {
    ensure_init();
    const bool outer = call_depth++ == 0;
    tracked_ = outer && !noop && window_open.load(std::memory_order_acquire) && claim();
    if (tracked_) stats[id_].calls.fetch_add(1, std::memory_order_relaxed);
  }
  ~counted_call() { --call_depth; }
  counted_call(const counted_call&) = delete;
  counted_call& operator=(const counted_call&) = delete;

  [[nodiscard]] bool tracked() const noexcept { return tracked_; }

  /// Numbers the call when its kind is selected; returns the error to fail it with when it is the
  /// armed one (and records the injection), 0 otherwise.
  int inject() noexcept {
    if (!tracked_ || (config.kinds & (1u << id_)) == 0) return 0;
    const std::uint64_t n = counted_calls.fetch_add(1, std::memory_order_acq_rel);
    if (!config.armed || n != config.fail_call) return 0;
    const int error = fns[id_].acquire ? error_out_of_memory : error_unknown;
    stats[id_].failed.fetch_add(1);
    failures.fetch_add(1);
    {
      locked hold(ledger_lock);
      if (injection_count < max_injections) injections[injection_count++] = {n, id_, error};
    }
    // Now, not only at exit: the code under test may crash or _exit() on the failure.
    write_report("injected", false);
    return error;
  }

  void finish(bool ok) noexcept {
    if (tracked_ && !ok) stats[id_].errors.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  fn_id id_;
  bool tracked_ = false;
};

std::uint64_t as_key(const void* p) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

// ---- finding the real functions ----------------------------------------------------------------

using dlsym_fn = void* (*)(void*, const char*);

void* dlsym_unavailable(void* /*handle*/, const char* /*name*/) { return nullptr; }

}  // namespace

// The pointer the dlsym trampoline jumps to, and the functions it calls (hidden, unmangled: the
// assembly names them).
extern "C" {
__attribute__((visibility("hidden"))) void* okit_interpose_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* okit_interpose_resolve_dlsym() noexcept;
__attribute__((visibility("hidden"))) void* okit_interpose_dlsym_lookup(void* handle,
                                                                        const char* name) noexcept;
}

void* okit_interpose_resolve_dlsym() noexcept {
  void* p = __atomic_load_n(&okit_interpose_real_dlsym, __ATOMIC_ACQUIRE);
  if (p != nullptr) return p;
  // The default version first, then the older ones of x86-64 and aarch64.
  const char* const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* v : versions) {
    p = dlvsym(RTLD_NEXT, "dlsym", v);
    if (p != nullptr) break;
  }
  if (p == nullptr) {
    say("glibc's dlsym was not found (dlvsym(RTLD_NEXT, \"dlsym\")); every dlsym() fails");
    p = reinterpret_cast<void*>(&dlsym_unavailable);
  }
  __atomic_store_n(&okit_interpose_real_dlsym, p, __ATOMIC_RELEASE);
  return p;
}

namespace {

dlsym_fn real_dlsym() noexcept {
  return reinterpret_cast<dlsym_fn>(okit_interpose_resolve_dlsym());
}

std::atomic<void*> real_fns[fn_count];
std::atomic<void*> real_get_proc_v1{nullptr};
std::atomic<void*> real_get_proc_v2{nullptr};
std::atomic<void*> driver_handle{nullptr};

void* cuda_driver() noexcept {
  void* h = driver_handle.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  // By soname, which also finds a driver loaded from an absolute path; load it if nothing has.
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) driver_handle.store(h, std::memory_order_release);
  return h;
}

const char* base_name(const char* path) noexcept {
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

bool starts_with(const char* s, const char* prefix) noexcept {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

struct runtime_search {
  char path[4096];
};

int find_runtime(dl_phdr_info* info, std::size_t /*size*/, void* data) noexcept {
  auto* search = static_cast<runtime_search*>(data);
  if (info->dlpi_name == nullptr || !starts_with(base_name(info->dlpi_name), "libcudart.so")) {
    return 0;
  }
  copy_text(search->path, sizeof search->path, info->dlpi_name);
  return 1;
}

void* cuda_runtime_symbol(const char* symbol) noexcept {
  void* p = real_dlsym()(RTLD_NEXT, symbol);
  if (p != nullptr) return p;
  // A shared runtime loaded with RTLD_LOCAL (as Python loads extension modules) is not in the
  // global scope: find it among the loaded objects.
  runtime_search search{};
  dl_iterate_phdr(find_runtime, &search);
  if (search.path[0] == '\0') return nullptr;
  void* h = dlopen(search.path, RTLD_NOW | RTLD_NOLOAD);
  return h != nullptr ? real_dlsym()(h, symbol) : nullptr;
}

// Whether `p` is defined in a library whose file name starts with `prefix`: only the CUDA
// libraries' own functions are replaced, never a same-named function of some other library.
bool defined_in(const void* p, const char* prefix) noexcept {
  Dl_info info{};
  if (dladdr(p, &info) == 0 || info.dli_fname == nullptr) return false;
  return starts_with(base_name(info.dli_fname), prefix);
}

void* wrapper_of(int id) noexcept;

void* resolve(int id) noexcept {
  const fn_info& f = fns[id];
  void* p = nullptr;
  if (f.runtime) {
    p = cuda_runtime_symbol(f.symbol);
  } else if (void* h = cuda_driver(); h != nullptr) {
    p = real_dlsym()(h, f.symbol);
  }
  return p == wrapper_of(id) ? nullptr : p;
}

template <class Fn>
Fn real_of(fn_id id) noexcept {
  void* p = real_fns[id].load(std::memory_order_acquire);
  if (p == nullptr) {
    p = resolve(id);
    if (p == nullptr) return nullptr;
    void* expected = nullptr;
    if (!real_fns[id].compare_exchange_strong(expected, p)) p = expected;
  }
  return reinterpret_cast<Fn>(p);
}

// The wrapper to hand out for `found`, the real function `id` names: the first instance seen is
// the one wrapped; a second instance (a second copy of a runtime) is handed out unwrapped.
void* substitute(int id, void* found) noexcept {
  void* wrapper = wrapper_of(id);
  if (found == nullptr || found == wrapper) return found;
  void* expected = nullptr;
  if (real_fns[id].compare_exchange_strong(expected, found) || expected == found) return wrapper;
  return found;
}

// ---- delays on the code's own asynchronous work -----------------------------------------------

// The stream-ordered calls that get a delay in front of them while delays are armed: the driver's
// asynchronous copies, fills and launches (each also as the _ptsz variant cuGetProcAddress hands
// out for per-thread default-stream code) and the runtime's, where bound by name.
enum delayed_id : int {
  d_memcpy_async,
  d_memcpy_async_ptsz,
  d_memcpy_htod_async,
  d_memcpy_htod_async_ptsz,
  d_memcpy_dtoh_async,
  d_memcpy_dtoh_async_ptsz,
  d_memcpy_dtod_async,
  d_memcpy_dtod_async_ptsz,
  d_memset_d8_async,
  d_memset_d8_async_ptsz,
  d_memset_d32_async,
  d_memset_d32_async_ptsz,
  d_launch_kernel,
  d_launch_kernel_ptsz,
  d_launch_kernel_ex,
  d_launch_kernel_ex_ptsz,
  d_cuda_memcpy_async,
  d_cuda_launch_kernel,
  delayed_count
};

struct delayed_info {
  const char* name;    ///< the name cuGetProcAddress takes
  const char* symbol;  ///< the exported symbol
  int since;           ///< the cuGetProcAddress version from which `name` has this ABI
  bool ptsz;           ///< the per-thread default-stream variant
  bool runtime;        ///< a runtime (libcudart) function
};

constexpr delayed_info delayed_fns[delayed_count] = {
    {"cuMemcpyAsync", "cuMemcpyAsync", 4000, false, false},
    {"cuMemcpyAsync", "cuMemcpyAsync_ptsz", 7000, true, false},
    {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", 3020, false, false},
    {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2_ptsz", 7000, true, false},
    {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", 3020, false, false},
    {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2_ptsz", 7000, true, false},
    {"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", 3020, false, false},
    {"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2_ptsz", 7000, true, false},
    {"cuMemsetD8Async", "cuMemsetD8Async", 3020, false, false},
    {"cuMemsetD8Async", "cuMemsetD8Async_ptsz", 7000, true, false},
    {"cuMemsetD32Async", "cuMemsetD32Async", 3020, false, false},
    {"cuMemsetD32Async", "cuMemsetD32Async_ptsz", 7000, true, false},
    {"cuLaunchKernel", "cuLaunchKernel", 4000, false, false},
    {"cuLaunchKernel", "cuLaunchKernel_ptsz", 7000, true, false},
    {"cuLaunchKernelEx", "cuLaunchKernelEx", 11060, false, false},
    {"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", 11060, true, false},
    {"cudaMemcpyAsync", "cudaMemcpyAsync", 0, false, true},
    {"cudaLaunchKernel", "cudaLaunchKernel", 0, false, true},
};

std::atomic<void*> real_delayed[delayed_count];
std::atomic<void*> real_launch_host_func{nullptr};
std::atomic<void*> real_is_capturing{nullptr};

void* wrapper_of_delayed(int id) noexcept;

void* resolve_delayed(int id) noexcept {
  const delayed_info& d = delayed_fns[id];
  void* p = nullptr;
  if (d.runtime) {
    p = cuda_runtime_symbol(d.symbol);
  } else if (void* h = cuda_driver(); h != nullptr) {
    p = real_dlsym()(h, d.symbol);
  }
  return p == wrapper_of_delayed(id) ? nullptr : p;
}

template <class Fn>
Fn real_delayed_of(delayed_id id) noexcept {
  void* p = real_delayed[id].load(std::memory_order_acquire);
  if (p == nullptr) {
    p = resolve_delayed(id);
    if (p == nullptr) return nullptr;
    void* expected = nullptr;
    if (!real_delayed[id].compare_exchange_strong(expected, p)) p = expected;
  }
  return reinterpret_cast<Fn>(p);
}

void* driver_function(std::atomic<void*>& slot, const char* symbol) noexcept {
  void* p = slot.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  void* h = cuda_driver();
  if (h == nullptr) return nullptr;
  p = real_dlsym()(h, symbol);
  if (p != nullptr) slot.store(p, std::memory_order_release);
  return p;
}

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The host function a delay enqueues: userData is the duration in microseconds, not a pointer, so
// that nothing is allocated.
void CUDA_CB sleep_for(void* user_data) {
  const auto us = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user_data));
  timespec left{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// A delayed call nested in another on the same thread (the runtime's cudaMemcpyAsync reaching the
// driver's) gets no second delay.
[[gnu::tls_model("initial-exec")]] thread_local int delay_depth = 0;

/// Enqueues the delay in front of the call it scopes when delays are armed and the stream is an
/// explicit one that is not capturing (a user's graph stays as captured; the legacy and
/// per-thread default streams are left alone: a delay there would hold back every blocking
/// stream).
class delayed_call {
 public:
  explicit delayed_call(CUstream stream) noexcept {
    if (delay_depth++ != 0) return;
    const std::uint32_t max = delay_max_us.load(std::memory_order_acquire);
    if (max == 0 || stream == nullptr || stream == CU_STREAM_LEGACY ||
        stream == CU_STREAM_PER_THREAD) {
      return;
    }
    const auto capturing = reinterpret_cast<PFN_cuStreamIsCapturing_v10000>(
        driver_function(real_is_capturing, "cuStreamIsCapturing"));
    const auto host_func = reinterpret_cast<PFN_cuLaunchHostFunc_v10000>(
        driver_function(real_launch_host_func, "cuLaunchHostFunc"));
    if (capturing == nullptr || host_func == nullptr) return;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (capturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE) {
      return;
    }
    const std::uint64_t n = delay_sequence.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t us = mix(delay_seed.load(std::memory_order_relaxed) ^ mix(n)) % (max + 1);
    if (us == 0) return;
    // userData carries the duration itself, not a pointer to it.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    void* duration = reinterpret_cast<void*>(static_cast<std::uintptr_t>(us));
    if (host_func(stream, &sleep_for, duration) == CUDA_SUCCESS) {
      delays_added.fetch_add(1, std::memory_order_relaxed);
    }
  }
  ~delayed_call() { --delay_depth; }
  delayed_call(const delayed_call&) = delete;
  delayed_call& operator=(const delayed_call&) = delete;
};

// The wrapper to hand out for `found`, the real function `id` names (as substitute() does).
void* substitute_delayed(int id, void* found) noexcept {
  void* wrapper = wrapper_of_delayed(id);
  if (found == nullptr || found == wrapper) return found;
  void* expected = nullptr;
  if (real_delayed[id].compare_exchange_strong(expected, found) || expected == found) {
    return wrapper;
  }
  return found;
}

void* substitute_get_proc(int abi, void* found) noexcept;

// cuGetProcAddress names a function by its base name and the CUDA version whose ABI the caller
// expects: "cuMemAlloc" at 3020 and later is cuMemAlloc_v2.
// With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in `flags` a stream-ordered function is its
// _ptsz variant.
void* substitute_proc(const char* symbol, int version, cuuint64_t flags, void* found) noexcept {
  if (symbol == nullptr || found == nullptr || symbol[0] != 'c' || symbol[1] != 'u') return found;
  if (same(symbol, "cuGetProcAddress")) {
    return substitute_get_proc(version >= 12000 ? 2 : 1, found);
  }
  for (int i = 0; i < fn_count; ++i) {
    if (!fns[i].runtime && version >= fns[i].since && same(symbol, fns[i].name)) {
      return substitute(i, found);
    }
  }
  const bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (int i = 0; i < delayed_count; ++i) {
    const delayed_info& d = delayed_fns[i];
    if (!d.runtime && d.ptsz == ptsz && version >= d.since && same(symbol, d.name)) {
      return substitute_delayed(i, found);
    }
  }
  return found;
}

}  // namespace

// ---- the exported functions --------------------------------------------------------------------

OKIT_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  ensure_init();
  void* real = real_get_proc_v2.load(std::memory_order_acquire);
  if (real == nullptr) {
    if (void* h = cuda_driver(); h != nullptr) real = real_dlsym()(h, "cuGetProcAddress_v2");
    if (real == nullptr || real == reinterpret_cast<void*>(&cuGetProcAddress_v2)) {
      return CUDA_ERROR_NOT_INITIALIZED;
    }
    real_get_proc_v2.store(real, std::memory_order_release);
  }
  const CUresult r =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(real)(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = substitute_proc(symbol, version, flags, *pfn);
  return r;
}

// The driver's exported name (cuda.h defines it to cuGetProcAddress_v2, undefined above).
// NOLINTNEXTLINE(readability-identifier-naming)
OKIT_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  ensure_init();
  void* real = real_get_proc_v1.load(std::memory_order_acquire);
  if (real == nullptr) {
    if (void* h = cuda_driver(); h != nullptr) real = real_dlsym()(h, "cuGetProcAddress");
    if (real == nullptr || real == reinterpret_cast<void*>(&cuGetProcAddress)) {
      return CUDA_ERROR_NOT_INITIALIZED;
    }
    real_get_proc_v1.store(real, std::memory_order_release);
  }
  const CUresult r =
      reinterpret_cast<PFN_cuGetProcAddress_v11030>(real)(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = substitute_proc(symbol, version, flags, *pfn);
  return r;
}

namespace {

void* substitute_get_proc(int abi, void* found) noexcept {
  void* wrapper = abi == 2 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                           : reinterpret_cast<void*>(&cuGetProcAddress);
  if (found == nullptr || found == wrapper) return found;
  std::atomic<void*>& slot = abi == 2 ? real_get_proc_v2 : real_get_proc_v1;
  void* expected = nullptr;
  if (slot.compare_exchange_strong(expected, found) || expected == found) return wrapper;
  return found;
}

}  // namespace

OKIT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  const auto real = real_of<PFN_cuMemAlloc_v3020>(f_cu_mem_alloc);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_alloc);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(dptr, bytes);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS && dptr != nullptr) ledger_add(r_device, *dptr, bytes);
  return r;
}

OKIT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  const auto real = real_of<PFN_cuMemFree_v3020>(f_cu_mem_free);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_free, dptr == 0);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(dptr);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_device, dptr);
  return r;
}

OKIT_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  const auto real = real_of<PFN_cuMemAllocHost_v3020>(f_cu_mem_alloc_host);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_alloc_host);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(pp, bytes);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS && pp != nullptr)
    ledger_add(r_pinned, as_key(*pp), bytes);
  return r;
}

OKIT_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  const auto real = real_of<PFN_cuMemHostAlloc_v2020>(f_cu_mem_host_alloc);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_host_alloc);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(pp, bytes, flags);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS && pp != nullptr)
    ledger_add(r_pinned, as_key(*pp), bytes);
  return r;
}

OKIT_EXPORT CUresult cuMemFreeHost(void* p) {
  const auto real = real_of<PFN_cuMemFreeHost_v2000>(f_cu_mem_free_host);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_free_host, p == nullptr);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(p);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_pinned, as_key(p));
  return r;
}

OKIT_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags) {
  const auto real = real_of<PFN_cuMemAddressReserve_v10020>(f_cu_mem_address_reserve);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_address_reserve);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(ptr, size, alignment, addr, flags);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS && ptr != nullptr) ledger_add(r_reservation, *ptr, size);
  return r;
}

OKIT_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const auto real = real_of<PFN_cuMemAddressFree_v10020>(f_cu_mem_address_free);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_address_free);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(ptr, size);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_reservation, ptr);
  return r;
}

OKIT_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  const auto real = real_of<PFN_cuMemCreate_v10020>(f_cu_mem_create);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_create);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(handle, size, prop, flags);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS && handle != nullptr) {
    ledger_add(r_physical_handle, *handle, size);
  }
  return r;
}

OKIT_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const auto real = real_of<PFN_cuMemRelease_v10020>(f_cu_mem_release);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_release);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(handle);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_remove(r_physical_handle, handle);
  return r;
}

OKIT_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const auto real = real_of<PFN_cuMemMap_v10020>(f_cu_mem_map);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_map);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(ptr, size, offset, handle, flags);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_add(r_mapping, ptr, size);
  return r;
}

OKIT_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const auto real = real_of<PFN_cuMemUnmap_v10020>(f_cu_mem_unmap);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_unmap);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(ptr, size);
  call.finish(r == CUDA_SUCCESS);
  if (call.tracked() && r == CUDA_SUCCESS) ledger_remove_range(r_mapping, ptr, size);
  return r;
}

OKIT_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                    size_t count) {
  const auto real = real_of<PFN_cuMemSetAccess_v10020>(f_cu_mem_set_access);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  counted_call call(f_cu_mem_set_access);
  if (const int e = call.inject()) return static_cast<CUresult>(e);
  const CUresult r = real(ptr, size, desc, count);
  call.finish(r == CUDA_SUCCESS);
  return r;
}

namespace {
using cuda_malloc_fn = cudaError_t (*)(void**, size_t);
using cuda_free_fn = cudaError_t (*)(void*);
using cuda_host_alloc_fn = cudaError_t (*)(void**, size_t, unsigned int);
}  // namespace

// The runtime wrappers keep cuda_runtime_api.h's parameter names.
OKIT_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  const auto real = real_of<cuda_malloc_fn>(f_cuda_malloc);
  if (real == nullptr) return cudaErrorInitializationError;
  counted_call call(f_cuda_malloc);
  if (const int e = call.inject()) return static_cast<cudaError_t>(e);
  const cudaError_t r = real(devPtr, size);
  call.finish(r == cudaSuccess);
  if (call.tracked() && r == cudaSuccess && devPtr != nullptr) {
    ledger_add(r_device, as_key(*devPtr), size);
  }
  return r;
}

OKIT_EXPORT cudaError_t cudaFree(void* devPtr) {
  const auto real = real_of<cuda_free_fn>(f_cuda_free);
  if (real == nullptr) return cudaErrorInitializationError;
  // cudaFree(nullptr) initializes the runtime and frees nothing.
  counted_call call(f_cuda_free, devPtr == nullptr);
  if (const int e = call.inject()) return static_cast<cudaError_t>(e);
  const cudaError_t r = real(devPtr);
  call.finish(r == cudaSuccess);
  if (call.tracked() && r == cudaSuccess) ledger_remove(r_device, as_key(devPtr));
  return r;
}

OKIT_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  const auto real = real_of<cuda_host_alloc_fn>(f_cuda_host_alloc);
  if (real == nullptr) return cudaErrorInitializationError;
  counted_call call(f_cuda_host_alloc);
  if (const int e = call.inject()) return static_cast<cudaError_t>(e);
  const cudaError_t r = real(pHost, size, flags);
  call.finish(r == cudaSuccess);
  if (call.tracked() && r == cudaSuccess && pHost != nullptr) {
    ledger_add(r_pinned, as_key(*pHost), size);
  }
  return r;
}

OKIT_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  const auto real = real_of<cuda_malloc_fn>(f_cuda_malloc_host);
  if (real == nullptr) return cudaErrorInitializationError;
  counted_call call(f_cuda_malloc_host);
  if (const int e = call.inject()) return static_cast<cudaError_t>(e);
  const cudaError_t r = real(ptr, size);
  call.finish(r == cudaSuccess);
  if (call.tracked() && r == cudaSuccess && ptr != nullptr) {
    ledger_add(r_pinned, as_key(*ptr), size);
  }
  return r;
}

OKIT_EXPORT cudaError_t cudaFreeHost(void* p) {
  const auto real = real_of<cuda_free_fn>(f_cuda_free_host);
  if (real == nullptr) return cudaErrorInitializationError;
  counted_call call(f_cuda_free_host, p == nullptr);
  if (const int e = call.inject()) return static_cast<cudaError_t>(e);
  const cudaError_t r = real(p);
  call.finish(r == cudaSuccess);
  if (call.tracked() && r == cudaSuccess) ledger_remove(r_pinned, as_key(p));
  return r;
}

// ---- the delayed calls: a delay in front, then the call, unchanged ----------------------------

// The parameters keep cuda.h's names.
#define OKIT_DELAYED_COPY(symbol, id, pfn, dst_t, dst, src_t, src, count)             \
  OKIT_EXPORT CUresult symbol(dst_t dst, src_t src, size_t count, CUstream hStream) { \
    const auto real = real_delayed_of<pfn>(id);                                       \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                           \
    const delayed_call delay(hStream);                                                \
    return real(dst, src, count, hStream);                                            \
  }

OKIT_DELAYED_COPY(cuMemcpyAsync, d_memcpy_async, PFN_cuMemcpyAsync_v4000, CUdeviceptr, dst,
                  CUdeviceptr, src, ByteCount)
OKIT_DELAYED_COPY(cuMemcpyAsync_ptsz, d_memcpy_async_ptsz, PFN_cuMemcpyAsync_v7000_ptsz,
                  CUdeviceptr, dst, CUdeviceptr, src, ByteCount)
OKIT_DELAYED_COPY(cuMemcpyHtoDAsync_v2, d_memcpy_htod_async, PFN_cuMemcpyHtoDAsync_v3020,
                  CUdeviceptr, dstDevice, const void*, srcHost, ByteCount)
OKIT_DELAYED_COPY(cuMemcpyHtoDAsync_v2_ptsz, d_memcpy_htod_async_ptsz,
                  PFN_cuMemcpyHtoDAsync_v7000_ptsz, CUdeviceptr, dstDevice, const void*, srcHost,
                  ByteCount)
OKIT_DELAYED_COPY(cuMemcpyDtoHAsync_v2, d_memcpy_dtoh_async, PFN_cuMemcpyDtoHAsync_v3020, void*,
                  dstHost, CUdeviceptr, srcDevice, ByteCount)
OKIT_DELAYED_COPY(cuMemcpyDtoHAsync_v2_ptsz, d_memcpy_dtoh_async_ptsz,
                  PFN_cuMemcpyDtoHAsync_v7000_ptsz, void*, dstHost, CUdeviceptr, srcDevice,
                  ByteCount)
OKIT_DELAYED_COPY(cuMemcpyDtoDAsync_v2, d_memcpy_dtod_async, PFN_cuMemcpyDtoDAsync_v3020,
                  CUdeviceptr, dstDevice, CUdeviceptr, srcDevice, ByteCount)
OKIT_DELAYED_COPY(cuMemcpyDtoDAsync_v2_ptsz, d_memcpy_dtod_async_ptsz,
                  PFN_cuMemcpyDtoDAsync_v7000_ptsz, CUdeviceptr, dstDevice, CUdeviceptr, srcDevice,
                  ByteCount)
OKIT_DELAYED_COPY(cuMemsetD8Async, d_memset_d8_async, PFN_cuMemsetD8Async_v3020, CUdeviceptr,
                  dstDevice, unsigned char, uc, N)
OKIT_DELAYED_COPY(cuMemsetD8Async_ptsz, d_memset_d8_async_ptsz, PFN_cuMemsetD8Async_v7000_ptsz,
                  CUdeviceptr, dstDevice, unsigned char, uc, N)
OKIT_DELAYED_COPY(cuMemsetD32Async, d_memset_d32_async, PFN_cuMemsetD32Async_v3020, CUdeviceptr,
                  dstDevice, unsigned int, ui, N)
OKIT_DELAYED_COPY(cuMemsetD32Async_ptsz, d_memset_d32_async_ptsz, PFN_cuMemsetD32Async_v7000_ptsz,
                  CUdeviceptr, dstDevice, unsigned int, ui, N)
#undef OKIT_DELAYED_COPY

#define OKIT_DELAYED_LAUNCH(symbol, id, pfn)                                                      \
  OKIT_EXPORT CUresult symbol(                                                                    \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
      unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
      unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {         \
    const auto real = real_delayed_of<pfn>(id);                                                   \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                       \
    const delayed_call delay(hStream);                                                            \
    return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, \
                hStream, kernelParams, extra);                                                    \
  }

OKIT_DELAYED_LAUNCH(cuLaunchKernel, d_launch_kernel, PFN_cuLaunchKernel_v4000)
OKIT_DELAYED_LAUNCH(cuLaunchKernel_ptsz, d_launch_kernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)
#undef OKIT_DELAYED_LAUNCH

#define OKIT_DELAYED_LAUNCH_EX(symbol, id, pfn)                                          \
  OKIT_EXPORT CUresult symbol(const CUlaunchConfig* config, CUfunction f, void** params, \
                              void** extra) {                                            \
    const auto real = real_delayed_of<pfn>(id);                                          \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                              \
    const delayed_call delay(config != nullptr ? config->hStream : nullptr);             \
    return real(config, f, params, extra);                                               \
  }

OKIT_DELAYED_LAUNCH_EX(cuLaunchKernelEx, d_launch_kernel_ex, PFN_cuLaunchKernelEx_v11060)
OKIT_DELAYED_LAUNCH_EX(cuLaunchKernelEx_ptsz, d_launch_kernel_ex_ptsz,
                       PFN_cuLaunchKernelEx_v11060_ptsz)
#undef OKIT_DELAYED_LAUNCH_EX

namespace {
using cuda_memcpy_async_fn = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind,
                                             cudaStream_t);
using cuda_launch_kernel_fn = cudaError_t (*)(const void*, dim3, dim3, void**, size_t,
                                              cudaStream_t);
}  // namespace

OKIT_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                        cudaMemcpyKind kind, cudaStream_t stream) {
  const auto real = real_delayed_of<cuda_memcpy_async_fn>(d_cuda_memcpy_async);
  if (real == nullptr) return cudaErrorInitializationError;
  const delayed_call delay(stream);
  return real(dst, src, count, kind, stream);
}

OKIT_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                         size_t sharedMem, cudaStream_t stream) {
  const auto real = real_delayed_of<cuda_launch_kernel_fn>(d_cuda_launch_kernel);
  if (real == nullptr) return cudaErrorInitializationError;
  const delayed_call delay(stream);
  return real(func, gridDim, blockDim, args, sharedMem, stream);
}

namespace {

void* wrapper_of_delayed(int id) noexcept {
  switch (id) {
    case d_memcpy_async:
      return reinterpret_cast<void*>(&cuMemcpyAsync);
    case d_memcpy_async_ptsz:
      return reinterpret_cast<void*>(&cuMemcpyAsync_ptsz);
    case d_memcpy_htod_async:
      return reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2);
    case d_memcpy_htod_async_ptsz:
      return reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2_ptsz);
    case d_memcpy_dtoh_async:
      return reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2);
    case d_memcpy_dtoh_async_ptsz:
      return reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2_ptsz);
    case d_memcpy_dtod_async:
      return reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2);
    case d_memcpy_dtod_async_ptsz:
      return reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2_ptsz);
    case d_memset_d8_async:
      return reinterpret_cast<void*>(&cuMemsetD8Async);
    case d_memset_d8_async_ptsz:
      return reinterpret_cast<void*>(&cuMemsetD8Async_ptsz);
    case d_memset_d32_async:
      return reinterpret_cast<void*>(&cuMemsetD32Async);
    case d_memset_d32_async_ptsz:
      return reinterpret_cast<void*>(&cuMemsetD32Async_ptsz);
    case d_launch_kernel:
      return reinterpret_cast<void*>(&cuLaunchKernel);
    case d_launch_kernel_ptsz:
      return reinterpret_cast<void*>(&cuLaunchKernel_ptsz);
    case d_launch_kernel_ex:
      return reinterpret_cast<void*>(&cuLaunchKernelEx);
    case d_launch_kernel_ex_ptsz:
      return reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz);
    case d_cuda_memcpy_async:
      return reinterpret_cast<void*>(&cudaMemcpyAsync);
    case d_cuda_launch_kernel:
      return reinterpret_cast<void*>(&cudaLaunchKernel);
    default:
      return nullptr;
  }
}

}  // namespace

namespace {

void* wrapper_of(int id) noexcept {
  switch (id) {
    case f_cu_mem_alloc:
      return reinterpret_cast<void*>(&cuMemAlloc_v2);
    case f_cu_mem_free:
      return reinterpret_cast<void*>(&cuMemFree_v2);
    case f_cu_mem_alloc_host:
      return reinterpret_cast<void*>(&cuMemAllocHost_v2);
    case f_cu_mem_host_alloc:
      return reinterpret_cast<void*>(&cuMemHostAlloc);
    case f_cu_mem_free_host:
      return reinterpret_cast<void*>(&cuMemFreeHost);
    case f_cu_mem_address_reserve:
      return reinterpret_cast<void*>(&cuMemAddressReserve);
    case f_cu_mem_address_free:
      return reinterpret_cast<void*>(&cuMemAddressFree);
    case f_cu_mem_create:
      return reinterpret_cast<void*>(&cuMemCreate);
    case f_cu_mem_release:
      return reinterpret_cast<void*>(&cuMemRelease);
    case f_cu_mem_map:
      return reinterpret_cast<void*>(&cuMemMap);
    case f_cu_mem_unmap:
      return reinterpret_cast<void*>(&cuMemUnmap);
    case f_cu_mem_set_access:
      return reinterpret_cast<void*>(&cuMemSetAccess);
    case f_cuda_malloc:
      return reinterpret_cast<void*>(&cudaMalloc);
    case f_cuda_free:
      return reinterpret_cast<void*>(&cudaFree);
    case f_cuda_host_alloc:
      return reinterpret_cast<void*>(&cudaHostAlloc);
    case f_cuda_malloc_host:
      return reinterpret_cast<void*>(&cudaMallocHost);
    case f_cuda_free_host:
      return reinterpret_cast<void*>(&cudaFreeHost);
    default:
      return nullptr;
  }
}

}  // namespace

// A lookup on an explicit handle (the trampoline below sends RTLD_NEXT and RTLD_DEFAULT straight
// to glibc). Explicit handles do not depend on the caller, so calling glibc from here is exact.
void* okit_interpose_dlsym_lookup(void* handle, const char* name) noexcept {
  void* found = real_dlsym()(handle, name);
  if (found == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return found;
  if (same(name, "cuGetProcAddress_v2") || same(name, "cuGetProcAddress")) {
    if (!defined_in(found, "libcuda.so")) return found;
    return substitute_get_proc(same(name, "cuGetProcAddress_v2") ? 2 : 1, found);
  }
  for (int i = 0; i < fn_count; ++i) {
    if (!same(name, fns[i].symbol)) continue;
    if (!defined_in(found, fns[i].runtime ? "libcudart.so" : "libcuda.so")) return found;
    return substitute(i, found);
  }
  for (int i = 0; i < delayed_count; ++i) {
    if (!same(name, delayed_fns[i].symbol)) continue;
    if (!defined_in(found, delayed_fns[i].runtime ? "libcudart.so" : "libcuda.so")) return found;
    return substitute_delayed(i, found);
  }
  return found;
}

// dlsym itself. RTLD_DEFAULT (0) and RTLD_NEXT (-1) jump to glibc's dlsym with the caller's return
// address still on the stack, since glibc resolves both relative to the caller; explicit handles
// go to okit_interpose_dlsym_lookup. An unversioned definition satisfies the versioned references
// (dlsym@GLIBC_2.34, dlsym@GLIBC_2.2.5) that programs and libraries carry.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
)"
#if defined(__CET__)
    "  endbr64\n"
#endif
    R"(
  testq %rdi, %rdi
  je 2f
  cmpq $-1, %rdi
  jne okit_interpose_dlsym_lookup
2:
  movq okit_interpose_real_dlsym(%rip), %rax
  testq %rax, %rax
  je 1f
  jmp *%rax
1:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call okit_interpose_resolve_dlsym
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  jmp *%rax
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
OKIT_EXPORT void* dlsym(void* __restrict handle, const char* __restrict name) __THROW {
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    // A tail call where the compiler makes it one: see the note at the top of this file.
    return real_dlsym()(handle, name);
  }
  return okit_interpose_dlsym_lookup(handle, name);
}
#endif

// ---- control -----------------------------------------------------------------------------------

OKIT_EXPORT int okit_interpose_set_window(int open) {
  ensure_init();
  return window_open.exchange(open != 0, std::memory_order_acq_rel) ? 1 : 0;
}

OKIT_EXPORT int okit_interpose_write_report(void) { return write_report("requested", true); }

OKIT_EXPORT uint64_t okit_interpose_failures(void) { return failures.load(); }

OKIT_EXPORT int okit_interpose_counts(okit_interpose_counts_t* out) {
  if (out == nullptr || out->struct_size < sizeof out->struct_size) return EINVAL;
  ensure_init();
  okit_interpose_counts_t c{};
  c.struct_size = sizeof c;
  {
    locked hold(ledger_lock);
    c.device_allocations = totals.created[r_device];
    c.pinned_allocations = totals.created[r_pinned];
    c.physical_handles = totals.created[r_physical_handle];
    c.reservations = totals.created[r_reservation];
    c.mappings = totals.created[r_mapping];
    c.outstanding_device_allocations = totals.live[r_device];
    c.outstanding_device_bytes = totals.live_bytes[r_device];
    c.outstanding_pinned_allocations = totals.live[r_pinned];
    c.outstanding_pinned_bytes = totals.live_bytes[r_pinned];
    c.outstanding_physical_handles = totals.live[r_physical_handle];
    c.outstanding_reservations = totals.live[r_reservation];
    c.outstanding_mapped_bytes = totals.live_bytes[r_mapping];
  }
  c.delays = delays_added.load();
  c.counting = window_open.load(std::memory_order_acquire) && claim() ? 1 : 0;
  const std::size_t n =
      out->struct_size < sizeof c ? static_cast<std::size_t>(out->struct_size) : sizeof c;
  c.struct_size = n;
  memcpy(out, &c, n);
  return 0;
}

OKIT_EXPORT uint32_t okit_interpose_set_delays(uint64_t seed, uint32_t max_us) {
  ensure_init();
  delay_seed.store(seed, std::memory_order_relaxed);
  delay_sequence.store(0, std::memory_order_relaxed);
  const std::uint32_t max = max_us < delay_limit_us ? max_us : delay_limit_us;
  return delay_max_us.exchange(max, std::memory_order_acq_rel);
}

namespace {

// Read the environment at load, before the program can change it or start threads.
__attribute__((constructor)) void at_load() { ensure_init(); }

__attribute__((destructor)) void at_exit() { (void)write_report("exit", false); }

}  // namespace
