#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "daemon/core/types.h"

namespace gpubroker {

/// Bytes per element of a gpubroker.v1.DType value; 0 for an unknown value.
uint64_t DTypeSize(int dtype);

/// Checks that a tensor descriptor is well formed and lies inside a buffer of
/// `buffer_size` bytes: known dtype, non-negative extents and strides, and
/// byte_offset + extent within the buffer. INVALID_ARGUMENT otherwise.
absl::Status ValidateTensor(const TensorDesc& tensor, uint64_t buffer_size);

}  // namespace gpubroker
