// Schedule files (parse, validate, serialize, corpus of good and bad files), the generators, the
// recording API, and replay (planner exactness, byte checks, planted corruption).
#include <dirent.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"
#include "offloadkit/traces/schedule_generate.hpp"
#include "offloadkit/traces/schedule_recorder.hpp"

namespace ot = offloadkit::traces;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
        out.push_back(dir + "/" + n);
      }
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool same(const ot::schedule& a, const ot::schedule& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    if (a.steps[i].op != b.steps[i].op || !(a.steps[i].key == b.steps[i].key)) return false;
  }
  return a.name == b.name && a.pipeline_size == b.pipeline_size &&
         a.pipeline_rank == b.pipeline_rank && a.virtual_stages == b.virtual_stages &&
         a.layers == b.layers && a.microbatches == b.microbatches && a.row_bytes == b.row_bytes &&
         a.max_rows == b.max_rows && a.page_rows == b.page_rows && a.rows == b.rows &&
         a.pools.has_value() == b.pools.has_value() &&
         (!a.pools || (a.pools->device_pages == b.pools->device_pages &&
                       a.pools->pinned_pages == b.pools->pinned_pages));
}

/// A random valid schedule: every microbatch stashes its keys in (vp, layer) order and later
/// restores them in reverse; microbatches interleave at random.
ot::schedule random_schedule() {
  ot::schedule s;
  s.virtual_stages = *rc::gen::inRange(1, 4);
  s.layers = *rc::gen::inRange(1, 5);
  s.microbatches = *rc::gen::inRange(1, 9);
  s.row_bytes = *rc::gen::container<std::vector<std::uint64_t>>(
      static_cast<std::size_t>(s.layers), rc::gen::inRange<std::uint64_t>(1, 300));
  s.max_rows = *rc::gen::inRange<std::uint32_t>(0, 200);
  s.page_rows = *rc::gen::inRange<std::uint32_t>(1, 70);
  s.rows = *rc::gen::container<std::vector<std::uint32_t>>(
      s.key_count(), rc::gen::inRange<std::uint32_t>(0, s.max_rows + 1));
  if (*rc::gen::arbitrary<bool>()) {
    s.pools = ot::schedule_pools{*rc::gen::inRange<std::uint64_t>(0, 50),
                                 *rc::gen::inRange<std::uint64_t>(0, 50)};
  }
  const int per_mb = s.virtual_stages * s.layers;
  std::vector<int> done(static_cast<std::size_t>(s.microbatches), 0);
  std::vector<int> open(static_cast<std::size_t>(s.microbatches));
  for (int m = 0; m < s.microbatches; ++m) open[static_cast<std::size_t>(m)] = m;
  while (!open.empty()) {
    const auto pick = *rc::gen::inRange<std::size_t>(0, open.size());
    const int mb = open[pick];
    const int e = done[static_cast<std::size_t>(mb)]++;
    const int pos = e < per_mb ? e : 2 * per_mb - 1 - e;
    s.steps.push_back({e < per_mb ? ot::schedule_op::stash : ot::schedule_op::restore,
                       {pos / s.layers, pos % s.layers, mb},
                       s.steps.size()});
    if (e + 1 == 2 * per_mb) open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return s;
}

}  // namespace

TEST(ScheduleCorpus, GoodFilesParse) {
  const auto good = files_in(OFFLOADKIT_TRACES_CORPUS "/good", ".json");
  const auto examples = files_in(OFFLOADKIT_TRACES_EXAMPLES, ".json");
  ASSERT_GE(good.size(), 3u);
  for (const auto& f : good) EXPECT_NO_THROW((void)ot::read_schedule(f)) << f;
  ASSERT_GE(examples.size(), 4u);
  for (const auto& f : examples) EXPECT_NO_THROW((void)ot::read_schedule(f)) << f;
}

TEST(ScheduleCorpus, BadFilesAreRejectedWithPosition) {
  const auto bad = files_in(OFFLOADKIT_TRACES_CORPUS "/bad", ".json");
  ASSERT_GE(bad.size(), 15u);
  for (const auto& f : bad) {
    const std::string where = slurp(f.substr(0, f.size() - 5) + ".where");
    try {
      (void)ot::parse_schedule(slurp(f));
      ADD_FAILURE() << f << " was accepted";
    } catch (const ot::schedule_error& e) {
      EXPECT_EQ(e.where(), where) << f << ": " << e.what();
      EXPECT_FALSE(e.reason().empty());
    }
  }
}

TEST(ScheduleFormat, ReasonsNameTheValueAndTheRange) {
  auto reason = [](const std::string& text) {
    try {
      (void)ot::parse_schedule(text);
    } catch (const ot::schedule_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string base =
      R"({"format": "offloadkit.schedule", "version": 1, "pipeline": {"virtual_stages": 2, )"
      R"("layers": 2, "microbatches": 2}, "row_bytes": 16, "max_rows": 10, "page_rows": 4, )"
      R"("rows": [1,2,3,4,5,6,7,8], "steps": )";
  EXPECT_NE(reason(base + R"([["F",2,0]]})").find("/steps/0/1: 2 is outside [0, 1]"),
            std::string::npos);
  EXPECT_NE(reason(base + R"([["F",0,0],["F",1,0],["B",1,0],["B",0,0],["F",0,0]]})")
                .find("stashed a second time (first at /steps/0)"),
            std::string::npos);
  EXPECT_NE(reason(base + R"([["S",0,1,0]]})").find("this microbatch stashes (vp 0, layer 0) next"),
            std::string::npos);
  EXPECT_NE(reason(base + "[]}").find("/steps: key (vp 0, layer 0, microbatch 0) is never stashed"),
            std::string::npos);
}

RC_GTEST_PROP(ScheduleFormat, RoundTripsRandomValidSchedules, ()) {
  const ot::schedule s = random_schedule();
  ot::validate(s);
  const ot::schedule back = ot::parse_schedule(ot::to_json(s));
  RC_ASSERT(same(s, back));
}

// Arbitrary edits of a valid file: the parser accepts or rejects with a schedule_error, nothing
// else (the libFuzzer target fuzz/schedule_parse_fuzz.cpp explores the same space further).
RC_GTEST_PROP(ScheduleFormat, MutatedFilesNeverEscapeAsOtherErrors, ()) {
  std::string text = ot::to_json(random_schedule());
  const int edits = *rc::gen::inRange(1, 6);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const auto pos = *rc::gen::inRange<std::size_t>(0, text.size());
    switch (*rc::gen::inRange(0, 3)) {
      case 0:
        text[pos] = *rc::gen::element('0', '9', '-', '"', '[', ']', ',', '{', 'S', 'F', 'e');
        break;
      case 1:
        text.erase(pos, *rc::gen::inRange<std::size_t>(1, 20));
        break;
      default:
        text.insert(pos, *rc::gen::element<std::string>("999999999999", "[\"R\",0,0,0],", "-1",
                                                        "1e400", "null", "\"\\u0000\""));
        break;
    }
  }
  try {
    (void)ot::parse_schedule(text);
  } catch (const ot::schedule_error&) {
  }
}

TEST(ScheduleGenerate, OneF1BWarmupMatchesRank) {
  ot::generate_options o;
  o.pipeline_size = 4;
  o.microbatches = 8;
  o.layers = 1;
  for (int rank = 0; rank < 4; ++rank) {
    o.pipeline_rank = rank;
    const auto s = ot::generate_schedule(o);
    // Forwards before the first backward: pipeline_size - rank (warmup plus the first 1F1B pair).
    std::size_t first_b = 0;
    while (s.steps[first_b].op == ot::schedule_op::stash) ++first_b;
    EXPECT_EQ(first_b, static_cast<std::size_t>(4 - rank));
  }
}

TEST(ScheduleGenerate, InterleavedVisitsChunksInMegatronOrder) {
  ot::generate_options o;
  o.kind = "interleaved";
  o.pipeline_size = 2;
  o.pipeline_rank = 1;
  o.virtual_stages = 2;
  o.microbatches = 4;
  o.layers = 1;
  const auto s = ot::generate_schedule(o);
  // Rank 1 of 2: warmup = (2-1-1)*2 + (2-1)*2 = 2 forwards, then 1F1B.
  std::vector<std::string> got;
  for (const auto& st : s.steps) {
    got.push_back(std::string(st.op == ot::schedule_op::stash ? "F" : "B") +
                  std::to_string(st.key.vp) + std::to_string(st.key.microbatch));
  }
  const std::vector<std::string> want = {"F00", "F01", "F10", "B10", "F11", "B11", "F02", "B00",
                                         "F03", "B01", "F12", "B12", "F13", "B13", "B02", "B03"};
  EXPECT_EQ(got, want);
  o.microbatches = 5;
  EXPECT_THROW((void)ot::generate_schedule(o), ot::schedule_error);
}

TEST(ScheduleRecorder, RecordsWhatAnImplementationReports) {
  ot::generate_options g;
  g.kind = "interleaved";
  g.pipeline_size = 4;
  g.virtual_stages = 2;
  g.microbatches = 8;
  const auto gen = ot::generate_schedule(g);
  ot::schedule_shape shape;
  shape.name = gen.name;
  shape.pipeline_size = 4;
  shape.virtual_stages = 2;
  shape.layers = gen.layers;
  shape.microbatches = 8;
  shape.row_bytes = {g.row_bytes};
  shape.max_rows = gen.max_rows;
  shape.page_rows = gen.page_rows;
  ot::schedule_recorder rec(shape);
  for (const auto& st : gen.steps) {
    if (st.op == ot::schedule_op::stash) {
      rec.record_stash(st.key);
      rec.set_rows(st.key, gen.rows_of(st.key));
    } else {
      rec.record_restore(st.key);
    }
  }
  EXPECT_TRUE(same(rec.finish(), gen));
  EXPECT_THROW(rec.record_stash({2, 0, 0}), offloadkit::out_of_range);
  EXPECT_THROW(rec.set_rows({0, 0, 0}, gen.max_rows + 1), offloadkit::out_of_range);
  // A recorded run that stashes out of layer order is reported at the offending step.
  ot::schedule_recorder bad(shape);
  bad.record_stash({0, 1, 0});
  try {
    (void)bad.finish();
    ADD_FAILURE() << "accepted";
  } catch (const ot::schedule_error& e) {
    EXPECT_EQ(e.where(), "/steps/0");
  }
  shape.layers = 0;
  EXPECT_THROW(ot::schedule_recorder{shape}, ot::schedule_error);
}

// The planner is exact: a pool of the planned size never overflows, one page less does, and the
// overflow names the key that did not fit.
RC_GTEST_PROP(Replay, PlannerIsExact, ()) {
  const ot::schedule s = random_schedule();
  const auto need = ot::plan(s, ot::schedule_pools{1u << 30, 0});
  RC_ASSERT(!need.overflow.has_value());
  RC_ASSERT(!ot::plan(s, ot::schedule_pools{need.peak_pages, 0}).overflow.has_value());
  if (need.peak_pages > 0) {
    const auto small = ot::plan(s, ot::schedule_pools{need.peak_pages - 1, 0});
    RC_ASSERT(small.overflow.has_value());
    const auto& ov = *small.overflow;
    RC_ASSERT(s.steps[ov.step].op == ot::schedule_op::stash);
    RC_ASSERT(ov.pages_needed == s.pages_of(ov.key));
    RC_ASSERT(ov.pages_needed > ov.device_free);
  }
  // Keys span tiers, so any split of the peak between them suffices and one page less does not.
  const std::uint64_t d = *rc::gen::inRange<std::uint64_t>(0, need.peak_pages + 1);
  RC_ASSERT(!ot::plan(s, ot::schedule_pools{d, need.peak_pages - d}).overflow.has_value());
  if (need.peak_pages > 0) {
    const std::uint64_t d2 = std::min(d, need.peak_pages - 1);
    RC_ASSERT(ot::plan(s, ot::schedule_pools{d2, need.peak_pages - 1 - d2}).overflow.has_value());
  }
}

RC_GTEST_PROP(Replay, ModelRestoresEveryByteOnHost, ()) {
  const ot::schedule s = random_schedule();
  offloadkit::host_executor ex;
  ot::replay_options o;
  const auto need = ot::plan(s, ot::schedule_pools{1u << 30, 0});
  // Half the pages on the device: keys spill to pinned pages, and small pools overflow.
  o.pools = ot::schedule_pools{need.peak_pages / 2,
                               *rc::gen::inRange<std::uint64_t>(0, need.peak_pages + 1)};
  const auto r = ot::replay_model(s, ex, o);
  RC_ASSERT(r.mismatches == 0u);
  const auto p = ot::plan(s, o.pools);
  RC_ASSERT(r.overflow.has_value() == p.overflow.has_value());
  std::uint64_t expected = 0;
  std::size_t keys = 0;
  if (!p.overflow) {
    for (int vp = 0; vp < s.virtual_stages; ++vp)
      for (int l = 0; l < s.layers; ++l)
        for (int mb = 0; mb < s.microbatches; ++mb) {
          expected += s.bytes_of({vp, l, mb});
          ++keys;
        }
    RC_ASSERT(r.bytes_checked == expected);
    RC_ASSERT(r.keys_checked == keys);
  }
}

namespace {

/// Planted bug: an executor that drops the n-th copy into device memory it is asked to do (a lost
/// page copy), behind the executor interface.
class dropping_adaptor final : public offloadkit::executor_adaptor {
 public:
  dropping_adaptor(offloadkit::executor& up, int n) : executor_adaptor(up), n_(n) {}

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, offloadkit::stream_ref s) override {
    if (count_++ == n_) return;
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  int n_;
  int count_ = 0;
};

}  // namespace

TEST(Replay, SuiteCatchesALostPageCopy) {
  ot::generate_options g;
  g.microbatches = 8;
  g.max_rows = 300;
  g.mean_rows = 200;
  g.row_bytes = 40;
  const auto s = ot::generate_schedule(g);
  offloadkit::host_executor host;
  dropping_adaptor bad(host, 5);
  const auto r = ot::replay_model(s, bad, {});
  EXPECT_GT(r.mismatches, 0u);
  EXPECT_NE(r.first_mismatch.find("bytes differ"), std::string::npos) << r.first_mismatch;
  offloadkit::host_executor good;
  EXPECT_EQ(ot::replay_model(s, good, {}).mismatches, 0u);
}
