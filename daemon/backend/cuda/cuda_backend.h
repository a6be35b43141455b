#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/devices.h"
#include "daemon/backend/region_table.h"

namespace gpubroker {

/// How GPU buffers under the VMM threshold are made.
enum class SmallBuffers {
  kArena,  // byte ranges of the tenant's VMM slabs, each slab mapped once per client
  kPool,   // cudaMallocFromPoolAsync from the tenant's IPC pool, mapped per buffer
};

struct CudaBackendOptions {
  /// Capacity per device: bytes ("64GiB") or a share of the device ("90%").
  std::string pool_bytes = "90%";
  /// Buffers of at least this many bytes are VMM allocations (so are buffers
  /// shared across tenants). Pool-pointer import costs grow with the size of
  /// newly mapped memory (~1.3 ms/GiB, and it hung at 6 GiB on driver 580).
  uint64_t vmm_threshold = uint64_t{2} << 30;
  /// Freed bytes a pool keeps mapped (its release threshold). With none, every
  /// free returns the memory at the next synchronization, and the next
  /// allocation and each importer's open map it anew (~0.2 ms at 64 MiB).
  uint64_t pool_retain = uint64_t{2} << 30;
  SmallBuffers small_buffers = SmallBuffers::kArena;
};

/// GPU memory on three paths, chosen per buffer: under the VMM threshold a
/// tenant-private buffer takes the small-buffer path (ArenaPath, or PoolPath
/// with --small-buffers pool); at or over it, and whenever it is shared across
/// tenants, VmmPath. This class routes and sums; each path owns its state.
///
/// Each buffer carries a ready fence: an 8-byte word that the producer sets at
/// seal in stream order and consumers' streams wait for (stream memory
/// operations). A VMM buffer's word sits after its bytes; an arena or pool
/// buffer's in a slot of its tenant's fence page (FencePages). Legacy IPC
/// events were the plan, but they open only where both processes share
/// /dev/shm objects of the creator's user: a root daemon's events failed in
/// a client of another uid.
class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(std::vector<CudaDevice> devices,
                                                             const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  const std::vector<DeviceInfo>& devices() const override { return infos_; }
  uint64_t RoundedSize(int device, uint64_t size, bool isolated) const override;
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) override;
  absl::StatusOr<FdGrant> ExportRegion(RegionId region, std::string_view tenant) override;
  void RegionHeld(RegionId region) override { regions_.AddHolder(region); }
  void RegionUnheld(RegionId region) override { regions_.DropHolder(region); }
  DeviceUsage Usage(int device) const override;
  uint64_t QuickAllocationLimit() const override { return options_.vmm_threshold; }
  /// Ranges of the tenant's arena slabs (cuda-arena only), under the VMM threshold.
  uint64_t RangeLimit(int device) const override;
  uint64_t RangeGranularity(int /*device*/) const override { return 512; }
  absl::StatusOr<std::unique_ptr<LeasedRange>> LeaseRange(const RangeRequest& req) override;
  void SetMappingHolders(MappingHolders* holders) override;
  void AllocationUnheld(AllocationId id) override;

 private:
  struct Device;

  CudaBackend() = default;
  bool UsesVmm(uint64_t size, bool isolated) const;

  CudaBackendOptions options_;
  std::vector<DeviceInfo> infos_;
  RegionTable regions_;  // before devices_: the paths enter their regions here
  std::vector<std::unique_ptr<Device>> devices_;
};

/// Parses --pool-bytes against a device: "90%" or a size; at most the device.
absl::StatusOr<uint64_t> ParsePoolBytes(const std::string& spec, uint64_t device_bytes);

}  // namespace gpubroker
