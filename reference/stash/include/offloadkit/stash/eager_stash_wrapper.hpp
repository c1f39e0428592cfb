// The reference stash behind the stash interface, every entry forwarded to it: the base of the
// planted stashes (plugin/planted, the driver-fault scenario probe), each of which overrides only
// the entries it changes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "offloadkit/stash/eager_stash.hpp"

namespace offloadkit::stash {

class eager_stash_wrapper : public stash_interface {
 public:
  eager_stash_wrapper(executor& ex, const stash_config& c, stream_ref s, std::string name)
      : ex_(&ex), inner_(ex, c, s), name_(std::move(name)) {}

 protected:
  [[nodiscard]] std::string do_name() const override { return name_; }
  [[nodiscard]] const stash_config& do_config() const noexcept override { return inner_.config(); }
  [[nodiscard]] bool do_capturable() const noexcept override { return false; }
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    inner_.stash(k, src, rows, s);
  }
  void do_restore(const stash_key& k, void* dst, std::uint64_t* rows_out, stream_ref s) override {
    inner_.restore(k, dst, rows_out, s);
  }
  void do_reset(stream_ref s) override { inner_.reset(s); }
  void do_clear_status(stream_ref s) override { inner_.clear_status(s); }
  stash_snapshot do_snapshot(stream_ref s) override { return inner_.snapshot(s); }

  executor* ex_;
  eager_stash inner_;

 private:
  std::string name_;
};

}  // namespace offloadkit::stash
