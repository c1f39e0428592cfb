// The optimized paged stash: a pool of fixed-size pages in two tiers (device memory, then pinned
// host memory), device-resident freelists, page table and status word, and one fused launch per
// stash and per restore, or per batch of up to 64 keys. The row count never leaves the device and
// no call synchronizes the host, so a graph captured for one step replays correctly with other row
// counts. On compute capability 9.0 and later the launches are programmatic (launch.hpp): each
// starts while the kernel before it in the stream ends, and waits for it before touching memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/stash.hpp"

namespace offloadkit::stash {

class paged_stash final : public stash_interface {
 public:
  /// Allocates the pool and fills the freelists in stream order on `s`.
  paged_stash(executor& ex, const stash_config& config, stream_ref s);
  ~paged_stash() override;

  /// The fixed index space of every stash and restore launch.
  [[nodiscard]] std::uint64_t workers() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;

  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] const stash_config& do_config() const noexcept override;
  [[nodiscard]] bool do_capturable() const noexcept override { return true; }
  void do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                stream_ref s) override;
  void do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out, stream_ref s) override;
  /// One launch per 64 keys.
  void do_stash_batch(const stash_item* items, std::size_t n, stream_ref s) override;
  void do_restore_batch(const restore_item* items, std::size_t n, stream_ref s) override;
  void do_reset(stream_ref s) override;
  void do_clear_status(stream_ref s) override;
  stash_snapshot do_snapshot(stream_ref s) override;
};

}  // namespace offloadkit::stash
