// Loading the factory in the interpreter that imported offloadkit._native, and the errors that
// cross between Python and C++.
#include <pybind11/pybind11.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "bridge.hpp"
#include "offloadkit/plugin/capabilities.hpp"

namespace offloadkit::python_bridge {
namespace {

/// A child's output is read after it ends, and the process may end by os._exit (its buffers never
/// flushed): line-buffer Python's own output.
void line_buffer_output() {
  using namespace pybind11::literals;
  py::module_ sys = py::module_::import("sys");
  for (const char* stream : {"stdout", "stderr"}) {
    py::object f = sys.attr(stream);
    if (!f.is_none() && py::hasattr(f, "reconfigure")) {
      f.attr("reconfigure")("line_buffering"_a = true);
    }
  }
}

feature_decl read_feature(const py::dict& features, const char* feature) {
  feature_decl d;
  if (!features.contains(feature)) return d;
  py::tuple t = features[feature];
  d.present = true;
  d.make = t[0];
  for (py::handle cap : t[1]) {
    d.capabilities |= plugin::capability_bit(feature, cap.cast<std::string>());
  }
  d.implementation = t[2].cast<std::string>();
  py::tuple limits = t[3];
  for (std::size_t i = 0; i < d.key_limits.size(); ++i) {
    d.key_limits[i] = limits[i].cast<std::uint32_t>();
  }
  d.owner = py::hasattr(d.make, "__qualname__")
                ? py::str(d.make.attr("__qualname__")).cast<std::string>()
                : d.implementation;
  return d;
}

void load_names() {
  python_names& n = names();
  py::module_ package = py::module_::import("offloadkit");
  n.support = py::module_::import("offloadkit._bridge");
  for (auto& [field, name] : std::initializer_list<std::pair<py::object*, const char*>>{
           {&n.buffer, "Buffer"},
           {&n.stream, "Stream"},
           {&n.event, "Event"},
           {&n.graph, "Graph"},
           {&n.physical, "Physical"},
           {&n.tensor, "Tensor"},
           {&n.stash_key, "StashKey"},
           {&n.stash_config, "StashConfig"},
           {&n.region_config, "RegionConfig"},
           {&n.offload_options, "OffloadOptions"},
           {&n.out_of_range, "OutOfRange"},
           {&n.state_error, "StateError"},
           {&n.logic_error, "LogicError"},
           {&n.out_of_memory, "OutOfMemory"},
           {&n.injected_fault, "InjectedFault"},
           {&n.cuda_error, "CudaError"},
           {&n.platform_error, "PlatformError"}}) {
    *field = package.attr(name);
  }
}

}  // namespace

python_names& names() {
  // Leaked on purpose (see python_names).
  static python_names* const n = new python_names();
  return *n;
}

void start_runtime() {
  // Called with the GIL held, which orders the first call against every other.
  static bool started = false;
  if (started) return;
  load_names();
  create_native_module();
  started = true;
}

namespace {

/// The work of start(), done once.
const plugin_decl* load_declaration() {
  // Kept for the life of the process, with the interpreter (see python_names).
  auto decl = std::make_unique<plugin_decl>();
  const char* spec_env = std::getenv("OFFLOADKIT_PYTHON_FACTORY");
  if (spec_env == nullptr || spec_env[0] == '\0') {
    OFFLOADKIT_FAIL(logic_error,
                    "OFFLOADKIT_PYTHON_FACTORY is not set: set it to MODULE:FACTORY, the Python "
                    "factory to check (offloadkit check --python MODULE:FACTORY sets it)");
  }
  const std::string spec = spec_env;
  if (Py_IsInitialized() == 0) {
    OFFLOADKIT_FAIL(logic_error,
                    "the Python bridge runs inside an interpreter that imported offloadkit._native "
                    "(python -m offloadkit check MODULE:FACTORY); no interpreter is running here");
  }
  std::string failure;
  {
    py::gil_scoped_acquire gil;
    try {
      line_buffer_output();
      start_runtime();
      py::tuple d = names().support.attr("describe")(spec);
      decl->name = d[0].cast<std::string>();
      decl->version = d[1].cast<std::string>();
      py::dict features = d[2];
      decl->stash = read_feature(features, "stash");
      decl->region = read_feature(features, "region");
      decl->arena = read_feature(features, "arena");
      decl->activation = read_feature(features, "activation");
    } catch (py::error_already_set& e) {
      // Not bound for an okit_error: the whole traceback goes to the user.
      failure = describe_python_error("factory " + spec, e, /*whole=*/true).message;
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) *decl = plugin_decl{};  // its Python objects go with the GIL held
  }
  if (!failure.empty()) throw logic_error("cannot load the Python plugin: " + failure);
  return decl.release();
}

}  // namespace

const plugin_decl& start() {
  // A failed start throws out of the initialization, which a later call then tries again.
  static const plugin_decl* const decl = load_declaration();
  return *decl;
}

// ---- errors ---------------------------------------------------------------------------------

void throw_stored(const stored_error& e) {
  switch (e.code) {
    case OKIT_ERR_OUT_OF_RANGE:
      throw out_of_range(e.message);
    case OKIT_ERR_STATE:
      throw state_error(e.message);
    case OKIT_ERR_OUT_OF_MEMORY:
      throw out_of_memory(e.message);
    case OKIT_ERR_CUDA:
      throw cuda_error(e.message, e.cuda_code);
    case OKIT_ERR_INJECTED:
      throw injected_fault(e.message);
    case OKIT_ERR_UNSUPPORTED:
      throw unsupported_error(e.message + " (operation not supported)");
    case OKIT_ERR_LOGIC:
      throw logic_error(e.message);
    default:
      throw runtime_error(e.message);
  }
}

stored_error describe_python_error(const std::string& what, py::error_already_set& e, bool whole) {
  if (!names().support) {
    // The offloadkit package itself could not be imported: pybind11's own text, with the type.
    return stored_error{OKIT_ERR_RUNTIME, 0, "python " + what + " raised " + e.what()};
  }
  try {
    // An exception raised by a method written in C++ (an optimized implementation's class) that
    // Python called straight from C++ has no traceback.
    const py::object trace =
        e.trace() ? py::reinterpret_borrow<py::object>(e.trace()) : py::object(py::none());
    py::tuple t = whole ? names().support.attr("format_error")(e.value(), what, trace, 0)
                        : names().support.attr("format_error")(e.value(), what, trace);
    return stored_error{t[0].cast<int>(), t[1].cast<int>(), t[2].cast<std::string>()};
  } catch (py::error_already_set& inner) {
    return stored_error{OKIT_ERR_RUNTIME, 0,
                        "python " + what + " raised " + e.what() +
                            " (formatting it failed too: " + inner.what() + ")"};
  } catch (const std::exception& inner) {
    return stored_error{OKIT_ERR_RUNTIME, 0,
                        "python " + what + " raised " + e.what() +
                            " (formatting it failed too: " + inner.what() + ")"};
  }
}

pending_errors::~pending_errors() {
  if (first_) {
    std::fprintf(stderr, "offloadkit python bridge: an error no later call reported%s:\n%s\n",
                 later_ > 0 ? (" (and " + std::to_string(later_) + " more)").c_str() : "",
                 first_->message.c_str());
  }
}

void pending_errors::store(stored_error e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_) {
    ++later_;
    return;
  }
  e.message += "\n(raised where it could not be reported; reported by the next call)";
  first_ = std::move(e);
}

void pending_errors::throw_if_any() {
  std::optional<stored_error> e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!first_) return;
    e = std::move(first_);
    first_.reset();
    later_ = 0;
  }
  throw_stored(*e);
}

}  // namespace offloadkit::python_bridge
