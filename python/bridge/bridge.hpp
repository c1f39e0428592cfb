// The Python bridge: a plugin (offloadkit/plugin.h) whose features are implemented in Python, part
// of the extension module offloadkit._native. In the interpreter that imported the module, it
// imports the factory named by OFFLOADKIT_PYTHON_FACTORY ("module:factory") and puts each feature
// the factory's plugin provides behind offloadkit's C++ interface (python_stash, python_region,
// ...), exported through the usual tables (offloadkit/plugin/export.hpp).
//
// Threads and the GIL: the module's entry points release the GIL while the batteries run; every
// call into Python takes it (call_python) and every call Python makes into offloadkit (the
// executor, a release callback) gives it up while it runs, so a stream worker that ends up in
// Python (a release run from another thread) can never deadlock with the thread that waits for it.
// Python objects owned by C++ are only touched, and destroyed, with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/plugin.h"
#include "offloadkit/stash/key.hpp"

namespace offloadkit::python_bridge {

namespace py = pybind11;

/// A feature as the factory declared it.
struct feature_decl {
  bool present = false;
  py::object make;  ///< builds one object per battery case
  std::uint64_t capabilities = 0;
  std::string implementation;  ///< the name in results
  std::string owner;           ///< the maker's qualified name, for messages ("NumpyStash")
  /// A stash's declared key limits (vp, layer, microbatch); 0: the codec's.
  std::array<std::uint32_t, 3> key_limits{};
};

struct plugin_decl {
  std::string name;
  std::string version;
  feature_decl stash, region, arena, activation;
};

/// Loads the factory (once per process) in the running interpreter and reads its plugin. Throws
/// offloadkit::logic_error / runtime_error with the Python traceback when any step fails, and
/// logic_error where no interpreter runs (the bridge loaded outside offloadkit._native).
const plugin_decl& start();

/// Looks up names() and creates the bridge's native module (Executor, Release, the exception
/// translator), once per process; start() does it before it reads the factory, and the optimized
/// implementations' classes (optimized.cpp) before their first object. Needs the GIL.
void start_runtime();

/// Python objects the bridge uses, looked up once by start_runtime(). Never destroyed: releasing
/// them at exit, after the interpreter may have been finalized, would need the GIL.
struct python_names {
  py::module_ support;  ///< offloadkit._bridge
  py::object buffer, stream, event, graph, physical, tensor, stash_key, stash_config, region_config,
      offload_options;
  py::object out_of_range, state_error, logic_error, out_of_memory, injected_fault, cuda_error,
      platform_error;
};
python_names& names();

// ---- errors ---------------------------------------------------------------------------------

/// An error as it crosses the C ABI: okit_status code, CUDA code, message.
struct stored_error {
  okit_status code = OKIT_ERR_RUNTIME;
  int cuda_code = 0;
  std::string message;
};

/// Throws the offloadkit exception that `e` stands for.
[[noreturn]] void throw_stored(const stored_error& e);

/// The Python exception in `e` as a stored_error: "python WHAT raised TYPE: MESSAGE" and its
/// traceback, cut to what an okit_error carries unless `whole`. Needs the GIL.
stored_error describe_python_error(const std::string& what, py::error_already_set& e,
                                   bool whole = false);

/// Errors raised where nothing can report them (a release callback, a noexcept entry such as
/// arena.release): kept here and thrown by the object's next call; one never reported is printed
/// to stderr when the last holder goes.
class pending_errors {
 public:
  pending_errors() = default;
  pending_errors(const pending_errors&) = delete;
  pending_errors& operator=(const pending_errors&) = delete;
  ~pending_errors();
  void store(stored_error e);
  /// Throws the first stored error (and forgets it), if any.
  void throw_if_any();

 private:
  std::mutex mutex_;
  std::optional<stored_error> first_;
  std::size_t later_ = 0;  ///< more errors stored after the first, before it was thrown
};

/// Runs `f` (which touches Python) with the GIL held, and turns a Python exception into the
/// offloadkit exception it stands for, its message naming `owner.method`. `f` must return a plain
/// C++ value: no Python object may outlive the GIL.
template <class F>
auto call_python(const std::string& owner, const char* method, F&& f) -> decltype(f()) {
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    throw_stored(describe_python_error(owner + "." + method, e));
  } catch (const py::cast_error& e) {
    OFFLOADKIT_FAIL(logic_error, "python ", owner, ".", method,
                    " returned a value the protocol does not take: ", e.what(),
                    " (see offloadkit.protocol)");
  }
}

// ---- values across the boundary (all need the GIL) ------------------------------------------

/// The executor lent to one Python object: valid until the object is destroyed.
struct executor_handle {
  executor* ex = nullptr;
  backend kind = backend::host;
  /// The executor, or a StateError for an object already destroyed.
  executor& get() const;
};

/// An address: an int, a Buffer, or anything offloadkit._bridge.address_of takes.
void* to_address(py::handle h);
/// A stream: an int (the native handle) with a `device` attribute (0 where it has none).
stream_ref to_stream(py::handle h);

/// A Python Executor over `h`.
py::object make_executor(const std::shared_ptr<executor_handle>& h);
/// offloadkit.Stream(handle, device).
py::object make_stream(stream_ref s);
/// offloadkit.Event(handle, device).
py::object make_event(event_ref e);
/// offloadkit.StashKey(vp, layer, microbatch).
py::object key_to_python(const stash::stash_key& k);
/// offloadkit.Buffer over memory offloadkit hands to Python, valid in the order of `s`.
py::object make_buffer(const void* p, std::size_t bytes, int device, memory_kind kind, backend b,
                       std::optional<stream_ref> s);

/// A Python callable as a std::function that takes the GIL to call it, and to drop it
/// (held_callable). A Python error it raises goes to `pending` (the caller of a release has
/// nowhere to report it).
std::function<void()> python_callback(py::object fn, std::string what,
                                      std::shared_ptr<pending_errors> pending);

/// The activation tensor a Python tensor (offloadkit.Tensor, or anything with its fields)
/// describes; its release, where it has one, a python_callback named `release_what`.
activation::tensor tensor_from_python(py::handle tensor, std::string release_what,
                                      std::shared_ptr<pending_errors> pending);

/// The release callback of a tensor handed to pack(), callable from Python exactly once.
struct release_once {
  std::mutex mutex;
  std::function<void()> fn;
  bool called = false;
  bool disowned = false;  ///< pack() failed: the caller kept the tensor, nothing may be released
};
py::object make_release(const std::shared_ptr<release_once>& r);

/// offloadkit.Tensor over the device tensor `t` (its data a Buffer of the executor back end `b`,
/// valid in the order of `s`), whose release calls `release`.
py::object tensor_to_python(const activation::tensor& t, backend b, stream_ref s,
                            const std::shared_ptr<release_once>& release);

/// A Python callable kept by C++: the holder drops it with the GIL held, from whichever thread
/// drops the last copy. Call it with the GIL held.
std::shared_ptr<py::object> held_callable(py::object fn);

/// Adds offloadkit's optimized implementations to the extension module `m` as the classes
/// OptimizedRegion, OptimizedActivation, OptimizedArena and OptimizedStash (optimized.cpp).
void add_optimized_classes(py::module_& m);

/// The module of the bridge's native classes (Executor, Release); created by start().
void create_native_module();

}  // namespace offloadkit::python_bridge
