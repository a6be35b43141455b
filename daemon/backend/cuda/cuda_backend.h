#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/devices.h"

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

/// GPU memory on three paths, chosen per buffer:
///
///  * cuda-arena (the default under the VMM threshold): byte ranges of a
///    tenant's slabs, VMM allocations (POSIX fd) that grow geometrically from
///    64 MiB to 2 GiB each. A client maps each slab once and caches it, so
///    opening a buffer costs no CUDA call at all: mapping is what a pool
///    import pays per buffer (~0.13 ms at 64 MiB, 1.3 ms at 1 GiB). Slabs are
///    kept for the daemon's life, like an exported pool's memory.
///  * cuda-pool (--small-buffers pool): cudaMallocFromPoolAsync from an IPC-exportable pool (POSIX
///    fd handles), one pool per (device, tenant), created on first use, with
///    maxSize = the device's capacity. A client imports the pool once and each
///    buffer's 64-byte export data, computed once at allocation.
///  * cuda-vmm: cuMemCreate with POSIX-fd handles, for large buffers and for
///    buffers shared across tenants (its fd is a capability for that buffer
///    alone, where a pool's fd exposes the whole pool). Exported once at
///    allocation; each opener gets a dup.
///
/// Each buffer carries a ready fence: an 8-byte word that the producer sets at
/// seal in stream order and consumers' streams wait for (stream memory
/// operations). A VMM buffer's word sits after its bytes; a pool buffer's in a
/// slot of its tenant's fence page, a small VMM allocation imported once like
/// the pool (stream memory operations refuse pool memory: INVALID_VALUE on
/// driver 580). Legacy IPC events were the plan, but they open only where both
/// processes share /dev/shm objects of the creator's user: a root daemon's
/// events failed in a client of another uid.
///
/// Accounting is the pools' own: a buffer's reserved size is the growth of
/// its pool's used memory (cudaMemPoolAttrUsedMemCurrent) that allocating it
/// caused, so Status, metrics and the pool attribute agree. Note that an
/// exported pool keeps the memory it has reserved (trimming has no effect on
/// IPC pools): reserved memory is reported as such.
class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(std::vector<CudaDevice> devices,
                                                             const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  const std::vector<DeviceInfo>& devices() const override { return infos_; }
  uint64_t RoundedSize(int device, uint64_t size, bool isolated) const override;
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) override;
  absl::StatusOr<FdGrant> ExportPool(PoolId pool, std::string_view tenant) override;
  DeviceUsage Usage(int device) const override;
  uint64_t QuickAllocationLimit() const override { return options_.vmm_threshold; }

  struct Device;
  struct Pool;
  struct FencePage;
  struct Arena;
  struct Slab;

 private:
  CudaBackend() = default;
  bool UsesVmm(uint64_t size, bool isolated) const;
  absl::StatusOr<std::shared_ptr<Pool>> PoolFor(Device& device, const std::string& tenant);
  absl::StatusOr<std::shared_ptr<FencePage>> FencesFor(Device& device, const std::string& tenant);
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocatePooled(Device& device,
                                                                const AllocationRequest& req);
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateVmm(Device& device,
                                                             const AllocationRequest& req);
  std::shared_ptr<Arena> ArenaFor(Device& device, const std::string& tenant);
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateFromArena(Device& device,
                                                                   const AllocationRequest& req);
  /// A new slab for `tenant`'s arena (of `arena_bytes` so far) with room for `size` bytes.
  absl::StatusOr<std::shared_ptr<Slab>> NewSlab(Device& device, const std::string& tenant,
                                                uint64_t arena_bytes, uint64_t size);

  CudaBackendOptions options_;
  std::vector<DeviceInfo> infos_;
  std::vector<std::unique_ptr<Device>> devices_;

  mutable absl::Mutex mu_;
  PoolId next_pool_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<PoolId, std::shared_ptr<Pool>> pools_by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PoolId, std::shared_ptr<FencePage>> fences_by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PoolId, std::shared_ptr<Slab>> slabs_by_id_ ABSL_GUARDED_BY(mu_);
};

/// Parses --pool-bytes against a device: "90%" or a size; at most the device.
absl::StatusOr<uint64_t> ParsePoolBytes(const std::string& spec, uint64_t device_bytes);

}  // namespace gpubroker
