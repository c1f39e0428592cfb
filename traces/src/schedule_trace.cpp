// Schedules in timelines (schedule_trace.hpp): the NVTX event texts and their conversion back
// into a schedule file.
#include "offloadkit/traces/schedule_trace.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <sstream>

#include "offloadkit/error.hpp"

namespace offloadkit::traces {
namespace {

constexpr const char* prefix = "offloadkit.";

std::string key_fields(stash::stash_key k) {
  return "vp=" + std::to_string(k.vp) + " layer=" + std::to_string(k.layer) +
         " mb=" + std::to_string(k.microbatch);
}

/// One event's text split into its kind ("stash") and fields; name= takes the rest of the text.
struct parsed_event {
  std::string kind;
  std::map<std::string, std::string> fields;
  std::optional<std::string> name;
};

/// Thrown inside the conversion and given the event's identity by the caller.
struct bad_event {
  std::string reason;
};

parsed_event split(const std::string& text) {
  parsed_event e;
  std::size_t i = std::string(prefix).size();
  std::size_t sp = text.find(' ', i);
  e.kind = text.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
  while (sp != std::string::npos) {
    i = sp + 1;
    if (i >= text.size()) break;
    if (text[i] == ' ') {
      sp = i;
      continue;
    }
    if (text.compare(i, 5, "name=") == 0) {
      e.name = text.substr(i + 5);
      break;
    }
    sp = text.find(' ', i);
    const std::string token = text.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
    const auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw bad_event{"'" + token + "' is not a field=value pair"};
    }
    const std::string field = token.substr(0, eq);
    if (!e.fields.emplace(field, token.substr(eq + 1)).second) {
      throw bad_event{"field " + field + " is given twice"};
    }
  }
  return e;
}

std::uint64_t number(const std::string& field, const std::string& value, std::uint64_t max) {
  std::uint64_t v = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end) {
    throw bad_event{field + " = '" + value + "' is not a non-negative integer"};
  }
  if (v > max) {
    throw bad_event{field + " = " + value + " is outside [0, " + std::to_string(max) + "]"};
  }
  return v;
}

/// Takes a required field out of `e` (so that fields left over are the unknown ones).
std::uint64_t take(parsed_event& e, const std::string& field, std::uint64_t max) {
  auto it = e.fields.find(field);
  if (it == e.fields.end()) throw bad_event{"the field " + field + "= is missing"};
  const std::uint64_t v = number(field, it->second, max);
  e.fields.erase(it);
  return v;
}

void no_more_fields(const parsed_event& e, const char* valid) {
  if (!e.fields.empty()) {
    throw bad_event{"unknown field " + e.fields.begin()->first + "= (" + e.kind + " takes " +
                    valid + ")"};
  }
  if (e.name && e.kind != "schedule") throw bad_event{"unknown field name= for " + e.kind};
}

stash::stash_key key_of(parsed_event& e) {
  stash::stash_key k;
  constexpr std::uint64_t u32 = 0xffffffffu;
  k.vp = static_cast<std::uint32_t>(take(e, "vp", u32));
  k.layer = static_cast<std::uint32_t>(take(e, "layer", u32));
  k.microbatch = static_cast<std::uint32_t>(take(e, "mb", u32));
  return k;
}

schedule_shape shape_of(parsed_event& e) {
  constexpr std::uint64_t u32 = 0xffffffffu;
  schedule_shape s;
  const std::uint64_t version = take(e, "version", u32);
  if (version != static_cast<std::uint64_t>(schedule_format_version)) {
    throw bad_event{"version = " + std::to_string(version) +
                    " is not supported (this reader reads " +
                    std::to_string(schedule_format_version) + ")"};
  }
  s.pipeline_size = static_cast<std::uint32_t>(take(e, "pipeline_size", u32));
  s.pipeline_rank = static_cast<std::uint32_t>(take(e, "pipeline_rank", u32));
  s.virtual_stages = static_cast<std::uint32_t>(take(e, "virtual_stages", u32));
  s.layers = static_cast<std::uint32_t>(take(e, "layers", u32));
  s.microbatches = static_cast<std::uint32_t>(take(e, "microbatches", u32));
  s.max_rows = take(e, "max_rows", ~std::uint64_t{0});
  s.page_rows = static_cast<std::uint32_t>(take(e, "page_rows", u32));
  auto rb = e.fields.find("row_bytes");
  if (rb == e.fields.end()) throw bad_event{"the field row_bytes= is missing"};
  std::size_t i = 0;
  const std::string& list = rb->second;
  do {
    const std::size_t comma = list.find(',', i);
    s.row_bytes.push_back(number(
        "row_bytes", list.substr(i, comma == std::string::npos ? std::string::npos : comma - i),
        ~std::uint64_t{0}));
    i = comma == std::string::npos ? list.size() + 1 : comma + 1;
  } while (i <= list.size());
  e.fields.erase(rb);
  if (e.name) s.name = *e.name;
  no_more_fields(e,
                 "version, pipeline_size, pipeline_rank, virtual_stages, layers, microbatches, "
                 "max_rows, page_rows, row_bytes and name");
  return s;
}

std::string time_text(std::int64_t ns) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(3);
  o << static_cast<double>(ns) / 1e6 << " ms";
  return o.str();
}

/// The step index a schedule_error from validation names ("/steps/17..." or its step()).
std::optional<std::size_t> step_of(const schedule_error& e) {
  if (e.step() != schedule_error::npos) return e.step();
  const std::string& w = e.where();
  const std::string head = "/steps/";
  if (w.compare(0, head.size(), head) != 0) return std::nullopt;
  std::size_t v = 0;
  const char* b = w.data() + head.size();
  const char* end = w.data() + w.size();
  const auto [p, ec] = std::from_chars(b, end, v);
  if (ec != std::errc() || p == b) return std::nullopt;
  return v;
}

}  // namespace

std::string schedule_event_text(const schedule_shape& s) {
  std::string t =
      std::string(prefix) + "schedule version=" + std::to_string(schedule_format_version) +
      " pipeline_size=" + std::to_string(s.pipeline_size) +
      " pipeline_rank=" + std::to_string(s.pipeline_rank) +
      " virtual_stages=" + std::to_string(s.virtual_stages) +
      " layers=" + std::to_string(s.layers) + " microbatches=" + std::to_string(s.microbatches) +
      " max_rows=" + std::to_string(s.max_rows) + " page_rows=" + std::to_string(s.page_rows) +
      " row_bytes=";
  for (std::size_t i = 0; i < s.row_bytes.size(); ++i) {
    t += (i == 0 ? "" : ",") + std::to_string(s.row_bytes[i]);
  }
  if (!s.name.empty()) t += " name=" + s.name;
  return t;
}

std::string pools_event_text(std::uint64_t device_pages, std::uint64_t pinned_pages) {
  return std::string(prefix) + "pools device_pages=" + std::to_string(device_pages) +
         " pinned_pages=" + std::to_string(pinned_pages);
}

std::string stash_event_text(stash::stash_key k, std::uint64_t rows) {
  return std::string(prefix) + "stash " + key_fields(k) + " rows=" + std::to_string(rows);
}

std::string restore_event_text(stash::stash_key k) {
  return std::string(prefix) + "restore " + key_fields(k);
}

bool is_schedule_event(const record& r) {
  return r.kind == record_kind::range && r.end_ns == r.start_ns &&
         (r.domain.empty() || r.domain == schedule_nvtx_domain) &&
         r.name.compare(0, std::string(prefix).size(), prefix) == 0;
}

namespace {

/// The convention's events in recording order (stable by time: equal times keep file order).
std::vector<const record*> events_of(const timeline& t) {
  std::vector<const record*> ev;
  for (const auto& r : t.records) {
    if (is_schedule_event(r)) ev.push_back(&r);
  }
  std::stable_sort(ev.begin(), ev.end(),
                   [](const record* a, const record* b) { return a->start_ns < b->start_ns; });
  return ev;
}

}  // namespace

std::size_t schedule_recordings(const timeline& t) {
  std::size_t n = 0;
  const std::string head = std::string(prefix) + "schedule";
  for (const record* r : events_of(t)) {
    if (r->name.compare(0, head.size(), head) == 0 &&
        (r->name.size() == head.size() || r->name[head.size()] == ' ')) {
      ++n;
    }
  }
  return n;
}

trace_schedule_error::trace_schedule_error(std::size_t event, std::int64_t time_ns,
                                           std::string text, std::string reason)
    : logic_error("event " + std::to_string(event) + " ('" + text + "' at " + time_text(time_ns) +
                  "): " + reason),
      event_(event),
      text_(std::move(text)),
      reason_(std::move(reason)) {}

schedule_file schedule_from_timeline(const timeline& t, std::size_t index) {
  const auto events = events_of(t);
  const std::size_t recordings = schedule_recordings(t);
  if (index >= recordings) {
    throw logic_error(
        recordings == 0
            ? std::string("the timeline holds no recording (no NVTX mark 'offloadkit.schedule ...'"
                          " in the domain 'offloadkit' or the default domain; ") +
                  std::to_string(events.size()) + " other offloadkit events)"
            : "recording " + std::to_string(index) + " is outside [0, " +
                  std::to_string(recordings) + "): the timeline holds " +
                  std::to_string(recordings) + (recordings == 1 ? " recording" : " recordings"));
  }
  std::optional<schedule_recorder> rec;
  std::vector<std::size_t> step_event;  // the event of each step
  std::size_t seen = 0;
  std::size_t last = 0;
  auto fail = [&](std::size_t i, const std::string& reason) -> trace_schedule_error {
    return {i, events[i]->start_ns, events[i]->name, reason};
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    const record& r = *events[i];
    try {
      parsed_event e = split(r.name);
      if (e.kind == "schedule") {
        if (seen++ == index + 1) break;  // the next recording begins: this one is complete
        if (seen != index + 1) continue;
        rec.emplace(shape_of(e));
        last = i;
        continue;
      }
      if (seen != index + 1) continue;  // an event of another recording
      last = i;
      if (e.kind == "stash") {
        const stash::stash_key k = key_of(e);
        const std::uint64_t rows = take(e, "rows", ~std::uint64_t{0});
        no_more_fields(e, "vp, layer, mb and rows");
        const bool agrees = r.payload == payload_type::none ||
                            (r.payload == payload_type::u64 && r.payload_u64 == rows) ||
                            (r.payload == payload_type::i64 && r.payload_i64 >= 0 &&
                             static_cast<std::uint64_t>(r.payload_i64) == rows);
        if (!agrees) {
          throw bad_event{"the payload (" +
                          (r.payload == payload_type::u64   ? std::to_string(r.payload_u64)
                           : r.payload == payload_type::i64 ? std::to_string(r.payload_i64)
                                                            : std::to_string(r.payload_f64)) +
                          ") disagrees with rows = " + std::to_string(rows)};
        }
        rec->record_stash(k);
        rec->set_rows(k, rows);
        step_event.push_back(i);
      } else if (e.kind == "restore") {
        const stash::stash_key k = key_of(e);
        no_more_fields(e, "vp, layer and mb");
        rec->record_restore(k);
        step_event.push_back(i);
      } else if (e.kind == "pools") {
        const std::uint64_t d = take(e, "device_pages", ~std::uint64_t{0});
        const std::uint64_t p = take(e, "pinned_pages", ~std::uint64_t{0});
        no_more_fields(e, "device_pages and pinned_pages");
        rec->set_pools(d, p);
      } else {
        throw bad_event{"unknown event 'offloadkit." + e.kind +
                        "' (valid: schedule, pools, stash, restore)"};
      }
    } catch (const bad_event& b) {
      throw fail(i, b.reason);
    } catch (const schedule_error& s) {
      throw fail(i, s.what());
    } catch (const logic_error& x) {  // out_of_range from the recorder: a key or rows
      throw fail(i, x.what());
    }
  }
  try {
    return rec->finish();
  } catch (const schedule_error& s) {
    const auto step = step_of(s);
    const std::size_t i = step && *step < step_event.size() ? step_event[*step] : last;
    throw fail(i, s.what());
  }
}

}  // namespace offloadkit::traces
