#include "daemon/core/tensor.h"

#include "common/dtype.h"
#include "common/tensor_check.h"

namespace gpubroker {

absl::Status ValidateTensor(const TensorDesc& tensor, uint64_t buffer_size) {
  const DTypeTraits* dtype = FindDType(tensor.dtype);
  return CheckTensor(tensor.dtype, dtype != nullptr ? dtype->bytes : 0, tensor.shape,
                     tensor.strides, tensor.byte_offset, buffer_size);
}

}  // namespace gpubroker
