#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/device.h"
#include "daemon/backend/cuda/fence_page.h"
#include "daemon/backend/region_table.h"

namespace gpubroker {

class ArenaSlab;
class LeasedRange;
class TenantArena;

/// cuda-arena (the default under the VMM threshold): byte ranges of a
/// tenant's slabs, VMM allocations (POSIX fd) that grow geometrically from
/// 64 MiB to 2 GiB each. A client maps each slab once and caches it, so
/// opening a buffer costs no CUDA call at all: mapping is what a pool import
/// pays per buffer (~0.13 ms at 64 MiB, 1.3 ms at 1 GiB). A slab goes back
/// to the device once no buffer uses it and no live session has received
/// its descriptor (so no client maps it: a client keeps a slab mapped until
/// its session ends). A buffer's reserved size is its range (512-byte
/// aligned); slabs are reserved memory.
class ArenaPath final : public BufferPath {
 public:
  ArenaPath(std::shared_ptr<CudaDeviceState> device, FencePages& fences, RegionTable& regions);

  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req,
                                                          CapacityGuard::Claim claim) override;
  void AddUsage(DeviceUsage& usage) const override;

  /// A range of `req.length` bytes of the tenant's slabs for one session to
  /// carve buffers from (docs/fast-path.md): their fences are words in the
  /// buffers themselves, so the range takes no fence slot.
  absl::StatusOr<std::unique_ptr<LeasedRange>> LeaseRange(const RangeRequest& req,
                                                          CapacityGuard::Claim claim);
  /// Ranges are at most a slab.
  static uint64_t RangeLimit();

  /// Bytes of live ranges and of slabs, shared with the buffers.
  struct Counters {
    std::atomic<uint64_t> slab_bytes{0};
    std::atomic<uint64_t> used_bytes{0};
  };

 private:
  std::shared_ptr<TenantArena> ArenaFor(const std::string& tenant);
  /// `size` bytes of one of the tenant's slabs (a new slab when none has room).
  absl::Status Place(const std::shared_ptr<TenantArena>& arena, const std::string& tenant,
                     uint64_t size, bool may_wait, std::shared_ptr<ArenaSlab>* slab,
                     uint64_t* offset);

  const std::shared_ptr<CudaDeviceState> device_;
  FencePages& fences_;
  RegionTable& regions_;
  const std::shared_ptr<Counters> counters_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<TenantArena>> arenas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpubroker
