// The launch that delay_adaptor enqueues to hold a stream for a while (see hold.cu).
#pragma once

#include <chrono>

#include "offloadkit/executor.hpp"

namespace offloadkit::detail {

/// A launch of one index that waits `d` in stream order, holding only the stream it runs on.
launch_request hold_request(std::chrono::microseconds d);

}  // namespace offloadkit::detail
