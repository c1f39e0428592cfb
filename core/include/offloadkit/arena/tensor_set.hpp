// A tensor set: the device buffers (pointer + size, any alignment) that an offloader copies to the
// host and back as one unit, e.g. all optimizer states of a model. Kept as plain pointers and
// sizes so that the same view can cross a C ABI.
#pragma once

#include <cstddef>
#include <vector>

namespace offloadkit::arena {

/// One device buffer of a set. `data` may be null only when `bytes` is 0.
struct device_tensor {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// A non-owning view of a tensor set (pointer + count, as a C caller would pass it).
struct tensor_set_view {
  const device_tensor* tensors = nullptr;
  std::size_t count = 0;

  tensor_set_view() = default;
  tensor_set_view(const device_tensor* t, std::size_t n) : tensors(t), count(n) {}
  tensor_set_view(const std::vector<device_tensor>& v)  // NOLINT(google-explicit-constructor)
      : tensors(v.data()), count(v.size()) {}

  [[nodiscard]] const device_tensor& operator[](std::size_t i) const noexcept { return tensors[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return count; }
  [[nodiscard]] bool empty() const noexcept { return count == 0; }
  [[nodiscard]] const device_tensor* begin() const noexcept { return tensors; }
  [[nodiscard]] const device_tensor* end() const noexcept { return tensors + count; }
};

/// Sum of the tensors' sizes; throws out_of_range when it overflows size_t.
std::size_t total_bytes(tensor_set_view set);

/// Throws out_of_range naming the first tensor with a null pointer and a non-zero size.
void validate(tensor_set_view set, const char* who);

}  // namespace offloadkit::arena
