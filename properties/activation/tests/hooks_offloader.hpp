// A test double of common real activation-offload code: saved-tensor hooks that copy each saved
// tensor to pinned host memory on the caller's stream and wait for it (as PyTorch's save_on_cpu
// does), and copy it back inside unpack. Real hooks of this kind differ from offloadkit's default
// profile in three ways, each a declared policy: they return tensors on the current device (the
// unpack stream's), not the one they were packed from; they decide what to offload by a rule of
// their own (here: integer tensors of other than one dimension, such as index and mask tensors,
// stay on the device) and report it in stats(); and they offload a storage saved twice once,
// holding its sources until synchronize(), an unpack, or max_pending_bytes asks for them. Each
// descriptor below declares one policy and passes the battery under it; the planted variants
// break that policy each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::activation::testing_doubles {

/// What a planted variant of the double gets wrong.
enum class hooks_planted {
  none,
  /// Declared current, but returns every tensor on the device it was packed from.
  returns_on_origin,
  /// Counts a tensor its rule keeps as kept, but copies it off and hands its source back in
  /// pack() like an offloaded one.
  copies_kept,
  /// Offloads a storage packed twice once, but hands back only the first pack's source.
  one_release_per_copy,
};

/// Which of the three policies the double follows (each false: offloadkit's default).
struct hooks_policies {
  bool current_device = false;
  bool predicate = false;
  bool dedup = false;
};

class hooks_offloader final : public offloader {
 public:
  hooks_offloader(executor& ex, offload_options o, hooks_policies p, hooks_planted planted)
      : ex_(ex), options_(o), policies_(p), planted_(planted) {}
  ~hooks_offloader() override {
    for (auto& [id, e] : entries_) {
      if ((e.kept || e.source_held) && e.source.release) e.source.release();
    }
  }

 private:
  struct entry {
    tensor source;
    bool kept = false;
    bool source_held = false;         ///< offloaded, its source not handed back yet
    std::shared_ptr<void> host_copy;  ///< pinned; shared by the packs of one storage
  };

  /// The hooks' own rule: integer tensors of other than one dimension stay on the device.
  [[nodiscard]] bool keeps(const tensor& t) const {
    if (!policies_.predicate) return t.bytes < options_.keep_threshold;
    const bool integer =
        t.type == dtype::u8 || t.type == dtype::i8 || t.type == dtype::i32 || t.type == dtype::i64;
    return integer && t.shape.size() != 1;
  }

  void hand_back(entry& e) {
    e.source_held = false;
    held_bytes_ -= e.source.bytes;
    auto release = std::move(e.source.release);
    e.source.release = nullptr;
    if (release) release();
  }

  handle do_pack(tensor t, stream_ref s) override {
    validate_for_pack(t, ex_.device_count());
    const handle h{next_++};
    entry e;
    const bool kept = keeps(t);
    if (kept && planted_ != hooks_planted::copies_kept) {
      e.kept = true;
      // Unpack may copy it to another device on a stream that is not ordered after this one.
      if (policies_.current_device) ex_.synchronize(s);
    } else {
      entry* shared = nullptr;
      if (policies_.dedup && !kept) {
        for (auto& [id, other] : entries_) {
          if (other.source_held && other.source.data == t.data && other.source.bytes == t.bytes &&
              other.source.device == t.device) {
            shared = &other;
            break;
          }
        }
      }
      if (shared != nullptr) {
        e.host_copy = shared->host_copy;
        if (planted_ == hooks_planted::one_release_per_copy) t.release = nullptr;  // the bug
      } else {
        const std::size_t n = std::max<std::size_t>(t.bytes, 1);
        executor& ex = ex_;
        e.host_copy = std::shared_ptr<void>(ex.allocate(memory_kind::pinned, n), [&ex, n](void* p) {
          ex.deallocate(memory_kind::pinned, p, n);
        });
        if (t.bytes > 0) ex_.copy(e.host_copy.get(), t.data, t.bytes, s);
        ex_.synchronize(s);  // the copy is complete: the source may go back
        if (!kept) stats_.offloaded_bytes += t.bytes;
      }
    }
    stats_.packed += 1;
    if (kept) stats_.kept += 1;
    e.source = std::move(t);
    auto& stored = entries_.emplace(h.id, std::move(e)).first->second;
    if (!stored.kept) {
      stored.source_held = true;
      held_bytes_ += stored.source.bytes;
      if (!policies_.dedup) {
        hand_back(stored);  // nothing to share it with later
      } else {
        held_order_.push_back(h.id);
        if (options_.max_pending_bytes > 0) give_back_held(options_.max_pending_bytes);
      }
    }
    return h;
  }

  /// Hands back held sources, oldest first, until they total at most `bound` bytes or one is left.
  void give_back_held(std::size_t bound) {
    while (!held_order_.empty()) {
      std::size_t count = 0;
      for (const auto& [id, e] : entries_) count += e.source_held ? 1 : 0;
      if (held_bytes_ <= bound || count <= 1) return;
      const auto it = entries_.find(held_order_.front());
      held_order_.pop_front();
      if (it != entries_.end() && it->second.source_held) hand_back(it->second);
    }
  }

  tensor do_unpack(handle h, stream_ref s) override {
    auto it = entries_.find(h.id);
    OFFLOADKIT_EXPECTS(it != entries_.end(), out_of_range, "handle ", h.id,
                       " is not packed (packed handles are below ", next_, ", each unpacked once)");
    entry& e = it->second;
    const int device = policies_.current_device && planted_ != hooks_planted::returns_on_origin
                           ? s.device
                           : e.source.device;
    if (e.kept && device == e.source.device) {
      tensor t = std::move(e.source);
      entries_.erase(it);
      return t;
    }
    tensor t;
    t.bytes = e.source.bytes;
    t.device = device;
    t.type = e.source.type;
    t.shape = e.source.shape;
    if (t.bytes > 0) {
      void* p = ex_.allocate(memory_kind::device, t.bytes, device);
      try {
        ex_.copy(p, e.kept ? e.source.data : e.host_copy.get(), t.bytes, s);
        ex_.synchronize(s);  // the host copy (or the kept source) may go
      } catch (...) {
        ex_.deallocate(memory_kind::device, p, t.bytes);
        throw;  // the tensor stays packed
      }
      t.data = p;
      executor& ex = ex_;
      t.release = [&ex, p, n = t.bytes, s] {
        ex.synchronize(s);  // the caller's work on the tensor is complete
        ex.deallocate(memory_kind::device, p, n);
      };
      stats_.restored_bytes += t.bytes;
      stats_.demand_uploads += 1;
    }
    entry gone = std::move(e);
    entries_.erase(it);
    if (gone.kept || gone.source_held) {
      if (gone.source_held) held_bytes_ -= gone.source.bytes;
      if (gone.source.release) gone.source.release();
    }
    return t;
  }

  void do_forward_layer_end(int, stream_ref) override {}
  void do_backward_layer_begin(int, stream_ref) override {}
  void do_synchronize() override { give_back_held(0); }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return policies_.predicate ? 0 : options_.keep_threshold;
  }
  [[nodiscard]] offload_stats do_stats() const override { return stats_; }
  [[nodiscard]] std::string do_name() const override { return "hooks"; }

  executor& ex_;
  offload_options options_;
  hooks_policies policies_;
  hooks_planted planted_;
  std::map<std::uint64_t, entry> entries_;
  std::deque<std::uint64_t> held_order_;
  std::size_t held_bytes_ = 0;
  offload_stats stats_;
  std::uint64_t next_ = 1;
};

/// The double's descriptor under `policies` (each a declared policy of the profile); it honours
/// both bounds and uploads nothing ahead of unpack().
inline offloadkit::testing::activation_implementation hooks_implementation(const std::string& name,
                                                                           hooks_policies policies,
                                                                           hooks_planted planted) {
  namespace t = offloadkit::testing;
  t::activation_implementation impl;
  impl.name = planted == hooks_planted::none ? name : "planted_" + name;
  impl.caps.backward_prefetch = false;
  if (policies.current_device) impl.caps.return_device = t::activation_return_device::current;
  if (policies.predicate) impl.caps.decision = t::activation_offload_decision::opaque_predicate;
  if (policies.dedup) impl.caps.dedup = t::activation_dedup::by_storage;
  impl.make = [policies, planted](executor& ex, const offload_options& o) {
    return std::unique_ptr<offloader>(std::make_unique<hooks_offloader>(ex, o, policies, planted));
  };
  return impl;
}

/// Returns tensors on the current device (the unpack stream's).
inline offloadkit::testing::activation_implementation current_device_hooks_implementation(
    hooks_planted planted = hooks_planted::none) {
  return hooks_implementation("current_device_hooks", {true, false, false}, planted);
}

/// Decides by its own rule, reported in stats().
inline offloadkit::testing::activation_implementation predicate_hooks_implementation(
    hooks_planted planted = hooks_planted::none) {
  return hooks_implementation("predicate_hooks", {false, true, false}, planted);
}

/// Offloads a storage packed twice once.
inline offloadkit::testing::activation_implementation dedup_hooks_implementation(
    hooks_planted planted = hooks_planted::none) {
  return hooks_implementation("dedup_hooks", {false, false, true}, planted);
}

/// All three at once.
inline offloadkit::testing::activation_implementation all_policies_hooks_implementation() {
  return hooks_implementation("all_policies_hooks", {true, true, true}, hooks_planted::none);
}

}  // namespace offloadkit::activation::testing_doubles
