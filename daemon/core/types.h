#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpubroker {

using BufferId = uint64_t;
using SessionId = uint64_t;

/// dtype/shape/strides of a buffer, as the producer declared them. The dtype
/// is the wire enum's value (gpubroker.v1.DType); the registry only checks
/// the descriptor against the buffer and stores it.
struct TensorDesc {
  int dtype = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements; empty = C-contiguous
  uint64_t byte_offset = 0;
};

enum class BufferState { kAllocated, kSealed, kFreed };

}  // namespace gpubroker
