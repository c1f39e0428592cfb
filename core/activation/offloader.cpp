// Helpers shared by every activation offloader: dtype sizes and the checks pack() makes.
#include "offloadkit/activation/offloader.hpp"

#include <cstdint>

#include "offloadkit/error.hpp"

namespace offloadkit::activation {

std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::u8:
    case dtype::i8:
      return 1;
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
  }
  return 1;
}

const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::u8:
      return "u8";
    case dtype::i8:
      return "i8";
    case dtype::f16:
      return "f16";
    case dtype::bf16:
      return "bf16";
    case dtype::f32:
      return "f32";
    case dtype::i32:
      return "i32";
    case dtype::f64:
      return "f64";
    case dtype::i64:
      return "i64";
  }
  return "?";
}

std::size_t element_count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    OFFLOADKIT_EXPECTS(shape[i] >= 0, out_of_range, "shape[", i, "] = ", shape[i],
                       " is negative; extents lie in [0, 2^63)");
    n *= static_cast<std::size_t>(shape[i]);
  }
  return n;
}

void validate_for_pack(const tensor& t, int device_count) {
  OFFLOADKIT_EXPECTS(t.device >= 0 && t.device < device_count, out_of_range,
                     "tensor device = ", t.device, " is outside [0, ", device_count, ")");
  const std::size_t expected = element_count(t.shape) * dtype_size(t.type);
  OFFLOADKIT_EXPECTS(t.bytes == expected, out_of_range, "tensor bytes = ", t.bytes,
                     " disagree with shape and dtype ", to_string(t.type), " (", expected,
                     " bytes)");
  OFFLOADKIT_EXPECTS(t.data != nullptr || t.bytes == 0, out_of_range,
                     "tensor data is null with bytes = ", t.bytes, "; only 0 bytes may be null");
}

}  // namespace offloadkit::activation
