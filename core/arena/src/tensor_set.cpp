// Tensor-set validation shared by every implementation.
#include "offloadkit/arena/tensor_set.hpp"

#include <limits>

#include "offloadkit/error.hpp"

namespace offloadkit::arena {

std::size_t total_bytes(tensor_set_view set) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < set.size(); ++i) {
    OFFLOADKIT_EXPECTS(set[i].bytes <= std::numeric_limits<std::size_t>::max() - total,
                       out_of_range, "tensor set: total size overflows size_t at tensor ", i, " (",
                       set[i].bytes, " bytes after ", total, ")");
    total += set[i].bytes;
  }
  return total;
}

void validate(tensor_set_view set, const char* who) {
  OFFLOADKIT_EXPECTS(set.count == 0 || set.tensors != nullptr, out_of_range, who,
                     ": tensor set of ", set.count, " tensors has a null tensor array");
  for (std::size_t i = 0; i < set.size(); ++i) {
    OFFLOADKIT_EXPECTS(set[i].data != nullptr || set[i].bytes == 0, out_of_range, who, ": tensor ",
                       i, " of ", set.size(), " has a null pointer and ", set[i].bytes,
                       " bytes (null is valid only for 0 bytes)");
  }
  (void)total_bytes(set);
}

}  // namespace offloadkit::arena
