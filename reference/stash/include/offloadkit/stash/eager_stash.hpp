// The reference paged stash: eager and obvious. stash() reads the row count on the host,
// allocates an exact-size buffer per key (device memory for the part that fits the device tier's
// page budget, pinned host memory for the rest) and copies; restore() copies back and frees. It
// keeps the same page accounting and status rules as the optimized stash, so the two can be
// compared call for call, but it synchronizes the host on every call and cannot be captured.
#pragma once

#include <cstdint>
#include <map>

#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/stash.hpp"

namespace offloadkit::stash {

class eager_stash final : public stash_interface {
 public:
  eager_stash(executor& ex, const stash_config& config, stream_ref s);
  ~eager_stash() override;

 private:
  struct held {
    std::uint64_t rows = 0;
    std::uint64_t device_pages = 0, pinned_pages = 0;
    buffer device_part, pinned_part;
  };

  executor* ex_;
  stash_config cfg_;
  std::map<std::uint32_t, held> entries_;         // key code -> buffers
  std::map<std::uint32_t, std::uint32_t> slots_;  // distinct keys seen, for the max_keys limit
  free_pages free_;
  stash_status status_;
  buffer scalar_;  // pinned staging for row counts

  void note_key(const stash_key& key);
  void fail(status_code c, const stash_key& key, std::uint64_t rows, std::uint64_t needed);

  [[nodiscard]] std::string do_name() const override { return "reference"; }
  [[nodiscard]] const stash_config& do_config() const noexcept override { return cfg_; }
  [[nodiscard]] bool do_capturable() const noexcept override { return false; }
  void do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                stream_ref s) override;
  void do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out, stream_ref s) override;
  void do_reset(stream_ref s) override;
  void do_clear_status(stream_ref s) override;
  stash_snapshot do_snapshot(stream_ref s) override;
};

}  // namespace offloadkit::stash
