#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpubroker {

using BufferId = uint64_t;
using SessionId = uint64_t;
using PoolId = uint64_t;

/// dtype/shape/strides of a buffer, as the producer declared them. The dtype
/// is the wire enum's value (gpubroker.v1.DType); the registry only stores it.
struct TensorDesc {
  int dtype = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements; empty = C-contiguous
  uint64_t byte_offset = 0;
};

enum class BufferState { kAllocated, kSealed, kFreed };

/// One device that a backend lends memory of.
struct DeviceInfo {
  std::string uuid;  // "GPU-..." for CUDA devices, "host" for the host backend
  std::string name;
  std::string backend;
  int ordinal = 0;
  uint64_t total_bytes = 0;     // memory of the device
  uint64_t capacity_bytes = 0;  // what the broker may lend on it
  std::string compute_capability;
};

/// Memory of one device as the broker sees it right now.
struct DeviceUsage {
  uint64_t capacity_bytes = 0;
  uint64_t reserved_bytes = 0;  // taken from the device by pools/arenas
  uint64_t used_bytes = 0;      // held by live buffers
  uint64_t free_bytes = 0;      // free on the device as the driver/OS reports it
};

}  // namespace gpubroker
