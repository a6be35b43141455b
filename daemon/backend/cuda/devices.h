#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpubroker {

/// A GPU as discovery finds it, with what the broker needs of it.
struct CudaDevice {
  int ordinal = 0;
  std::string uuid;
  std::string name;
  uint64_t total_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
  bool memory_pools = false;     // cudaMallocAsync and pools
  bool pool_posix_fd = false;    // pools exportable as POSIX fds
  bool vmm = false;              // cuMemCreate/cuMemMap
  bool vmm_posix_fd = false;     // VMM handles exportable as POSIX fds
  bool ipc_events = false;       // interprocess events (reported; fences use memory ops)
  bool stream_mem_ops = false;   // 64-bit cuStreamWriteValue/WaitValue (the ready fences)
  uint64_t vmm_granularity = 0;  // minimum VMM allocation granularity, bytes

  /// Empty when the device can serve the CUDA backends; else what it lacks.
  std::string Lacks() const;
  std::string ComputeCapability() const;
};

/// Every visible GPU. FAILED_PRECONDITION (saying why) when there is no
/// driver or no device.
absl::StatusOr<std::vector<CudaDevice>> DiscoverCudaDevices();

/// The devices of `all` that `selection` names: a comma-separated list of
/// UUIDs (or unique UUID prefixes) and ordinals; empty selects all.
absl::StatusOr<std::vector<CudaDevice>> SelectDevices(const std::vector<CudaDevice>& all,
                                                      const std::string& selection);

}  // namespace gpubroker
