// The collective nccl_region_test captures into its graphs: NCCL's all-reduce across GPUs 0 and
// 1 on the cuda executor, or, on the host executor, a stand-in that sums on the host in stream
// order, so that the scenario, its checks and its report run on a machine without GPUs (with
// faults planted on request, to show that a hang, a wrong sum, a crash and an error are each
// reported as such).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "nccl_api.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::multigpu {

/// An all-reduce (sum of floats) over devices 0 and 1, one rank per device. Failures throw
/// std::runtime_error naming the call and the error.
class collective {
 public:
  collective() = default;
  collective(const collective&) = delete;
  collective& operator=(const collective&) = delete;
  virtual ~collective() = default;

  /// One line: what runs the all-reduce.
  [[nodiscard]] virtual std::string describe() const = 0;
  /// Creates the two ranks (ncclCommInitAll over devices 0 and 1).
  virtual void init() = 0;
  /// Brackets the calls that one thread issues for both ranks (ncclGroupStart / ncclGroupEnd).
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  /// Sums `count` floats of `send` over the ranks into `recv` (in place where they are equal),
  /// in order on `s`, a stream of `device`; may be issued to a capturing stream.
  virtual void all_reduce(int device, const void* send, void* recv, std::size_t count,
                          stream_ref s) = 0;
  /// Whether register_buffer() does anything (ncclCommRegister exists).
  [[nodiscard]] virtual bool can_register() const = 0;
  /// Registers [p, p + bytes) with `device`'s rank; returns the handle (null: not registered).
  virtual void* register_buffer(int device, void* p, std::size_t bytes) = 0;
  virtual void deregister_buffer(int device, void* handle) = 0;
  /// Throws when a rank has reported an asynchronous error (ncclCommGetAsyncError).
  virtual void check_async_errors(const std::string& during) const = 0;
  /// Ends both ranks (ncclCommFinalize in a group, then ncclCommDestroy).
  virtual void finalize() = 0;
};

/// NCCL's, from a loaded library.
std::unique_ptr<collective> make_nccl_collective(const nccl_api& api);

/// Faults the host stand-in plants at its third all-reduce: after the warm-up and the replay
/// before any pause, the first replay after a resume.
enum class host_fault { none, hang, wrong, crash, error };

/// Parses "none", "hang", "wrong", "crash", "error"; false for anything else.
bool parse_host_fault(const std::string& text, host_fault& out);

/// The host stand-in: each rank's all-reduce is a host function on its stream (captured into the
/// graph like any other work); the two meet, and the second to arrive sums both ranks' inputs
/// into both outputs.
std::unique_ptr<collective> make_host_collective(executor& ex, host_fault fault);

}  // namespace offloadkit::multigpu
