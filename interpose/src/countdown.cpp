// The countdown's decisions: reading the interposer's report and a scenario's result, classifying
// a case, and the table.
#include "offloadkit/interpose/countdown.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "offloadkit/detail/text.hpp"
#include "offloadkit/interpose/control.h"

namespace offloadkit::interpose {
namespace {

using nlohmann::json;
using ::offloadkit::detail::join;

std::int64_t get_i64(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

}  // namespace

interposer_report interposer_report::parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the interposer's report is not JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != OKIT_INTERPOSE_REPORT_FORMAT) {
    throw std::runtime_error(
        "the interposer's report lacks \"format\": \"" OKIT_INTERPOSE_REPORT_FORMAT "\"");
  }
  interposer_report r;
  try {
    r.reason = j.at("reason").get<std::string>();
    if (j.at("armed_call").is_number_unsigned())
      r.armed_call = j["armed_call"].get<std::uint64_t>();
    r.counted_calls = j.at("counted_calls").get<std::uint64_t>();
    const auto& injected = j.at("injected");
    if (!injected.empty()) {
      r.failed_function = injected.at(0).at("function").get<std::string>();
      r.failed_error = injected.at(0).at("error").get<int>();
    }
    for (const auto& [name, f] : j.at("functions").items()) {
      r.functions[name] =
          function_counts{f.value("calls", std::uint64_t{0}), f.value("failed", std::uint64_t{0}),
                          f.value("errors", std::uint64_t{0})};
    }
    const auto& o = j.at("outstanding");
    r.outstanding.physical_handles = get_i64(o, "physical_handles");
    r.outstanding.reservations = get_i64(o, "reservations");
    r.outstanding.mapped_bytes = get_i64(o, "mapped_bytes");
    r.outstanding.device_allocations = get_i64(o, "device_allocations");
    r.outstanding.device_bytes = get_i64(o, "device_bytes");
    r.outstanding.pinned_allocations = get_i64(o, "pinned_allocations");
    r.outstanding.pinned_bytes = get_i64(o, "pinned_bytes");
    const auto& u = j.at("untracked");
    r.untracked_releases = u.value("releases", std::uint64_t{0});
    r.table_full = u.value("table_full", std::uint64_t{0});
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("the interposer's report is incomplete: ") + e.what());
  }
  return r;
}

std::optional<interposer_report> read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) return std::nullopt;
  return interposer_report::parse(text.str());
}

std::string describe_leak(const outstanding_resources& o) {
  std::vector<std::string> parts;
  auto add = [&parts](std::int64_t n, const char* what) {
    if (n > 0) parts.push_back(std::to_string(n) + " " + what);
  };
  add(o.physical_handles, "physical allocation handle(s) created and never released");
  add(o.reservations, "address reservation(s) not freed");
  add(o.mapped_bytes, "mapped byte(s) not unmapped");
  add(o.device_allocations, "device allocation(s) not freed");
  if (o.device_allocations > 0 && o.device_bytes > 0) {
    parts.back() += " (" + std::to_string(o.device_bytes) + " bytes)";
  }
  add(o.pinned_allocations, "pinned host allocation(s) not freed");
  if (o.pinned_allocations > 0 && o.pinned_bytes > 0) {
    parts.back() += " (" + std::to_string(o.pinned_bytes) + " bytes)";
  }
  return join(parts, ", ");
}

outstanding_resources released_between(const outstanding_resources& before,
                                       const outstanding_resources& after) {
  auto less = [](std::int64_t b, std::int64_t a) { return b > a ? b - a : 0; };
  outstanding_resources r;
  r.physical_handles = less(before.physical_handles, after.physical_handles);
  r.reservations = less(before.reservations, after.reservations);
  r.mapped_bytes = less(before.mapped_bytes, after.mapped_bytes);
  r.device_allocations = less(before.device_allocations, after.device_allocations);
  r.device_bytes = less(before.device_bytes, after.device_bytes);
  r.pinned_allocations = less(before.pinned_allocations, after.pinned_allocations);
  r.pinned_bytes = less(before.pinned_bytes, after.pinned_bytes);
  return r;
}

std::string describe_resources(const outstanding_resources& o) {
  std::vector<std::string> parts;
  auto add = [&parts](std::int64_t n, const char* what, std::int64_t bytes) {
    if (n <= 0) return;
    parts.push_back(std::to_string(n) + " " + what);
    if (bytes > 0) parts.back() += " (" + std::to_string(bytes) + " bytes)";
  };
  add(o.physical_handles, "physical allocation handle(s)", 0);
  add(o.reservations, "address reservation(s)", 0);
  add(o.mapped_bytes, "mapped byte(s)", 0);
  add(o.device_allocations, "device allocation(s)", o.device_bytes);
  add(o.pinned_allocations, "pinned host allocation(s)", o.pinned_bytes);
  return join(parts, ", ");
}

std::string scenario_result::to_json() const {
  return json{{"feature", feature},         {"implementation", implementation},
              {"failed_step", failed_step}, {"error", error},
              {"typed_error", typed_error}, {"retried", retried},
              {"retry_ok", retry_ok},       {"retry_error", retry_error},
              {"data_ok", data_ok},         {"consistent", consistent},
              {"problems", problems},       {"unusable", unusable},
              {"close_error", close_error}, {"framework_cache", framework_cache}}
      .dump();
}

scenario_result scenario_result::from_json(const std::string& text) {
  const json j = json::parse(text);
  scenario_result r;
  r.feature = j.at("feature").get<std::string>();
  r.implementation = j.at("implementation").get<std::string>();
  r.failed_step = j.at("failed_step").get<std::string>();
  r.error = j.at("error").get<std::string>();
  r.typed_error = j.at("typed_error").get<bool>();
  r.retried = j.at("retried").get<bool>();
  r.retry_ok = j.at("retry_ok").get<bool>();
  r.retry_error = j.at("retry_error").get<std::string>();
  r.data_ok = j.at("data_ok").get<bool>();
  r.consistent = j.at("consistent").get<bool>();
  r.problems = j.at("problems").get<std::vector<std::string>>();
  r.unusable = j.at("unusable").get<std::string>();
  r.close_error = j.value("close_error", std::string());
  r.framework_cache = j.value("framework_cache", std::string());
  return r;
}

const char* to_string(fault_class c) noexcept {
  switch (c) {
    case fault_class::clean:
      return "clean";
    case fault_class::retry_failed:
      return "retry failed";
    case fault_class::data_lost:
      return "data lost";
    case fault_class::inconsistent:
      return "inconsistent";
    case fault_class::close_failed:
      return "close failed";
    case fault_class::leak:
      return "leak";
    case fault_class::exited:
      return "exited";
    case fault_class::crashed:
      return "crashed";
    case fault_class::hung:
      return "hung";
    case fault_class::unknown:
      return "unknown";
  }
  return "unknown";
}

namespace {

/// "after cuMemMap failed (error 2)", or empty when nothing was injected.
std::string after_failure(const std::optional<interposer_report>& r) {
  if (!r || !r->failed_function) return "";
  return " after " + *r->failed_function + " failed (error " + std::to_string(r->failed_error) +
         ")";
}

/// The ledger's verdict: a leak, or why the report cannot say; nothing when it is clean.
std::optional<fault_finding> judge_ledger(const case_run& run) {
  if (!run.report) {
    return fault_finding{fault_class::unknown,
                         run.report_error.empty()
                             ? "the interposer wrote no report (was it loaded?)"
                             : "the interposer's report could not be read: " + run.report_error};
  }
  if (!run.report->complete()) {
    return fault_finding{fault_class::unknown,
                         "the interposer's report was not completed at the end of the run"};
  }
  std::string leaked = describe_leak(run.report->outstanding);
  if (leaked.empty()) return std::nullopt;
  if (run.report->table_full > 0) {
    leaked += " (the ledger overflowed: " + std::to_string(run.report->table_full) +
              " creation(s) untracked, so some of this may be released memory)";
  }
  return fault_finding{fault_class::leak, leaked};
}

/// What the scenario's own result says, worst first.
std::vector<fault_finding> judge_scenario(const scenario_result& s) {
  std::vector<fault_finding> out;
  const std::string where = s.failed_step.empty() ? "" : " in " + s.failed_step;
  if (!s.data_ok) out.push_back({fault_class::data_lost, join(s.problems, "; ")});
  if (s.retried && !s.retry_ok) {
    out.push_back(
        {fault_class::retry_failed, s.error + where + "; the retry failed: " + s.retry_error});
  }
  if (!s.consistent || !s.typed_error) {
    std::vector<std::string> why = s.problems;
    if (!s.typed_error) {
      why.push_back("the error" + where + " was not one of offloadkit's typed errors: " + s.error);
    }
    out.push_back({fault_class::inconsistent, join(why, "; ")});
  }
  // A close that failed comes before the ledger: what it could not release may be what the
  // ledger holds.
  if (!s.close_error.empty()) out.push_back({fault_class::close_failed, s.close_error});
  return out;
}

/// The row's detail, with what a framework's cache gave back before the ledger was read.
void note_framework_cache(case_row& row, const case_run& run) {
  if (!run.scenario || run.scenario->framework_cache.empty()) return;
  row.detail += (row.detail.empty() ? "" : "; ") + std::string("framework cache: ") +
                run.scenario->framework_cache;
}

/// How a process that wrote its result then ended: "crashed: signal 11 (SIGSEGV) after its
/// result", "exited with code 3 after its result", "still running 30 s after its result
/// (killed)".
std::string shutdown_of(const process_end& p) {
  switch (p.end) {
    case process_end::how::signaled:
      return "crashed: signal " + std::to_string(p.signal) + " (" + p.signal_name +
             ") after its result";
    case process_end::how::timed_out:
      return p.past_grace
                 ? "still running " + std::to_string(p.grace_s) + " s after its result (killed)"
                 : "still running at the time limit (" + std::to_string(p.timeout_s) +
                       " s) after its result";
    case process_end::how::exited:
      break;
  }
  return "exited with code " + std::to_string(p.exit_code) + " after its result";
}

case_row classify_without_notes(std::uint64_t n, const case_run& run) {
  case_row row;
  row.n = n;
  row.seconds = run.process.seconds;
  row.output = run.process.output;
  const bool injected = run.report && run.report->failed_function;
  if (injected) row.call = *run.report->failed_function;
  const std::string after = after_failure(run.report);

  const bool exited_cleanly =
      run.process.end == process_end::how::exited && run.process.exit_code == 0;
  if (run.scenario && !exited_cleanly) {
    // The scenario's result is in: the case is what it says. How the process then ended is the
    // implementation's shutdown (interpreter exit, a static destructor), not the fault's outcome.
    row.shutdown = shutdown_of(run.process);
  }
  // A process that died or hung before its result says nothing more: its ledger was never
  // completed.
  switch (row.shutdown.empty() ? run.process.end : process_end::how::exited) {
    case process_end::how::signaled:
      row.cls = fault_class::crashed;
      row.detail = "signal " + std::to_string(run.process.signal) + " (" + run.process.signal_name +
                   ")" + after;
      return row;
    case process_end::how::timed_out:
      row.cls = fault_class::hung;
      row.detail = "still running after " + std::to_string(run.process.timeout_s) + " s" + after;
      return row;
    case process_end::how::exited:
      break;
  }

  std::vector<fault_finding> found;
  if (run.scenario && !run.scenario->unusable.empty()) {
    row.cls = fault_class::unknown;
    row.detail = run.scenario->unusable;
    return row;
  }
  if (!run.scenario && run.process.exit_code != 0) {
    // A black box's exit status is all it says.
    found.push_back(
        {fault_class::exited, "exit code " + std::to_string(run.process.exit_code) + after});
  }
  if (run.scenario) {
    for (fault_finding& f : judge_scenario(*run.scenario)) found.push_back(std::move(f));
  }
  // The ledger is read whatever else went wrong: a case can fail its retry and leak too. One a
  // shutdown left unfinished cannot be judged, which the detail says instead.
  std::string unjudged;
  if (auto ledger = judge_ledger(run)) {
    if (!row.shutdown.empty() && ledger->cls == fault_class::unknown) {
      unjudged = "leaks not judged: " + ledger->detail + " (the process did not exit cleanly)";
    } else {
      found.push_back(std::move(*ledger));
    }
  }
  const auto add_shutdown = [&row, &unjudged] {
    if (!unjudged.empty()) row.detail += (row.detail.empty() ? "" : "; ") + unjudged;
    if (!row.shutdown.empty()) {
      row.detail += (row.detail.empty() ? "" : "; ") + std::string("shutdown: ") + row.shutdown;
    }
  };
  if (!found.empty()) {
    row.cls = found.front().cls;
    row.detail = found.front().detail;
    row.also.assign(found.begin() + 1, found.end());
    for (const fault_finding& f : row.also) {
      row.detail += "; also " + std::string(to_string(f.cls)) + ": " + f.detail;
    }
    add_shutdown();
    return row;
  }
  row.cls = fault_class::clean;
  if (!injected) {
    row.detail = "no call " + std::to_string(n) + ": the run made " +
                 std::to_string(run.report->counted_calls) + " counted call(s)";
  } else if (run.scenario && !run.scenario->error.empty()) {
    // The kind of error is enough for a clean row; the message is long (it names the plugin).
    const std::string& e = run.scenario->error;
    row.detail =
        e.substr(0, e.find(':')) + " in " + run.scenario->failed_step + "; the retry worked";
  } else if (run.scenario) {
    row.detail = "absorbed: no error reached the caller" +
                 (run.scenario->failed_step.empty() ? "" : " in " + run.scenario->failed_step);
  } else {
    row.detail = "exit code 0";
  }
  add_shutdown();
  return row;
}

}  // namespace

case_row classify(std::uint64_t n, const case_run& run) {
  case_row row = classify_without_notes(n, run);
  note_framework_cache(row, run);
  return row;
}

countdown_result run_countdown(
    const std::function<std::optional<case_run>(std::uint64_t n)>& run_case,
    std::uint64_t max_cases, std::optional<std::uint64_t> only,
    const std::function<void(const case_row&)>& on_row) {
  countdown_result out;
  for (std::uint64_t n = only.value_or(0);; ++n) {
    if (!only && n >= max_cases) {
      out.stopped = "stopped after " + std::to_string(max_cases) + " cases";
      return out;
    }
    const std::optional<case_run> run = run_case(n);
    if (!run) {
      out.stopped = "interrupted";
      return out;
    }
    case_row row = classify(n, *run);
    if (on_row) on_row(row);
    out.rows.push_back(std::move(row));
    if (run->report) out.calls = run->report->counted_calls;
    if (only) {
      out.complete = true;
      return out;
    }
    if (!run->report) {
      out.stopped = "case " + std::to_string(n) +
                    " left no interposer report, so whether it reached its call cannot be told";
      return out;
    }
    if (!run->report->failed_function) {
      out.complete = true;
      return out;
    }
  }
}

std::vector<std::string> countdown_case_environment(const std::string& interposer, std::uint64_t n,
                                                    const std::string& report_path,
                                                    bool window_closed, const std::string& kinds) {
  std::string preload = interposer;
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0') {
    preload += ":" + std::string(existing);
  }
  return {"LD_PRELOAD=" + preload, std::string(OKIT_INTERPOSE_ENV_CALL) + "=" + std::to_string(n),
          std::string(OKIT_INTERPOSE_ENV_REPORT) + "=" + report_path,
          std::string(OKIT_INTERPOSE_ENV_KINDS) + "=" + kinds,
          std::string(OKIT_INTERPOSE_ENV_WINDOW) + "=" + (window_closed ? "closed" : "open")};
}

std::string find_interposer(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    struct stat st {};
    // A readable regular file: a folder named by OFFLOADKIT_INTERPOSE_LIBRARY is not a library.
    if (!c.empty() && ::stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(c.c_str(), R_OK) == 0) {
      return c;
    }
  }
  return "";
}

void print_countdown_table(std::ostream& os, const std::vector<case_row>& rows) {
  const std::vector<std::string> header = {"N", "failed call", "result", "detail"};
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& r : rows) {
    cells.push_back({std::to_string(r.n), r.call.empty() ? "(none reached)" : r.call,
                     to_string(r.cls), r.detail});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& c : cells) {
    // The detail is last and may be long: it sets no width.
    for (std::size_t i = 0; i + 1 < c.size(); ++i) width[i] = std::max(width[i], c[i].size());
  }
  auto print = [&](const std::vector<std::string>& c) {
    std::string line;
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (i > 0) line += " | ";
      const std::string pad(i + 1 < c.size() ? width[i] - c[i].size() : 0, ' ');
      line += i == 0 ? pad + c[i] : c[i] + pad;  // N is a number: right-aligned
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  };
  print(header);
  std::string rule;
  for (std::size_t i = 0; i < width.size(); ++i) {
    if (i > 0) rule += "-+-";
    rule += std::string(i + 1 < width.size() ? width[i] : header[i].size(), '-');
  }
  os << rule << "\n";
  for (const auto& c : cells) print(c);

  std::map<std::string, std::size_t> counts;
  for (const auto& r : rows) ++counts[to_string(r.cls)];
  std::vector<std::string> parts;
  parts.reserve(counts.size());
  for (const auto& [name, count] : counts) parts.push_back(std::to_string(count) + " " + name);
  os << rows.size() << " case(s): " << join(parts, ", ") << "\n";
}

bool all_clean(const std::vector<case_row>& rows) {
  return std::all_of(rows.begin(), rows.end(),
                     [](const case_row& r) { return r.cls == fault_class::clean; });
}

}  // namespace offloadkit::interpose
