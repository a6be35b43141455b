#include "daemon/core/tensor.h"

#include "common/tensor_check.h"

namespace gpubroker {

uint64_t DTypeSize(int dtype) {
  // Indexed by gpubroker.v1.DType.
  static constexpr uint64_t kSizes[] = {0, 1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 8, 16};
  if (dtype < 0 || dtype >= static_cast<int>(std::size(kSizes))) return 0;
  return kSizes[dtype];
}

absl::Status ValidateTensor(const TensorDesc& tensor, uint64_t buffer_size) {
  return CheckTensor(tensor.dtype, DTypeSize(tensor.dtype), tensor.shape, tensor.strides,
                     tensor.byte_offset, buffer_size);
}

}  // namespace gpubroker
