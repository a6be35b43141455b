#pragma once

// What a backend says about its devices and its buffers.

#include <cstdint>
#include <string>

#include "common/unique_fd.h"

namespace gpubroker {

/// Memory behind one descriptor that clients of one tenant receive (a host
/// arena, a GPU arena slab, a CUDA pool, a fence page); 0 is no region.
using RegionId = uint64_t;

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
  uint64_t reserved_bytes = 0;  // taken from the device: arenas, pools, VMM allocations, fences
  uint64_t used_bytes = 0;      // held by live buffers
  uint64_t free_bytes = 0;      // free on the device as the driver/OS reports it
  uint64_t zeroed_bytes = 0;    // since start: zeroed before being lent to a new tenant
  // Of reserved_bytes: freed allocations kept for their tenant's next buffer
  // of the size, and of those, the ones clients still map (they were asked
  // to unmap them; the memory is freed once they have).
  uint64_t kept_bytes = 0;
  uint64_t unmapping_bytes = 0;
};

/// How a client maps a buffer into its address space.
enum class ImportKind {
  kHostArena,  // map the tenant arena's fd (region_id) at `offset`
  kHostFd,     // map the buffer's own memfd at 0
  kCudaPool,   // import the pool's fd (region_id) once, then `export_data` per buffer
  kCudaVmm,    // import the buffer's own fd, reserve, map, set access
  kCudaArena,  // map the slab's fd (region_id) once; the buffer is at `offset`
};

struct ImportInfo {
  ImportKind kind = ImportKind::kHostArena;
  RegionId region_id = 0;  // 0: the buffer has an fd of its own
  uint64_t offset = 0;
  uint64_t mapped_size = 0;
  std::string export_data;  // cuda-pool: cudaMemPoolPtrExportData
  std::string device_uuid;
  // CUDA: the ready fence, a word that the producer sets to fence_value at
  // seal (see broker.proto): at fence_offset in the fence page
  // fence_region_id, or, when that is 0, in the buffer itself.
  RegionId fence_region_id = 0;
  uint64_t fence_offset = 0;
  uint64_t fence_value = 0;
  // A buffer with memory of its own that the daemon may keep for the next
  // buffer of its size: the id of that memory (the same for every buffer it
  // serves), which clients key their kept mappings by; 0: none.
  uint64_t allocation_id = 0;
};

/// What travels with a descriptor on session.sock.
enum class FdKind { kHostArena, kHostBuffer, kCudaPool, kCudaVmm, kCudaFences, kCudaSlab };

/// A descriptor for a client, with what it is.
struct FdGrant {
  UniqueFd fd;
  FdKind kind = FdKind::kHostArena;
  uint64_t size = 0;
  std::string device_uuid;
};

}  // namespace gpubroker
