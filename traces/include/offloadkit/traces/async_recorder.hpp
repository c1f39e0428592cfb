// Recording a production schedule without a host synchronization. A paged stash that runs under
// CUDA graphs keeps each key's row count on the device; reading it back per key would stall the
// host at every stash. This recorder instead enqueues, in stream order, an asynchronous copy of
// the 4-byte count into a slot of a pinned ring, and reads the slots at resolve(), which the job
// calls at a point it synchronizes anyway (the end of the step). It enqueues nothing but those
// copies, so it adds no host synchronization and records under stream capture as well (the copy
// becomes a node of the graph; each replay refreshes the slot).
//
// resolve() also writes each resolved event as an NVTX mark of the convention in
// schedule_trace.hpp (domain "offloadkit"), with the device's row count in the text and payload,
// so that a capture of the job (`offloadkit capture`) holds the same schedule as the file this
// recorder writes (`offloadkit schedule-from-trace` turns it back into one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "offloadkit/executor.hpp"
#include "offloadkit/traces/schedule_recorder.hpp"

namespace offloadkit::traces {

class async_schedule_recorder {
 public:
  struct options {
    /// Row counts that may wait for resolve() at once (4 bytes of pinned memory each). The slots
    /// are used in order and start over once every count has been resolved.
    std::size_t ring_slots = 4096;
    /// Write the NVTX marks at resolve().
    bool nvtx = true;
  };

  /// The ring is allocated here (pinned, once); `shape` as schedule_recorder takes it.
  async_schedule_recorder(schedule_shape shape, executor& ex, options o);
  async_schedule_recorder(schedule_shape shape, executor& ex)
      : async_schedule_recorder(std::move(shape), ex, options{}) {}
  ~async_schedule_recorder();
  async_schedule_recorder(const async_schedule_recorder&) = delete;
  async_schedule_recorder& operator=(const async_schedule_recorder&) = delete;

  /// A stash whose row count is the uint32 at `device_rows`, read on `s` after the work already
  /// enqueued there (the stash kernel that wrote it). Enqueues one 4-byte copy; never waits.
  /// out_of_range for a key outside the shape; state_error when the ring is full (resolve() more
  /// often, or give more ring_slots).
  void record_stash(stash::stash_key k, const std::uint32_t* device_rows, stream_ref s);
  /// Stashes of keys (k.vp, k.layer + i, k.microbatch) for i in [0, n), in that order, whose row
  /// counts are the n consecutive uint32 at `device_rows` (a MoE layer's tokens per expert, one
  /// layer index per expert): one copy of 4n bytes for all of them. The same errors as above;
  /// nothing is recorded when one is thrown.
  void record_stashes(stash::stash_key k, const std::uint32_t* device_rows, std::size_t n,
                      stream_ref s);
  /// A stash whose row count the host already knows.
  void record_stash(stash::stash_key k, std::uint64_t rows);
  void record_restore(stash::stash_key k);
  void set_pools(std::uint64_t device_pages, std::uint64_t pinned_pages);

  /// Reads the row counts copied since the last resolve() and hands the events to the schedule
  /// in recording order (writing their NVTX marks). Call it after the streams the copies went to
  /// have been synchronized: a copy that has not landed yet is a state_error naming its key, and
  /// the events from that one on stay pending for a later resolve(). Returns the events resolved.
  std::size_t resolve();
  /// Events recorded and not yet resolved.
  [[nodiscard]] std::size_t pending() const;

  /// The schedule resolved so far (resolve() first), validated; see schedule_recorder::finish.
  [[nodiscard]] schedule_file finish() const { return rec_.finish(); }
  void write(const std::string& path) const { rec_.write(path); }
  [[nodiscard]] std::size_t steps_recorded() const { return rec_.steps_recorded(); }

 private:
  struct entry {
    enum class kind { stash_device, stash_host, restore, pools } what = kind::restore;
    stash::stash_key key;
    std::uint64_t a = 0;  ///< rows (host), ring slot (device), device pages (pools)
    std::uint64_t b = 0;  ///< pinned pages (pools)
  };
  void check_key(stash::stash_key k) const;
  /// Consecutive ring slots for n counts, their copy enqueued; the first slot.
  std::size_t take_slots(const std::uint32_t* device_rows, std::size_t n, stream_ref s);
  void emit(const std::string& text, const std::uint64_t* payload) const;

  executor& ex_;
  options opt_;
  schedule_shape shape_;
  schedule_recorder rec_;
  mutable std::mutex mu_;
  std::uint32_t* ring_ = nullptr;  ///< pinned, ring_slots
  std::size_t next_slot_ = 0;      ///< the ring's next free slot
  std::size_t used_slots_ = 0;     ///< slots waiting for resolve()
  std::vector<entry> pending_;
  bool header_written_ = false;
};

}  // namespace offloadkit::traces
