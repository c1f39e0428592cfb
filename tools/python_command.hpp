// `offloadkit check --python` (and `offloadkit ecosystem`): the check runs in a Python
// interpreter, as `python3 -m offloadkit check` with the same options, so that the implementation
// is imported by the interpreter that has its packages (a venv, conda, the machine's torch). The
// command finds the interpreter (OFFLOADKIT_PYTHON, else python3 on PATH), makes sure it imports an
// offloadkit package of the command's own version, and then becomes that process.
#pragma once

#include <string>
#include <vector>

namespace offloadkit::tools {

/// The interpreter `check --python` runs.
struct python_interpreter {
  std::string path;    ///< absolute, or as OFFLOADKIT_PYTHON gave it when it holds a '/'
  std::string origin;  ///< how it was chosen: "OFFLOADKIT_PYTHON=..." or "python3 from PATH"
  std::string command = "check";  ///< the `python -m offloadkit` command it is to run
};

/// The interpreter OFFLOADKIT_PYTHON names (a path, or a name looked up on PATH), else python3 on
/// PATH, to run `python -m offloadkit <command>`. Throws unavailable_error naming what was looked
/// for when there is none.
python_interpreter find_python_interpreter(const std::string& command = "check");

/// Starts `python` once to import offloadkit._native, and throws unavailable_error, naming the
/// interpreter, OFFLOADKIT_PYTHON and how to install the package, when it cannot be started, cannot
/// import the package, or imports one whose version (`version`) or plugin ABI
/// (`plugin_abi_version`) differs from this command's.
void expect_offloadkit_package(const python_interpreter& python, const std::string& version,
                               unsigned plugin_abi_version);

/// The text every unavailable_error above ends with: how to install the package into `python`.
std::string python_install_hint(const python_interpreter& python);

/// Replaces this process by `<python> -m offloadkit <command> <args...>` (exec), so that its
/// output, its exit status and the signals it gets are those of the Python command itself. Returns
/// only by throwing unavailable_error when the exec fails.
[[noreturn]] void exec_python_command(const python_interpreter& python, const std::string& command,
                                      const std::vector<std::string>& args);

}  // namespace offloadkit::tools
