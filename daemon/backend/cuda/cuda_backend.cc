#include "daemon/backend/cuda/cuda_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "common/cuda/cuda_util.h"
#include "common/refusal.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/range_allocator.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

// One VMM allocation with a POSIX-fd handle, exported once: what fence pages,
// arena slabs and VMM buffers are made of. Releases the allocation when it
// goes (importers' mappings keep the memory until they unmap).
class ExportedVmm {
 public:
  /// cuMemCreate + cuMemExportToShareableHandle of `size` bytes (a multiple
  /// of the granularity) on device `ordinal`; RESOURCE_EXHAUSTED when full.
  static absl::StatusOr<ExportedVmm> Create(const cuda::DriverApi* api, int ordinal, uint64_t size,
                                            std::string_view what) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ExportedVmm m;
    m.api_ = api;
    m.size_ = size;
    if (auto s = api->Check(api->cuMemCreate(&m.handle_, size, &prop, 0),
                            StrCat("cuMemCreate (", what, ")"));
        !s.ok()) {
      m.handle_ = 0;
      return s;
    }
    int fd = -1;
    if (auto s = api->Check(api->cuMemExportToShareableHandle(
                                &fd, m.handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                            StrCat("cuMemExportToShareableHandle (", what, ")"));
        !s.ok()) {
      return s;
    }
    m.fd_.reset(fd);
    return m;
  }

  ExportedVmm() = default;
  ExportedVmm(ExportedVmm&& o) noexcept
      : api_(o.api_), handle_(std::exchange(o.handle_, 0)), fd_(std::move(o.fd_)), size_(o.size_) {}
  ExportedVmm& operator=(ExportedVmm&& o) noexcept {
    if (this != &o) {
      Release();
      api_ = o.api_;
      handle_ = std::exchange(o.handle_, 0);
      fd_ = std::move(o.fd_);
      size_ = o.size_;
    }
    return *this;
  }
  ~ExportedVmm() { Release(); }

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }

 private:
  void Release() {
    fd_.reset();
    if (handle_ == 0) return;
    if (auto s = api_->Check(api_->cuMemRelease(handle_), "cuMemRelease"); !s.ok()) {
      spdlog::error("cuda: {}", std::string(View(s.message())));
    }
    handle_ = 0;
  }

  const cuda::DriverApi* api_ = nullptr;
  CUmemGenericAllocationHandle handle_ = 0;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

}  // namespace

struct CudaBackend::Device {
  CudaDevice info;
  int index = 0;  // position in devices()
  uint64_t capacity = 0;
  cudaStream_t stream = nullptr;
  // Bytes of live buffers (pool deltas and VMM sizes), for the capacity check.
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> vmm_bytes{0};
  std::atomic<uint64_t> fence_bytes{0};  // fence pages: reserved, not held by buffers
  std::atomic<uint64_t> slab_bytes{0};   // arenas' slabs: reserved
  std::atomic<uint64_t> arena_used{0};   // arenas' live ranges
  absl::Mutex mu;
  std::map<std::string, std::shared_ptr<Pool>> pools ABSL_GUARDED_BY(mu);
  std::map<std::string, std::shared_ptr<Arena>> arenas ABSL_GUARDED_BY(mu);
  // Freed VMM allocations of tenant-private buffers, by tenant and size, for
  // that tenant's next allocation of the same size (a new one of 40 GiB costs
  // ~0.15 s); dropped when the device needs the room.
  std::map<std::string, std::multimap<uint64_t, ExportedVmm>> vmm_cache ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> vmm_cached{0};

  /// Releases every cached VMM allocation; what it gave back.
  uint64_t DropVmmCache() {
    std::map<std::string, std::multimap<uint64_t, ExportedVmm>> gone;
    {
      absl::MutexLock lock(&mu);
      gone.swap(vmm_cache);
    }
    uint64_t bytes = 0;
    for (const auto& [tenant, sizes] : gone) {
      for (const auto& [size, memory] : sizes) bytes += size;
    }
    vmm_cached -= bytes;
    return bytes;  // `gone` releases them here, outside the lock
  }
  std::map<std::string, std::shared_ptr<FencePage>> fences ABSL_GUARDED_BY(mu);
};

struct CudaBackend::Pool {
  PoolId id = 0;
  std::string tenant;
  Device* device = nullptr;
  cudaMemPool_t pool = nullptr;
  UniqueFd exported;  // the pool's POSIX fd; clients get dups
  // Serializes this pool's allocations and frees, so that the change of the
  // pool's used memory around a call is that call's alone.
  absl::Mutex mu;
};

// One tenant's fence words on one device: a VMM allocation of 8-byte slots,
// exported like a pool and imported once per client process.
struct CudaBackend::FencePage {
  PoolId id = 0;
  std::string tenant;
  Device* device = nullptr;
  ExportedVmm memory;
  absl::Mutex mu;
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  uint32_t next_slot ABSL_GUARDED_BY(mu) = 0;

  std::optional<uint32_t> Take() {
    absl::MutexLock lock(&mu);
    if (!free_slots.empty()) {
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    if (uint64_t{next_slot} * 8 >= memory.size()) return std::nullopt;
    return next_slot++;
  }
  void Give(uint32_t slot) {
    absl::MutexLock lock(&mu);
    free_slots.push_back(slot);
  }
};

// One VMM allocation of a tenant's arena, exported once and mapped once per
// client process; buffers are byte ranges of it.
struct CudaBackend::Slab {
  PoolId id = 0;
  std::string tenant;
  Device* device = nullptr;
  ExportedVmm memory;
  RangeAllocator ranges;  // under the arena's lock

  explicit Slab(ExportedVmm m) : memory(std::move(m)), ranges(memory.size()) {}
};

// A tenant's slabs on one device.
struct CudaBackend::Arena {
  std::string tenant;
  absl::Mutex mu;
  std::vector<std::shared_ptr<Slab>> slabs ABSL_GUARDED_BY(mu);
  uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
};

namespace {

constexpr uint64_t kPoolAlignment = 512;
constexpr uint64_t kSlabMin = uint64_t{64} << 20;
constexpr uint64_t kSlabMax = uint64_t{2} << 30;
// VMM allocations slower than this are logged, with where the time went.
constexpr auto kSlowAllocation = std::chrono::milliseconds(20);
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kFenceBytes = 8;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The ready fence's word sits after the buffer's bytes, 8-byte aligned.
uint64_t FenceOffset(uint64_t size) { return RoundUp(size, kFenceBytes); }
uint64_t WithFence(uint64_t size) { return FenceOffset(size) + kFenceBytes; }

// A value no stale word is likely to hold: the fence waits for equality.
uint64_t FenceValue() {
  const Token t = RandomToken();
  uint64_t v = 0;
  std::memcpy(&v, t.data(), sizeof(v));
  return v | 1;  // never 0, the value of fresh memory
}

uint64_t PoolAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  cuuint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool, attr, &value) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<uint64_t>(value);
}

// A buffer's slot in its tenant's fence page, given back when it goes.
class FenceSlot {
 public:
  /// A free slot of `page`; RESOURCE_EXHAUSTED when the tenant has none left.
  static absl::StatusOr<FenceSlot> Take(std::shared_ptr<CudaBackend::FencePage> page,
                                        const std::string& tenant, const std::string& uuid) {
    const std::optional<uint32_t> slot = page->Take();
    if (!slot) {
      return LimitRefusal(StrCat("tenant '", tenant, "' has too many live buffers on ", uuid,
                                 " (no fence slot left)"));
    }
    return FenceSlot(std::move(page), *slot);
  }

  FenceSlot(FenceSlot&& o) noexcept : page_(std::move(o.page_)), slot_(o.slot_) {}
  FenceSlot& operator=(FenceSlot&&) = delete;
  ~FenceSlot() {
    if (page_) page_->Give(slot_);
  }

  /// Where a buffer's fence word is, with a value of its own.
  void Describe(ImportInfo& info) const {
    info.fence_pool_id = page_->id;
    info.fence_offset = uint64_t{slot_} * kFenceBytes;
    info.fence_value = FenceValue();
  }

 private:
  FenceSlot(std::shared_ptr<CudaBackend::FencePage> page, uint32_t slot)
      : page_(std::move(page)), slot_(slot) {}

  std::shared_ptr<CudaBackend::FencePage> page_;
  uint32_t slot_;
};

// A buffer from a tenant's pool.
class PoolBuffer final : public BackendBuffer {
 public:
  PoolBuffer(std::shared_ptr<CudaBackend::Pool> pool, FenceSlot fence, void* ptr, uint64_t reserved,
             ImportInfo info)
      : pool_(std::move(pool)),
        fence_(std::move(fence)),
        ptr_(ptr),
        reserved_(reserved),
        info_(std::move(info)) {}
  ~PoolBuffer() override;

  uint64_t reserved_size() const override { return reserved_; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    return absl::FailedPreconditionError("buffer lives in its tenant's pool; import the pool");
  }

 private:
  std::shared_ptr<CudaBackend::Pool> pool_;
  FenceSlot fence_;
  void* ptr_;
  uint64_t reserved_;
  ImportInfo info_;
};

// A VMM allocation with a POSIX fd of its own.
class VmmBuffer final : public BackendBuffer {
 public:
  /// `cache_as`: the tenant whose cache takes the allocation back when the
  /// buffer goes; empty for a buffer shared across tenants (never reused).
  VmmBuffer(CudaBackend::Device* device, ExportedVmm memory, ImportInfo info, std::string cache_as)
      : device_(device),
        memory_(std::move(memory)),
        info_(std::move(info)),
        cache_as_(std::move(cache_as)) {}
  ~VmmBuffer() override;

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    auto fd = DupFd(memory_.fd());
    if (!fd.ok()) return fd.status();
    return FdGrant{std::move(*fd), FdKind::kCudaVmm, info_.mapped_size, info_.device_uuid};
  }

 private:
  CudaBackend::Device* device_;
  ExportedVmm memory_;
  ImportInfo info_;
  std::string cache_as_;
};

// A range of a slab of its tenant's arena.
class ArenaBuffer final : public BackendBuffer {
 public:
  ArenaBuffer(std::shared_ptr<CudaBackend::Arena> arena, std::shared_ptr<CudaBackend::Slab> slab,
              FenceSlot fence, ImportInfo info)
      : arena_(std::move(arena)),
        slab_(std::move(slab)),
        fence_(std::move(fence)),
        info_(std::move(info)) {}
  ~ArenaBuffer() override;

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    return absl::FailedPreconditionError(
        "buffer lives in a slab of its tenant's arena; map the slab");
  }

 private:
  std::shared_ptr<CudaBackend::Arena> arena_;
  std::shared_ptr<CudaBackend::Slab> slab_;
  FenceSlot fence_;
  ImportInfo info_;
};

}  // namespace

ArenaBuffer::~ArenaBuffer() {
  {
    absl::MutexLock lock(&arena_->mu);
    slab_->ranges.Free(info_.offset, info_.mapped_size);
  }
  slab_->device->used -= info_.mapped_size;
  slab_->device->arena_used -= info_.mapped_size;
}

PoolBuffer::~PoolBuffer() {
  CudaBackend::Device& d = *pool_->device;
  {
    absl::MutexLock lock(&pool_->mu);
    cuda::ScopedDevice on(d.info.ordinal);
    cudaError_t err = cudaFreeAsync(ptr_, d.stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(d.stream);
    if (err != cudaSuccess) {
      spdlog::error("cuda-pool: freeing {} bytes on {}: {}", reserved_, d.info.uuid,
                    cudaGetErrorString(err));
      cudaGetLastError();
    }
  }
  d.used -= reserved_;
}

VmmBuffer::~VmmBuffer() {
  const uint64_t size = info_.mapped_size;
  device_->used -= size;
  device_->vmm_bytes -= size;
  // Kept for the tenant's next buffer of this size while the device has room
  // for it beside what is lent; the fd goes with it (only this tenant's
  // sessions ever received dups of it). Otherwise memory_ releases it.
  if (!cache_as_.empty() &&
      device_->used.load() + device_->vmm_cached.load() + size <= device_->capacity) {
    absl::MutexLock lock(&device_->mu);
    device_->vmm_cache[cache_as_].emplace(size, std::move(memory_));
    device_->vmm_cached += size;
  }
}

absl::StatusOr<uint64_t> ParsePoolBytes(const std::string& spec, uint64_t device_bytes) {
  auto parsed = ParseSizeOrShare(spec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(StrCat("--pool-bytes: ", View(parsed.status().message())));
  }
  const uint64_t bytes = parsed->Of(device_bytes);
  if (bytes > device_bytes) {
    return absl::InvalidArgumentError(StrCat("--pool-bytes: ", FormatBytes(bytes),
                                             " is more than the device has (",
                                             FormatBytes(device_bytes), ")"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("--pool-bytes must be positive");
  return bytes;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    std::vector<CudaDevice> devices, const CudaBackendOptions& options) {
  auto api = cuda::DriverApi::Get();
  if (!api.ok()) return api.status();
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  backend->options_ = options;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto d = std::make_unique<Device>();
    d->info = std::move(devices[i]);
    d->index = static_cast<int>(i);
    auto capacity = ParsePoolBytes(options.pool_bytes, d->info.total_bytes);
    if (!capacity.ok()) return capacity.status();
    d->capacity = *capacity;
    cuda::ScopedDevice on(d->info.ordinal);
    if (!on.status().ok()) return on.status();
    GPUBROKER_CUDA_TRY(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    DeviceInfo info;
    info.uuid = d->info.uuid;
    info.name = d->info.name;
    info.backend = "cuda";
    info.ordinal = d->info.ordinal;
    info.total_bytes = d->info.total_bytes;
    info.capacity_bytes = d->capacity;
    info.compute_capability = d->info.ComputeCapability();
    backend->infos_.push_back(info);
    backend->devices_.push_back(std::move(d));
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  {
    absl::MutexLock lock(&mu_);
    pools_by_id_.clear();
    fences_by_id_.clear();
    slabs_by_id_.clear();
  }
  for (auto& d : devices_) {
    cuda::ScopedDevice on(d->info.ordinal);
    {
      absl::MutexLock lock(&d->mu);
      for (auto& [tenant, pool] : d->pools) cudaMemPoolDestroy(pool->pool);
      d->pools.clear();
      d->fences.clear();
      d->arenas.clear();
    }
    d->DropVmmCache();
    if (d->stream != nullptr) cudaStreamDestroy(d->stream);
  }
}

bool CudaBackend::UsesVmm(uint64_t size, bool isolated) const {
  return isolated || size >= options_.vmm_threshold;
}

uint64_t CudaBackend::RoundedSize(int device, uint64_t size, bool isolated) const {
  if (UsesVmm(size, isolated)) {
    return RoundUp(WithFence(size), std::max<uint64_t>(devices_[device]->info.vmm_granularity, 1));
  }
  return RoundUp(size, kPoolAlignment);
}

absl::StatusOr<std::shared_ptr<CudaBackend::Pool>> CudaBackend::PoolFor(Device& d,
                                                                        const std::string& tenant) {
  absl::MutexLock lock(&d.mu);
  if (auto it = d.pools.find(tenant); it != d.pools.end()) return it->second;
  cuda::ScopedDevice on(d.info.ordinal);
  if (!on.status().ok()) return on.status();
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = d.info.ordinal;
  // The capacity is enforced by our own count; the pool's cap sits a little
  // above it, so that its internal rounding never refuses what the count allows.
  props.maxSize = RoundUp(d.capacity, 2 * kMiB) + 64 * kMiB;
  auto pool = std::make_shared<Pool>();
  pool->tenant = tenant;
  pool->device = &d;
  GPUBROKER_CUDA_TRY(cudaMemPoolCreate(&pool->pool, &props));
  uint64_t retain = options_.pool_retain;
  if (const cudaError_t err =
          cudaMemPoolSetAttribute(pool->pool, cudaMemPoolAttrReleaseThreshold, &retain);
      err != cudaSuccess) {
    cudaMemPoolDestroy(pool->pool);
    return cuda::RuntimeError(err, "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  }
  int fd = -1;
  const cudaError_t err =
      cudaMemPoolExportToShareableHandle(&fd, pool->pool, cudaMemHandleTypePosixFileDescriptor, 0);
  if (err != cudaSuccess) {
    cudaMemPoolDestroy(pool->pool);
    return cuda::RuntimeError(err, "cudaMemPoolExportToShareableHandle");
  }
  pool->exported.reset(fd);
  {
    absl::MutexLock ids(&mu_);
    pool->id = next_pool_id_++;
    pools_by_id_[pool->id] = pool;
  }
  d.pools[tenant] = pool;
  spdlog::info("cuda-pool: pool {} for tenant '{}' on {} (max {})", pool->id, tenant, d.info.uuid,
               FormatBytes(d.capacity));
  return pool;
}

absl::StatusOr<std::shared_ptr<CudaBackend::FencePage>> CudaBackend::FencesFor(
    Device& d, const std::string& tenant) {
  absl::MutexLock lock(&d.mu);
  if (auto it = d.fences.find(tenant); it != d.fences.end()) return it->second;
  auto api = cuda::DriverApi::Get();
  if (!api.ok()) return api.status();
  cuda::ScopedDevice on(d.info.ordinal);
  if (!on.status().ok()) return on.status();
  auto memory = ExportedVmm::Create(
      *api, d.info.ordinal, std::max<uint64_t>(d.info.vmm_granularity, 2 * kMiB), "fence page");
  if (!memory.ok()) return memory.status();
  auto page = std::make_shared<FencePage>();
  page->tenant = tenant;
  page->device = &d;
  page->memory = std::move(*memory);
  {
    absl::MutexLock ids(&mu_);
    page->id = next_pool_id_++;
    fences_by_id_[page->id] = page;
  }
  d.fences[tenant] = page;
  d.fence_bytes += page->memory.size();
  return page;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> CudaBackend::Allocate(const AllocationRequest& req) {
  if (req.device < 0 || req.device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(StrCat("no device ", req.device));
  }
  Device& d = *devices_[req.device];
  const uint64_t estimate = RoundedSize(req.device, req.size, req.isolated);
  // Claim the estimate against the capacity first; the real size follows.
  const uint64_t before = d.used.fetch_add(estimate);
  if (before + estimate > d.capacity) {
    d.used -= estimate;
    return OutOfMemoryRefusal(StrCat("device ", d.info.uuid, " full: requested ", estimate,
                                     " bytes, ", before, " of ", d.capacity, " in use, ",
                                     d.capacity > before ? d.capacity - before : 0, " free"));
  }
  auto buffer = UsesVmm(req.size, req.isolated)                  ? AllocateVmm(d, req)
                : options_.small_buffers == SmallBuffers::kArena ? AllocateFromArena(d, req)
                                                                 : AllocatePooled(d, req);
  if (!buffer.ok()) {
    d.used -= estimate;
    return buffer;
  }
  d.used += (*buffer)->reserved_size();
  d.used -= estimate;
  return buffer;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> CudaBackend::AllocatePooled(
    Device& d, const AllocationRequest& req) {
  auto pool = PoolFor(d, req.tenant);
  if (!pool.ok()) return pool.status();
  auto fences = FencesFor(d, req.tenant);
  if (!fences.ok()) return fences.status();
  auto fence = FenceSlot::Take(*std::move(fences), req.tenant, d.info.uuid);
  if (!fence.ok()) return fence.status();
  void* ptr = nullptr;
  uint64_t reserved = 0;
  cudaMemPoolPtrExportData data{};
  {
    absl::MutexLock lock(&(*pool)->mu);
    cuda::ScopedDevice on(d.info.ordinal);
    const uint64_t used_before = PoolAttribute((*pool)->pool, cudaMemPoolAttrUsedMemCurrent);
    cudaError_t err = cudaMallocFromPoolAsync(&ptr, req.size, (*pool)->pool, d.stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(d.stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (err == cudaErrorMemoryAllocation) {
        return OutOfMemoryRefusal(
            StrCat("out of memory on ", d.info.uuid, ": cudaMallocFromPoolAsync of ", req.size,
                   " bytes failed (pool of tenant '", req.tenant, "' holds ",
                   PoolAttribute((*pool)->pool, cudaMemPoolAttrReservedMemCurrent), " bytes)"));
      }
      return cuda::RuntimeError(err, "cudaMallocFromPoolAsync");
    }
    const uint64_t used_after = PoolAttribute((*pool)->pool, cudaMemPoolAttrUsedMemCurrent);
    reserved =
        used_after > used_before ? used_after - used_before : RoundUp(req.size, kPoolAlignment);
    err = cudaMemPoolExportPointer(&data, ptr);
    if (err != cudaSuccess) {
      cudaFreeAsync(ptr, d.stream);
      cudaStreamSynchronize(d.stream);
      return cuda::RuntimeError(err, "cudaMemPoolExportPointer");
    }
  }
  ImportInfo info;
  info.kind = ImportKind::kCudaPool;
  info.pool_id = (*pool)->id;
  info.mapped_size = reserved;
  info.export_data.assign(reinterpret_cast<const char*>(&data), sizeof(data));
  info.device_uuid = d.info.uuid;
  fence->Describe(info);
  return std::make_unique<PoolBuffer>(*pool, *std::move(fence), ptr, reserved, std::move(info));
}

std::shared_ptr<CudaBackend::Arena> CudaBackend::ArenaFor(Device& d, const std::string& tenant) {
  absl::MutexLock lock(&d.mu);
  auto& arena = d.arenas[tenant];
  if (!arena) {
    arena = std::make_shared<Arena>();
    arena->tenant = tenant;
  }
  return arena;
}

absl::StatusOr<std::shared_ptr<CudaBackend::Slab>> CudaBackend::NewSlab(Device& d,
                                                                        const std::string& tenant,
                                                                        uint64_t arena_bytes,
                                                                        uint64_t size) {
  auto api = cuda::DriverApi::Get();
  if (!api.ok()) return api.status();
  const uint64_t granularity = std::max<uint64_t>(d.info.vmm_granularity, 2 * kMiB);
  const uint64_t least = RoundUp(size, granularity);
  // Geometric growth (each slab as large as the arena so far, 64 MiB to
  // 2 GiB), within what the device may lend.
  uint64_t want = std::max(least, std::clamp(arena_bytes, kSlabMin, kSlabMax));
  const uint64_t held = d.slab_bytes.load() + d.vmm_bytes.load() + d.fence_bytes.load();
  const uint64_t room = d.capacity > held ? RoundUp(d.capacity - held, granularity) : 0;
  want = std::max(least, std::min(want, room));
  cuda::ScopedDevice on(d.info.ordinal);
  if (!on.status().ok()) return on.status();
  auto memory = ExportedVmm::Create(*api, d.info.ordinal, want, "slab");
  if (memory.status().code() == absl::StatusCode::kResourceExhausted && d.DropVmmCache() > 0) {
    memory = ExportedVmm::Create(*api, d.info.ordinal, want, "slab");
  }
  if (!memory.ok() && want > least) {  // fuller than our books say: the least will do
    want = least;
    memory = ExportedVmm::Create(*api, d.info.ordinal, want, "slab");
  }
  if (!memory.ok()) {
    if (memory.status().code() == absl::StatusCode::kResourceExhausted) {
      return OutOfMemoryRefusal(StrCat("out of memory on ", d.info.uuid, ": a ", want,
                                       "-byte slab for tenant '", tenant, "' failed"));
    }
    return memory.status();
  }
  auto slab = std::make_shared<Slab>(std::move(*memory));
  slab->tenant = tenant;
  slab->device = &d;
  {
    absl::MutexLock ids(&mu_);
    slab->id = next_pool_id_++;
    slabs_by_id_[slab->id] = slab;
  }
  d.slab_bytes += want;
  spdlog::info("cuda-arena: slab {} of {} for tenant '{}' on {} (arena now {})", slab->id,
               FormatBytes(want), tenant, d.info.uuid, FormatBytes(arena_bytes + want));
  return slab;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> CudaBackend::AllocateFromArena(
    Device& d, const AllocationRequest& req) {
  std::shared_ptr<Arena> arena = ArenaFor(d, req.tenant);
  auto fences = FencesFor(d, req.tenant);
  if (!fences.ok()) return fences.status();
  auto fence = FenceSlot::Take(*std::move(fences), req.tenant, d.info.uuid);
  if (!fence.ok()) return fence.status();
  const uint64_t size = RoundUp(req.size, kPoolAlignment);
  std::shared_ptr<Slab> slab;
  uint64_t offset = 0;
  {
    absl::MutexLock lock(&arena->mu);
    for (const auto& s : arena->slabs) {
      if (auto o = s->ranges.Allocate(size)) {
        slab = s;
        offset = *o;
        break;
      }
    }
    if (!slab) {
      auto made = NewSlab(d, req.tenant, arena->bytes, size);
      if (!made.ok()) return made.status();
      slab = *made;
      arena->slabs.push_back(slab);
      arena->bytes += slab->memory.size();
      offset = slab->ranges.Allocate(size).value();  // a new slab has room for it
    }
  }
  d.arena_used += size;
  ImportInfo info;
  info.kind = ImportKind::kCudaArena;
  info.pool_id = slab->id;
  info.offset = offset;
  info.mapped_size = size;
  info.device_uuid = d.info.uuid;
  fence->Describe(info);
  return std::make_unique<ArenaBuffer>(std::move(arena), std::move(slab), *std::move(fence),
                                       std::move(info));
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> CudaBackend::AllocateVmm(
    Device& d, const AllocationRequest& req) {
  auto api = cuda::DriverApi::Get();
  if (!api.ok()) return api.status();
  const uint64_t size = RoundedSize(d.index, req.size, true);
  const std::string cache_as = req.isolated ? std::string() : req.tenant;
  std::optional<ExportedVmm> memory;
  if (!cache_as.empty()) {  // one of the tenant's own, kept from an earlier buffer
    absl::MutexLock lock(&d.mu);
    if (auto t = d.vmm_cache.find(cache_as); t != d.vmm_cache.end()) {
      if (auto c = t->second.find(size); c != t->second.end()) {
        memory = std::move(c->second);
        t->second.erase(c);
        d.vmm_cached -= size;
      }
    }
  }
  if (!memory) {
    // Lent plus kept may not pass the capacity (`used` includes this request).
    if (d.used.load() + d.vmm_cached.load() > d.capacity) d.DropVmmCache();
    cuda::ScopedDevice on(d.info.ordinal);
    if (!on.status().ok()) return on.status();
    const auto start = std::chrono::steady_clock::now();
    auto made = ExportedVmm::Create(*api, d.info.ordinal, size, "buffer");
    if (made.status().code() == absl::StatusCode::kResourceExhausted && d.DropVmmCache() > 0) {
      made = ExportedVmm::Create(*api, d.info.ordinal, size, "buffer");
    }
    if (!made.ok()) {
      if (made.status().code() == absl::StatusCode::kResourceExhausted) {
        return OutOfMemoryRefusal(
            StrCat("out of memory on ", d.info.uuid, ": cuMemCreate of ", size, " bytes failed"));
      }
      return made.status();
    }
    const auto took = std::chrono::steady_clock::now() - start;
    if (took > kSlowAllocation) {
      spdlog::info("cuda-vmm: a new {} on {} took {:.1f} ms", FormatBytes(size), d.info.uuid,
                   std::chrono::duration<double, std::milli>(took).count());
    }
    memory = std::move(*made);
  }
  ImportInfo info;
  info.kind = ImportKind::kCudaVmm;
  info.pool_id = 0;
  info.mapped_size = size;
  info.device_uuid = d.info.uuid;
  info.fence_offset = FenceOffset(req.size);
  info.fence_value = FenceValue();  // new for every buffer: a kept word never reads as ready
  d.vmm_bytes += size;
  return std::make_unique<VmmBuffer>(&d, std::move(*memory), std::move(info), cache_as);
}

absl::StatusOr<FdGrant> CudaBackend::ExportPool(PoolId pool, std::string_view tenant) {
  std::shared_ptr<Pool> p;
  std::shared_ptr<FencePage> fences;
  std::shared_ptr<Slab> slab;
  {
    absl::MutexLock lock(&mu_);
    auto s = slabs_by_id_.find(pool);
    if (s != slabs_by_id_.end() && s->second->tenant == tenant) slab = s->second;
    auto it = pools_by_id_.find(pool);
    if (it != pools_by_id_.end() && it->second->tenant == tenant) p = it->second;
    auto f = fences_by_id_.find(pool);
    if (f != fences_by_id_.end() && f->second->tenant == tenant) fences = f->second;
  }
  if (slab) {
    auto fd = DupFd(slab->memory.fd());
    if (!fd.ok()) return fd.status();
    return FdGrant{std::move(*fd), FdKind::kCudaSlab, slab->memory.size(), slab->device->info.uuid};
  }
  if (fences) {
    auto fd = DupFd(fences->memory.fd());
    if (!fd.ok()) return fd.status();
    return FdGrant{std::move(*fd), FdKind::kCudaFences, fences->memory.size(),
                   fences->device->info.uuid};
  }
  if (!p) return absl::NotFoundError(StrCat("no pool ", pool, " for this tenant"));
  auto fd = DupFd(p->exported.get());
  if (!fd.ok()) return fd.status();
  return FdGrant{std::move(*fd), FdKind::kCudaPool, p->device->capacity, p->device->info.uuid};
}

DeviceUsage CudaBackend::Usage(int device) const {
  DeviceUsage u;
  if (device < 0 || device >= static_cast<int>(devices_.size())) return u;
  Device& d = *devices_[device];
  u.capacity_bytes = d.capacity;
  std::vector<cudaMemPool_t> pools;
  {
    absl::MutexLock lock(&d.mu);
    for (const auto& [tenant, pool] : d.pools) pools.push_back(pool->pool);
  }
  cuda::ScopedDevice on(d.info.ordinal);
  for (cudaMemPool_t p : pools) {
    u.reserved_bytes += PoolAttribute(p, cudaMemPoolAttrReservedMemCurrent);
    u.used_bytes += PoolAttribute(p, cudaMemPoolAttrUsedMemCurrent);
  }
  const uint64_t vmm = d.vmm_bytes.load();
  u.reserved_bytes += vmm + d.vmm_cached.load() + d.fence_bytes.load() + d.slab_bytes.load();
  u.used_bytes += vmm + d.arena_used.load();
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    u.free_bytes = free;
  } else {
    cudaGetLastError();
  }
  return u;
}

}  // namespace gpubroker
