// The stash's own checks on snapshots written by hand: each way a snapshot can break page
// conservation is named by check_conservation (the batteries rely on it to catch lost, doubled or
// misplaced pages), and every status has its own sentence.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "offloadkit/stash/stash.hpp"

namespace {

using namespace offloadkit::stash;

/// 2 device pages (ids 0, 1) and 2 pinned pages (ids 2, 3), 4 rows per page; key (0, 1, 2) holds
/// 6 rows in device page 1 and pinned page 3; pages 0 and 2 are free.
struct valid_snapshot {
  stash_config cfg;
  stash_snapshot snap;
  valid_snapshot() {
    cfg.row_bytes = 8;
    cfg.rows_per_page = 4;
    cfg.max_rows = 16;
    cfg.device_pages = 2;
    cfg.pinned_pages = 2;
    snap.free = {1, 1};
    snap.free_ids = {0, 2};
    entry_view e;
    e.key = {0, 1, 2};
    e.rows = 6;
    e.device_pages = 1;
    e.pinned_pages = 1;
    e.page_ids = {1, 3};
    snap.entries.push_back(e);
  }
  [[nodiscard]] std::string check() const { return check_conservation(snap, cfg, true); }
};

void expect_violation(const std::string& got, const std::string& want) {
  EXPECT_NE(got.find(want), std::string::npos) << "expected '" << want << "' in: '" << got << "'";
}

TEST(StashChecks, AValidSnapshotPasses) {
  const valid_snapshot v;
  EXPECT_EQ(v.check(), "");
  EXPECT_EQ(check_conservation(v.snap, v.cfg, false), "");
}

TEST(StashChecks, EachBrokenSnapshotIsNamed) {
  {
    valid_snapshot v;
    v.snap.entries[0].rows = 9;  // needs 3 pages, holds 2
    expect_violation(v.check(), "with 9 rows holds 1 + 1 pages, not 3");
  }
  {
    valid_snapshot v;
    v.snap.free.device = 0;
    expect_violation(v.check(), "device tier: 0 free + 1 held != 2 pages");
  }
  {
    valid_snapshot v;
    v.snap.free.pinned = 2;
    expect_violation(v.check(), "pinned tier: 2 free + 1 held != 2 pages");
  }
  {
    valid_snapshot v;
    v.snap.free_ids = {0};
    expect_violation(v.check(), "free lists report 1 ids for 2 free pages");
    // Without page ids the counts alone are checked, and they are right.
    EXPECT_EQ(check_conservation(v.snap, v.cfg, false), "");
  }
  {
    valid_snapshot v;
    v.snap.free_ids = {0, 7};
    expect_violation(v.check(), "page id 7 in the free list is outside [0, 4)");
  }
  {
    valid_snapshot v;
    v.snap.entries[0].page_ids = {1};
    expect_violation(v.check(), "lists 1 page ids for 2 pages");
  }
  {
    valid_snapshot v;
    v.snap.entries[0].page_ids = {3, 1};  // a pinned id where the device page belongs
    expect_violation(v.check(), "page 0 (id 3) is in the wrong tier");
  }
  {
    valid_snapshot v;
    v.snap.entries[0].page_ids = {0, 3};  // page 0 is also free
    expect_violation(v.check(), "page 0 is handed out twice (key");
    expect_violation(v.check(), "and the free list)");
  }
  {
    valid_snapshot v;
    v.snap.free_ids = {0, 0};
    expect_violation(v.check(), "page 0 is handed out twice (the free list and the free list)");
  }
  {
    valid_snapshot v;
    entry_view second;
    second.key = {0, 2, 0};
    second.rows = 1;
    second.device_pages = 1;
    second.page_ids = {1};  // the first key's device page
    v.snap.entries.push_back(second);
    v.snap.free = {0, 1};
    v.snap.free_ids = {2};
    expect_violation(v.check(),
                     "page 1 is handed out twice (key (vp 0, layer 2, microbatch 0) and key "
                     "(vp 0, layer 1, microbatch 2))");
  }
}

TEST(StashChecks, EveryStatusHasItsOwnSentence) {
  std::set<std::string> names;
  std::set<std::string> messages;
  for (const auto c : {status_code::ok, status_code::overflow, status_code::double_stash,
                       status_code::restore_empty, status_code::rows_too_large}) {
    names.insert(to_string(c));
    stash_status s;
    s.code = c;
    s.key = {1, 2, 3};
    s.rows = 40;
    messages.insert(s.message());
    if (c != status_code::ok) {
      EXPECT_NE(s.message().find(to_string(s.key)), std::string::npos) << s.message();
    }
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_EQ(messages.size(), 5u);
  EXPECT_EQ(names.count("unknown status"), 0u);
  stash_status odd;
  odd.code = static_cast<status_code>(99);
  EXPECT_EQ(odd.message(), "paged stash: unknown status");
  EXPECT_STREQ(to_string(static_cast<status_code>(99)), "unknown status");
}

}  // namespace
