#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace gpubroker {

/// Checks that a tensor of `item_size`-byte elements (0: an unknown dtype)
/// is well formed and lies inside a buffer of `buffer_size` bytes:
/// non-negative extents and strides, at most 32 dimensions, as many strides
/// as dimensions (or none: C-contiguous), and byte_offset + extent within the
/// buffer. INVALID_ARGUMENT saying what is wrong otherwise. The daemon and the
/// client (for the buffers it makes itself) check with the same code.
absl::Status CheckTensor(int dtype, uint64_t item_size, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides, uint64_t byte_offset,
                         uint64_t buffer_size);

}  // namespace gpubroker
