// Test-side scope guard shared by the batteries: queued work finishes before what it uses goes.
#pragma once

#include <initializer_list>
#include <vector>

#include "offloadkit/executor.hpp"

namespace offloadkit::testing {

/// Synchronizes streams when it goes out of scope, so that buffers declared before it are not
/// released while queued work still uses them (also when a check fails half way).
class sync_on_exit {
 public:
  sync_on_exit(executor& ex, std::initializer_list<stream_ref> streams)
      : ex_(ex), streams_(streams) {}
  sync_on_exit(const sync_on_exit&) = delete;
  sync_on_exit& operator=(const sync_on_exit&) = delete;
  ~sync_on_exit() {
    for (stream_ref s : streams_) {
      try {
        ex_.synchronize(s);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor reports nothing more here
      }
    }
  }

 private:
  executor& ex_;
  std::vector<stream_ref> streams_;
};

}  // namespace offloadkit::testing
