#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/cuda/device.h"
#include "daemon/backend/cuda/fence_page.h"
#include "daemon/backend/region_table.h"

namespace gpubroker {

class TenantPool;

/// cuda-pool (--small-buffers pool): cudaMallocFromPoolAsync from an
/// IPC-exportable pool (POSIX-fd handles), one per (device, tenant), made on
/// first use and destroyed once no buffer lives in it and no live session
/// holds it (as a fence page goes). A client imports the pool once, then
/// each buffer's 64-byte export data, computed once at allocation.
///
/// A buffer's reserved size is the growth of its pool's used memory
/// (cudaMemPoolAttrUsedMemCurrent) that allocating it caused: the pool's
/// allocations and frees are serialized, each synchronized on the device's
/// stream, so that Status, metrics, quotas and the pool attribute agree. An
/// exported pool keeps what it has reserved (trimming has no effect on IPC
/// pools): reserved memory is reported as such.
class PoolPath final : public BufferPath {
 public:
  /// `retain`: freed bytes a pool keeps mapped (its release threshold).
  PoolPath(std::shared_ptr<CudaDeviceState> device, FencePages& fences, RegionTable& regions,
           uint64_t retain);

  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req,
                                                          CapacityGuard::Claim claim) override;
  void AddUsage(DeviceUsage& usage) const override;

  class Pools;  // the tenants' pools: shared with them, which outlive the path in buffers

 private:
  /// `tenant`'s pool, made where it has none (or its last has gone).
  absl::StatusOr<std::shared_ptr<TenantPool>> PoolFor(const std::string& tenant);
  /// One allocation of `req.size` bytes from `pool`, zeroed and exported.
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateIn(const std::shared_ptr<TenantPool>& pool,
                                                            const AllocationRequest& req,
                                                            CapacityGuard::Claim& claim,
                                                            FenceSlot& fence, bool* retired);

  const std::shared_ptr<CudaDeviceState> device_;
  FencePages& fences_;
  const uint64_t retain_;
  const std::shared_ptr<Pools> pools_;
};

}  // namespace gpubroker
