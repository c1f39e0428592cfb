// Schedule files: a streaming (SAX) JSON reader with a JSON pointer in every error, validation
// through offloadkit::stash, and serialization.
#include "offloadkit/traces/schedule_format.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace offloadkit::traces {
namespace {

using nlohmann::json;
using stash::schedule_limits;
using stash::stash_key;
using stash::step_kind;

[[noreturn]] void fail(const std::string& where, const std::string& reason) {
  throw schedule_error(where, reason);
}

std::string range_text(std::uint64_t lo, std::uint64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

/// One "steps" entry as read: the operation and up to three numbers, checked against the global
/// key limits only (the shape may come later in the document).
struct raw_step {
  char op = 0;  // 'S', 'R', 'F', 'B'
  std::uint8_t count = 0;
  std::uint32_t v[3] = {0, 0, 0};
};

/// What a value in the current position must be.
enum class slot {
  root,       // the document: an object
  scalar,     // a top-level or nested scalar (format, version, name, max_rows, ...)
  pipeline,   // "/pipeline": an object of integers
  pools,      // "/pools": an object of integers
  row_bytes,  // "/row_bytes": an integer or an array of integers
  rows,       // "/rows": an array of integers
  steps,      // "/steps": an array of entries
  int_item,   // an element of /row_bytes or /rows, a member of /pipeline or /pools
  step,       // an entry of /steps: an array
  step_item,  // an element of a step entry
  unknown,    // refused
};

/// Builds a schedule_file from SAX events. Containers other than the format's are refused at
/// their first event, so nesting never goes deeper than three levels (the document, "steps", one
/// entry) and nothing is kept but the values the schedule needs.
class reader final : public json::json_sax_t {
 public:
  // Top-level fields as read (present flags, since every one may come in any order).
  bool has_format = false, has_version = false, has_pipeline = false, has_row_bytes = false,
       has_max_rows = false, has_page_rows = false, has_rows = false, has_steps = false;
  bool has_vp = false, has_layers = false, has_mb = false, has_size = false, has_rank = false;
  std::uint64_t vp = 0, layers = 0, mb = 0, size = 1, rank = 0, max_rows = 0, page_rows = 0;
  std::vector<std::uint64_t> row_bytes;
  bool row_bytes_array = false;
  std::optional<stash::tier_pools> pools;
  std::string name;
  std::vector<std::uint32_t> rows;
  std::vector<raw_step> steps;
  std::optional<schedule_error> error;
  bool steps_truncated = false;  ///< reading stopped past 2 x keys steps

  bool null() override { return scalar_value("null", nullptr); }
  bool boolean(bool b) override { return scalar_value(b ? "true" : "false", nullptr); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) return negative(v);
    const auto u = static_cast<std::uint64_t>(v);
    return scalar_value(std::to_string(u), &u);
  }
  bool number_unsigned(number_unsigned_t v) override { return scalar_value(std::to_string(v), &v); }
  bool number_float(number_float_t, const string_t& s) override {
    return scalar_value(clip(s), nullptr);
  }
  bool string(string_t& s) override { return string_value(s); }
  bool binary(binary_t&) override { return refuse(where_value(), "unexpected binary value"); }
  bool start_object(std::size_t) override {
    const slot sl = current();
    if (sl != slot::root && sl != slot::pipeline && sl != slot::pools) {
      return refuse(where_value(), expected(sl) + ", found an object");
    }
    if (sl == slot::pipeline) has_pipeline = true;
    if (sl == slot::pools) pools = stash::tier_pools{};
    frames_.push_back({sl, true, 0, {}, {}});
    return true;
  }
  bool key(string_t& k) override {
    frame& f = frames_.back();
    f.key = k;
    const char* const* valid = f.kind == slot::root       ? root_keys
                               : f.kind == slot::pipeline ? pipeline_keys
                                                          : pool_keys;
    for (std::size_t i = 0; valid[i] != nullptr; ++i) {
      if (k == valid[i]) {
        if (f.seen.size() <= i) f.seen.resize(i + 1, false);
        if (f.seen[i]) return refuse(where_value(), "key '" + k + "' appears twice");
        f.seen[i] = true;
        return true;
      }
    }
    std::string list;
    for (std::size_t i = 0; valid[i] != nullptr; ++i)
      list += (i ? ", " : "") + std::string(valid[i]);
    return refuse(where_value(), "unknown key '" + clip(k) + "' (valid keys: " + list + ")");
  }
  bool end_object() override {
    frames_.pop_back();
    advance();
    return true;
  }
  bool start_array(std::size_t) override {
    const slot sl = current();
    if (sl == slot::row_bytes) {
      row_bytes_array = true;
      row_bytes.clear();
    } else if (sl != slot::rows && sl != slot::steps && sl != slot::step) {
      return refuse(where_value(), expected(sl) + ", found an array");
    }
    if (sl == slot::step) steps.emplace_back();
    frames_.push_back({sl, false, 0, {}, {}});
    return true;
  }
  bool end_array() override {
    const frame f = frames_.back();
    frames_.pop_back();
    if (f.kind == slot::step && !finish_step(f.index)) return false;
    if (f.kind == slot::rows) has_rows = true;
    if (f.kind == slot::steps) has_steps = true;
    if (f.kind == slot::row_bytes) has_row_bytes = true;
    advance();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at line 1, column 5: ".
    if (const auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    error = schedule_error("byte " + std::to_string(position), "not valid JSON: " + what);
    return false;
  }

  /// The shape, where the document has given it.
  [[nodiscard]] bool shape_known() const { return has_vp && has_layers && has_mb; }
  [[nodiscard]] std::uint64_t keys() const { return vp * layers * mb; }

 private:
  struct frame {
    slot kind;
    bool object;
    std::size_t index;  // arrays: index of the next element
    std::string key;    // objects: the current key
    std::vector<bool> seen;
  };
  static constexpr const char* root_keys[] = {"format",    "version",  "name",      "pipeline",
                                              "row_bytes", "max_rows", "page_rows", "pools",
                                              "rows",      "steps",    nullptr};
  static constexpr const char* pipeline_keys[] = {"size",   "rank",         "virtual_stages",
                                                  "layers", "microbatches", nullptr};
  static constexpr const char* pool_keys[] = {"device_pages", "pinned_pages", nullptr};
  std::vector<frame> frames_;

  static std::string clip(const std::string& s) {
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }

  bool refuse(std::string where, std::string reason) {
    if (!error) error = schedule_error(std::move(where), std::move(reason));
    return false;
  }

  /// What the value at the current position must be.
  [[nodiscard]] slot current() const {
    if (frames_.empty()) return slot::root;
    const frame& f = frames_.back();
    switch (f.kind) {
      case slot::root:
        if (f.key == "pipeline") return slot::pipeline;
        if (f.key == "pools") return slot::pools;
        if (f.key == "row_bytes") return slot::row_bytes;
        if (f.key == "rows") return slot::rows;
        if (f.key == "steps") return slot::steps;
        return slot::scalar;
      case slot::pipeline:
      case slot::pools:
      case slot::rows:
      case slot::row_bytes:
        return slot::int_item;
      case slot::steps:
        return slot::step;
      case slot::step:
        return slot::step_item;
      default:
        return slot::unknown;
    }
  }

  [[nodiscard]] static std::string expected(slot sl) {
    switch (sl) {
      case slot::root:
        return "the document must be a JSON object";
      case slot::rows:
        return "expected an array of row counts";
      case slot::steps:
        return "expected an array of steps";
      case slot::step:
        return "expected [\"F\"|\"B\", vp, microbatch] or [\"S\"|\"R\", vp, layer, microbatch]";
      case slot::row_bytes:
      case slot::int_item:
      case slot::step_item:
        return "expected an integer";
      case slot::pipeline:
      case slot::pools:
        return "expected an object";
      default:
        return "expected a string or a number";
    }
  }

  /// The JSON pointer of the value at the current position.
  [[nodiscard]] std::string where_value() const {
    std::string w;
    for (const frame& f : frames_) w += "/" + (f.object ? f.key : std::to_string(f.index));
    return w;
  }

  void advance() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  bool negative(std::int64_t v) {
    const slot sl = current();
    const bool integer_slot =
        sl == slot::int_item || sl == slot::row_bytes ||
        (sl == slot::scalar && frames_.back().key != "format" && frames_.back().key != "name") ||
        (sl == slot::step_item && frames_.back().index > 0);
    if (!integer_slot) return scalar_value(std::to_string(v), nullptr);
    return refuse(where_value(), std::to_string(v) + " is negative; " + expected_range());
  }

  [[nodiscard]] std::string expected_range() const {
    return "expected an integer in " + range_text(0, limit_of());
  }

  /// The largest value a number at `where` may take regardless of the rest of the document.
  [[nodiscard]] std::uint64_t limit_of() const {
    if (frames_.empty()) return 0;
    const frame& f = frames_.back();
    if (f.kind == slot::root) {
      if (f.key == "version") return schedule_format_version;
      if (f.key == "max_rows") return schedule_limits::max_rows;
      if (f.key == "page_rows") return schedule_limits::rows_per_page;
      if (f.key == "row_bytes") return schedule_limits::row_bytes;
      return 0;
    }
    if (f.kind == slot::pipeline) {
      if (f.key == "size") return max_pipeline_size;
      if (f.key == "rank") return max_pipeline_size - 1;
      if (f.key == "virtual_stages") return schedule_limits::vp_stages;
      if (f.key == "layers") return schedule_limits::layers;
      return schedule_limits::microbatches;
    }
    if (f.kind == slot::pools) return schedule_limits::pool_pages;
    if (f.kind == slot::row_bytes) return schedule_limits::row_bytes;
    if (f.kind == slot::rows) return has_max_rows ? max_rows : schedule_limits::max_rows;
    if (f.kind == slot::step) return UINT32_MAX;  // checked against the shape at the end
    return 0;
  }

  bool string_value(const std::string& s) {
    const slot sl = current();
    if (sl == slot::step_item && frames_.back().index == 0) {
      raw_step& st = steps.back();
      if (s != "S" && s != "R" && s != "F" && s != "B") {
        return refuse(where_value(),
                      "unknown step '" + clip(s) + "' (valid: F, B chunk steps; S, R key steps)");
      }
      st.op = s[0];
      advance();
      return true;
    }
    if (sl == slot::scalar && frames_.back().key == "format") {
      if (s != "offloadkit.schedule") {
        return refuse("/format", "expected \"offloadkit.schedule\", found \"" + clip(s) + "\"");
      }
      has_format = true;
      return true;
    }
    if (sl == slot::scalar && frames_.back().key == "name") {
      if (s.size() > max_name_bytes) {
        return refuse("/name", "is " + std::to_string(s.size()) + " bytes long; at most " +
                                   std::to_string(max_name_bytes));
      }
      name = s;
      return true;
    }
    return scalar_value("\"" + clip(s) + "\"", nullptr);
  }

  /// A scalar that is not a string: `u` is its value when it is a non-negative integer.
  bool scalar_value(const std::string& text, const std::uint64_t* u) {
    const slot sl = current();
    if (sl == slot::root) return refuse("", "the document must be a JSON object, found " + text);
    if (sl == slot::rows || sl == slot::steps || sl == slot::pipeline || sl == slot::pools) {
      return refuse(where_value(), expected(sl) + ", found " + text);
    }
    if (sl == slot::scalar && frames_.back().key == "format") {
      return refuse(where_value(), "expected \"offloadkit.schedule\", found " + text);
    }
    if (sl == slot::scalar && frames_.back().key == "name") {
      return refuse(where_value(), "expected a string, found " + text);
    }
    if (sl == slot::step_item && frames_.back().index == 0) {
      return refuse(where_value(), "expected an operation name (F, B, S or R), found " + text);
    }
    if (u == nullptr) return refuse(where_value(), expected_range() + ", found " + text);
    if (sl == slot::step_item) {
      raw_step& st = steps.back();
      const std::size_t i = frames_.back().index;
      if (i > 3) return refuse(where_value(), "a step has at most 3 numbers");
      if (*u > UINT32_MAX) {
        return refuse(where_value(), text + " is outside " + range_text(0, UINT32_MAX));
      }
      st.v[i - 1] = static_cast<std::uint32_t>(*u);
      st.count = static_cast<std::uint8_t>(i);
      advance();
      return true;
    }
    const std::uint64_t hi = limit_of();
    if (*u > hi || (sl == slot::scalar && frames_.back().key == "version" && *u != hi)) {
      if (frames_.back().key == "version" && frames_.back().kind == slot::root) {
        return refuse(where_value(), text + " is not supported (this reader reads version " +
                                         std::to_string(schedule_format_version) + ")");
      }
      const std::uint64_t lo = needs_one() ? 1 : 0;
      return refuse(where_value(), text + " is outside " + range_text(lo, hi));
    }
    if (needs_one() && *u == 0)
      return refuse(where_value(), text + " is outside " + range_text(1, hi));
    return store(*u);
  }

  [[nodiscard]] bool needs_one() const {
    const frame& f = frames_.back();
    if (f.kind == slot::row_bytes) return true;
    if (f.kind == slot::root) return f.key == "page_rows" || f.key == "row_bytes";
    if (f.kind == slot::pipeline) return f.key != "rank";
    return false;
  }

  bool store(std::uint64_t u) {
    frame& f = frames_.back();
    if (f.kind == slot::rows) {
      const std::uint64_t cap = shape_known() ? keys() : schedule_limits::keys;
      if (rows.size() >= cap) {
        return refuse("/rows", "has more than " + std::to_string(cap) +
                                   " entries; expected virtual_stages x layers x microbatches");
      }
      rows.push_back(static_cast<std::uint32_t>(u));
      advance();
      return true;
    }
    if (f.kind == slot::row_bytes) {
      if (row_bytes.size() >= schedule_limits::layers) {
        return refuse("/row_bytes", "has more than " + std::to_string(schedule_limits::layers) +
                                        " entries (one per layer)");
      }
      row_bytes.push_back(u);
      advance();
      return true;
    }
    const std::string& k = f.key;
    if (f.kind == slot::pipeline) {
      if (k == "size") has_size = true, size = u;
      if (k == "rank") has_rank = true, rank = u;
      if (k == "virtual_stages") has_vp = true, vp = u;
      if (k == "layers") has_layers = true, layers = u;
      if (k == "microbatches") has_mb = true, mb = u;
      if (shape_known() && keys() > schedule_limits::keys) {
        return refuse("/pipeline",
                      "virtual_stages x layers x microbatches = " + std::to_string(keys()) +
                          " exceeds " + std::to_string(schedule_limits::keys) + " keys");
      }
      return true;
    }
    if (f.kind == slot::pools) {
      (k == "device_pages" ? pools->device_pages : pools->pinned_pages) = u;
      return true;
    }
    if (k == "version") has_version = true;
    if (k == "max_rows") has_max_rows = true, max_rows = u;
    if (k == "page_rows") has_page_rows = true, page_rows = u;
    if (k == "row_bytes") {
      has_row_bytes = true;
      row_bytes_array = false;
      row_bytes.assign(1, u);
    }
    return true;
  }

  bool finish_step(std::size_t elements) {
    const raw_step& st = steps.back();
    auto w = [&] { return "/steps/" + std::to_string(steps.size() - 1); };
    if (st.op == 0) {
      return refuse(w(), expected(slot::step) + ", found an array of " + std::to_string(elements) +
                             " elements");
    }
    const std::size_t want = st.op == 'F' || st.op == 'B' ? 2 : 3;
    if (elements - 1 != want) {
      return refuse(w(), "'" + std::string(1, st.op) + "' takes " + std::to_string(want) +
                             " numbers, found " + std::to_string(elements - 1));
    }
    // Past 2 x keys entries some key is stashed or restored twice; stop reading there (validation
    // then names that step) so that a long list of steps costs no more than the keys allow.
    const std::uint64_t cap = 2 * (shape_known() ? keys() : schedule_limits::keys);
    if (steps.size() > cap) {
      steps_truncated = true;
      return false;
    }
    return true;
  }
};

/// The schedule_file of a completely read document; schedule_error for what is missing or does
/// not fit the shape.
schedule_file build(reader& r) {
  if (!r.has_format) fail("", "missing required key 'format'");
  if (!r.has_version) fail("", "missing required key 'version'");
  if (!r.has_pipeline && !(r.has_vp || r.has_layers || r.has_mb)) {
    fail("", "missing required key 'pipeline'");
  }
  if (!r.has_vp) fail("/pipeline", "missing required key 'virtual_stages'");
  if (!r.has_layers) fail("/pipeline", "missing required key 'layers'");
  if (!r.has_mb) fail("/pipeline", "missing required key 'microbatches'");
  if (r.has_rank && r.rank >= r.size) {
    fail("/pipeline/rank", std::to_string(r.rank) + " is outside [0, " + std::to_string(r.size) +
                               ") (pipeline size " + std::to_string(r.size) + ")");
  }
  schedule_file f;
  f.name = std::move(r.name);
  f.pipeline_size = static_cast<std::uint32_t>(r.size);
  f.pipeline_rank = static_cast<std::uint32_t>(r.rank);
  stash::schedule& s = f.work.sched;
  s.vp_stages = static_cast<std::uint32_t>(r.vp);
  s.layers = static_cast<std::uint32_t>(r.layers);
  s.microbatches = static_cast<std::uint32_t>(r.mb);
  // Steps first: a truncated list is reported at its offending step before anything else.
  const std::size_t limit = 2 * stash::key_count(s);
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const raw_step& e = r.steps[i];
    const bool chunk = e.op == 'F' || e.op == 'B';
    auto check = [&](std::size_t pos, std::uint32_t v, std::uint32_t n) {
      if (v >= n) {
        fail("/steps/" + std::to_string(i) + "/" + std::to_string(pos),
             std::to_string(v) + " is outside " + range_text(0, n - 1));
      }
    };
    check(1, e.v[0], s.vp_stages);
    if (chunk) {
      check(2, e.v[1], s.microbatches);
    } else {
      check(2, e.v[1], s.layers);
      check(3, e.v[2], s.microbatches);
    }
    const std::uint32_t mbi = chunk ? e.v[1] : e.v[2];
    const step_kind kind = e.op == 'F' || e.op == 'S' ? step_kind::stash : step_kind::restore;
    const std::uint32_t n = chunk ? s.layers : 1;
    for (std::uint32_t l = 0; l < n && s.steps.size() < limit + 1; ++l) {
      const std::uint32_t layer = !chunk ? e.v[1] : e.op == 'F' ? l : s.layers - 1 - l;
      s.steps.push_back({kind, stash_key{e.v[0], layer, mbi}});
      f.source_index.push_back(static_cast<std::uint32_t>(i));
    }
  }
  if (s.steps.size() > limit || r.steps_truncated) {
    // More steps than 2 x keys: validation names the step where a key is stashed or restored
    // the second time.
    if (auto e = stash::validate(s)) {
      fail(e->step() < f.source_index.size() ? "/steps/" + std::to_string(f.source_index[e->step()])
                                             : e->where(),
           e->reason());
    }
    fail("/steps", "more than 2 x keys (" + std::to_string(limit) + ") steps");
  }
  if (!r.has_row_bytes) fail("", "missing required key 'row_bytes'");
  if (!r.has_max_rows) fail("", "missing required key 'max_rows'");
  if (!r.has_page_rows) fail("", "missing required key 'page_rows'");
  if (!r.has_rows && !r.steps_truncated) fail("", "missing required key 'rows'");
  if (!r.has_steps && !r.steps_truncated) fail("", "missing required key 'steps'");
  // Row sizes: the widest is the stash's row size; per-layer sizes are kept where they differ.
  if (r.row_bytes_array && r.row_bytes.size() != s.layers) {
    fail("/row_bytes", "has " + std::to_string(r.row_bytes.size()) +
                           " entries; expected one per layer (" + std::to_string(s.layers) +
                           ") or a single integer");
  }
  std::uint64_t widest = 0;
  bool uniform = true;
  for (auto b : r.row_bytes) {
    widest = std::max(widest, b);
    uniform = uniform && b == r.row_bytes.front();
  }
  f.work.row_bytes = widest;
  if (!uniform) f.work.layer_row_bytes = r.row_bytes;
  f.work.max_rows = r.max_rows;
  f.page_rows = static_cast<std::uint32_t>(r.page_rows);
  f.pools = r.pools;
  if (r.rows.size() != stash::key_count(s)) {
    fail("/rows", "has " + std::to_string(r.rows.size()) +
                      " entries; expected virtual_stages x layers x microbatches = " +
                      std::to_string(stash::key_count(s)));
  }
  f.work.rows.reserve(r.rows.size());
  std::size_t i = 0;
  for (std::uint32_t v = 0; v < s.vp_stages; ++v) {
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      for (std::uint32_t m = 0; m < s.microbatches; ++m) {
        f.work.rows.push_back({stash_key{v, l, m}, r.rows[i++]});
      }
    }
  }
  std::vector<std::uint32_t>().swap(r.rows);
  validate(f);
  return f;
}

schedule_file finish(reader& r, bool ok) {
  if (!ok) {
    if (r.error) throw *r.error;
    if (!r.steps_truncated) fail("byte 0", "not valid JSON");
  }
  return build(r);
}

}  // namespace

void validate(const schedule_file& f) {
  try {
    stash::validate_workload(f.work);
  } catch (const schedule_error& e) {
    if (e.step() != schedule_error::npos && e.step() < f.work.sched.steps.size()) {
      throw schedule_error("/steps/" + std::to_string(f.source_of(e.step())), e.reason(), e.step());
    }
    throw;
  }
  if (f.name.size() > max_name_bytes) {
    fail("/name", "is " + std::to_string(f.name.size()) + " bytes long; at most " +
                      std::to_string(max_name_bytes));
  }
  if (f.page_rows < 1 || f.page_rows > schedule_limits::rows_per_page) {
    fail("/page_rows", std::to_string(f.page_rows) + " is outside " +
                           range_text(1, schedule_limits::rows_per_page));
  }
  if (f.pipeline_size < 1 || f.pipeline_size > max_pipeline_size) {
    fail("/pipeline/size",
         std::to_string(f.pipeline_size) + " is outside " + range_text(1, max_pipeline_size));
  }
  if (f.pipeline_rank >= f.pipeline_size) {
    fail("/pipeline/rank", std::to_string(f.pipeline_rank) + " is outside [0, " +
                               std::to_string(f.pipeline_size) + ")");
  }
  if (f.pools && (f.pools->device_pages > schedule_limits::pool_pages ||
                  f.pools->pinned_pages > schedule_limits::pool_pages - f.pools->device_pages)) {
    fail("/pools", "device_pages + pinned_pages = " + std::to_string(f.pools->device_pages) +
                       " + " + std::to_string(f.pools->pinned_pages) + " is outside " +
                       range_text(0, schedule_limits::pool_pages) +
                       " (page ids of the stash implementations are 31-bit)");
  }
}

schedule_file parse_schedule(std::istream& in) {
  reader r;
  const bool ok = json::sax_parse(in, &r, json::input_format_t::json, true, true);
  return finish(r, ok);
}

schedule_file parse_schedule(const std::string& text) {
  reader r;
  const bool ok = json::sax_parse(text, &r, json::input_format_t::json, true, true);
  return finish(r, ok);
}

schedule_file read_schedule(const std::string& path) {
  // A FILE* is read a buffer at a time; an istream would be read a character at a time.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    throw runtime_error("cannot open schedule file '" + path + "': " + std::strerror(errno));
  }
  reader r;
  const bool ok = json::sax_parse(f.get(), &r, json::input_format_t::json, true, true);
  return finish(r, ok);
}

std::string to_json(const schedule_file& f) {
  // Hand-written so that steps stay one per line and rows stay compact: example files are read
  // by people as well as by the parser.
  const stash::schedule& s = f.work.sched;
  std::ostringstream os;
  os << "{\n  \"format\": \"offloadkit.schedule\",\n  \"version\": " << schedule_format_version
     << ",\n";
  if (!f.name.empty()) {
    os << "  \"name\": " << json(f.name).dump(-1, ' ', false, json::error_handler_t::replace)
       << ",\n";
  }
  os << "  \"pipeline\": {\"size\": " << f.pipeline_size << ", \"rank\": " << f.pipeline_rank
     << ", \"virtual_stages\": " << s.vp_stages << ", \"layers\": " << s.layers
     << ", \"microbatches\": " << s.microbatches << "},\n";
  if (f.work.layer_row_bytes.empty()) {
    os << "  \"row_bytes\": " << f.work.row_bytes << ",\n";
  } else {
    os << "  \"row_bytes\": " << json(f.work.layer_row_bytes).dump() << ",\n";
  }
  os << "  \"max_rows\": " << f.work.max_rows << ",\n  \"page_rows\": " << f.page_rows << ",\n";
  if (f.pools) {
    os << "  \"pools\": {\"device_pages\": " << f.pools->device_pages
       << ", \"pinned_pages\": " << f.pools->pinned_pages << "},\n";
  }
  const std::vector<std::uint64_t> rows = stash::dense_rows(f.work);
  os << "  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i % s.microbatches == 0) {
      os << (i == 0 ? "\n    " : ",\n    ");
    } else {
      os << ",";
    }
    os << rows[i];
  }
  os << "\n  ],\n  \"steps\": [";
  bool first = true;
  auto sep = [&] {
    os << (first ? "\n    " : ",\n    ");
    first = false;
  };
  const auto& steps = s.steps;
  for (std::size_t i = 0; i < steps.size();) {
    const stash::schedule_step& st = steps[i];
    // Is this the start of a whole chunk in layer order (stash) or reverse order (restore)?
    bool whole = i + s.layers <= steps.size();
    for (std::uint32_t l = 0; whole && l < s.layers; ++l) {
      const stash::schedule_step& o = steps[i + l];
      const std::uint32_t want = st.kind == step_kind::stash ? l : s.layers - 1 - l;
      whole = o.kind == st.kind && o.key.vp == st.key.vp && o.key.microbatch == st.key.microbatch &&
              o.key.layer == want;
    }
    sep();
    const bool stash_step = st.kind == step_kind::stash;
    if (whole) {
      os << "[\"" << (stash_step ? "F" : "B") << "\"," << st.key.vp << "," << st.key.microbatch
         << "]";
      i += s.layers;
    } else {
      os << "[\"" << (stash_step ? "S" : "R") << "\"," << st.key.vp << "," << st.key.layer << ","
         << st.key.microbatch << "]";
      ++i;
    }
  }
  os << "\n  ]\n}\n";
  return os.str();
}

void write_schedule(const schedule_file& f, const std::string& path) {
  validate(f);
  std::ofstream out(path, std::ios::binary);
  if (!out.good()) {
    throw runtime_error("cannot open '" + path + "' for writing: " + std::strerror(errno));
  }
  out << to_json(f);
  out.close();
  if (!out.good()) throw runtime_error("writing '" + path + "' failed");
}

}  // namespace offloadkit::traces
