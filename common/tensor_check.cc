#include "common/tensor_check.h"

#include "common/strings.h"

namespace gpubroker {

absl::Status CheckTensor(int dtype, uint64_t item, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides, uint64_t byte_offset,
                         uint64_t buffer_size) {
  if (item == 0) return absl::InvalidArgumentError(StrCat("unknown dtype ", dtype));
  if (shape.size() > 32) {
    return absl::InvalidArgumentError(
        StrCat("tensor has ", shape.size(), " dimensions; the limit is 32"));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        StrCat("tensor has ", shape.size(), " dimensions but ", strides.size(), " strides"));
  }
  // Highest element index reachable, computed with overflow checks.
  constexpr uint64_t kLimit = UINT64_MAX / 2;
  uint64_t elements = 1;   // contiguous case
  uint64_t max_index = 0;  // strided case
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t dim = shape[i];
    if (dim < 0) {
      return absl::InvalidArgumentError(StrCat("tensor dimension ", i, " is negative"));
    }
    if (dim == 0) empty = true;
    const auto d = static_cast<uint64_t>(dim);
    if (strides.empty()) {
      if (d != 0 && elements > kLimit / d) {
        return absl::InvalidArgumentError("tensor shape overflows");
      }
      elements *= d;
    } else {
      const int64_t stride = strides[i];
      if (stride < 0) {
        return absl::InvalidArgumentError(StrCat("tensor stride ", i, " is negative"));
      }
      const auto s = static_cast<uint64_t>(stride);
      if (d > 0 && s != 0 && (d - 1) > kLimit / s) {
        return absl::InvalidArgumentError("tensor strides overflow");
      }
      if (d > 0) max_index += (d - 1) * s;
      if (max_index > kLimit) return absl::InvalidArgumentError("tensor strides overflow");
    }
  }
  uint64_t extent = 0;
  if (!empty) {
    const uint64_t count = strides.empty() ? elements : max_index + 1;
    if (count > kLimit / item) return absl::InvalidArgumentError("tensor extent overflows");
    extent = count * item;
  }
  if (byte_offset > buffer_size || extent > buffer_size - byte_offset) {
    return absl::InvalidArgumentError(StrCat("tensor needs ", extent, " bytes at offset ",
                                             byte_offset, " but the buffer has ", buffer_size));
  }
  return absl::OkStatus();
}

}  // namespace gpubroker
