// NCCL's all-reduce behind the collective interface, and the host stand-in.
#include "collectives.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace offloadkit::multigpu {
namespace {

constexpr int ranks = 2;

class nccl_collective final : public collective {
 public:
  explicit nccl_collective(nccl_api api) : api_(std::move(api)) {}

  [[nodiscard]] std::string describe() const override {
    return "NCCL " + api_.version_text() + " from " + api_.path;
  }

  void init() override {
    const int devices[ranks] = {0, 1};
    check(api_.comm_init_all(comms_.data(), ranks, devices), "ncclCommInitAll over devices 0 and 1",
          nullptr);
  }

  void group_start() override { check(api_.group_start(), "ncclGroupStart", nullptr); }
  void group_end() override { check(api_.group_end(), "ncclGroupEnd", nullptr); }

  void all_reduce(int device, const void* send, void* recv, std::size_t count,
                  stream_ref s) override {
    check(api_.all_reduce(send, recv, count, nccl_float32, nccl_sum, comm(device),
                          static_cast<cudaStream_t>(s.native)),
          "ncclAllReduce(device " + std::to_string(device) + ")", comm(device));
  }

  [[nodiscard]] bool can_register() const override { return api_.comm_register != nullptr; }

  void* register_buffer(int device, void* p, std::size_t bytes) override {
    void* handle = nullptr;
    check(api_.comm_register(comm(device), p, bytes, &handle),
          "ncclCommRegister(device " + std::to_string(device) + ")", comm(device));
    return handle;
  }

  void deregister_buffer(int device, void* handle) override {
    check(api_.comm_deregister(comm(device), handle),
          "ncclCommDeregister(device " + std::to_string(device) + ")", comm(device));
  }

  void check_async_errors(const std::string& during) const override {
    if (api_.comm_get_async_error == nullptr) return;
    for (int d = 0; d < ranks; ++d) {
      nccl_comm_t c = comm(d);
      if (c == nullptr) continue;
      nccl_result async = nccl_success;
      check(api_.comm_get_async_error(c, &async), "ncclCommGetAsyncError", c);
      if (async != nccl_success && async != nccl_in_progress) {
        throw std::runtime_error("NCCL reported an asynchronous error on device " +
                                 std::to_string(d) + " during " + during + ": " +
                                 api_.error_text(async, c));
      }
    }
  }

  void finalize() override {
    // Every rank of this process finalized in one group, then destroyed: a single thread that
    // drives several ranks cannot finalize them one after the other.
    if (api_.comm_finalize != nullptr) {
      check(api_.group_start(), "ncclGroupStart (finalize)", nullptr);
      for (int d = 0; d < ranks; ++d) {
        check(api_.comm_finalize(comm(d)), "ncclCommFinalize(device " + std::to_string(d) + ")",
              comm(d));
      }
      check(api_.group_end(), "ncclGroupEnd (finalize)", nullptr);
    }
    for (int d = 0; d < ranks; ++d) {
      check(api_.comm_destroy(comm(d)), "ncclCommDestroy(device " + std::to_string(d) + ")",
            comm(d));
      comms_[static_cast<std::size_t>(d)] = nullptr;
    }
  }

 private:
  [[nodiscard]] nccl_comm_t comm(int device) const {
    return comms_.at(static_cast<std::size_t>(device));
  }

  void check(nccl_result r, const std::string& call, nccl_comm_t c) const {
    if (r != nccl_success) throw std::runtime_error(call + " failed: " + api_.error_text(r, c));
  }

  nccl_api api_;
  std::array<nccl_comm_t, ranks> comms_{};
};

/// Where the two ranks' host functions meet. The second to arrive sums both inputs into both
/// outputs (through a temporary, so that in place works) and releases the first.
class rendezvous {
 public:
  void arrive(int device, const float* send, float* recv, std::size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    parts_.at(static_cast<std::size_t>(device)) = {send, recv, count};
    const std::uint64_t generation = generation_;
    if (++arrived_ < ranks) {
      wake_.wait(lock, [&] { return generation_ != generation; });
      return;
    }
    if (parts_[0].count != parts_[1].count) {
      // Both ranks must pass the same count, as with NCCL; a mismatch here is this test's bug.
      std::fprintf(stderr, "host all-reduce: counts differ (%zu on device 0, %zu on device 1)\n",
                   parts_[0].count, parts_[1].count);
      std::abort();
    }
    sum_.resize(count);
    for (std::size_t i = 0; i < count; ++i) sum_[i] = parts_[0].send[i] + parts_[1].send[i];
    for (const part& p : parts_) std::memcpy(p.recv, sum_.data(), count * sizeof(float));
    arrived_ = 0;
    ++generation_;
    wake_.notify_all();
  }

 private:
  struct part {
    const float* send = nullptr;
    float* recv = nullptr;
    std::size_t count = 0;
  };
  std::mutex mutex_;
  std::condition_variable wake_;
  std::array<part, ranks> parts_{};
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<float> sum_;
};

class host_collective final : public collective {
 public:
  host_collective(executor& ex, host_fault fault) : ex_(&ex), fault_(fault) {}

  [[nodiscard]] std::string describe() const override {
    return std::string("the host stand-in (sums on the host in stream order; no NCCL)") +
           (fault_ == host_fault::none ? ""
                                       : ", planting a fault at the first replay after resume");
  }

  void init() override {}
  void group_start() override {}
  void group_end() override {}

  void all_reduce(int device, const void* send, void* recv, std::size_t count,
                  stream_ref s) override {
    const auto* in = static_cast<const float*>(send);
    auto* out = static_cast<float*>(recv);
    ex_->host_function([this, device, in, out, count] { run(device, in, out, count); }, s);
  }

  [[nodiscard]] bool can_register() const override { return true; }
  void* register_buffer(int /*device*/, void* p, std::size_t /*bytes*/) override { return p; }
  void deregister_buffer(int /*device*/, void* /*handle*/) override {}

  void check_async_errors(const std::string& during) const override {
    if (error_.load()) {
      throw std::runtime_error("the host stand-in reported an asynchronous error during " + during +
                               " (planted)");
    }
  }

  void finalize() override {}

 private:
  // Runs on the stream's worker thread at every replay of the graph that captured it.
  void run(int device, const float* in, float* out, std::size_t count) {
    // The warm-up is the first all-reduce, the replay before any pause the second, and the
    // first replay after a resume the third.
    const int call = ++calls_.at(static_cast<std::size_t>(device));
    const bool planted = call == 3;
    if (planted && fault_ == host_fault::hang && device == 1) {
      // Never arrives: device 0 waits for it, as for a peer whose kernel never runs.
      std::mutex m;
      std::unique_lock<std::mutex> lock(m);
      std::condition_variable never;
      never.wait(lock, [] { return false; });
    }
    if (planted && fault_ == host_fault::crash && device == 0) std::raise(SIGSEGV);
    meeting_.arrive(device, in, out, count);
    if (planted && fault_ == host_fault::wrong && device == 0) out[count / 2] += 1.0F;
    if (planted && fault_ == host_fault::error) error_.store(true);
  }

  executor* ex_;
  host_fault fault_;
  rendezvous meeting_;
  std::array<std::atomic<int>, ranks> calls_{};
  std::atomic<bool> error_{false};
};

}  // namespace

std::unique_ptr<collective> make_nccl_collective(const nccl_api& api) {
  return std::make_unique<nccl_collective>(api);
}

bool parse_host_fault(const std::string& text, host_fault& out) {
  static const std::pair<const char*, host_fault> names[] = {{"none", host_fault::none},
                                                             {"hang", host_fault::hang},
                                                             {"wrong", host_fault::wrong},
                                                             {"crash", host_fault::crash},
                                                             {"error", host_fault::error}};
  for (const auto& [name, fault] : names) {
    if (text == name) {
      out = fault;
      return true;
    }
  }
  return false;
}

std::unique_ptr<collective> make_host_collective(executor& ex, host_fault fault) {
  return std::make_unique<host_collective>(ex, fault);
}

}  // namespace offloadkit::multigpu
