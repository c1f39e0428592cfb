// Round trips of random schedules, the capacity sweep that predicts the first overflow, and
// batched calls against the same calls made key by key.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

// ---- properties -------------------------------------------------------------------------------

/// Differential: for random schedules, row counts, row sizes and page sizes, restores give back
/// exactly the model's bytes, pages are conserved after every step (none lost, none owned twice)
/// and the freelists are full at the end.
void prop_round_trip(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload();
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const auto [dev, pin] =
      pool_for_peak(impl, plan.peak_pages, *rc::gen::inRange<std::uint64_t>(0, plan.peak_pages + 1),
                    *rc::gen::inRange<std::uint64_t>(0, 3));
  const stash_config cfg = config_for(r, dev, pin);
  stream s(ex);
  auto st = impl.make(ex, cfg, s);
  // What the instance says of itself agrees with what its descriptor declares.
  RC_ASSERT(st->capturable() == impl.caps.capturable);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  run_workload(*st, io, r.w, {}, true, impl.caps.page_ids, 1);
  RC_ASSERT(st->status(s).ok());
  // A second training step on the same pool behaves the same.
  run_workload(*st, io, r.w, {}, false, impl.caps.page_ids, 2);
  RC_ASSERT(st->status(s).ok());
}

/// Fault injection: at every pool capacity from 0 up to the planner's peak, the status word names
/// exactly the first overflowing key with its row count, need and free pages in both tiers;
/// every other key restores correctly; overflowed keys restore nothing; pages are conserved. At
/// the peak nothing overflows (the planner is exact).
void prop_capacity_sweep(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload(true);
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const int split_percent = *rc::gen::element(0, 50, 100);
  stream s(ex);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  for (std::uint64_t cap = 0; cap <= plan.peak_pages; ++cap) {
    // A single-tier stash has the whole capacity in its tier: the prediction is the split one
    // with the other tier empty.
    const auto [dev, pin] =
        tiers_for(impl.caps, cap * split_percent / 100, cap - cap * split_percent / 100);
    const stash_config cfg = config_for(r, dev, pin);
    auto st = impl.make(ex, cfg, s);
    std::vector<stash_key> dropped;
    const auto predicted = predict_overflow(r.w, r.rows_per_page, dev, pin, &dropped);
    run_workload(*st, io, r.w, dropped, false, impl.caps.page_ids, static_cast<std::uint32_t>(cap));
    const stash_status got = st->status(s);
    if (cap == plan.peak_pages) {
      if (!got.ok())
        RC_FAIL(detail::concat("at the planner's capacity ", cap, ": ", got.message()));
      RC_ASSERT_FALSE(predicted.has_value());
      continue;
    }
    RC_ASSERT(predicted.has_value());  // below the peak something must overflow
    if (got.code != status_code::overflow || got.key != predicted->key ||
        got.rows != predicted->rows || got.needed != predicted->needed ||
        got.free_device != predicted->free_device || got.free_pinned != predicted->free_pinned) {
      RC_FAIL(detail::concat("capacity ", dev, " device + ", pin, " pinned: status says '",
                             got.message(), "', expected overflow of ", to_string(predicted->key),
                             " needing ", predicted->needed, " with ", predicted->free_device,
                             " + ", predicted->free_pinned, " free"));
    }
    bool thrown = false;
    try {
      st->check(s);
    } catch (const stash_overflow& e) {
      thrown = std::string(e.what()).find(to_string(predicted->key)) != std::string::npos;
    }
    RC_ASSERT(thrown);
  }
}

namespace {

// ---- batches ------------------------------------------------------------------------------------

/// Everything a snapshot says, as text, for comparing two stashes that should agree exactly (page
/// ids only where the implementation reports them).
std::string describe(const stash_snapshot& snap, bool page_ids) {
  const stash_status& st = snap.status;
  std::string out =
      detail::concat("free ", snap.free.device, "+", snap.free.pinned, "; status ",
                     static_cast<std::uint32_t>(st.code), " ", to_string(st.key), " rows ", st.rows,
                     " needed ", st.needed, " free ", st.free_device, "+", st.free_pinned);
  if (page_ids) {
    out += "; free ids";
    for (std::uint32_t id : snap.free_ids) out += detail::concat(" ", id);
  }
  std::vector<entry_view> entries = snap.entries;
  std::sort(entries.begin(), entries.end(),
            [](const entry_view& a, const entry_view& b) { return a.key < b.key; });
  for (const entry_view& e : entries) {
    out += detail::concat("; ", to_string(e.key), " rows ", e.rows, " pages ", e.device_pages, "+",
                          e.pinned_pages);
    if (!page_ids) continue;
    out += " ids";
    for (std::uint32_t id : e.page_ids) out += detail::concat(" ", id);
  }
  return out;
}

/// Runs `f` and names what it threw: "nothing", "out_of_memory" or "state_error" (an overflow
/// thrown, a restore of nothing refused); anything else goes on to fail the property.
template <class F>
const char* stash_error_kind(F&& f) {
  try {
    f();
  } catch (const out_of_memory&) {
    return "out_of_memory";
  } catch (const state_error&) {
    return "state_error";
  }
  return "nothing";
}

}  // namespace

/// Differential: stash_batch() and restore_batch() leave exactly what stash() and restore() of
/// the same items in batch order leave: the same entries (page ids included where reported), free
/// pages, sticky status word (which key failed first, with its need and the free pages it saw),
/// restored bytes and row counts. Batches are random subsets of a layer's keys in random order
/// over pools that often run out, with keys stashed twice, restored empty and rows past max_rows.
void prop_batch_matches_per_key(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 40),
                                  rc::gen::element<std::size_t>(32, 128, 192));
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 9);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(0, 40);
  const std::size_t n_keys = *rc::gen::inRange<std::size_t>(1, 13);
  const std::uint64_t per_key = pages_for(cfg.max_rows, cfg.rows_per_page);
  std::tie(cfg.device_pages, cfg.pinned_pages) =
      tiers_for(impl.caps, *rc::gen::inRange<std::uint64_t>(0, n_keys * per_key / 2 + 2),
                *rc::gen::inRange<std::uint64_t>(0, n_keys * per_key / 2 + 2));
  cfg.max_keys = n_keys;
  stream s(ex);
  auto per = impl.make(ex, cfg, s);
  auto bat = impl.make(ex, cfg, s);
  const std::size_t bytes = cfg.max_rows * cfg.row_bytes;
  device_io io(ex, s, bytes);
  std::vector<stash_key> keys;
  std::vector<buffer> src, rows, dst_per, dst_bat, out_per, out_bat;
  for (std::size_t k = 0; k < n_keys; ++k) {
    keys.push_back(
        stash_key{0, static_cast<std::uint32_t>(k / 4), static_cast<std::uint32_t>(k % 4)});
    src.emplace_back(ex, memory_kind::device, bytes);
    rows.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    dst_per.emplace_back(ex, memory_kind::device, bytes);
    dst_bat.emplace_back(ex, memory_kind::device, bytes);
    out_per.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    out_bat.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    io.write_source(src[k].data(), pattern_code(keys[k]), 7);
  }
  const int rounds = *rc::gen::inRange(1, 7);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::size_t> order(n_keys);
    for (std::size_t k = 0; k < n_keys; ++k) order[k] = k;
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(*rc::gen::inRange<std::size_t>(1, n_keys + 1));
    const bool stashing = *rc::gen::arbitrary<bool>();
    std::string what = stashing ? "stash_batch of" : "restore_batch of";
    if (stashing) {
      std::vector<stash_item> items;
      for (std::size_t k : order) {
        const std::uint64_t r = *rc::gen::weightedOneOf<std::uint64_t>(
            {{1, rc::gen::just(std::uint64_t{cfg.max_rows + 1})},
             {2, rc::gen::just(std::uint64_t{cfg.max_rows})},
             {6, rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1)}});
        io.write_u64(rows[k].data(), r);
        items.push_back(stash_item{keys[k], src[k].data(), rows[k].as<std::uint64_t>()});
        what += detail::concat(" ", to_string(keys[k]), ":", r);
      }
      // Where an overflow is an exception, a batch stops at the first item that throws, as
      // per-key calls in batch order do, and throws what that item throws.
      const char* per_threw = stash_error_kind([&] {
        for (const stash_item& it : items) per->stash(it.key, it.src, it.rows, s);
      });
      const char* bat_threw = stash_error_kind([&] { bat->stash_batch(items, s); });
      if (std::string(per_threw) != bat_threw) {
        RC_FAIL(detail::concat("round ", round, ", ", what, ": the batch threw ", bat_threw,
                               ", per-key calls in batch order threw ", per_threw));
      }
    } else {
      if (impl.caps.unknown_restore == offloadkit::testing::stash_unknown_restore::error) {
        // Restoring a key that holds nothing is an error under this profile (model_based checks
        // it): restore the held ones.
        std::set<stash_key> held;
        for (const entry_view& e : per->snapshot(s).entries) held.insert(e.key);
        order.erase(std::remove_if(order.begin(), order.end(),
                                   [&](std::size_t k) { return held.count(keys[k]) == 0; }),
                    order.end());
        if (order.empty()) continue;
      }
      std::vector<restore_item> items;
      for (std::size_t k : order) {
        io.clear(dst_per[k].data());
        io.clear(dst_bat[k].data());
        io.write_u64(out_per[k].data(), 0xDEADBEEFull);
        io.write_u64(out_bat[k].data(), 0xDEADBEEFull);
        per->restore(keys[k], dst_per[k].data(), out_per[k].as<std::uint64_t>(), s);
        items.push_back(restore_item{keys[k], dst_bat[k].data(), out_bat[k].as<std::uint64_t>()});
        what += detail::concat(" ", to_string(keys[k]));
      }
      bat->restore_batch(items, s);
      for (std::size_t k : order) {
        if (io.read(dst_per[k].data()) != io.read(dst_bat[k].data())) {
          RC_FAIL(detail::concat("round ", round, ", ", what, ": ", to_string(keys[k]),
                                 " restored other bytes than a restore() of its own"));
        }
        const std::uint64_t rp = io.read_u64(out_per[k].data()),
                            rb = io.read_u64(out_bat[k].data());
        if (rp != rb) {
          RC_FAIL(detail::concat("round ", round, ", ", what, ": ", to_string(keys[k]),
                                 " row count out ", rb, ", restore() writes ", rp));
        }
      }
    }
    const std::string want = describe(per->snapshot(s), impl.caps.page_ids);
    const stash_snapshot got_snap = bat->snapshot(s);
    const std::string got = describe(got_snap, impl.caps.page_ids);
    if (got != want) {
      RC_FAIL(detail::concat("round ", round, ", ", what, ":\n  batch:   ", got,
                             "\n  per key: ", want));
    }
    const std::string err = check_conservation(got_snap, cfg, impl.caps.page_ids);
    if (!err.empty()) RC_FAIL(detail::concat("round ", round, ", ", what, ": ", err));
  }
}

}  // namespace offloadkit::stash::testing
