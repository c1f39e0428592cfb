// offloadkit._native: the Python package's extension module (pybind11, module mode). It holds the
// Python bridge (bridge.hpp, running in the interpreter that imported it), the plugin host, the
// property batteries and the `check` command (tools/check_cli.hpp), so that `python -m offloadkit
// check` runs the batteries against a Python implementation in the user's own interpreter; the
// offloadkit command's `check --python` starts that same command. The module
// exports okit_plugin_entry and names itself as the library --python loads; each property runs in
// a child process started from sys.executable.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "bridge.hpp"
#include "check_cli.hpp"
#include "cli_common.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/plugin.h"
#include "offloadkit/plugin/capabilities.hpp"
#include "plugin_subjects.hpp"
#include "schedule_commands.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif
#ifndef OFFLOADKIT_INTERPOSE_BUILD_PATH
#define OFFLOADKIT_INTERPOSE_BUILD_PATH ""
#endif

namespace py = pybind11;
namespace tools = offloadkit::tools;

namespace {

/// The path of this extension module: the library that --python loads as its plugin.
std::string module_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_path), &info) == 0 || info.dli_fname == nullptr) {
    throw offloadkit::runtime_error("offloadkit._native cannot find its own file (dladdr failed)");
  }
  return info.dli_fname;
}

/// `offloadkit check` with `args` (the options after `check`), its children started as
/// `executable <command...> --run-one ...`, its reproduce lines starting with `program_name`.
/// Returns the exit status.
int check_main(const std::vector<std::string>& args, const std::string& program_name,
               const std::string& executable, const std::vector<std::string>& command) {
  return tools::run_guarded("check", [&] {
    tools::check_program program;
    program.name = program_name;
    program.command = command;
    program.executable = executable;
    program.python_bridge = module_path();
    // Only --python is offered from Python: the built-in batteries are the offloadkit command's.
    program.cases = [](const std::string&) { return std::vector<offloadkit::check_case>{}; };
    program.plugin_cases = tools::plugin_check_cases;
    program.fault_subjects = tools::plugin_fault_subjects;
    return tools::check_main(args, program);
  });
}

/// `offloadkit replay` with `args` (the options after `replay`), replaying through the paged stash
/// of the Python factory `factory`: the Python bridge in this module is the plugin it loads.
/// Returns the exit status.
int replay_main(const std::vector<std::string>& args, const std::string& factory) {
  return tools::run_guarded("replay", [&] {
    ::setenv("OFFLOADKIT_PYTHON_FACTORY", factory.c_str(), 1);
    std::vector<std::string> with_plugin = args;
    with_plugin.insert(with_plugin.end(), {"--plugin", module_path()});
    return tools::replay_main(with_plugin);
  });
}

/// The properties the batteries run for the Python factory `factory` on the executor named
/// `executor_name`, without running any: (cases, notes), each case a dict.
py::tuple list_cases(const std::string& factory, const std::string& executor_name) {
  if (executor_name != "host" && executor_name != "cuda") {
    throw offloadkit::out_of_range("executor '" + executor_name +
                                   "' is not one of the valid values host, cuda");
  }
  std::vector<offloadkit::check_case> cases;
  std::vector<std::string> notes;
  {
    py::gil_scoped_release nogil;
    ::setenv("OFFLOADKIT_PYTHON_FACTORY", factory.c_str(), 1);
    cases = tools::plugin_check_cases(module_path(), executor_name, notes);
  }
  py::list out;
  for (const auto& c : cases) {
    py::dict d;
    d["feature"] = c.feature;
    d["implementation"] = c.implementation;
    d["name"] = c.name;
    d["default_cases"] = c.default_cases;
    d["min_devices"] = c.min_devices;
    d["not_applicable"] = c.not_applicable;
    d["reads_free_memory"] = c.reads_free_memory;
    out.append(d);
  }
  return py::make_tuple(out, notes);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() =
      "offloadkit's native side: the property batteries, the executors (host and cuda), the "
      "plugin host and the Python bridge, run from the interpreter that imports it";
  m.attr("version") = OFFLOADKIT_VERSION;
  // With the version, what the offloadkit command compares before it runs `check --python` here.
  m.attr("plugin_abi_version") = OKIT_ABI_VERSION;
  m.attr("interposer_build_path") = OFFLOADKIT_INTERPOSE_BUILD_PATH;
  m.def("check_main", &check_main, py::arg("args"), py::arg("program_name"), py::arg("executable"),
        py::arg("command"), py::call_guard<py::gil_scoped_release>(),
        "Runs `offloadkit check` with `args` (what follows `check`); each property in a child "
        "process `executable <command...> --run-one ...`. Returns the exit status.");
  m.def("replay_main", &replay_main, py::arg("args"), py::arg("factory"),
        py::call_guard<py::gil_scoped_release>(),
        "Runs `offloadkit replay` with `args` (what follows `replay`) through the paged stash of "
        "the Python factory MODULE:FACTORY. Returns the exit status.");
  m.def("list_cases", &list_cases, py::arg("factory"), py::arg("executor"),
        "The properties the batteries would run for the Python factory MODULE:FACTORY on the "
        "executor named 'host' or 'cuda': (list of dicts, notes).");
  m.def(
      "cuda_unavailable_reason",
      [] {
        py::gil_scoped_release nogil;
        return offloadkit::cuda_unavailable_reason();
      },
      "Why the cuda executor cannot run here; empty where it can.");
  offloadkit::python_bridge::add_optimized_classes(m);
  m.def("module_path", &module_path, "The file of this extension module.");
  m.def(
      "capability_table",
      [] {
        py::list out;
        for (const auto& c : offloadkit::plugin::capability_table())
          out.append(py::make_tuple(c.feature, c.name, c.bit, c.meaning));
        return out;
      },
      "Every capability of every feature as (feature, name, bit, meaning), common ones first: the "
      "one table the C ABI's host, the check command and the Python bridge read.");
}
