#include "daemon/backend/cuda/pool_path.h"

#include <atomic>

#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

constexpr uint64_t kPoolAlignment = 512;
constexpr uint64_t kMiB = uint64_t{1} << 20;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

// One tenant's pool on one device, exported to the tenant's clients. It goes
// (Pools::RetireIfIdle) once no buffer lives in it and no live session holds
// it; an allocation from it after that finds it retired.
class TenantPool final : public ExportedRegion {
 public:
  TenantPool(std::shared_ptr<CudaDeviceState> device, CudaMemPool pool, UniqueFd exported,
             std::string tenant, std::weak_ptr<PoolPath::Pools> pools)
      : device_(std::move(device)),
        pool_(std::move(pool)),
        exported_(std::move(exported)),
        tenant_(std::move(tenant)),
        pools_(std::move(pools)) {}

  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd, DupFd(exported_.get()));
    return FdGrant{std::move(fd), FdKind::kCudaPool, device_->capacity(), device_->info.uuid};
  }
  // The last session that held it has ended.
  void Unheld() const override { RetireIfIdle(); }

  RegionId id() const { return id_; }
  void set_id(RegionId id) { id_ = id; }
  const std::string& tenant() const { return tenant_; }
  CudaDeviceState& device() const { return *device_; }
  const CudaMemPool& pool() const { return pool_; }
  // Serializes this pool's allocations and frees, so that the change of the
  // pool's used memory around a call is that call's alone.
  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // Set under mu(), so that an allocation made under it sees it; read without
  // it where a stale answer is caught by that check.
  bool retired() const { return retired_.load(std::memory_order_acquire); }
  // Its live buffers, counted under mu() with the allocation or free.
  void Added() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { live_++; }
  /// True when that was the last.
  bool Removed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return --live_ == 0; }

  /// Marks the pool gone where no buffer lives in it and `holders` (the live
  /// sessions that hold it) is 0; true if this call did.
  bool Retire(uint32_t holders) const {
    absl::MutexLock lock(&mu_);
    if (retired_.load() || holders > 0 || live_ > 0) return false;
    retired_.store(true, std::memory_order_release);
    return true;
  }
  void RetireIfIdle() const;

 private:
  const std::shared_ptr<CudaDeviceState> device_;
  const CudaMemPool pool_;
  const UniqueFd exported_;  // the pool's POSIX fd; clients get dups
  const std::string tenant_;
  const std::weak_ptr<PoolPath::Pools> pools_;  // gone with the path
  RegionId id_ = 0;
  mutable absl::Mutex mu_;
  uint64_t live_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::atomic<bool> retired_{false};
};

// The tenants' pools, and the table through which their clients fetch them.
class PoolPath::Pools {
 public:
  explicit Pools(RegionTable& table) : regions(table) {}

  /// Takes `pool` out (no longer exported, destroyed with the last
  /// reference) if no buffer lives in it and no live session holds it.
  void RetireIfIdle(const TenantPool& pool) {
    if (!pool.Retire(regions.Holders(pool.id()))) return;
    {
      absl::MutexLock lock(&mu);
      auto it = by_tenant.find(pool.tenant());
      if (it != by_tenant.end() && it->second.get() == &pool) by_tenant.erase(it);
    }
    spdlog::info("cuda-pool: pool {} of tenant '{}' on {} destroyed (no buffer, unmapped)",
                 pool.id(), pool.tenant(), pool.device().info.uuid);
    regions.Remove(pool.id());  // the caller holds the pool until it returns
  }

  RegionTable& regions;
  absl::Mutex mu;
  std::map<std::string, std::shared_ptr<TenantPool>> by_tenant ABSL_GUARDED_BY(mu);
};

void TenantPool::RetireIfIdle() const {
  if (auto pools = pools_.lock()) pools->RetireIfIdle(*this);
}

namespace {

class PoolBuffer final : public BackendBuffer {
 public:
  PoolBuffer(std::shared_ptr<TenantPool> pool, CapacityGuard::Claim claim, FenceSlot fence,
             void* ptr, ImportInfo info)
      : pool_(std::move(pool)),
        claim_(std::move(claim)),
        fence_(std::move(fence)),
        ptr_(ptr),
        info_(std::move(info)) {}
  ~PoolBuffer() override {
    CudaDeviceState& d = pool_->device();
    bool last = false;
    {
      absl::MutexLock lock(&pool_->mu());
      cuda::ScopedDevice on(d.info.ordinal);
      cudaError_t err = cudaFreeAsync(ptr_, d.stream.get());
      if (err == cudaSuccess) err = cudaStreamSynchronize(d.stream.get());
      if (err != cudaSuccess) {
        spdlog::error("cuda-pool: freeing {} bytes on {}: {}", claim_.bytes(), d.info.uuid,
                      cudaGetErrorString(err));
        cudaGetLastError();
      }
      last = pool_->Removed();
    }
    if (last) pool_->RetireIfIdle();
  }

  uint64_t reserved_size() const override { return claim_.bytes(); }
  const ImportInfo& import_info() const override { return info_; }

 private:
  std::shared_ptr<TenantPool> pool_;
  CapacityGuard::Claim claim_;
  FenceSlot fence_;
  void* ptr_;
  ImportInfo info_;
};

}  // namespace

PoolPath::PoolPath(std::shared_ptr<CudaDeviceState> device, FencePages& fences,
                   RegionTable& regions, uint64_t retain)
    : device_(std::move(device)),
      fences_(fences),
      retain_(retain),
      pools_(std::make_shared<Pools>(regions)) {}

absl::StatusOr<std::shared_ptr<TenantPool>> PoolPath::PoolFor(const std::string& tenant) {
  absl::MutexLock lock(&pools_->mu);
  auto it = pools_->by_tenant.find(tenant);
  if (it != pools_->by_tenant.end() && !it->second->retired()) return it->second;
  CudaDeviceState& d = *device_;
  cuda::ScopedDevice on(d.info.ordinal);
  GPUBROKER_RETURN_IF_ERROR(on.status());
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = d.info.ordinal;
  // The capacity is enforced by our own count; the pool's cap sits a little
  // above it, so that its internal rounding never refuses what the count allows.
  props.maxSize = RoundUp(d.capacity(), 2 * kMiB) + 64 * kMiB;
  GPUBROKER_ASSIGN_OR_RETURN(CudaMemPool pool, CudaMemPool::Create(d.info.ordinal, props));
  uint64_t retain = retain_;
  GPUBROKER_CUDA_TRY(cudaMemPoolSetAttribute(pool.get(), cudaMemPoolAttrReleaseThreshold, &retain));
  int fd = -1;
  GPUBROKER_CUDA_TRY(
      cudaMemPoolExportToShareableHandle(&fd, pool.get(), cudaMemHandleTypePosixFileDescriptor, 0));
  auto made = std::make_shared<TenantPool>(device_, std::move(pool), UniqueFd(fd), tenant, pools_);
  made->set_id(pools_->regions.Add(tenant, made));
  pools_->by_tenant[tenant] = made;
  spdlog::info("cuda-pool: pool {} for tenant '{}' on {} (max {})", made->id(), tenant, d.info.uuid,
               FormatBytes(d.capacity()));
  return made;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> PoolPath::Allocate(const AllocationRequest& req,
                                                                  CapacityGuard::Claim claim) {
  GPUBROKER_ASSIGN_OR_RETURN(FenceSlot fence, fences_.Take(req.tenant));
  while (true) {
    GPUBROKER_ASSIGN_OR_RETURN(std::shared_ptr<TenantPool> pool, PoolFor(req.tenant));
    bool retired = false;
    auto made = AllocateIn(pool, req, claim, fence, &retired);
    if (retired) continue;  // gone since PoolFor found it: the tenant's next pool is made
    // A pool made for this buffer goes with its failure.
    if (!made.ok()) pool->RetireIfIdle();
    return made;
  }
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> PoolPath::AllocateIn(
    const std::shared_ptr<TenantPool>& pool, const AllocationRequest& req,
    CapacityGuard::Claim& claim, FenceSlot& fence, bool* retired) {
  CudaDeviceState& d = *device_;
  void* ptr = nullptr;
  cudaMemPoolPtrExportData data{};
  {
    absl::MutexLock lock(&pool->mu());
    if (pool->retired()) {
      *retired = true;
      return absl::AbortedError("the pool has gone");
    }
    cuda::ScopedDevice on(d.info.ordinal);
    const CudaMemPool& p = pool->pool();
    const uint64_t used_before = p.Attribute(cudaMemPoolAttrUsedMemCurrent);
    cudaError_t err = cudaMallocFromPoolAsync(&ptr, req.size, p.get(), d.stream.get());
    // Which of a pool's pages are new from the driver (and may hold bytes of
    // memory this daemon released for another tenant) cannot be told, so
    // every pool buffer starts zeroed: one more operation before the same
    // synchronization. (VMM memory follows CudaDeviceState::Lend's rule.)
    if (err == cudaSuccess) err = cudaMemsetAsync(ptr, 0, req.size, d.stream.get());
    if (err == cudaSuccess) err = cudaStreamSynchronize(d.stream.get());
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (ptr != nullptr) {  // made, but not zeroed: not lent
        cudaFreeAsync(ptr, d.stream.get());
        cudaStreamSynchronize(d.stream.get());
      }
      if (err == cudaErrorMemoryAllocation) {
        return OutOfMemoryRefusal(
            StrCat("out of memory on ", d.info.uuid, ": cudaMallocFromPoolAsync of ", req.size,
                   " bytes failed (pool of tenant '", req.tenant, "' holds ",
                   p.Attribute(cudaMemPoolAttrReservedMemCurrent), " bytes)"));
      }
      return cuda::RuntimeError(err, "cudaMallocFromPoolAsync");
    }
    d.zeroed_bytes += req.size;
    const uint64_t used_after = p.Attribute(cudaMemPoolAttrUsedMemCurrent);
    claim.Resize(used_after > used_before ? used_after - used_before
                                          : RoundUp(req.size, kPoolAlignment));
    err = cudaMemPoolExportPointer(&data, ptr);
    if (err != cudaSuccess) {
      cudaFreeAsync(ptr, d.stream.get());
      cudaStreamSynchronize(d.stream.get());
      return cuda::RuntimeError(err, "cudaMemPoolExportPointer");
    }
    pool->Added();
  }
  ImportInfo info;
  info.kind = ImportKind::kCudaPool;
  info.region_id = pool->id();
  info.mapped_size = claim.bytes();
  info.export_data.assign(reinterpret_cast<const char*>(&data), sizeof(data));
  info.device_uuid = d.info.uuid;
  fence.Describe(info);
  return std::make_unique<PoolBuffer>(pool, std::move(claim), std::move(fence), ptr,
                                      std::move(info));
}

void PoolPath::AddUsage(DeviceUsage& usage) const {
  std::vector<std::shared_ptr<TenantPool>> pools;
  {
    absl::MutexLock lock(&pools_->mu);
    for (const auto& [tenant, pool] : pools_->by_tenant) pools.push_back(pool);
  }
  cuda::ScopedDevice on(device_->info.ordinal);
  for (const auto& p : pools) {
    usage.reserved_bytes += p->pool().Attribute(cudaMemPoolAttrReservedMemCurrent);
    usage.used_bytes += p->pool().Attribute(cudaMemPoolAttrUsedMemCurrent);
  }
}

}  // namespace gpubroker
