// Chrome-trace JSON (write and read back) and the SVG timeline picture.
#include "offloadkit/traces/export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit::traces {
namespace {

using nlohmann::json;

template <class E, std::size_t N>
E parse_enum(const std::string& s, const E (&values)[N], const char* field, std::size_t index) {
  for (E v : values) {
    if (s == to_string(v)) return v;
  }
  std::string valid;
  for (E v : values) valid += std::string(valid.empty() ? "" : ", ") + to_string(v);
  OFFLOADKIT_FAIL(logic_error, "traceEvents[", index, "].args.", field, " = '", s,
                  "' is not one of: ", valid);
}

constexpr record_kind all_kinds[] = {record_kind::kernel, record_kind::memcpy, record_kind::memset,
                                     record_kind::sync,   record_kind::range,  record_kind::api};
constexpr copy_direction all_dirs[] = {copy_direction::h2d, copy_direction::d2h,
                                       copy_direction::d2d, copy_direction::h2h,
                                       copy_direction::p2p, copy_direction::unknown};
constexpr memory_location all_locs[] = {memory_location::device, memory_location::pinned,
                                        memory_location::pageable, memory_location::managed,
                                        memory_location::unknown};
constexpr sync_kind all_syncs[] = {sync_kind::context,     sync_kind::stream,
                                   sync_kind::event,       sync_kind::stream_wait_event,
                                   sync_kind::event_query, sync_kind::unknown};
constexpr payload_type all_payloads[] = {payload_type::none, payload_type::u64, payload_type::i64,
                                         payload_type::f64};
constexpr api_kind all_apis[] = {api_kind::pinned_alloc,    api_kind::pinned_free,
                                 api_kind::pinned_register, api_kind::mem_map,
                                 api_kind::mem_unmap,       api_kind::other};

// Chrome-trace lanes: pid 0 is the host (tid = thread), pid d+1 is device d (tid = stream).
std::pair<std::int64_t, std::int64_t> lane_of(const record& r) {
  if (r.is_device_work()) return {r.device + 1, r.stream};
  return {0, static_cast<std::int64_t>(r.thread & 0x7fffffffffffffffull)};
}

std::string category(const record& r) {
  if (r.kind == record_kind::memcpy) return std::string("memcpy_") + to_string(r.direction);
  if (r.kind == record_kind::api) return std::string("api_") + to_string(r.api);
  return to_string(r.kind);
}

}  // namespace

std::string to_chrome_trace(const timeline& t) {
  json events = json::array();
  std::map<std::int64_t, std::string> processes;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> threads;
  for (const auto& r : t.records) {
    const auto lane = lane_of(r);
    processes[lane.first] = lane.first == 0 ? "host" : "GPU " + std::to_string(lane.first - 1);
    threads[lane] = lane.first == 0 ? "thread " + std::to_string(lane.second)
                                    : "stream " + std::to_string(lane.second);
    json args = {{"kind", to_string(r.kind)}, {"start_ns", r.start_ns},
                 {"end_ns", r.end_ns},        {"device", r.device},
                 {"stream", r.stream},        {"thread", r.thread},
                 {"bytes", r.bytes},          {"direction", to_string(r.direction)},
                 {"src", to_string(r.src)},   {"dst", to_string(r.dst)},
                 {"sync", to_string(r.sync)}, {"api", to_string(r.api)}};
    // NVTX fields only where they say something, so that other records stay as they were.
    if (!r.domain.empty()) args["domain"] = r.domain;
    if (r.category != 0) args["category"] = r.category;
    if (r.payload != payload_type::none) {
      args["payload_type"] = to_string(r.payload);
      if (r.payload == payload_type::u64) args["payload"] = r.payload_u64;
      if (r.payload == payload_type::i64) args["payload"] = r.payload_i64;
      if (r.payload == payload_type::f64) args["payload"] = r.payload_f64;
    }
    events.push_back({{"name", r.name},
                      {"cat", category(r)},
                      {"ph", "X"},
                      {"ts", static_cast<double>(r.start_ns) / 1e3},
                      {"dur", static_cast<double>(r.duration_ns()) / 1e3},
                      {"pid", lane.first},
                      {"tid", lane.second},
                      {"args", std::move(args)}});
  }
  for (const auto& [pid, name] : processes) {
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
  for (const auto& [lane, name] : threads) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", lane.first},
                      {"tid", lane.second},
                      {"args", {{"name", name}}}});
  }
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ns"},
              {"offloadkit",
               {{"format", "offloadkit.timeline"},
                {"version", timeline_format_version},
                {"source", t.source},
                {"dropped", t.dropped}}}};
  // Replace invalid UTF-8 (kernel names come from foreign programs) instead of throwing.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_chrome_trace(const timeline& t, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "cannot open '", path, "' for writing");
  f << to_chrome_trace(t);
  f.close();
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "writing '", path, "' failed");
}

timeline parse_chrome_trace(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    OFFLOADKIT_FAIL(logic_error, "timeline: not valid JSON at byte ", e.byte, ": ", e.what());
  } catch (const json::exception& e) {
    // Numbers out of range (1e999) are reported as out_of_range, not parse_error.
    OFFLOADKIT_FAIL(logic_error, "timeline: not valid JSON: ", e.what());
  }
  OFFLOADKIT_EXPECTS(doc.is_object(), logic_error, "timeline: the document must be an object");
  timeline t;
  if (auto m = doc.find("offloadkit"); m != doc.end()) {
    OFFLOADKIT_EXPECTS(m->is_object(), logic_error, "timeline: /offloadkit must be an object");
    if (auto v = m->find("version"); v != m->end()) {
      OFFLOADKIT_EXPECTS(
          v->is_number_integer() && v->get<std::int64_t>() == timeline_format_version, logic_error,
          "timeline: /offloadkit/version = ", v->dump(),
          " is not supported (this reader reads version ", timeline_format_version, ")");
    }
    if (auto s = m->find("source"); s != m->end() && s->is_string())
      t.source = s->get<std::string>();
    if (auto d = m->find("dropped"); d != m->end() && d->is_number_unsigned()) {
      t.dropped = d->get<std::uint64_t>();
    }
  }
  auto ev = doc.find("traceEvents");
  OFFLOADKIT_EXPECTS(ev != doc.end() && ev->is_array(), logic_error,
                     "timeline: /traceEvents must be an array");
  for (std::size_t i = 0; i < ev->size(); ++i) {
    const json& e = (*ev)[i];
    OFFLOADKIT_EXPECTS(e.is_object(), logic_error, "timeline: traceEvents[", i,
                       "] must be an object");
    auto args = e.find("args");
    // Events without our fields (metadata, or events other tools added) are not records.
    if (args == e.end() || !args->is_object() || !args->contains("kind")) continue;
    auto get_int = [&](const char* field) -> std::int64_t {
      auto f = args->find(field);
      OFFLOADKIT_EXPECTS(f != args->end() && f->is_number_integer(), logic_error,
                         "timeline: traceEvents[", i, "].args.", field,
                         " must be an integer, found ",
                         f == args->end() ? std::string("nothing") : f->dump());
      return f->get<std::int64_t>();
    };
    auto get_uint = [&](const char* field) -> std::uint64_t {
      auto f = args->find(field);
      OFFLOADKIT_EXPECTS(f != args->end() && f->is_number_unsigned(), logic_error,
                         "timeline: traceEvents[", i, "].args.", field,
                         " must be a non-negative integer, found ",
                         f == args->end() ? std::string("nothing") : f->dump());
      return f->get<std::uint64_t>();
    };
    auto get_str = [&](const char* field) -> std::string {
      auto f = args->find(field);
      OFFLOADKIT_EXPECTS(f != args->end() && f->is_string(), logic_error, "timeline: traceEvents[",
                         i, "].args.", field, " must be a string");
      return f->get<std::string>();
    };
    record r;
    r.kind = parse_enum(get_str("kind"), all_kinds, "kind", i);
    auto name = e.find("name");
    if (name != e.end() && name->is_string()) r.name = name->get<std::string>();
    r.start_ns = get_int("start_ns");
    r.end_ns = get_int("end_ns");
    OFFLOADKIT_EXPECTS(r.end_ns >= r.start_ns, logic_error, "timeline: traceEvents[", i,
                       "]: end_ns = ", r.end_ns, " is before start_ns = ", r.start_ns);
    const std::int64_t device = get_int("device");
    OFFLOADKIT_EXPECTS(device >= -1 && device < (1 << 20), logic_error, "timeline: traceEvents[", i,
                       "].args.device = ", device, " is outside [-1, ", (1 << 20), ")");
    r.device = static_cast<int>(device);
    r.stream = get_int("stream");
    r.thread = get_uint("thread");
    r.bytes = get_uint("bytes");
    r.direction = parse_enum(get_str("direction"), all_dirs, "direction", i);
    r.src = parse_enum(get_str("src"), all_locs, "src", i);
    r.dst = parse_enum(get_str("dst"), all_locs, "dst", i);
    r.sync = parse_enum(get_str("sync"), all_syncs, "sync", i);
    r.api = parse_enum(get_str("api"), all_apis, "api", i);
    if (args->contains("domain")) r.domain = get_str("domain");
    if (args->contains("category")) {
      const std::uint64_t c = get_uint("category");
      OFFLOADKIT_EXPECTS(c <= 0xffffffffu, logic_error, "timeline: traceEvents[", i,
                         "].args.category = ", c, " is outside [0, 2^32)");
      r.category = static_cast<std::uint32_t>(c);
    }
    if (args->contains("payload_type")) {
      r.payload = parse_enum(get_str("payload_type"), all_payloads, "payload_type", i);
      auto p = args->find("payload");
      const bool fits =
          r.payload == payload_type::none ||
          (p != args->end() && ((r.payload == payload_type::u64 && p->is_number_unsigned()) ||
                                (r.payload == payload_type::i64 && p->is_number_integer()) ||
                                (r.payload == payload_type::f64 && p->is_number())));
      OFFLOADKIT_EXPECTS(fits, logic_error, "timeline: traceEvents[", i,
                         "].args.payload must be a number of type ", to_string(r.payload),
                         ", found ", p == args->end() ? std::string("nothing") : p->dump());
      if (r.payload == payload_type::u64) r.payload_u64 = p->get<std::uint64_t>();
      if (r.payload == payload_type::i64) r.payload_i64 = p->get<std::int64_t>();
      if (r.payload == payload_type::f64) r.payload_f64 = p->get<double>();
    }
    t.records.push_back(std::move(r));
  }
  return t;
}

timeline read_chrome_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "cannot open timeline '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_chrome_trace(ss.str());
}

// ---- SVG ----------------------------------------------------------------------------------------

namespace {

std::string xml_escape(const std::string& s) { return offloadkit::detail::escape_markup(s); }

struct style {
  const char* label;
  const char* colour;
};

// Colour by what the record is; pageable copies get a warning colour of their own.
style style_of(const record& r) {
  switch (r.kind) {
    case record_kind::kernel:
      return {"kernel", "#4878d0"};
    case record_kind::memset:
      return {"memset", "#8c8c8c"};
    case record_kind::sync:
      return {"host sync", "#d65f5f"};
    case record_kind::range:
      return {"NVTX range", "#f3e79b"};
    case record_kind::api:
      if (r.api == api_kind::pinned_alloc || r.api == api_kind::pinned_register) {
        return {"pinned alloc", "#b04fc2"};
      }
      if (r.api == api_kind::pinned_free) return {"pinned free", "#dcb0e4"};
      if (r.api == api_kind::mem_map || r.api == api_kind::mem_unmap)
        return {"map/unmap", "#2a9d8f"};
      return {"api", "#bbbbbb"};
    case record_kind::memcpy:
      if (r.src == memory_location::pageable || r.dst == memory_location::pageable) {
        return {"pageable copy", "#e41a1c"};
      }
      switch (r.direction) {
        case copy_direction::h2d:
          return {"copy H2D", "#6acc64"};
        case copy_direction::d2h:
          return {"copy D2H", "#ee854a"};
        case copy_direction::d2d:
          return {"copy D2D", "#956cb4"};
        default:
          return {"copy other", "#82c6e2"};
      }
  }
  return {"?", "#000000"};
}

double nice_step(double span) {
  const double raw = span / 10.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string to_svg(const timeline& t, const svg_options& o) {
  // Lanes: device streams first (by device, stream), then host threads; ranges nest on their
  // thread's lane as a thin band so that kernels and copies stay readable.
  std::map<std::tuple<int, std::int64_t, std::uint64_t>, int> lanes;
  for (const auto& r : t.records) {
    if (r.is_device_work()) {
      lanes[{0, r.device * (std::int64_t{1} << 32) + r.stream, 0}] = 0;
    } else {
      lanes[{1, 0, r.thread}] = 0;
    }
  }
  int idx = 0;
  for (auto& [k, v] : lanes) v = idx++;
  const int label_w = 170, top = 40, axis_h = 30;
  const int lanes_h = static_cast<int>(lanes.size()) * o.lane_height;
  const int legend_y = top + lanes_h + axis_h + 10;
  const int height = legend_y + 40;
  const int width = label_w + o.width + 20;
  const std::int64_t t0 = t.begin_ns();
  const std::int64_t span = std::max<std::int64_t>(1, t.end_ns() - t0);
  auto x_of = [&](std::int64_t ns) {
    return label_w + static_cast<double>(ns - t0) / static_cast<double>(span) * o.width;
  };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"10\" y=\"20\" font-size=\"14\">"
     << xml_escape(o.title.empty() ? "offloadkit timeline" : o.title) << " — " << t.records.size()
     << " records</text>\n";
  for (const auto& [k, i] : lanes) {
    const int y = top + i * o.lane_height;
    std::string label;
    if (std::get<0>(k) == 0) {
      const std::int64_t v = std::get<1>(k);
      label = "GPU " + std::to_string(v >> 32) + " stream " + std::to_string(v & 0xffffffff);
    } else {
      label = "host thread " + std::to_string(std::get<2>(k) % 1000000);
    }
    os << "<rect x=\"" << label_w << "\" y=\"" << y << "\" width=\"" << o.width << "\" height=\""
       << o.lane_height << "\" fill=\"" << (i % 2 ? "#f7f7f7" : "#eeeeee") << "\"/>\n";
    os << "<text x=\"5\" y=\"" << y + o.lane_height * 0.7 << "\">" << xml_escape(label)
       << "</text>\n";
  }
  std::map<std::string, std::string> legend;
  char buf[128];
  for (const auto& r : t.records) {
    const int lane = r.is_device_work()
                         ? lanes[{0, r.device * (std::int64_t{1} << 32) + r.stream, 0}]
                         : lanes[{1, 0, r.thread}];
    const style s = style_of(r);
    legend[s.label] = s.colour;
    const double x = x_of(r.start_ns);
    const double w = std::max(0.5, x_of(r.end_ns) - x);
    double y = top + lane * o.lane_height + 2;
    double h = o.lane_height - 4;
    if (r.kind == record_kind::range) h = 5;  // a band at the top of the lane
    if (r.kind == record_kind::api || r.kind == record_kind::sync) {
      y += 6;
      h -= 6;
    }
    std::snprintf(buf, sizeof buf, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"", x,
                  y, w, h);
    os << buf << " fill=\"" << s.colour << "\"><title>" << xml_escape(r.name) << " (" << s.label
       << ", " << (static_cast<double>(r.duration_ns()) / 1000.0) << " us";
    if (r.bytes != 0) os << ", " << r.bytes << " B";
    os << ")</title></rect>\n";
  }
  // Time axis with round tick spacing.
  const int axis_y = top + lanes_h + 5;
  os << "<line x1=\"" << label_w << "\" y1=\"" << axis_y << "\" x2=\"" << label_w + o.width
     << "\" y2=\"" << axis_y << "\" stroke=\"black\"/>\n";
  const double span_us = static_cast<double>(span) / 1e3;
  const double step = nice_step(span_us);
  for (double u = 0; u <= span_us + 1e-9; u += step) {
    const double x = label_w + u / span_us * o.width;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>", x, axis_y,
                  x, axis_y + 5);
    os << buf;
    if (span_us >= 1e4) {
      std::snprintf(buf, sizeof buf, "%g ms", u / 1e3);
    } else {
      std::snprintf(buf, sizeof buf, "%g us", u);
    }
    os << "<text x=\"" << x << "\" y=\"" << axis_y + 17 << "\" text-anchor=\"middle\">" << buf
       << "</text>\n";
  }
  int lx = label_w;
  for (const auto& [label, colour] : legend) {
    os << "<rect x=\"" << lx << "\" y=\"" << legend_y << "\" width=\"12\" height=\"12\" fill=\""
       << colour << "\"/><text x=\"" << lx + 16 << "\" y=\"" << legend_y + 10 << "\">" << label
       << "</text>\n";
    lx += 20 + static_cast<int>(label.size()) * 7 + 15;
  }
  os << "</svg>\n";
  return os.str();
}

void write_svg(const timeline& t, const std::string& path, const svg_options& o) {
  std::ofstream f(path, std::ios::binary);
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "cannot open '", path, "' for writing");
  f << to_svg(t, o);
  f.close();
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "writing '", path, "' failed");
}

}  // namespace offloadkit::traces
