// A test double of a common real stash, written from public descriptions of paged activation
// stashes built for one training step: keys are decimal schedule positions (each field below
// 1000), a key goes whole into one tier (the device if it has room, else pinned memory), any
// failure raises one sticky flag after which stash() stores nothing and restore() gives back
// nothing until the step is run again (reset) or the flag is cleared, and restoring a key that
// was never stashed is an error. It passes the battery under the profile it declares
// (sticky_flag_stash_implementation); the planted variants break one declared policy each. Made
// to throw out_of_memory for a key that does not fit instead of raising the flag, it is the double
// of the exception overflow policy (throwing_stash_implementation). With one tier of pages and a
// per-key status word it is the double of the single-tier placement
// (single_tier_stash_implementation: device pages only, or pinned pages only, as libraries that
// keep activations only in device buffers or only in host buffers do), and, validating its config
// at the first stash or restore instead of at creation, of first-use validation
// (first_use_stash_implementation). Each reads the policies it follows from the descriptor it is
// made by.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/stash.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::stash::testing_doubles {

/// What a planted variant of the double gets wrong.
enum class sticky_planted {
  none,
  /// Declared whole key per tier, but splits a key across the tiers when neither alone has room.
  splits_keys,
  /// Declared sticky, but goes on stashing after the flag is up.
  stashes_after_the_flag,
  /// Declared to throw on overflow, but after throwing raises a hidden flag that silently stops
  /// every later stash() until reset() or clear_status().
  stops_after_exception,
  /// Declared single tier (device pages only), but a key that does not fit its tier is kept in
  /// pinned memory of its own, the tier it does not have, and counted as pinned pages.
  spills_to_the_missing_tier,
  /// Declared single tier, but accepts a config that gives pages to the tier it lacks (and never
  /// uses them).
  accepts_the_missing_tier,
  /// Declared to validate at first use: refuses a bad config at the first call only, then stashes
  /// and restores as if it were good (one row per page where rows_per_page is 0).
  stashes_after_a_bad_config,
  /// Declared to validate at first use: restore() writes a row count of 0 before refusing a bad
  /// config.
  writes_before_refusing,
};

using offloadkit::testing::stash_capabilities;
using offloadkit::testing::stash_config_validation;
using offloadkit::testing::stash_overflow_report;
using offloadkit::testing::stash_placement;
using offloadkit::testing::stash_tier;
using offloadkit::testing::stash_unknown_restore;

class sticky_flag_stash final : public stash_interface {
 public:
  static constexpr std::uint32_t field_limit = 1000;

  /// Follows the overflow report, placement (whole_key_per_tier or single_tier), tier, restore of
  /// an empty key and validation policies of `profile`.
  sticky_flag_stash(executor& ex, const stash_config& c, sticky_planted planted,
                    const stash_capabilities& profile)
      : ex_(&ex),
        cfg_(c),
        planted_(planted),
        profile_(profile),
        overflow_(profile.overflow),
        device_count_(ex.device_count()) {
    if (profile.validation == stash_config_validation::construction) validate();
    free_ = {c.device_pages, c.pinned_pages};
    scalar_ = buffer(ex, memory_kind::pinned, sizeof(std::uint64_t));
  }

 private:
  struct held {
    bool spilled = false;  ///< the planted spill: pages outside the pool
    std::uint64_t rows = 0;
    std::uint64_t device_pages = 0, pinned_pages = 0;
    buffer device_part, pinned_part;
  };

  /// Throws out_of_range naming the field and its valid range for a config this stash cannot
  /// take: check_config's rules, and no pages in the tier a single-tier stash lacks.
  void validate() const {
    check_config(cfg_, device_count_);
    if (!profile_.single_tier() || planted_ == sticky_planted::accepts_the_missing_tier) return;
    const bool device = profile_.tier == stash_tier::device;
    const std::size_t other = device ? cfg_.pinned_pages : cfg_.device_pages;
    OFFLOADKIT_EXPECTS(other == 0, out_of_range, "stash_config.",
                       device ? "pinned_pages" : "device_pages", " = ", other,
                       " is outside [0, 0] (this stash has ",
                       device ? "device pages only)" : "pinned pages only)");
  }
  /// Under first-use validation, refuses every call while the config is bad.
  void validate_at_first_use() {
    if (validated_) return;
    if (planted_ == sticky_planted::stashes_after_a_bad_config) validated_ = true;  // reported once
    validate();
    validated_ = true;
  }
  [[nodiscard]] std::uint64_t pages_for(std::uint64_t rows) const {
    const std::uint64_t per = std::max<std::uint64_t>(cfg_.rows_per_page, 1);
    return (rows + per - 1) / per;
  }
  /// The tier a key needing `need` pages goes into, whole: 0 device, 1 pinned, -1 none.
  [[nodiscard]] int tier_for(std::uint64_t need) const {
    if (profile_.single_tier()) {
      const bool device = profile_.tier == stash_tier::device;
      return need <= (device ? free_.device : free_.pinned) ? (device ? 0 : 1) : -1;
    }
    return need <= free_.device ? 0 : need <= free_.pinned ? 1 : -1;
  }

  /// The decimal code of a key; out_of_range naming the field past 1000.
  static std::uint32_t decimal(const stash_key& k) {
    const char* names[] = {"vp", "layer", "microbatch"};
    const std::uint32_t fields[] = {k.vp, k.layer, k.microbatch};
    for (int i = 0; i < 3; ++i) {
      OFFLOADKIT_EXPECTS(fields[i] < field_limit, out_of_range, "sticky_flag_stash: key ",
                         to_string(k), " has ", names[i], " = ", fields[i], ", outside [0, ",
                         field_limit, ")");
    }
    return (k.vp * field_limit + k.layer) * field_limit + k.microbatch;
  }
  void note_key(std::uint32_t code) {
    if (seen_.count(code) != 0) return;
    OFFLOADKIT_EXPECTS(seen_.size() < cfg_.max_keys, out_of_range,
                       "sticky_flag_stash: distinct key number ", seen_.size() + 1,
                       " is outside [1, max_keys = ", cfg_.max_keys, "]");
    seen_.insert(code);
  }
  void raise(status_code c, const stash_key& k, std::uint64_t rows, std::uint64_t need) {
    if (status_.ok()) status_ = stash_status{c, k, rows, need, free_.device, free_.pinned};
  }
  /// The flag is up and stops stash() and restore() (a sticky flag only).
  [[nodiscard]] bool stopped() const {
    return !status_.ok() && overflow_ == stash_overflow_report::sticky_flag;
  }
  void write_rows(std::uint64_t* rows_out, std::uint64_t rows, stream_ref s) {
    if (rows_out == nullptr) return;
    *scalar_.as<std::uint64_t>() = rows;
    ex_->copy(rows_out, scalar_.data(), sizeof rows, s);
  }

  [[nodiscard]] std::string do_name() const override { return "sticky_flag"; }
  [[nodiscard]] const stash_config& do_config() const noexcept override { return cfg_; }
  [[nodiscard]] bool do_capturable() const noexcept override { return false; }

  void do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    validate_at_first_use();
    const std::uint32_t code = decimal(key);
    note_key(code);
    if (stopped() && planted_ != sticky_planted::stashes_after_the_flag) return;
    if (thrown_stop_) return;  // the planted silent flag
    ex_->copy(scalar_.data(), rows, sizeof(std::uint64_t), s);
    ex_->synchronize(s);
    const std::uint64_t r = *scalar_.as<std::uint64_t>();
    if (r > cfg_.max_rows) return raise(status_code::rows_too_large, key, r, 0);
    const std::uint64_t need = pages_for(r);
    if (entries_.count(code) != 0) return raise(status_code::double_stash, key, r, need);
    held h;
    h.rows = r;
    const int tier = tier_for(need);
    if (tier == 0) {
      h.device_pages = need;
    } else if (tier == 1) {
      h.pinned_pages = need;
    } else if (planted_ == sticky_planted::spills_to_the_missing_tier) {
      h.pinned_pages = need;
      h.spilled = true;
    } else if (planted_ == sticky_planted::splits_keys && need <= free_.device + free_.pinned) {
      h.device_pages = free_.device;
      h.pinned_pages = need - free_.device;
    } else if (overflow_ == stash_overflow_report::exception) {
      thrown_stop_ = planted_ == sticky_planted::stops_after_exception;
      OFFLOADKIT_FAIL(out_of_memory, "sticky_flag_stash: ", to_string(key), " needs ", need,
                      " pages; free: ", free_.device, " device, ", free_.pinned,
                      profile_.single_tier() ? " pinned (a key goes whole into its one tier)"
                                             : " pinned (a key goes whole into one tier)");
    } else {
      return raise(status_code::overflow, key, r, need);
    }
    const std::uint64_t dev_rows =
        std::min<std::uint64_t>(r, h.device_pages * std::max<std::uint64_t>(cfg_.rows_per_page, 1));
    const std::size_t dev_bytes = dev_rows * cfg_.row_bytes;
    const std::size_t pin_bytes = (r - dev_rows) * cfg_.row_bytes;
    h.device_part = buffer(*ex_, memory_kind::device, dev_bytes, cfg_.device);
    h.pinned_part = buffer(*ex_, memory_kind::pinned, pin_bytes, cfg_.device);
    const auto* from = static_cast<const unsigned char*>(src);
    if (dev_bytes > 0) ex_->copy(h.device_part.data(), from, dev_bytes, s);
    if (pin_bytes > 0) ex_->copy(h.pinned_part.data(), from + dev_bytes, pin_bytes, s);
    ex_->synchronize(s);
    if (!h.spilled) {
      free_.device -= h.device_pages;
      free_.pinned -= h.pinned_pages;
    }
    entries_.emplace(code, std::move(h));
  }

  void do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out, stream_ref s) override {
    if (planted_ == sticky_planted::writes_before_refusing && !validated_) {
      write_rows(rows_out, 0, s);
      ex_->synchronize(s);
    }
    validate_at_first_use();
    const std::uint32_t code = decimal(key);
    note_key(code);
    if (stopped()) {
      // The step is lost: nothing comes back until it is run again.
      write_rows(rows_out, 0, s);
      ex_->synchronize(s);
      return;
    }
    auto it = entries_.find(code);
    if (it == entries_.end() && profile_.unknown_restore == stash_unknown_restore::status_word) {
      raise(status_code::restore_empty, key, 0, 0);
      write_rows(rows_out, 0, s);
      ex_->synchronize(s);
      return;
    }
    OFFLOADKIT_EXPECTS(it != entries_.end(), state_error, "sticky_flag_stash: restore of ",
                       to_string(key),
                       ", which holds nothing (never stashed, or restored already)");
    held& h = it->second;
    auto* to = static_cast<unsigned char*>(dst);
    if (h.device_part.size() > 0) ex_->copy(to, h.device_part.data(), h.device_part.size(), s);
    if (h.pinned_part.size() > 0) {
      ex_->copy(to + h.device_part.size(), h.pinned_part.data(), h.pinned_part.size(), s);
    }
    write_rows(rows_out, h.rows, s);
    ex_->synchronize(s);
    if (!h.spilled) {
      free_.device += h.device_pages;
      free_.pinned += h.pinned_pages;
    }
    entries_.erase(it);
  }

  void do_reset(stream_ref s) override {
    ex_->synchronize(s);
    entries_.clear();
    free_ = {cfg_.device_pages, cfg_.pinned_pages};
    status_ = {};
    thrown_stop_ = false;
  }
  void do_clear_status(stream_ref s) override {
    ex_->synchronize(s);
    status_ = {};
    thrown_stop_ = false;
  }
  stash_snapshot do_snapshot(stream_ref s) override {
    ex_->synchronize(s);
    stash_snapshot out;
    out.free = free_;
    if (overflow_ == stash_overflow_report::sticky_flag) {
      out.status.code = status_.code;  // a flag: which key failed is not reported
    } else {
      out.status = status_;
    }
    for (const auto& [code, h] : entries_) {
      entry_view ev;
      ev.key = stash_key{code / (field_limit * field_limit), code / field_limit % field_limit,
                         code % field_limit};
      ev.rows = h.rows;
      ev.device_pages = h.device_pages;
      ev.pinned_pages = h.pinned_pages;
      out.entries.push_back(std::move(ev));
    }
    return out;
  }

  executor* ex_;
  stash_config cfg_;
  sticky_planted planted_;
  stash_capabilities profile_;  ///< the policies it follows
  std::map<std::uint32_t, held> entries_;
  std::set<std::uint32_t> seen_;  ///< distinct keys so far, for max_keys
  stash_overflow_report overflow_;
  int device_count_;
  bool validated_ = false;  ///< the config passed validate() (first-use validation)
  free_pages free_;
  stash_status status_;       ///< the first failure since the last reset or clear
  bool thrown_stop_ = false;  ///< the planted variant's silent flag, which stops stash() only
  buffer scalar_;
};

/// The double's descriptor for a profile: its name, the decimal key space and the factory, which
/// hands the double the profile it declares.
inline offloadkit::testing::stash_implementation double_implementation(
    const std::string& name, sticky_planted planted, const stash_capabilities& caps) {
  offloadkit::testing::stash_implementation impl;
  impl.name = planted == sticky_planted::none ? name : "planted_" + name;
  impl.caps = caps;
  impl.caps.vp_limit = sticky_flag_stash::field_limit;
  impl.caps.layer_limit = sticky_flag_stash::field_limit;
  impl.caps.microbatch_limit = sticky_flag_stash::field_limit;
  const stash_capabilities profile = impl.caps;
  impl.make = [planted, profile](executor& ex, const stash_config& c, stream_ref /*s*/) {
    return std::unique_ptr<stash_interface>(
        std::make_unique<sticky_flag_stash>(ex, c, planted, profile));
  };
  return impl;
}

/// The sticky double's profile: sticky flag, whole key per tier, an empty restore is an error.
inline stash_capabilities sticky_profile() {
  stash_capabilities caps;
  caps.capturable = false;
  caps.page_ids = false;
  caps.overflow = stash_overflow_report::sticky_flag;
  caps.placement = stash_placement::whole_key_per_tier;
  caps.unknown_restore = stash_unknown_restore::error;
  return caps;
}

/// The same double, declaring that stash() of a key that does not fit throws out_of_memory (and
/// records nothing, later calls going on); other failures go to a per-key status word.
inline offloadkit::testing::stash_implementation throwing_stash_implementation(
    sticky_planted planted = sticky_planted::none) {
  stash_capabilities caps = sticky_profile();
  caps.overflow = stash_overflow_report::exception;
  return double_implementation("throwing", planted, caps);
}

/// The double's descriptor: the profile it declares.
inline offloadkit::testing::stash_implementation sticky_flag_stash_implementation(
    sticky_planted planted = sticky_planted::none) {
  return double_implementation("sticky_flag", planted, sticky_profile());
}

/// The double with one tier of pages (`tier`): a key goes whole into it or overflows, recorded in
/// a per-key status word, as is the restore of a key that holds nothing; a config that gives the
/// other tier pages is refused at creation.
inline offloadkit::testing::stash_implementation single_tier_stash_implementation(
    stash_tier tier, sticky_planted planted = sticky_planted::none) {
  stash_capabilities caps;
  caps.overflow = stash_overflow_report::status_word;
  caps.placement = stash_placement::single_tier;
  caps.tier = tier;
  caps.unknown_restore = stash_unknown_restore::status_word;
  return double_implementation(tier == stash_tier::device ? "device_tier_only" : "pinned_tier_only",
                               planted, caps);
}

/// The sticky double validating its config at the first stash() or restore() instead of at
/// creation.
inline offloadkit::testing::stash_implementation first_use_stash_implementation(
    sticky_planted planted = sticky_planted::none) {
  stash_capabilities caps = sticky_profile();
  caps.validation = stash_config_validation::first_use;
  return double_implementation("config_at_first_use", planted, caps);
}

}  // namespace offloadkit::stash::testing_doubles
