#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "daemon/backend/cuda/device.h"

namespace gpubroker {

/// cuda-vmm: cuMemCreate with POSIX-fd handles, for buffers at or over the
/// VMM threshold and for buffers shared across tenants (its fd is a
/// capability for that buffer alone, where a pool's or slab's fd exposes the
/// whole region). Exported once at allocation; each opener gets a dup. The
/// ready fence's word sits after the buffer's bytes. A freed tenant-private
/// allocation is kept for the tenant's next buffer of the same size while
/// lent plus kept stays within the capacity (CudaDeviceState::kept).
class VmmPath final : public BufferPath {
 public:
  explicit VmmPath(std::shared_ptr<CudaDeviceState> device);

  /// The bytes a buffer of `size` takes: its bytes and its fence word, rounded
  /// to the granularity.
  static uint64_t RoundedSize(uint64_t size, uint64_t granularity);

  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req,
                                                          CapacityGuard::Claim claim) override;
  void AddUsage(DeviceUsage& usage) const override;

 private:
  const std::shared_ptr<CudaDeviceState> device_;
  const std::shared_ptr<std::atomic<uint64_t>> live_bytes_;  // shared with the buffers
};

}  // namespace gpubroker
