#include "python_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "cli_common.hpp"
#include "isolation.hpp"

namespace offloadkit::tools {
namespace {

/// How long the interpreter may take to import the package (a cold NumPy or torch import on a
/// slow file system takes seconds).
constexpr std::chrono::seconds probe_timeout{120};

/// Marks the probe's answer among whatever else the interpreter prints (a sitecustomize, say).
constexpr const char* probe_marker = "offloadkit-probe: ";

/// Imports the package as `python -m offloadkit` will, and prints what it found as one JSON line.
constexpr const char* probe_script = R"(import json, sys
try:
    import offloadkit, offloadkit._native as m
    r = {"version": m.version, "plugin_abi": getattr(m, "plugin_abi_version", None),
         "package": offloadkit.__file__}
except BaseException as e:
    r = {"error": f"{type(e).__name__}: {e}"}
print("offloadkit-probe: " + json.dumps(r), flush=True)
)";

bool is_executable_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

/// `name` looked up on PATH as execvp would; empty when it is on none of its folders.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string folders = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= folders.size()) {
    std::size_t end = folders.find(':', begin);
    if (end == std::string::npos) end = folders.size();
    const std::string folder = end > begin ? folders.substr(begin, end - begin) : ".";
    const std::filesystem::path candidate = std::filesystem::path(folder) / name;
    if (is_executable_file(candidate)) {
      std::error_code ec;
      const auto absolute = std::filesystem::absolute(candidate, ec);
      return ec ? candidate.string() : absolute.lexically_normal().string();
    }
    begin = end + 1;
  }
  return {};
}

/// How an error about the interpreter begins: check --python names its option; ecosystem, a
/// command that runs there whole, names none (run_guarded names the command).
std::string error_lead(const python_interpreter& python) {
  return python.command == "check" ? "--python: " : "";
}

}  // namespace

std::string python_install_hint(const python_interpreter& python) {
  return "install offloadkit into that interpreter (`" + python.path +
         " -m pip install --no-build-isolation .` from offloadkit's checkout), or set "
         "OFFLOADKIT_PYTHON to an interpreter that has it (python -m offloadkit " +
         python.command + " runs the same command there)";
}

python_interpreter find_python_interpreter(const std::string& command) {
  const std::string runs = (command == "check" ? "--python runs" : "it runs") +
                           std::string(" `python3 -m offloadkit ") + command + "`";
  const char* chosen = std::getenv("OFFLOADKIT_PYTHON");
  if (chosen != nullptr && chosen[0] != '\0') {
    const std::string value = chosen;
    python_interpreter p{value, "OFFLOADKIT_PYTHON=" + value, command};
    if (value.find('/') == std::string::npos) {
      p.path = on_path(value);
      if (p.path.empty()) {
        throw unavailable_error(
            runs + " in the interpreter OFFLOADKIT_PYTHON names, but OFFLOADKIT_PYTHON=" + value +
            " is not on PATH: set it to an interpreter's path");
      }
    } else if (!is_executable_file(value)) {
      throw unavailable_error(
          runs + " in the interpreter OFFLOADKIT_PYTHON names, but OFFLOADKIT_PYTHON=" + value +
          " is not an executable file: set it to an interpreter that has offloadkit ("
          "`pip install --no-build-isolation .` from offloadkit's checkout installs it)");
    }
    return p;
  }
  python_interpreter p{on_path("python3"), "python3 from PATH", command};
  if (p.path.empty()) {
    throw unavailable_error(runs +
                            ", but there is no python3 on PATH: set OFFLOADKIT_PYTHON to an "
                            "interpreter that has offloadkit (`pip install "
                            "--no-build-isolation .` from offloadkit's checkout installs it)");
  }
  return p;
}

void expect_offloadkit_package(const python_interpreter& python, const std::string& version,
                               unsigned plugin_abi_version) {
  const std::string who = python.path + " (" + python.origin + ")";
  const std::string lead = error_lead(python);
  child_run run;
  try {
    run = run_child({python.path, "-c", probe_script},
                    std::chrono::duration_cast<std::chrono::milliseconds>(probe_timeout));
  } catch (const std::system_error& e) {
    throw unavailable_error(lead + "the Python interpreter " + who +
                            " cannot be started: " + e.what() + "; " + python_install_hint(python));
  }
  const auto marker = run.output.rfind(probe_marker);
  if (run.how != child_run::end::exited || marker == std::string::npos) {
    const std::string tail = last_lines(run.output, 10);
    throw unavailable_error(
        lead + "the Python interpreter " + who +
        " did not say which offloadkit it imports: " + describe_end(run, probe_timeout) +
        (tail.empty() ? std::string() : ", its output:\n" + tail) + "\n" +
        python_install_hint(python));
  }
  nlohmann::json answer;
  try {
    const auto begin = marker + std::strlen(probe_marker);
    answer = nlohmann::json::parse(run.output.substr(begin, run.output.find('\n', begin) - begin));
  } catch (const nlohmann::json::exception& e) {
    throw unavailable_error(lead + "the Python interpreter " + who +
                            " gave an answer that is not JSON (" + e.what() + "); " +
                            python_install_hint(python));
  }
  if (answer.contains("error")) {
    throw unavailable_error(lead + "the Python interpreter " + who + " cannot import offloadkit (" +
                            answer["error"].get<std::string>() + "); " +
                            python_install_hint(python));
  }
  const std::string theirs = answer.value("version", std::string("unknown"));
  const auto& abi = answer["plugin_abi"];
  const bool same_abi = abi.is_number_unsigned() && abi.get<unsigned>() == plugin_abi_version;
  if (theirs != version || !same_abi) {
    throw unavailable_error(
        lead + "the Python interpreter " + who + " imports offloadkit " + theirs + " (plugin ABI " +
        (abi.is_null() ? std::string("unknown") : abi.dump()) + ", " +
        answer.value("package", std::string("?")) + "), but this command is offloadkit " + version +
        " (plugin ABI " + std::to_string(plugin_abi_version) + "): " + python_install_hint(python));
  }
}

void exec_python_command(const python_interpreter& python, const std::string& command,
                         const std::vector<std::string>& args) {
  std::vector<std::string> words = {python.path, "-m", "offloadkit", command};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(words.size() + 1);
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::execv(python.path.c_str(), argv.data());
  const int err = errno;
  throw unavailable_error(error_lead(python) + "the Python interpreter " + python.path + " (" +
                          python.origin + ") cannot be started: " + std::strerror(err) + "; " +
                          python_install_hint(python));
}

}  // namespace offloadkit::tools
