// Schedule files: JSON parsing with positions in every error, validation, serialization.
#include "offloadkit/traces/schedule_format.hpp"

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace offloadkit::traces {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& reason) {
  throw schedule_error(where, reason);
}

std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::int64_t get_int(const json& j, const std::string& where, std::int64_t lo, std::int64_t hi) {
  if (!j.is_number_integer())
    fail(where, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], found " + show(j));
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    fail(where, show(j) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const auto v = j.get<std::int64_t>();
  if (v < lo || v > hi) {
    fail(where, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
  }
  return v;
}

const json& member(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, std::string("missing required key '") + key + "'");
  return *it;
}

void only_keys(const json& obj, const std::string& where, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) {
      std::string valid;
      for (const char* k : keys) valid += std::string(valid.empty() ? "" : ", ") + k;
      fail(where + "/" + it.key(), "unknown key '" + it.key() + "' (valid keys: " + valid + ")");
    }
  }
}

std::string key_text(schedule_key k) {
  return "key (vp " + std::to_string(k.vp) + ", layer " + std::to_string(k.layer) +
         ", microbatch " + std::to_string(k.microbatch) + ")";
}

std::string step_where(const schedule_step& st) {
  return "/steps/" + std::to_string(st.source_index);
}

}  // namespace

void validate(const schedule& s) {
  if (s.virtual_stages < 1 || s.virtual_stages > max_virtual_stages) {
    fail("/pipeline/virtual_stages", std::to_string(s.virtual_stages) + " is outside [1, " +
                                         std::to_string(max_virtual_stages) + "]");
  }
  if (s.layers < 1 || s.layers > max_layers) {
    fail("/pipeline/layers",
         std::to_string(s.layers) + " is outside [1, " + std::to_string(max_layers) + "]");
  }
  if (s.microbatches < 1 || s.microbatches > max_microbatches) {
    fail("/pipeline/microbatches", std::to_string(s.microbatches) + " is outside [1, " +
                                       std::to_string(max_microbatches) + "]");
  }
  if (s.key_count() > max_keys) {
    fail("/pipeline", "virtual_stages x layers x microbatches = " + std::to_string(s.key_count()) +
                          " exceeds " + std::to_string(max_keys) + " keys");
  }
  if (s.row_bytes.size() != static_cast<std::size_t>(s.layers)) {
    fail("/row_bytes", "has " + std::to_string(s.row_bytes.size()) +
                           " entries; expected one per layer (" + std::to_string(s.layers) + ")");
  }
  for (std::size_t i = 0; i < s.row_bytes.size(); ++i) {
    if (s.row_bytes[i] < 1 || s.row_bytes[i] > max_row_bytes) {
      fail("/row_bytes/" + std::to_string(i), std::to_string(s.row_bytes[i]) + " is outside [1, " +
                                                  std::to_string(max_row_bytes) + "]");
    }
  }
  if (s.page_rows < 1 || s.page_rows > max_page_rows) {
    fail("/page_rows",
         std::to_string(s.page_rows) + " is outside [1, " + std::to_string(max_page_rows) + "]");
  }
  if (s.rows.size() != s.key_count()) {
    fail("/rows", "has " + std::to_string(s.rows.size()) +
                      " entries; expected virtual_stages x layers x microbatches = " +
                      std::to_string(s.key_count()));
  }
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (s.rows[i] > s.max_rows) {
      fail("/rows/" + std::to_string(i),
           std::to_string(s.rows[i]) + " rows exceed max_rows = " + std::to_string(s.max_rows));
    }
  }
  // 0: not stashed yet, 1: stashed, 2: restored.
  std::vector<std::uint8_t> key_state(s.key_count(), 0);
  std::vector<std::size_t> stashed_at(s.key_count(), 0);
  // A microbatch's forward runs through the rank's virtual stages in order and its backward in
  // reverse, so its keys are stashed in (vp, layer) order and restored in the reverse order.
  const int per_mb = s.virtual_stages * s.layers;
  std::vector<int> next_stash(static_cast<std::size_t>(s.microbatches), 0);
  std::vector<int> next_restore(static_cast<std::size_t>(s.microbatches), per_mb - 1);
  auto pos_text = [&](int pos) {
    return "(vp " + std::to_string(pos / s.layers) + ", layer " + std::to_string(pos % s.layers) +
           ")";
  };
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const schedule_step& st = s.steps[i];
    const schedule_key k = st.key;
    if (k.vp < 0 || k.vp >= s.virtual_stages || k.layer < 0 || k.layer >= s.layers ||
        k.microbatch < 0 || k.microbatch >= s.microbatches) {
      fail(step_where(st), key_text(k) + " is outside the pipeline's [0, " +
                               std::to_string(s.virtual_stages) + ") x [0, " +
                               std::to_string(s.layers) + ") x [0, " +
                               std::to_string(s.microbatches) + ")");
    }
    const std::size_t ki = s.key_index(k);
    const auto mb = static_cast<std::size_t>(k.microbatch);
    const int pos = k.vp * s.layers + k.layer;
    if (st.op == schedule_op::stash) {
      if (key_state[ki] != 0) {
        fail(step_where(st), key_text(k) + " is stashed a second time (first at /steps/" +
                                 std::to_string(stashed_at[ki]) + ")");
      }
      if (next_stash[mb] != pos) {
        fail(step_where(st), "stash of " + key_text(k) +
                                 " out of forward order: this microbatch stashes " +
                                 pos_text(next_stash[mb]) + " next");
      }
      key_state[ki] = 1;
      stashed_at[ki] = st.source_index;
      ++next_stash[mb];
    } else {
      if (key_state[ki] == 0) {
        fail(step_where(st), "restore of " + key_text(k) + " before its stash");
      }
      if (key_state[ki] == 2) fail(step_where(st), key_text(k) + " is restored a second time");
      if (next_restore[mb] != pos) {
        fail(step_where(st), "restore of " + key_text(k) +
                                 " out of backward (reverse) order: this microbatch restores " +
                                 pos_text(next_restore[mb]) + " next");
      }
      key_state[ki] = 2;
      --next_restore[mb];
    }
  }
  for (int vp = 0; vp < s.virtual_stages; ++vp) {
    for (int l = 0; l < s.layers; ++l) {
      for (int mb = 0; mb < s.microbatches; ++mb) {
        const schedule_key k{vp, l, mb};
        const auto st = key_state[s.key_index(k)];
        if (st != 2) {
          fail("/steps", key_text(k) + (st == 0 ? " is never stashed" : " is never restored") +
                             " (every key must be stashed once and restored once)");
        }
      }
    }
  }
}

schedule parse_schedule(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("byte " + std::to_string(e.byte), std::string("not valid JSON: ") + e.what());
  } catch (const json::exception& e) {
    fail("byte 0", std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) fail("", "the document must be a JSON object, found " + show(doc));
  only_keys(doc, "",
            {"format", "version", "name", "pipeline", "row_bytes", "max_rows", "page_rows", "pools",
             "rows", "steps"});
  const json& format = member(doc, "format", "");
  if (!format.is_string() || format.get<std::string>() != "offloadkit.schedule") {
    fail("/format", "expected \"offloadkit.schedule\", found " + show(format));
  }
  const json& version = member(doc, "version", "");
  if (!version.is_number_integer() || version.get<std::int64_t>() != schedule_format_version) {
    fail("/version", show(version) + " is not supported (this reader reads version " +
                         std::to_string(schedule_format_version) + ")");
  }
  schedule s;
  if (auto n = doc.find("name"); n != doc.end()) {
    if (!n->is_string()) fail("/name", "expected a string, found " + show(*n));
    s.name = n->get<std::string>();
  }
  const json& p = member(doc, "pipeline", "");
  if (!p.is_object()) fail("/pipeline", "expected an object, found " + show(p));
  only_keys(p, "/pipeline", {"size", "rank", "virtual_stages", "layers", "microbatches"});
  if (auto it = p.find("size"); it != p.end()) {
    s.pipeline_size = static_cast<int>(get_int(*it, "/pipeline/size", 1, 1 << 16));
  }
  if (auto it = p.find("rank"); it != p.end()) {
    s.pipeline_rank = static_cast<int>(get_int(*it, "/pipeline/rank", 0, s.pipeline_size - 1));
  }
  s.virtual_stages = static_cast<int>(get_int(member(p, "virtual_stages", "/pipeline"),
                                              "/pipeline/virtual_stages", 1, max_virtual_stages));
  s.layers = static_cast<int>(
      get_int(member(p, "layers", "/pipeline"), "/pipeline/layers", 1, max_layers));
  s.microbatches = static_cast<int>(get_int(member(p, "microbatches", "/pipeline"),
                                            "/pipeline/microbatches", 1, max_microbatches));
  if (s.key_count() > max_keys) {
    fail("/pipeline", "virtual_stages x layers x microbatches = " + std::to_string(s.key_count()) +
                          " exceeds " + std::to_string(max_keys) + " keys");
  }
  const json& rb = member(doc, "row_bytes", "");
  if (rb.is_array()) {
    if (rb.size() != static_cast<std::size_t>(s.layers)) {
      fail("/row_bytes", "has " + std::to_string(rb.size()) + " entries; expected one per layer (" +
                             std::to_string(s.layers) + ") or a single integer");
    }
    for (std::size_t i = 0; i < rb.size(); ++i) {
      s.row_bytes.push_back(static_cast<std::uint64_t>(get_int(
          rb[i], "/row_bytes/" + std::to_string(i), 1, static_cast<std::int64_t>(max_row_bytes))));
    }
  } else {
    s.row_bytes.assign(static_cast<std::size_t>(s.layers),
                       static_cast<std::uint64_t>(
                           get_int(rb, "/row_bytes", 1, static_cast<std::int64_t>(max_row_bytes))));
  }
  s.max_rows = static_cast<std::uint32_t>(
      get_int(member(doc, "max_rows", ""), "/max_rows", 0, std::int64_t{1} << 31));
  s.page_rows = static_cast<std::uint32_t>(
      get_int(member(doc, "page_rows", ""), "/page_rows", 1, max_page_rows));
  if (auto it = doc.find("pools"); it != doc.end()) {
    if (!it->is_object()) fail("/pools", "expected an object, found " + show(*it));
    only_keys(*it, "/pools", {"device_pages", "pinned_pages"});
    schedule_pools pools;
    if (auto d = it->find("device_pages"); d != it->end()) {
      pools.device_pages =
          static_cast<std::uint64_t>(get_int(*d, "/pools/device_pages", 0, std::int64_t{1} << 40));
    }
    if (auto d = it->find("pinned_pages"); d != it->end()) {
      pools.pinned_pages =
          static_cast<std::uint64_t>(get_int(*d, "/pools/pinned_pages", 0, std::int64_t{1} << 40));
    }
    s.pools = pools;
  }
  const json& rows = member(doc, "rows", "");
  if (!rows.is_array()) fail("/rows", "expected an array of row counts, found " + show(rows));
  if (rows.size() != s.key_count()) {
    fail("/rows", "has " + std::to_string(rows.size()) +
                      " entries; expected virtual_stages x layers x microbatches = " +
                      std::to_string(s.key_count()));
  }
  s.rows.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    s.rows.push_back(
        static_cast<std::uint32_t>(get_int(rows[i], "/rows/" + std::to_string(i), 0, s.max_rows)));
  }
  const json& steps = member(doc, "steps", "");
  if (!steps.is_array()) fail("/steps", "expected an array, found " + show(steps));
  // A valid schedule has exactly two steps per key; stopping there bounds the expansion of chunk
  // entries by the size of the rows array, which the input itself had to contain.
  const std::size_t limit = 2 * s.key_count();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string where = "/steps/" + std::to_string(i);
    const json& e = steps[i];
    if (!e.is_array() || e.empty() || !e[0].is_string()) {
      fail(where,
           "expected [\"F\"|\"B\", vp, microbatch] or [\"S\"|\"R\", vp, layer, "
           "microbatch], found " +
               show(e));
    }
    const std::string op = e[0].get<std::string>();
    const bool chunk = op == "F" || op == "B";
    if (!chunk && op != "S" && op != "R") {
      fail(where + "/0", "unknown step '" + op + "' (valid: F, B chunk steps; S, R key steps)");
    }
    const std::size_t want = chunk ? 3 : 4;
    if (e.size() != want) {
      fail(where, "'" + op + "' takes " + std::to_string(want - 1) + " numbers, found " +
                      std::to_string(e.size() - 1));
    }
    schedule_step st;
    st.source_index = i;
    st.key.vp = static_cast<int>(get_int(e[1], where + "/1", 0, s.virtual_stages - 1));
    const std::size_t mb_pos = chunk ? 2 : 3;
    st.key.microbatch = static_cast<int>(
        get_int(e[mb_pos], where + "/" + std::to_string(mb_pos), 0, s.microbatches - 1));
    const std::size_t add = chunk ? static_cast<std::size_t>(s.layers) : 1;
    if (s.steps.size() + add > limit) {
      fail(where, "more stash/restore steps than 2 x keys (" + std::to_string(limit) +
                      "): some key is stashed or restored twice");
    }
    if (chunk) {
      st.op = op == "F" ? schedule_op::stash : schedule_op::restore;
      for (int l = 0; l < s.layers; ++l) {
        st.key.layer = op == "F" ? l : s.layers - 1 - l;
        s.steps.push_back(st);
      }
    } else {
      st.op = op == "S" ? schedule_op::stash : schedule_op::restore;
      st.key.layer = static_cast<int>(get_int(e[2], where + "/2", 0, s.layers - 1));
      s.steps.push_back(st);
    }
  }
  validate(s);
  return s;
}

schedule read_schedule(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "cannot open schedule file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_schedule(ss.str());
}

std::string to_json(const schedule& s) {
  // Hand-written so that steps stay one per line and rows stay compact: example files are read
  // by people as well as by the parser.
  std::ostringstream os;
  os << "{\n  \"format\": \"offloadkit.schedule\",\n  \"version\": " << schedule_format_version
     << ",\n";
  if (!s.name.empty()) os << "  \"name\": " << json(s.name).dump() << ",\n";
  os << "  \"pipeline\": {\"size\": " << s.pipeline_size << ", \"rank\": " << s.pipeline_rank
     << ", \"virtual_stages\": " << s.virtual_stages << ", \"layers\": " << s.layers
     << ", \"microbatches\": " << s.microbatches << "},\n";
  bool uniform = true;
  for (auto b : s.row_bytes) uniform = uniform && b == s.row_bytes.front();
  if (uniform && !s.row_bytes.empty()) {
    os << "  \"row_bytes\": " << s.row_bytes.front() << ",\n";
  } else {
    os << "  \"row_bytes\": " << json(s.row_bytes).dump() << ",\n";
  }
  os << "  \"max_rows\": " << s.max_rows << ",\n  \"page_rows\": " << s.page_rows << ",\n";
  if (s.pools) {
    os << "  \"pools\": {\"device_pages\": " << s.pools->device_pages
       << ", \"pinned_pages\": " << s.pools->pinned_pages << "},\n";
  }
  os << "  \"rows\": [";
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (i % static_cast<std::size_t>(s.microbatches) == 0)
      os << (i == 0 ? "\n    " : ",\n    ");
    else
      os << ",";
    os << s.rows[i];
  }
  os << "\n  ],\n  \"steps\": [";
  bool first = true;
  auto sep = [&] {
    os << (first ? "\n    " : ",\n    ");
    first = false;
  };
  for (std::size_t i = 0; i < s.steps.size();) {
    const schedule_step& st = s.steps[i];
    // Is this the start of a whole chunk in layer order (stash) or reverse order (restore)?
    bool whole = i + static_cast<std::size_t>(s.layers) <= s.steps.size();
    for (int l = 0; whole && l < s.layers; ++l) {
      const schedule_step& o = s.steps[i + static_cast<std::size_t>(l)];
      const int want = st.op == schedule_op::stash ? l : s.layers - 1 - l;
      whole = o.op == st.op && o.key.vp == st.key.vp && o.key.microbatch == st.key.microbatch &&
              o.key.layer == want;
    }
    sep();
    if (whole) {
      os << "[\"" << (st.op == schedule_op::stash ? "F" : "B") << "\"," << st.key.vp << ","
         << st.key.microbatch << "]";
      i += static_cast<std::size_t>(s.layers);
    } else {
      os << "[\"" << (st.op == schedule_op::stash ? "S" : "R") << "\"," << st.key.vp << ","
         << st.key.layer << "," << st.key.microbatch << "]";
      ++i;
    }
  }
  os << "\n  ]\n}\n";
  return os.str();
}

void write_schedule(const schedule& s, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "cannot open '", path, "' for writing");
  f << to_json(s);
  f.close();
  OFFLOADKIT_EXPECTS(f.good(), runtime_error, "writing '", path, "' failed");
}

}  // namespace offloadkit::traces
