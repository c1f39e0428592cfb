// Finding and loading NCCL at run time. The GPU machines this test runs on get NCCL from PyTorch's
// pip wheels (nvidia-nccl-cu13 puts libnccl.so.2 under site-packages/nvidia/cu13/lib, older
// wheels under nvidia/nccl/lib), which the dynamic loader does not search, so the interpreter's
// sys.path is asked for.
#include "nccl_api.hpp"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace offloadkit::multigpu {
namespace {

const char* dl_error_text() {
  const char* why = dlerror();
  return why != nullptr ? why : "dlopen failed without a message";
}

template <class Fn>
void resolve(void* handle, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

/// Loads `candidate` and resolves the entry points; on failure says why in `why`.
bool try_load(const std::string& candidate, nccl_api& api, std::string& why) {
  (void)dlerror();
  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace; this program calls them only
  // through the pointers below. The handle is never closed: NCCL cannot be unloaded safely.
  void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = dl_error_text();
    return false;
  }
  nccl_api a;
  // The entry points every variant needs; the first one missing is named.
  const char* missing = nullptr;
  const auto require = [&](const char* symbol, auto& fn) {
    resolve(handle, symbol, fn);
    if (fn == nullptr && missing == nullptr) missing = symbol;
  };
  require("ncclGetVersion", a.get_version);
  require("ncclGetErrorString", a.get_error_string);
  require("ncclCommInitAll", a.comm_init_all);
  require("ncclCommDestroy", a.comm_destroy);
  require("ncclGroupStart", a.group_start);
  require("ncclGroupEnd", a.group_end);
  require("ncclAllReduce", a.all_reduce);
  if (missing != nullptr) {
    why = std::string("loaded, but it has no ") + missing + " (not NCCL's C API?)";
    return false;
  }
  resolve(handle, "ncclGetLastError", a.get_last_error);
  resolve(handle, "ncclCommGetAsyncError", a.comm_get_async_error);
  resolve(handle, "ncclCommFinalize", a.comm_finalize);
  resolve(handle, "ncclCommRegister", a.comm_register);
  resolve(handle, "ncclCommDeregister", a.comm_deregister);
  if (a.comm_register == nullptr || a.comm_deregister == nullptr) {
    a.comm_register = nullptr;
    a.comm_deregister = nullptr;
  }
  if (const nccl_result r = a.get_version(&a.version); r != nccl_success) {
    why = "loaded, but ncclGetVersion failed with ncclResult_t " + std::to_string(r);
    return false;
  }
  // The file behind a bare name ("libnccl.so.2"), as the loader found it.
  a.path = candidate;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(a.get_version), &info) != 0 && info.dli_fname != nullptr) {
    a.path = info.dli_fname;
  }
  api = std::move(a);
  return true;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

/// The interpreter's sys.executable followed by its sys.path, one per line; `why` says what went
/// wrong when the list is empty.
std::vector<std::string> python_sys_path(const std::string& python, std::string& why) {
  const std::string command =
      shell_quote(python) +
      " -c 'import sys; print(sys.executable); print(*sys.path, sep=chr(10))' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    why = "cannot run " + python;
    return {};
  }
  std::vector<std::string> lines;
  std::string line;
  for (int c = 0; (c = std::fgetc(pipe)) != EOF;) {
    if (c == '\n') {
      lines.push_back(line);
      line.clear();
    } else {
      line += static_cast<char>(c);
    }
  }
  if (!line.empty()) lines.push_back(line);
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    why = python + " did not run (" +
          (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127
               ? std::string("not found")
               : "exit status " + std::to_string(status)) +
          ")";
    return {};
  }
  return lines;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

}  // namespace

std::string nccl_api::version_text() const {
  // NCCL_VERSION_CODE: X * 10000 + Y * 100 + Z since 2.9, X * 1000 + Y * 100 + Z before.
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
  const int patch = version % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string nccl_api::error_text(nccl_result result, nccl_comm_t comm) const {
  static const char* const names[] = {
      "ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
      "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
      "ncclRemoteError",   "ncclInProgress",         "ncclTimeout"};
  const int r = static_cast<int>(result);
  std::string text = r >= 0 && r < static_cast<int>(std::size(names))
                         ? names[r]
                         : "ncclResult_t " + std::to_string(r);
  text += " (" + std::to_string(r) + ")";
  if (get_error_string != nullptr) {
    const char* s = get_error_string(result);
    if (s != nullptr) text += std::string(": ") + s;
  }
  if (get_last_error != nullptr) {
    const char* last = get_last_error(comm);
    if (last != nullptr && *last != '\0') text += std::string("; last error: ") + last;
  }
  return text;
}

std::string nccl_search::summary() const {
  std::string s = "tried ";
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    s += (i == 0 ? "" : "; ") + attempts[i];
  }
  s += ". Set OFFLOADKIT_NCCL_LIBRARY=/path/to/libnccl.so.2 (pip install nvidia-nccl-cu13 puts it "
       "under site-packages/nvidia/cu13/lib), or OFFLOADKIT_PYTHON to the interpreter whose "
       "site-packages hold it";
  return s;
}

nccl_search find_nccl() {
  nccl_search search;
  std::string why;
  auto attempt = [&](const std::string& what, const std::string& path) {
    if (try_load(path, search.api, why)) {
      search.loaded = true;
      return true;
    }
    search.attempts.push_back(what + ": " + why);
    return false;
  };

  if (const char* env = std::getenv("OFFLOADKIT_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    if (attempt(std::string("OFFLOADKIT_NCCL_LIBRARY=") + env, env)) return search;
  } else {
    search.attempts.emplace_back("OFFLOADKIT_NCCL_LIBRARY: not set");
  }
  if (attempt("dlopen(libnccl.so.2) on the loader's search path", "libnccl.so.2")) return search;

  // The interpreter named, or python3 on PATH and the system's (which may differ from a venv's).
  std::vector<std::string> pythons;
  if (const char* env = std::getenv("OFFLOADKIT_PYTHON"); env != nullptr && *env != '\0') {
    pythons.emplace_back(env);
  } else {
    pythons = {"python3", "/usr/bin/python3"};
  }
  static const char* const wheel_folders[] = {"nvidia/nccl/lib", "nvidia/cu13/lib",
                                              "nvidia/cu12/lib", "torch/lib"};
  std::vector<std::string> executables;
  for (const std::string& python : pythons) {
    std::vector<std::string> lines = python_sys_path(python, why);
    if (lines.empty()) {
      std::string attempt_text = python;
      attempt_text += "'s site-packages: ";
      attempt_text += why;
      search.attempts.push_back(std::move(attempt_text));
      continue;
    }
    const std::string executable = lines.front();
    lines.erase(lines.begin());
    bool seen = false;
    for (const std::string& e : executables) seen = seen || e == executable;
    if (seen) continue;  // /usr/bin/python3 is python3 on PATH
    executables.push_back(executable);
    std::string searched;
    for (const std::string& entry : lines) {
      if (entry.empty() || entry.front() != '/') continue;  // "" is the current folder
      search.python_paths.push_back(entry);
      searched += (searched.empty() ? "" : ", ") + entry;
      for (const char* folder : wheel_folders) {
        const std::string path = entry + "/" + folder + "/libnccl.so.2";
        if (exists(path) && attempt(path, path)) return search;
      }
    }
    std::string attempt_text = python;
    attempt_text += " (" + executable + ") sys.path entries [";
    attempt_text += searched;
    attempt_text +=
        "]: none holds libnccl.so.2 under nvidia/nccl/lib, nvidia/cu13/lib, nvidia/cu12/lib or "
        "torch/lib";
    search.attempts.push_back(std::move(attempt_text));
  }
  return search;
}

}  // namespace offloadkit::multigpu
