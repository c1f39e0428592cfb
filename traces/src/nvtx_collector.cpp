// The NVTX collector (nvtx_collector.hpp): handlers for NVTX's core and domain callbacks that
// turn ranges and marks into timeline records.
#include "offloadkit/traces/nvtx_collector.hpp"

#define NVTX_NO_IMPL  // NVTX's types and callback ids only; its implementation is the caller's
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace offloadkit::traces::nvtx_collector {
namespace {

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// What an event's attributes say, decoded.
struct event {
  std::string message;
  std::uint32_t category = 0;
  payload_type payload = payload_type::none;
  std::uint64_t u64 = 0;
  std::int64_t i64 = 0;
  double f64 = 0;
};

struct open_range {
  event what;
  std::string domain;
  std::int64_t start = 0;
  std::uint64_t thread = 0;
};

struct domain_entry {
  std::string name;
};

struct collector_state {
  std::mutex mu;
  std::vector<record> done;
  std::unordered_map<std::uint64_t, open_range> started;  // start/end ranges by id
  std::map<std::string, std::unique_ptr<domain_entry>> domains;
  std::vector<std::unique_ptr<std::string>> strings;  // registered strings; handles point here
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<std::int64_t (*)()> clock{&monotonic_ns};
  std::atomic<bool> attached{false};
  std::atomic<std::size_t> pushed_open{0};
};

collector_state& state() {
  // Leaked on purpose: NVTX calls may come from threads still running while the process exits.
  static auto* s = new collector_state;
  return *s;
}

std::int64_t now() { return state().clock.load(std::memory_order_relaxed)(); }
std::uint64_t this_thread() { return static_cast<std::uint64_t>(syscall(SYS_gettid)); }

/// wchar_t text (UTF-32 on Linux) as UTF-8; code points outside Unicode become U+FFFD.
std::string utf8(const wchar_t* w) {
  std::string out;
  if (w == nullptr) return out;
  for (; *w != L'\0'; ++w) {
    auto c = static_cast<std::uint32_t>(static_cast<std::int32_t>(*w));
    if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) c = 0xfffd;
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

std::string domain_name(nvtxDomainHandle_t d) {
  return d == nullptr ? std::string() : reinterpret_cast<const domain_entry*>(d)->name;
}

/// Reads the fields an attributes struct of `size` bytes has (older NVTX versions pass smaller
/// structs; fields past their size are absent).
event decode(const nvtxEventAttributes_t* a) {
  event e;
  if (a == nullptr) return e;
  const auto has = [&](std::size_t offset, std::size_t bytes) { return a->size >= offset + bytes; };
  if (has(offsetof(nvtxEventAttributes_t, category), sizeof a->category)) e.category = a->category;
  if (has(offsetof(nvtxEventAttributes_t, payload), sizeof a->payload)) {
    switch (a->payloadType) {
      case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
        e.payload = payload_type::u64;
        e.u64 = a->payload.ullValue;
        break;
      case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
        e.payload = payload_type::u64;
        e.u64 = a->payload.uiValue;
        break;
      case NVTX_PAYLOAD_TYPE_INT64:
        e.payload = payload_type::i64;
        e.i64 = a->payload.llValue;
        break;
      case NVTX_PAYLOAD_TYPE_INT32:
        e.payload = payload_type::i64;
        e.i64 = a->payload.iValue;
        break;
      case NVTX_PAYLOAD_TYPE_DOUBLE:
        e.payload = payload_type::f64;
        e.f64 = a->payload.dValue;
        break;
      case NVTX_PAYLOAD_TYPE_FLOAT:
        e.payload = payload_type::f64;
        e.f64 = a->payload.fValue;
        break;
      default:  // no payload, or an extended payload this collector does not decode
        break;
    }
  }
  if (has(offsetof(nvtxEventAttributes_t, message), sizeof a->message)) {
    switch (a->messageType) {
      case NVTX_MESSAGE_TYPE_ASCII:
        if (a->message.ascii != nullptr) e.message = a->message.ascii;
        break;
      case NVTX_MESSAGE_TYPE_UNICODE:
        e.message = utf8(a->message.unicode);
        break;
      case NVTX_MESSAGE_TYPE_REGISTERED:
        if (a->message.registered != nullptr)
          e.message = *reinterpret_cast<const std::string*>(a->message.registered);
        break;
      default:
        break;
    }
  }
  return e;
}

event text(std::string message) {
  event e;
  e.message = std::move(message);
  return e;
}

void finish(open_range o, std::int64_t end) {
  record r;
  r.kind = record_kind::range;
  r.name = std::move(o.what.message);
  r.start_ns = o.start;
  r.end_ns = end < o.start ? o.start : end;
  r.thread = o.thread;
  r.domain = std::move(o.domain);
  r.category = o.what.category;
  r.payload = o.what.payload;
  r.payload_u64 = o.what.u64;
  r.payload_i64 = o.what.i64;
  r.payload_f64 = o.what.f64;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.done.push_back(std::move(r));
}

void mark(nvtxDomainHandle_t d, event e) {
  const std::int64_t t = now();
  finish({std::move(e), domain_name(d), t, this_thread()}, t);
}

nvtxRangeId_t start(nvtxDomainHandle_t d, event e) {
  auto& s = state();
  const std::uint64_t id = s.next_id.fetch_add(1);
  open_range o{std::move(e), domain_name(d), now(), this_thread()};
  std::lock_guard<std::mutex> lock(s.mu);
  s.started.emplace(id, std::move(o));
  return id;
}

void end(nvtxRangeId_t id) {
  const std::int64_t t = now();
  auto& s = state();
  open_range o;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.started.find(id);
    if (it == s.started.end()) return;  // an id this collector never handed out
    o = std::move(it->second);
    s.started.erase(it);
  }
  finish(std::move(o), t);
}

// Push/pop ranges nest per thread and per domain.
thread_local std::map<nvtxDomainHandle_t, std::vector<open_range>> stacks;

int push(nvtxDomainHandle_t d, event e) {
  auto& stack = stacks[d];
  stack.push_back({std::move(e), domain_name(d), now(), this_thread()});
  state().pushed_open.fetch_add(1);
  return static_cast<int>(stack.size()) - 1;
}

int pop(nvtxDomainHandle_t d) {
  const std::int64_t t = now();
  auto it = stacks.find(d);
  if (it == stacks.end() || it->second.empty()) return -1;  // NVTX's "no range to pop"
  open_range o = std::move(it->second.back());
  it->second.pop_back();
  state().pushed_open.fetch_sub(1);
  const int level = static_cast<int>(it->second.size());
  finish(std::move(o), t);
  return level;
}

// ---- the handlers NVTX calls ---------------------------------------------------------------
// NVTX requires that no exception leave them; allocation failure is the only one possible and
// ends the recording of that one event.

template <class F>
auto guarded(F f, decltype(f()) fallback) noexcept {
  try {
    return f();
  } catch (const std::exception&) {
    return fallback;  // out of memory: this event is not recorded; the program goes on
  }
}

void NVTX_API mark_ex(const nvtxEventAttributes_t* a) {
  guarded([&] { return mark(nullptr, decode(a)), 0; }, 0);
}
void NVTX_API mark_a(const char* m) {
  guarded([&] { return mark(nullptr, text(m != nullptr ? m : "")), 0; }, 0);
}
void NVTX_API mark_w(const wchar_t* m) {
  guarded([&] { return mark(nullptr, text(utf8(m))), 0; }, 0);
}
nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t* a) {
  return guarded([&] { return start(nullptr, decode(a)); }, nvtxRangeId_t{0});
}
nvtxRangeId_t NVTX_API start_a(const char* m) {
  return guarded([&] { return start(nullptr, text(m != nullptr ? m : "")); }, nvtxRangeId_t{0});
}
nvtxRangeId_t NVTX_API start_w(const wchar_t* m) {
  return guarded([&] { return start(nullptr, text(utf8(m))); }, nvtxRangeId_t{0});
}
void NVTX_API range_end(nvtxRangeId_t id) {
  guarded([&] { return end(id), 0; }, 0);
}
int NVTX_API push_ex(const nvtxEventAttributes_t* a) {
  return guarded([&] { return push(nullptr, decode(a)); }, -1);
}
int NVTX_API push_a(const char* m) {
  return guarded([&] { return push(nullptr, text(m != nullptr ? m : "")); }, -1);
}
int NVTX_API push_w(const wchar_t* m) {
  return guarded([&] { return push(nullptr, text(utf8(m))); }, -1);
}
int NVTX_API range_pop() {
  return guarded([&] { return pop(nullptr); }, -1);
}

void NVTX_API domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  guarded([&] { return mark(d, decode(a)), 0; }, 0);
}
nvtxRangeId_t NVTX_API domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return guarded([&] { return start(d, decode(a)); }, nvtxRangeId_t{0});
}
void NVTX_API domain_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
  guarded([&] { return end(id), 0; }, 0);
}
int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return guarded([&] { return push(d, decode(a)); }, -1);
}
int NVTX_API domain_pop(nvtxDomainHandle_t d) {
  return guarded([&] { return pop(d); }, -1);
}

nvtxStringHandle_t register_string(std::string text) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.strings.push_back(std::make_unique<std::string>(std::move(text)));
  return reinterpret_cast<nvtxStringHandle_t>(s.strings.back().get());
}
nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t, const char* t) {
  return guarded([&] { return register_string(t != nullptr ? t : ""); }, nvtxStringHandle_t{});
}
nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t, const wchar_t* t) {
  return guarded([&] { return register_string(utf8(t)); }, nvtxStringHandle_t{});
}

/// One handle per domain name, kept for the life of the process (records name it by pointer).
nvtxDomainHandle_t create_domain(std::string name) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& slot = s.domains[name];
  if (!slot) slot = std::make_unique<domain_entry>(domain_entry{std::move(name)});
  return reinterpret_cast<nvtxDomainHandle_t>(slot.get());
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* n) {
  return guarded([&] { return create_domain(n != nullptr ? n : ""); }, nvtxDomainHandle_t{});
}
nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t* n) {
  return guarded([&] { return create_domain(utf8(n)); }, nvtxDomainHandle_t{});
}
// Domains stay: records already taken or still open refer to them by name.
void NVTX_API domain_destroy(nvtxDomainHandle_t) {}
void NVTX_API initialize(const void*) {}

template <class F>
NvtxFunctionPointer fp(F f) {
  return reinterpret_cast<NvtxFunctionPointer>(f);
}

/// Fills `module`'s slots with `handlers` (callback id, function); false when NVTX has no table
/// for the module.
bool install(const NvtxExportTableCallbacks* cb, NvtxCallbackModule module,
             std::initializer_list<std::pair<unsigned, NvtxFunctionPointer>> handlers) {
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (cb->GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr) return false;
  for (const auto& [id, f] : handlers) {
    if (id < size && table[id] != nullptr) *table[id] = f;
  }
  return true;
}

}  // namespace

int attach(export_table_getter get) noexcept {
  if (get == nullptr) return 0;
  const auto* cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  if (cb == nullptr || cb->struct_size < sizeof(NvtxExportTableCallbacks) ||
      cb->GetModuleFunctionTable == nullptr) {
    return 0;
  }
  const bool core = install(cb, NVTX_CB_MODULE_CORE,
                            {{NVTX_CBID_CORE_MarkEx, fp(mark_ex)},
                             {NVTX_CBID_CORE_MarkA, fp(mark_a)},
                             {NVTX_CBID_CORE_MarkW, fp(mark_w)},
                             {NVTX_CBID_CORE_RangeStartEx, fp(start_ex)},
                             {NVTX_CBID_CORE_RangeStartA, fp(start_a)},
                             {NVTX_CBID_CORE_RangeStartW, fp(start_w)},
                             {NVTX_CBID_CORE_RangeEnd, fp(range_end)},
                             {NVTX_CBID_CORE_RangePushEx, fp(push_ex)},
                             {NVTX_CBID_CORE_RangePushA, fp(push_a)},
                             {NVTX_CBID_CORE_RangePushW, fp(push_w)},
                             {NVTX_CBID_CORE_RangePop, fp(range_pop)}});
  // NVTX before version 2 has no domains; the core table alone is then enough.
  install(cb, NVTX_CB_MODULE_CORE2,
          {{NVTX_CBID_CORE2_DomainMarkEx, fp(domain_mark_ex)},
           {NVTX_CBID_CORE2_DomainRangeStartEx, fp(domain_start_ex)},
           {NVTX_CBID_CORE2_DomainRangeEnd, fp(domain_end)},
           {NVTX_CBID_CORE2_DomainRangePushEx, fp(domain_push_ex)},
           {NVTX_CBID_CORE2_DomainRangePop, fp(domain_pop)},
           {NVTX_CBID_CORE2_DomainRegisterStringA, fp(register_string_a)},
           {NVTX_CBID_CORE2_DomainRegisterStringW, fp(register_string_w)},
           {NVTX_CBID_CORE2_DomainCreateA, fp(domain_create_a)},
           {NVTX_CBID_CORE2_DomainCreateW, fp(domain_create_w)},
           {NVTX_CBID_CORE2_DomainDestroy, fp(domain_destroy)},
           {NVTX_CBID_CORE2_Initialize, fp(initialize)}});
  if (!core) return 0;
  if (const auto* v = static_cast<const NvtxExportTableVersionInfo*>(get(NVTX_ETID_VERSIONINFO));
      v != nullptr && v->struct_size >= sizeof(NvtxExportTableVersionInfo) &&
      v->SetInjectionNvtxVersion != nullptr) {
    v->SetInjectionNvtxVersion(NVTX_VERSION);
  }
  state().attached.store(true);
  return 1;
}

bool attached() noexcept { return state().attached.load(); }

void set_clock(std::int64_t (*now_ns)()) noexcept {
  state().clock.store(now_ns != nullptr ? now_ns : &monotonic_ns);
}

std::vector<record> take() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<record> out = std::move(s.done);
  s.done.clear();
  return out;
}

std::size_t open_ranges() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.started.size() + s.pushed_open.load();
}

}  // namespace offloadkit::traces::nvtx_collector
