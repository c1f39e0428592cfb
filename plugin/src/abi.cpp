// Both directions of the executor across the C ABI (executor_table, abi_executor), the error
// mapping between typed exceptions and okit_status codes, and owned callbacks.
#include "offloadkit/plugin/abi.hpp"

#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace offloadkit::plugin {

// ---- callbacks ------------------------------------------------------------------------------

okit_callback to_c_callback(std::function<void()> fn) {
  if (!fn) return okit_callback{nullptr, nullptr, nullptr};
  auto* held = new std::function<void()>(std::move(fn));
  // A callback that throws has nowhere to report to across the boundary (it runs on a stream
  // worker or inside a release); the trampoline is noexcept, as such callbacks are in C++ too.
  return okit_callback{[](void* ctx) noexcept { (*static_cast<std::function<void()>*>(ctx))(); },
                       [](void* ctx) noexcept { delete static_cast<std::function<void()>*>(ctx); },
                       held};
}

std::function<void()> from_c_callback(okit_callback cb) {
  if (cb.call == nullptr && cb.drop == nullptr) return {};
  // Shared so that copies of the std::function share one context, dropped with the last copy.
  struct holder {
    explicit holder(okit_callback c) : cb(c) {}
    holder(const holder&) = delete;
    holder& operator=(const holder&) = delete;
    ~holder() {
      if (cb.drop != nullptr) cb.drop(cb.ctx);
    }
    okit_callback cb;
  };
  auto h = std::make_shared<holder>(cb);
  return [h] {
    if (h->cb.call != nullptr) h->cb.call(h->cb.ctx);
  };
}

// ---- errors ---------------------------------------------------------------------------------

const char* status_name(okit_status code) noexcept {
  switch (code) {
    case OKIT_OK:
      return "ok";
    case OKIT_ERR_OUT_OF_RANGE:
      return "out of range";
    case OKIT_ERR_STATE:
      return "invalid state";
    case OKIT_ERR_LOGIC:
      return "logic error";
    case OKIT_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case OKIT_ERR_CUDA:
      return "cuda error";
    case OKIT_ERR_RUNTIME:
      return "runtime error";
    case OKIT_ERR_INJECTED:
      return "injected fault";
    case OKIT_ERR_UNSUPPORTED:
      return "unsupported";
    default:
      return "unknown status code";
  }
}

okit_status store_current_exception(okit_error* err) noexcept {
  try {
    throw;
  } catch (const out_of_range& e) {
    return okit_set_error(err, OKIT_ERR_OUT_OF_RANGE, e.what());
  } catch (const state_error& e) {
    return okit_set_error(err, OKIT_ERR_STATE, e.what());
  } catch (const unsupported_error& e) {
    return okit_set_error(err, OKIT_ERR_UNSUPPORTED, e.what());
  } catch (const std::logic_error& e) {
    return okit_set_error(err, OKIT_ERR_LOGIC, e.what());
  } catch (const out_of_memory& e) {
    return okit_set_error(err, OKIT_ERR_OUT_OF_MEMORY, e.what());
  } catch (const injected_fault& e) {
    return okit_set_error(err, OKIT_ERR_INJECTED, e.what());
  } catch (const cuda_error& e) {
    okit_set_error(err, OKIT_ERR_CUDA, e.what());
    if (err != nullptr) err->cuda_code = e.code();
    return OKIT_ERR_CUDA;
  } catch (const std::bad_alloc& e) {
    return okit_set_error(err, OKIT_ERR_OUT_OF_MEMORY, e.what());
  } catch (const std::exception& e) {
    return okit_set_error(err, OKIT_ERR_RUNTIME, e.what());
  } catch (...) {
    return okit_set_error(err, OKIT_ERR_RUNTIME, "a non-standard C++ exception was thrown");
  }
}

void throw_error(const okit_error& err, const std::string& context) {
  // The message buffer may not be terminated when a plugin wrote it by hand.
  const std::string message(err.message, strnlen(err.message, sizeof(err.message)));
  const std::string what = context + ": " + (message.empty() ? "(no message)" : message);
  switch (err.code) {
    case OKIT_ERR_OUT_OF_RANGE:
      throw out_of_range(what);
    case OKIT_ERR_STATE:
      throw state_error(what);
    case OKIT_ERR_LOGIC:
      throw logic_error(what);
    case OKIT_ERR_OUT_OF_MEMORY:
      throw out_of_memory(what);
    case OKIT_ERR_CUDA:
      throw cuda_error(what, err.cuda_code);
    case OKIT_ERR_INJECTED:
      throw injected_fault(what);
    case OKIT_ERR_RUNTIME:
      throw runtime_error(what);
    case OKIT_ERR_UNSUPPORTED:
      throw unsupported_error(what + " (operation not supported)");
    default:
      throw runtime_error(what + " (status code " + std::to_string(err.code) +
                          ", not one of plugin.h's okit_status_code values)");
  }
}

// ---- host side: the table over an executor -------------------------------------------------

namespace {

executor& self_of(void* self) { return *static_cast<executor*>(self); }

memory_kind memory_kind_of(std::int32_t k) {
  switch (k) {
    case OKIT_MEMORY_DEVICE:
      return memory_kind::device;
    case OKIT_MEMORY_PINNED:
      return memory_kind::pinned;
    case OKIT_MEMORY_PAGEABLE:
      return memory_kind::pageable;
    default:
      OFFLOADKIT_FAIL(out_of_range, "memory kind ", k,
                      " is not one of OKIT_MEMORY_DEVICE (0), OKIT_MEMORY_PINNED (1), "
                      "OKIT_MEMORY_PAGEABLE (2)");
  }
}

std::int32_t to_c(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::device:
      return OKIT_MEMORY_DEVICE;
    case memory_kind::pinned:
      return OKIT_MEMORY_PINNED;
    case memory_kind::pageable:
      break;
  }
  return OKIT_MEMORY_PAGEABLE;
}

std::int32_t to_c(pointer_kind k) noexcept {
  switch (k) {
    case pointer_kind::device:
      return OKIT_POINTER_DEVICE;
    case pointer_kind::pinned:
      return OKIT_POINTER_PINNED;
    case pointer_kind::managed:
      return OKIT_POINTER_MANAGED;
    case pointer_kind::pageable:
      break;
  }
  return OKIT_POINTER_PAGEABLE;
}

pointer_kind pointer_kind_of(std::int32_t k) noexcept {
  switch (k) {
    case OKIT_POINTER_DEVICE:
      return pointer_kind::device;
    case OKIT_POINTER_PINNED:
      return pointer_kind::pinned;
    case OKIT_POINTER_MANAGED:
      return pointer_kind::managed;
    default:
      return pointer_kind::pageable;
  }
}

launch_request launch_of(const okit_launch& r) {
  launch_request q;
  q.n = r.n;
  q.block = r.block;
  q.device_launch = r.device_launch;
  q.host_run = r.host_run;
  q.name = r.name != nullptr ? r.name : "plugin kernel";
  // The executor keeps the body alive for as long as queued or captured work may run it; the
  // owner goes back to the plugin when the last reference goes.
  void* owner = r.owner;
  void (*drop)(void*) = r.drop_owner;
  q.body = std::shared_ptr<const void>(r.body, [owner, drop](const void*) {
    if (drop != nullptr) drop(owner);
  });
  return q;
}

}  // namespace

executor_table::executor_table(executor& ex) : ex_(&ex), name_(ex.name()) {
  okit_executor& t = table_;
  t.struct_size = sizeof(okit_executor);
  t.backend = ex.kind() == backend::cuda ? OKIT_BACKEND_CUDA : OKIT_BACKEND_HOST;
  t.device_count = ex.device_count();
  t.name = name_.c_str();
  t.self = ex_;
  t.allocate = [](void* self, okit_error* err, std::int32_t kind, std::size_t bytes,
                  std::int32_t device, void** out) noexcept {
    return guard(err, [&] { *out = self_of(self).allocate(memory_kind_of(kind), bytes, device); });
  };
  t.deallocate = [](void* self, std::int32_t kind, void* p, std::size_t bytes) noexcept {
    const memory_kind k = kind == OKIT_MEMORY_DEVICE   ? memory_kind::device
                          : kind == OKIT_MEMORY_PINNED ? memory_kind::pinned
                                                       : memory_kind::pageable;
    self_of(self).deallocate(k, p, bytes);
  };
  t.classify = [](void* self, okit_error* err, const void* p, std::int32_t* kind,
                  std::int32_t* device) noexcept {
    return guard(err, [&] {
      const pointer_info i = self_of(self).classify(p);
      *kind = to_c(i.kind);
      *device = i.device;
    });
  };
  t.extent_of = [](void* self, okit_error* err, const void* p, const void** base,
                   std::size_t* bytes) noexcept {
    return guard(err, [&] {
      const allocation_extent e = self_of(self).extent_of(p);
      *base = e.base;
      *bytes = e.bytes;
    });
  };
  t.device_memory = [](void* self, okit_error* err, std::int32_t device, std::size_t* free_bytes,
                       std::size_t* total_bytes) noexcept {
    return guard(err, [&] {
      const memory_info m = self_of(self).device_memory(device);
      *free_bytes = m.free;
      *total_bytes = m.total;
    });
  };
  t.create_stream = [](void* self, okit_error* err, std::int32_t device,
                       okit_stream* out) noexcept {
    return guard(err, [&] { *out = to_c(self_of(self).create_stream(device)); });
  };
  t.destroy_stream = [](void* self, okit_stream s) noexcept {
    self_of(self).destroy_stream(from_c(s));
  };
  t.create_event = [](void* self, okit_error* err, std::int32_t device, okit_event* out) noexcept {
    return guard(err, [&] { *out = to_c(self_of(self).create_event(device)); });
  };
  t.destroy_event = [](void* self, okit_event e) noexcept {
    self_of(self).destroy_event(from_c(e));
  };
  t.copy = [](void* self, okit_error* err, void* dst, const void* src, std::size_t bytes,
              okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).copy(dst, src, bytes, from_c(s)); });
  };
  t.fill = [](void* self, okit_error* err, void* dst, std::int32_t value, std::size_t bytes,
              okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).fill(dst, value, bytes, from_c(s)); });
  };
  t.launch = [](void* self, okit_error* err, const okit_launch* r, okit_stream s) noexcept {
    if (r == nullptr) return okit_set_error(err, OKIT_ERR_LOGIC, "launch: the request is NULL");
    return guard(err, [&] { self_of(self).launch(launch_of(*r), from_c(s)); });
  };
  t.host_function = [](void* self, okit_error* err, okit_callback fn, okit_stream s) noexcept {
    return guard(err, [&] {
      // Owned from here on: if the executor refuses it, the std::function drops it.
      std::function<void()> f = from_c_callback(fn);
      self_of(self).host_function(std::move(f), from_c(s));
    });
  };
  t.record = [](void* self, okit_error* err, okit_event e, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).record(from_c(e), from_c(s)); });
  };
  t.wait = [](void* self, okit_error* err, okit_event e, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).wait(from_c(e), from_c(s)); });
  };
  t.synchronize_stream = [](void* self, okit_error* err, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).synchronize(from_c(s)); });
  };
  t.synchronize_event = [](void* self, okit_error* err, okit_event e) noexcept {
    return guard(err, [&] { self_of(self).synchronize(from_c(e)); });
  };
  t.ready = [](void* self, okit_error* err, okit_event e, std::int32_t* is_ready) noexcept {
    return guard(err, [&] { *is_ready = self_of(self).ready(from_c(e)) ? 1 : 0; });
  };
  t.granularity = [](void* self, okit_error* err, std::int32_t device, std::size_t* out) noexcept {
    return guard(err, [&] { *out = self_of(self).granularity(device); });
  };
  t.reserve = [](void* self, okit_error* err, std::size_t bytes, std::int32_t device,
                 void** out) noexcept {
    return guard(err, [&] { *out = self_of(self).reserve(bytes, device); });
  };
  t.unreserve = [](void* self, void* va, std::size_t bytes) noexcept {
    self_of(self).unreserve(va, bytes);
  };
  t.create_physical = [](void* self, okit_error* err, std::size_t bytes, std::int32_t device,
                         okit_physical* out) noexcept {
    return guard(err, [&] { *out = to_c(self_of(self).create_physical(bytes, device)); });
  };
  t.release_physical = [](void* self, okit_physical h) noexcept {
    self_of(self).release_physical(from_c(h));
  };
  t.map = [](void* self, okit_error* err, void* va, std::size_t bytes, okit_physical h) noexcept {
    return guard(err, [&] { self_of(self).map(va, bytes, from_c(h)); });
  };
  t.unmap = [](void* self, okit_error* err, void* va, std::size_t bytes) noexcept {
    return guard(err, [&] { self_of(self).unmap(va, bytes); });
  };
  t.set_access = [](void* self, okit_error* err, void* va, std::size_t bytes,
                    std::int32_t device) noexcept {
    return guard(err, [&] { self_of(self).set_access(va, bytes, device); });
  };
  t.begin_capture = [](void* self, okit_error* err, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).begin_capture(from_c(s)); });
  };
  t.end_capture = [](void* self, okit_error* err, okit_graph* out, okit_stream s) noexcept {
    return guard(err, [&] { *out = to_c(self_of(self).end_capture(from_c(s))); });
  };
  t.replay = [](void* self, okit_error* err, okit_graph g, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).replay(from_c(g), from_c(s)); });
  };
  t.destroy_graph = [](void* self, okit_graph g) noexcept {
    self_of(self).destroy_graph(from_c(g));
  };
  t.allocate_managed = [](void* self, okit_error* err, std::size_t bytes, std::int32_t device,
                          void** out) noexcept {
    return guard(err, [&] { *out = self_of(self).allocate_managed(bytes, device); });
  };
  t.deallocate_managed = [](void* self, void* p, std::size_t bytes) noexcept {
    self_of(self).deallocate_managed(p, bytes);
  };
  t.prefetch = [](void* self, okit_error* err, const void* p, std::size_t bytes,
                  std::int32_t device, okit_stream s) noexcept {
    return guard(err, [&] { self_of(self).prefetch(p, bytes, device, from_c(s)); });
  };
}

// ---- plugin side: an executor over the lent table -------------------------------------------

namespace {
constexpr const char* lent = "the executor lent by offloadkit";

/// An entry appended after the version-1 table is missing from a table that an older offloadkit
/// lent (struct_size ends before it), or is NULL: the operation is not there to call.
[[noreturn]] void missing_entry(const okit_executor* t, const char* entry) {
  OFFLOADKIT_FAIL(logic_error, lent, " has no ", entry, " entry (its table's struct_size is ",
                  t->struct_size, " of the ", sizeof(okit_executor),
                  " this plugin was built with): offloadkit is older than the plugin's headers "
                  "(operation not supported)");
}
}  // namespace

abi_executor::abi_executor(const okit_executor* table) : t_(table) {
  OFFLOADKIT_EXPECTS(table != nullptr, logic_error, "abi_executor: the executor table is NULL");
  // Entries appended since version 1 are checked where they are called (OKIT_EXECUTOR_HAS).
  OFFLOADKIT_EXPECTS(table->struct_size >= OKIT_EXECUTOR_V1_SIZE, logic_error,
                     "abi_executor: the executor table has struct_size ", table->struct_size,
                     ", expected at least ", OKIT_EXECUTOR_V1_SIZE,
                     " (the version-1 table; the table is corrupt or not an okit_executor)");
}

backend abi_executor::do_kind() const noexcept {
  return t_->backend == OKIT_BACKEND_CUDA ? backend::cuda : backend::host;
}
std::string abi_executor::do_name() const { return t_->name != nullptr ? t_->name : "lent"; }
int abi_executor::do_device_count() const { return t_->device_count; }

void* abi_executor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  void* p = nullptr;
  call_checked_self(lent, "allocate", t_->allocate, t_->self, to_c(kind), bytes, device, &p);
  return p;
}
void abi_executor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  t_->deallocate(t_->self, to_c(kind), p, bytes);
}
pointer_info abi_executor::do_classify(const void* p) const {
  std::int32_t kind = OKIT_POINTER_PAGEABLE, device = -1;
  call_checked_self(lent, "classify", t_->classify, t_->self, p, &kind, &device);
  return pointer_info{pointer_kind_of(kind), device};
}
allocation_extent abi_executor::do_extent_of(const void* p) const {
  const void* base = nullptr;
  std::size_t bytes = 0;
  call_checked_self(lent, "extent_of", t_->extent_of, t_->self, p, &base, &bytes);
  return allocation_extent{base, bytes};
}
memory_info abi_executor::do_device_memory(int device) {
  memory_info m;
  call_checked_self(lent, "device_memory", t_->device_memory, t_->self, device, &m.free, &m.total);
  return m;
}
void* abi_executor::do_allocate_managed(std::size_t bytes, int device) {
  if (!OKIT_EXECUTOR_HAS(t_, allocate_managed)) missing_entry(t_, "allocate_managed");
  void* p = nullptr;
  call_checked_self(lent, "allocate_managed", t_->allocate_managed, t_->self, bytes, device, &p);
  return p;
}
void abi_executor::do_deallocate_managed(void* p, std::size_t bytes) noexcept {
  // A table without the entry cannot have handed out managed memory to give back.
  if (OKIT_EXECUTOR_HAS(t_, deallocate_managed)) t_->deallocate_managed(t_->self, p, bytes);
}
void abi_executor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  if (!OKIT_EXECUTOR_HAS(t_, prefetch)) missing_entry(t_, "prefetch");
  call_checked_self(lent, "prefetch", t_->prefetch, t_->self, p, bytes, device, to_c(s));
}
stream_ref abi_executor::do_create_stream(int device) {
  okit_stream s{};
  call_checked_self(lent, "create_stream", t_->create_stream, t_->self, device, &s);
  return from_c(s);
}
void abi_executor::do_destroy_stream(stream_ref s) noexcept {
  t_->destroy_stream(t_->self, to_c(s));
}
event_ref abi_executor::do_create_event(int device) {
  okit_event e{};
  call_checked_self(lent, "create_event", t_->create_event, t_->self, device, &e);
  return from_c(e);
}
void abi_executor::do_destroy_event(event_ref e) noexcept { t_->destroy_event(t_->self, to_c(e)); }
void abi_executor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  call_checked_self(lent, "copy", t_->copy, t_->self, dst, src, bytes, to_c(s));
}
void abi_executor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  call_checked_self(lent, "fill", t_->fill, t_->self, dst, value, bytes, to_c(s));
}
void abi_executor::do_launch(const launch_request& r, stream_ref s) {
  okit_launch c{};
  c.n = r.n;
  c.block = r.block;
  c.body = r.body.get();
  c.device_launch = r.device_launch;
  c.host_run = r.host_run;
  c.name = r.name;
  // The table takes ownership of one reference to the body, also when the launch fails.
  c.owner = new std::shared_ptr<const void>(r.body);
  c.drop_owner = [](void* owner) noexcept {
    delete static_cast<std::shared_ptr<const void>*>(owner);
  };
  call_checked_self(lent, "launch", t_->launch, t_->self, &c, to_c(s));
}
void abi_executor::do_host_function(std::function<void()> fn, stream_ref s) {
  call_checked_self(lent, "host_function", t_->host_function, t_->self,
                    to_c_callback(std::move(fn)), to_c(s));
}
void abi_executor::do_record(event_ref e, stream_ref s) {
  call_checked_self(lent, "record", t_->record, t_->self, to_c(e), to_c(s));
}
void abi_executor::do_wait(event_ref e, stream_ref s) {
  call_checked_self(lent, "wait", t_->wait, t_->self, to_c(e), to_c(s));
}
void abi_executor::do_synchronize_stream(stream_ref s) {
  call_checked_self(lent, "synchronize_stream", t_->synchronize_stream, t_->self, to_c(s));
}
void abi_executor::do_synchronize_event(event_ref e) {
  call_checked_self(lent, "synchronize_event", t_->synchronize_event, t_->self, to_c(e));
}
bool abi_executor::do_ready(event_ref e) {
  std::int32_t r = 0;
  call_checked_self(lent, "ready", t_->ready, t_->self, to_c(e), &r);
  return r != 0;
}
std::size_t abi_executor::do_granularity(int device) {
  std::size_t g = 0;
  call_checked_self(lent, "granularity", t_->granularity, t_->self, device, &g);
  return g;
}
void* abi_executor::do_reserve(std::size_t bytes, int device) {
  void* va = nullptr;
  call_checked_self(lent, "reserve", t_->reserve, t_->self, bytes, device, &va);
  return va;
}
void abi_executor::do_unreserve(void* va, std::size_t bytes) noexcept {
  t_->unreserve(t_->self, va, bytes);
}
physical_handle abi_executor::do_create_physical(std::size_t bytes, int device) {
  okit_physical h{};
  call_checked_self(lent, "create_physical", t_->create_physical, t_->self, bytes, device, &h);
  return from_c(h);
}
void abi_executor::do_release_physical(physical_handle h) noexcept {
  t_->release_physical(t_->self, to_c(h));
}
void abi_executor::do_map(void* va, std::size_t bytes, physical_handle h) {
  call_checked_self(lent, "map", t_->map, t_->self, va, bytes, to_c(h));
}
void abi_executor::do_unmap(void* va, std::size_t bytes) {
  call_checked_self(lent, "unmap", t_->unmap, t_->self, va, bytes);
}
void abi_executor::do_set_access(void* va, std::size_t bytes, int device) {
  call_checked_self(lent, "set_access", t_->set_access, t_->self, va, bytes, device);
}
void abi_executor::do_begin_capture(stream_ref s) {
  call_checked_self(lent, "begin_capture", t_->begin_capture, t_->self, to_c(s));
}
graph_ref abi_executor::do_end_capture(stream_ref s) {
  okit_graph g{};
  call_checked_self(lent, "end_capture", t_->end_capture, t_->self, &g, to_c(s));
  return from_c(g);
}
void abi_executor::do_replay(graph_ref g, stream_ref s) {
  call_checked_self(lent, "replay", t_->replay, t_->self, to_c(g), to_c(s));
}
void abi_executor::do_destroy_graph(graph_ref g) noexcept { t_->destroy_graph(t_->self, to_c(g)); }

}  // namespace offloadkit::plugin
