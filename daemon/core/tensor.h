#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "daemon/core/types.h"

namespace gpubroker {

/// Checks that a tensor descriptor is well formed and lies inside a buffer of
/// `buffer_size` bytes: known dtype, non-negative extents and strides, and
/// byte_offset + extent within the buffer. INVALID_ARGUMENT otherwise.
absl::Status ValidateTensor(const TensorDesc& tensor, uint64_t buffer_size);

}  // namespace gpubroker
