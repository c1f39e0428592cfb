#include "harness.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::bench {

command_line::command_line(std::string program, const std::string& description,
                           const std::string& footer)
    : program_(std::move(program)), app_(tools::make_app("", description, footer, program_)) {
  executor_option_ = tools::add_executor_option(*app_, executor_);
}

int command_line::run(int argc, const char* const* argv, const std::function<int()>& body) {
  for (int i = 0; i < argc; ++i) command_ += (i == 0 ? "" : " ") + std::string(argv[i]);
  // Last, so that the help lists it after the benchmark's own options.
  tools::add_json_option(*app_, json_);
  if (const int status = tools::parse_program_arguments(*app_, argc, argv, std::cout, std::cerr);
      status >= 0) {
    return status;
  }
  try {
    return body();
  } catch (const tools::usage_error& e) {
    std::cerr << program_ << ": " << e.what() << "\n(" << program_ << " --help shows the usage)\n";
    return tools::exit_status::usage;
  } catch (const std::exception& e) {
    std::cerr << program_ << ": " << e.what() << "\n";
    return tools::exit_status::check_failed;
  }
}

std::unique_ptr<executor> command_line::make_executor(std::string& skipped) const {
  return tools::benchmark_executor(executor_, skipped);
}

int command_line::skip(const std::string& why, json doc) const {
  std::printf("skipped: %s\n", why.c_str());
  if (!json_.empty()) {
    if (!doc.contains("benchmark")) doc["benchmark"] = program_;
    doc["command"] = command_;
    doc["skipped"] = why;
    write_json(json_, doc);
  }
  return tools::exit_status::ok;
}

std::string gpu_only_skip_reason(const std::string& executor_name, const std::string& host_reason) {
  if (executor_name == "host") return host_reason;
  if (const std::string reason = cuda_unavailable_reason(); !reason.empty()) {
    return "no usable GPU: " + reason;
  }
  return "";
}

void write_json(const std::string& path, const json& doc) {
  // Not finite (a ratio to a limit not measured, say): null, as JSON has no such number.
  const std::string text = doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  errno = 0;
  std::ofstream out(path);
  const int open_errno = out.is_open() ? 0 : errno;
  out << text;
  out.close();
  if (out) return;
  std::error_code ec;
  const std::string why = std::filesystem::is_directory(path, ec) ? path + " is a folder"
                          : open_errno != 0                       ? std::strerror(open_errno)
                                                                  : "the write failed";
  throw input_error("--json " + path + ": cannot write the file: " + why);
}

double pinned_copy_bandwidth(executor& ex, std::size_t bytes, bool to_host, int reps) {
  buffer dev(ex, memory_kind::device, bytes);
  buffer host(ex, memory_kind::pinned, bytes);
  stream s(ex);
  ex.fill(dev.data(), 1, bytes, s);
  s.synchronize();
  const double best = best_of(reps, [&] {
    if (to_host) {
      ex.copy(host.data(), dev.data(), bytes, s);
    } else {
      ex.copy(dev.data(), host.data(), bytes, s);
    }
    s.synchronize();
  });
  return static_cast<double>(bytes) / best;
}

}  // namespace offloadkit::bench
