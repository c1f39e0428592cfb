// Planted bug of the traces tests: an executor that drops the n-th copy of at least one byte it
// is asked to do (0 the first), a lost page copy behind the executor interface.
#pragma once

#include <cstddef>

#include "offloadkit/adaptors.hpp"

namespace offloadkit::testing {

class dropping_adaptor final : public executor_adaptor {
 public:
  dropping_adaptor(executor& up, int n) : executor_adaptor(up), n_(n) {}

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    if (bytes != 0 && count_++ == n_) return;
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  int n_;
  int count_ = 0;
};

}  // namespace offloadkit::testing
