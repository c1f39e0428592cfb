// The timeline model: what a GPU program did and when, as flat records (kernels, copies, memsets,
// synchronizations, NVTX ranges, host API calls that matter for offload). Filled by the CUPTI
// recorder or by hand in tests; read by the analyses (analysis.hpp) and the exporters
// (export.hpp). Times are nanoseconds on one clock (CUPTI's timestamp clock when recorded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offloadkit::traces {

enum class record_kind { kernel, memcpy, memset, sync, range, api };

enum class copy_direction { h2d, d2h, d2d, h2h, p2p, unknown };

/// Where one side of a copy (or a memset target) lives, as CUPTI reports it.
enum class memory_location { device, pinned, pageable, managed, unknown };

/// Host-blocking waits are device/context, stream and event synchronizations; stream_wait_event
/// is a device-side dependency and blocks no host thread, and event_query is a poll of an event
/// (cudaEventQuery, which CUPTI reports as an event synchronization) that returns at once.
enum class sync_kind { context, stream, event, stream_wait_event, event_query, unknown };

/// The host calls the offload checks care about.
enum class api_kind { pinned_alloc, pinned_free, pinned_register, mem_map, mem_unmap, other };

/// The type of an NVTX event's payload (nvtxEventAttributes_t::payloadType), none when it has none.
enum class payload_type { none, u64, i64, f64 };

const char* to_string(record_kind k) noexcept;
const char* to_string(copy_direction d) noexcept;
const char* to_string(memory_location m) noexcept;
const char* to_string(sync_kind s) noexcept;
const char* to_string(api_kind a) noexcept;
const char* to_string(payload_type p) noexcept;

/// One interval on the timeline. Fields that do not apply to a kind keep their defaults.
struct record {
  record_kind kind = record_kind::kernel;
  std::string name;  ///< kernel name, NVTX range text, API function name
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;   ///< end_ns >= start_ns; equal for instantaneous markers
  int device = -1;           ///< -1 for host-side records
  std::int64_t stream = -1;  ///< CUDA stream id for device work, -1 otherwise
  std::uint64_t thread = 0;  ///< host thread id for ranges, API calls and syncs
  std::uint64_t bytes = 0;   ///< copies, memsets, pinned allocations, maps
  copy_direction direction = copy_direction::unknown;
  memory_location src = memory_location::unknown;
  memory_location dst = memory_location::unknown;  ///< also a memset's target
  sync_kind sync = sync_kind::unknown;
  api_kind api = api_kind::other;
  // NVTX ranges and marks (marks are ranges with end_ns == start_ns):
  std::string domain;          ///< the NVTX domain's name, "" for the default domain
  std::uint32_t category = 0;  ///< nvtxEventAttributes_t::category, 0 when none
  payload_type payload = payload_type::none;
  std::uint64_t payload_u64 = 0;  ///< the payload when payload == u64
  std::int64_t payload_i64 = 0;   ///< ... when i64
  double payload_f64 = 0;         ///< ... when f64

  [[nodiscard]] std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
  [[nodiscard]] bool is_device_work() const noexcept {
    return kind == record_kind::kernel || kind == record_kind::memcpy ||
           kind == record_kind::memset;
  }
};

/// Copy direction from the locations of its two sides.
copy_direction direction_of(memory_location src, memory_location dst) noexcept;

/// A recorded timeline: records in any order plus where they came from.
struct timeline {
  std::vector<record> records;
  std::string source;         ///< "cupti", "synthetic", a command line...
  std::uint64_t dropped = 0;  ///< records the recorder had to drop (CUPTI buffer overflow)

  // Builders, mostly for tests and synthetic timelines; each returns the record added.
  record& add_kernel(std::string name, std::int64_t start, std::int64_t end, std::int64_t stream,
                     int device = 0);
  record& add_copy(memory_location src, memory_location dst, std::uint64_t bytes,
                   std::int64_t start, std::int64_t end, std::int64_t stream, int device = 0);
  record& add_memset(std::uint64_t bytes, std::int64_t start, std::int64_t end, std::int64_t stream,
                     int device = 0);
  record& add_sync(sync_kind kind, std::int64_t start, std::int64_t end, std::uint64_t thread = 0);
  record& add_range(std::string name, std::int64_t start, std::int64_t end,
                    std::uint64_t thread = 0);
  record& add_api(api_kind kind, std::string name, std::int64_t start, std::int64_t end,
                  std::uint64_t bytes = 0, std::uint64_t thread = 0);

  /// Sorts records by start time (stable, so equal starts keep their order).
  void sort();
  /// Earliest start and latest end over all records ({0, 0} when empty).
  [[nodiscard]] std::int64_t begin_ns() const noexcept;
  [[nodiscard]] std::int64_t end_ns() const noexcept;
};

}  // namespace offloadkit::traces
