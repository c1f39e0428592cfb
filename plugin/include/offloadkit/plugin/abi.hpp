// The C++ side of the plugin C ABI (offloadkit/plugin.h), used on both sides of the boundary:
//   - offloadkit (the host) lends each plugin object an okit_executor made by executor_table, and
//     turns a returned okit_error into the typed exception it stands for (throw_error);
//   - a plugin written in C++ (offloadkit's own dogfood plugins, or anyone's) runs its code on an
//     abi_executor over that table, and turns its exceptions into codes (guard).
// Conversions between the plain C handles and the C++ ones live here once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/plugin.h"

namespace offloadkit::plugin {

// ---- handles --------------------------------------------------------------------------------

inline okit_stream to_c(stream_ref s) noexcept { return okit_stream{s.native, s.device}; }
inline stream_ref from_c(okit_stream s) noexcept { return stream_ref{s.native, s.device}; }
inline okit_event to_c(event_ref e) noexcept { return okit_event{e.native, e.device}; }
inline event_ref from_c(okit_event e) noexcept { return event_ref{e.native, e.device}; }
inline okit_graph to_c(graph_ref g) noexcept { return okit_graph{g.native}; }
inline graph_ref from_c(okit_graph g) noexcept { return graph_ref{g.native}; }
inline okit_physical to_c(physical_handle h) noexcept {
  return okit_physical{h.value, h.device, h.bytes};
}
inline physical_handle from_c(okit_physical h) noexcept {
  return physical_handle{h.value, h.device, h.bytes};
}

/// Wraps a std::function<void()> as an owned okit_callback (call runs it, drop frees it).
okit_callback to_c_callback(std::function<void()> fn);
/// Takes ownership of `cb`: the std::function calls cb.call; dropping the last copy calls cb.drop.
std::function<void()> from_c_callback(okit_callback cb);

// ---- errors ---------------------------------------------------------------------------------

/// Names the code: "out of range", "cuda error", ...
const char* status_name(okit_status code) noexcept;

/// Writes the exception in flight (call from a catch block) into `err` as the matching code:
/// out_of_range → OKIT_ERR_OUT_OF_RANGE, state_error → OKIT_ERR_STATE, out_of_memory →
/// OKIT_ERR_OUT_OF_MEMORY, injected_fault → OKIT_ERR_INJECTED, cuda_error → OKIT_ERR_CUDA (with
/// its code), other logic errors → OKIT_ERR_LOGIC, anything else → OKIT_ERR_RUNTIME.
okit_status store_current_exception(okit_error* err) noexcept;

/// Runs `f` and returns OKIT_OK, or the code of the exception it threw (stored into `err`). What a
/// C++ plugin wraps every table entry in, so that no exception crosses the boundary.
template <class F>
okit_status guard(okit_error* err, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return OKIT_OK;
  } catch (...) {
    return store_current_exception(err);
  }
}

/// Throws the typed exception that `err` stands for (the inverse of store_current_exception),
/// its message prefixed with `context` (for example "plugin 'libfoo.so' stash.restore").
[[noreturn]] void throw_error(const okit_error& err, const std::string& context);

/// Calls a table entry: throws a clear error when the entry is null, and throw_error when it
/// returns a failure. `entry` names it for messages ("stash.restore").
template <class Fn, class... Args>
void call_checked(const std::string& context, const char* entry, Fn* fn, Args&&... args) {
  if (fn == nullptr) {
    OFFLOADKIT_FAIL(logic_error, context, ": entry ", entry,
                    " is a null function pointer; the table must provide it");
  }
  okit_error err{};
  const okit_status st = fn(&err, std::forward<Args>(args)...);
  if (st != OKIT_OK) {
    if (err.code == OKIT_OK) err.code = st;
    throw_error(err, context + " " + entry);
  }
}

/// The same for entries that take `self` before the error argument.
template <class Fn, class... Args>
void call_checked_self(const std::string& context, const char* entry, Fn* fn, void* self,
                       Args&&... args) {
  if (fn == nullptr) {
    OFFLOADKIT_FAIL(logic_error, context, ": entry ", entry,
                    " is a null function pointer; the table must provide it");
  }
  okit_error err{};
  const okit_status st = fn(self, &err, std::forward<Args>(args)...);
  if (st != OKIT_OK) {
    if (err.code == OKIT_OK) err.code = st;
    throw_error(err, context + " " + entry);
  }
}

// ---- the executor across the boundary -------------------------------------------------------

/// Host side: an okit_executor whose entries forward to `ex` (which must outlive it). Exceptions
/// of `ex` become codes; ownership rules of plugin.h (launch owners, callbacks) are kept.
class executor_table {
 public:
  explicit executor_table(executor& ex);
  executor_table(const executor_table&) = delete;
  executor_table& operator=(const executor_table&) = delete;
  [[nodiscard]] const okit_executor* get() const noexcept { return &table_; }
  [[nodiscard]] executor& target() const noexcept { return *ex_; }

 private:
  executor* ex_;
  std::string name_;
  okit_executor table_{};
};

/// Plugin side: an executor whose every operation calls the table offloadkit lent; failures come
/// back as the typed exceptions they were on the host side.
class abi_executor final : public executor {
 public:
  explicit abi_executor(const okit_executor* table);

 private:
  OFFLOADKIT_EXECUTOR_HOOK_OVERRIDES

  const okit_executor* t_;
};

}  // namespace offloadkit::plugin
