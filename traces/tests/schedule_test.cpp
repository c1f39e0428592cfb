// Schedule files (parse, validate, serialize, corpus of good and bad files), the generators, the
// recording API, and replay (planner exactness, byte checks, planted corruption).
#include <dirent.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>

#include "dropping_adaptor.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"
#include "offloadkit/traces/schedule_generate.hpp"
#include "offloadkit/traces/schedule_recorder.hpp"

namespace ot = offloadkit::traces;
namespace os = offloadkit::stash;

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
        out.push_back(dir);
        out.back().append("/").append(n);
      }
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool same(const ot::schedule_file& a, const ot::schedule_file& b) {
  const auto& x = a.work;
  const auto& y = b.work;
  return x.sched.steps == y.sched.steps && a.name == b.name && a.pipeline_size == b.pipeline_size &&
         a.pipeline_rank == b.pipeline_rank && x.sched.vp_stages == y.sched.vp_stages &&
         x.sched.layers == y.sched.layers && x.sched.microbatches == y.sched.microbatches &&
         x.row_bytes == y.row_bytes && x.layer_row_bytes == y.layer_row_bytes &&
         x.max_rows == y.max_rows && a.page_rows == b.page_rows &&
         os::dense_rows(x) == os::dense_rows(y) && a.pools.has_value() == b.pools.has_value() &&
         (!a.pools || (a.pools->device_pages == b.pools->device_pages &&
                       a.pools->pinned_pages == b.pools->pinned_pages));
}

/// A random valid schedule file, drawn from a seed rapidcheck picks.
ot::schedule_file random_schedule() {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  return ot::random_schedule_file(rng);
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
  // An extra duplicate stash and an early restore are reported where they happen, naming the key.
  EXPECT_NE(reason(base + R"([["F",0,0],["F",1,0],["B",1,0],["B",0,0],["F",0,0],["F",1,1]]})")
                .find("/steps/4: key (vp 0, layer 0, microbatch 0) was already stashed"),
            std::string::npos);
  EXPECT_NE(reason(base + R"([["F",0,0],["F",1,0],["B",1,0],["B",0,0],["R",0,0,0],["F",1,1]]})")
                .find("/steps/4: key (vp 0, layer 0, microbatch 0) was already restored"),
            std::string::npos);
  EXPECT_NE(reason(base + R"([["F",0,0],["R",0,1,0],["F",1,0]]})")
                .find("/steps/1: key (vp 0, layer 1, microbatch 0) is restored before the "
                      "microbatch's forward finished"),
            std::string::npos);
  EXPECT_NE(reason(base + R"([["S",0,1,0]]})")
                .find("/steps/0: stash (vp 0, layer 1, microbatch 0) is out of forward order; "
                      "expected the stash of (vp 0, layer 0, microbatch 0) first"),
            std::string::npos);
  EXPECT_NE(reason(base + "[]}").find("/steps: key (vp 0, layer 0, microbatch 0) is never stashed"),
            std::string::npos);
  // Pools are limited to what the implementations accept, and the error names /pools.
  const std::string pooled =
      R"({"format": "offloadkit.schedule", "version": 1, "pipeline": {"virtual_stages": 1, )"
      R"("layers": 1, "microbatches": 1}, "row_bytes": 16, "max_rows": 10, "page_rows": 4, )"
      R"("rows": [1], "steps": [["F",0,0],["B",0,0]], "pools": )";
  EXPECT_NE(reason(pooled + R"({"device_pages": 1099511627776}})").find("/pools/device_pages"),
            std::string::npos);
  EXPECT_NE(reason(pooled + R"({"device_pages": 2147483647, "pinned_pages": 1}})")
                .find("schedule /pools: device_pages + pinned_pages"),
            std::string::npos);
  EXPECT_EQ(reason(pooled + R"({"device_pages": 2147483646, "pinned_pages": 1}})"), "accepted");
  // max_rows is checked against its range.
  EXPECT_NE(reason(R"({"format": "offloadkit.schedule", "version": 1, "max_rows": 4294967295})")
                .find("/max_rows: 4294967295 is outside [0, 2147483648]"),
            std::string::npos);
  EXPECT_NE(reason(R"({"format": "offloadkit.schedule", "version": 1, "max_rows": -1})")
                .find("/max_rows: -1 is negative"),
            std::string::npos);
}

// Deep nesting is refused at the first container the format does not have there, without
// recursion: the error rendering never walks the input.
TEST(ScheduleFormat, DeepNestingIsAClearError) {
  for (const std::string& open : {std::string("["), std::string("{\"steps\": [[")}) {
    std::string text = open;
    text += std::string(200000, '[');
    text += std::string(200000, ']');
    try {
      (void)ot::parse_schedule(text);
      ADD_FAILURE() << "accepted";
    } catch (const ot::schedule_error& e) {
      EXPECT_FALSE(e.reason().empty());
      EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
    }
  }
}

// Input is read as a stream: a long file is rejected as soon as it holds more than the schedule
// can use, without reading (or keeping) the rest.
TEST(ScheduleFormat, LongInputsStopAtTheSchedulesLimits) {
  std::string text =
      R"({"format": "offloadkit.schedule", "version": 1, "pipeline": {"virtual_stages": 1, )"
      R"("layers": 1, "microbatches": 2}, "rows": [)";
  for (int i = 0; i < 100000; ++i) text += "1,";
  text += "1]}";
  std::istringstream in(text);
  try {
    (void)ot::parse_schedule(in);
    ADD_FAILURE() << "accepted";
  } catch (const ot::schedule_error& e) {
    EXPECT_EQ(e.where(), "/rows");
    EXPECT_NE(e.reason().find("more than 2 entries"), std::string::npos) << e.reason();
  }
}

RC_GTEST_PROP(ScheduleFormat, RoundTripsRandomValidSchedules, ()) {
  const ot::schedule_file s = random_schedule();
  ot::validate(s);
  const ot::schedule_file back = ot::parse_schedule(ot::to_json(s));
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
  for (std::uint32_t rank = 0; rank < 4; ++rank) {
    o.pipeline_rank = rank;
    const auto s = ot::generate_schedule(o);
    // Forwards before the first backward: pipeline_size - rank (warmup plus the first 1F1B pair).
    std::size_t first_b = 0;
    while (s.work.sched.steps[first_b].kind == os::step_kind::stash) ++first_b;
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
  for (const auto& st : s.work.sched.steps) {
    got.push_back(std::string(st.kind == os::step_kind::stash ? "F" : "B") +
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
  shape.layers = gen.work.sched.layers;
  shape.microbatches = 8;
  shape.row_bytes = {g.row_bytes};
  shape.max_rows = gen.work.max_rows;
  shape.page_rows = gen.page_rows;
  ot::schedule_recorder rec(shape);
  for (const auto& st : gen.work.sched.steps) {
    if (st.kind == os::step_kind::stash) {
      rec.record_stash(st.key);
      rec.set_rows(st.key, os::rows_of(gen.work, st.key));
    } else {
      rec.record_restore(st.key);
    }
  }
  EXPECT_TRUE(same(rec.finish(), gen));
  EXPECT_THROW(rec.record_stash({2, 0, 0}), offloadkit::out_of_range);
  EXPECT_THROW(rec.set_rows({0, 0, 0}, gen.work.max_rows + 1), offloadkit::out_of_range);
  EXPECT_THROW(rec.set_pools(std::uint64_t{1} << 31, 0), ot::schedule_error);
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
  // max_rows is validated: the recorder cannot write a file replay rejects.
  shape.layers = 2;
  shape.max_rows = (std::uint64_t{1} << 31) + 1;
  try {
    ot::schedule_recorder too_big{shape};
    ADD_FAILURE() << "accepted max_rows 2^31 + 1";
  } catch (const ot::schedule_error& e) {
    EXPECT_EQ(e.where(), "/max_rows");
  }
}

using offloadkit::testing::dropping_adaptor;

TEST(Replay, SuiteCatchesALostPageCopy) {
  ot::generate_options g;
  g.microbatches = 8;
  g.max_rows = 300;
  g.mean_rows = 200;
  g.row_bytes = 40;
  const auto f = ot::generate_schedule(g);
  auto run = [&](offloadkit::executor& ex) {
    offloadkit::stream st(ex);
    const os::tier_pools pools{os::plan(f.work, f.page_rows).peak_pages, 0};
    auto impl = ot::make_stash("optimized", ex, ot::config_for(f, pools), st);
    st.synchronize();
    return ot::replay_stash(f, *impl, ex);
  };
  offloadkit::host_executor host;
  dropping_adaptor bad(host, 5);
  const auto r = run(bad);
  EXPECT_GT(r.mismatches, 0u);
  EXPECT_NE(r.first_mismatch.find("bytes differ"), std::string::npos) << r.first_mismatch;
  offloadkit::host_executor good;
  EXPECT_EQ(run(good).mismatches, 0u);
}
