#include "daemon/backend/cuda/arena_path.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/leased_range.h"
#include "daemon/backend/range_allocator.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

constexpr uint64_t kAlignment = 512;
constexpr uint64_t kSlabMin = uint64_t{64} << 20;
constexpr uint64_t kSlabMax = uint64_t{2} << 30;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

// One VMM allocation of a tenant's arena, exported once and mapped once per
// client process; buffers are byte ranges of it (under the arena's lock).
class ArenaSlab final : public ExportedRegion {
 private:
  const std::shared_ptr<CudaDeviceState> device_;
  const ExportedVmm memory_;

 public:
  ArenaSlab(std::shared_ptr<CudaDeviceState> device, ExportedVmm memory,
            std::weak_ptr<TenantArena> owner)
      : device_(std::move(device)),
        memory_(std::move(memory)),
        arena(std::move(owner)),
        ranges(memory_.size()) {
    device_->vmm_held += memory_.size();
  }
  ~ArenaSlab() override { device_->vmm_held -= memory_.size(); }

  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd, DupFd(memory_.fd()));
    return FdGrant{std::move(fd), FdKind::kCudaSlab, memory_.size(), device_->info.uuid};
  }
  void Unheld() const override;
  uint64_t size() const { return memory_.size(); }

  RegionId id = 0;
  const std::weak_ptr<TenantArena> arena;
  RangeAllocator ranges;  // after memory_, which it spans; under the arena's lock
};

// A tenant's slabs on one device.
class TenantArena {
 public:
  TenantArena(std::string tenant, RegionTable& regions, std::shared_ptr<ArenaPath::Counters> c)
      : tenant_(std::move(tenant)), regions_(regions), counters_(std::move(c)) {}

  /// Gives slab `id` back to the device when no buffer uses it and no live
  /// session holds its descriptor (so no client maps it): a client that has
  /// mapped it keeps it until its session ends. Call without `mu`.
  void ReleaseIfIdle(RegionId id) ABSL_LOCKS_EXCLUDED(mu) {
    std::shared_ptr<ArenaSlab> gone;  // released after the lock
    {
      absl::MutexLock lock(&mu);
      auto it = std::find_if(slabs.begin(), slabs.end(),
                             [id](const auto& slab) { return slab->id == id; });
      if (it == slabs.end()) return;
      const ArenaSlab& slab = **it;
      if (slab.ranges.free_bytes() != slab.ranges.capacity() || regions_.Holders(id) > 0) return;
      gone = std::move(*it);
      slabs.erase(it);
      bytes -= gone->size();
      counters_->slab_bytes -= gone->size();
      regions_.Remove(id);
    }
    spdlog::info("cuda-arena: slab {} of {} of tenant '{}' given back (unused, unmapped)", id,
                 FormatBytes(gone->size()), tenant_);
  }

  absl::Mutex mu;
  std::vector<std::shared_ptr<ArenaSlab>> slabs ABSL_GUARDED_BY(mu);
  uint64_t bytes ABSL_GUARDED_BY(mu) = 0;

 private:
  const std::string tenant_;
  RegionTable& regions_;
  const std::shared_ptr<ArenaPath::Counters> counters_;
};

void ArenaSlab::Unheld() const {
  if (auto a = arena.lock()) a->ReleaseIfIdle(id);
}

namespace {

class ArenaBuffer final : public BackendBuffer {
 public:
  ArenaBuffer(std::shared_ptr<TenantArena> arena, std::shared_ptr<ArenaSlab> slab,
              std::shared_ptr<ArenaPath::Counters> counters, CapacityGuard::Claim claim,
              FenceSlot fence, ImportInfo info)
      : arena_(std::move(arena)),
        slab_(std::move(slab)),
        counters_(std::move(counters)),
        claim_(std::move(claim)),
        fence_(std::move(fence)),
        info_(std::move(info)) {
    counters_->used_bytes += info_.mapped_size;
  }
  ~ArenaBuffer() override {
    bool empty = false;
    {
      absl::MutexLock lock(&arena_->mu);
      slab_->ranges.Free(info_.offset, info_.mapped_size);
      empty = slab_->ranges.free_bytes() == slab_->ranges.capacity();
    }
    counters_->used_bytes -= info_.mapped_size;
    if (empty) arena_->ReleaseIfIdle(slab_->id);
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }

 private:
  std::shared_ptr<TenantArena> arena_;
  std::shared_ptr<ArenaSlab> slab_;
  std::shared_ptr<ArenaPath::Counters> counters_;
  CapacityGuard::Claim claim_;
  FenceSlot fence_;
  ImportInfo info_;
};

// A new slab for a tenant's arena of `arena_bytes` so far, with room for
// `size` bytes: as large as the arena so far (64 MiB to 2 GiB), within what
// the device may lend.
absl::StatusOr<ExportedVmm> NewSlabMemory(CudaDeviceState& d, const std::string& tenant,
                                          uint64_t arena_bytes, uint64_t size, bool may_wait) {
  const uint64_t granularity = d.granularity();
  const uint64_t least = RoundUp(size, granularity);
  uint64_t want = std::max(least, std::clamp(arena_bytes, kSlabMin, kSlabMax));
  const uint64_t held = d.vmm_held.load();
  const uint64_t room = d.capacity() > held ? RoundUp(d.capacity() - held, granularity) : 0;
  want = std::max(least, std::min(want, room));
  auto lent = d.Lend(tenant, want, "slab", {.may_wait = may_wait});
  if (lent.status().code() == absl::StatusCode::kResourceExhausted && want > least) {
    want = least;  // fuller than our books say: the least will do
    lent = d.Lend(tenant, want, "slab", {.may_wait = may_wait});
  }
  if (lent.status().code() == absl::StatusCode::kResourceExhausted) {
    return OutOfMemoryRefusal(StrCat("out of memory on ", d.info.uuid, ": a ", want,
                                     "-byte slab for tenant '", tenant, "' failed"));
  }
  GPUBROKER_RETURN_IF_ERROR(lent.status());
  return std::move(lent->memory);
}

}  // namespace

ArenaPath::ArenaPath(std::shared_ptr<CudaDeviceState> device, FencePages& fences,
                     RegionTable& regions)
    : device_(std::move(device)),
      fences_(fences),
      regions_(regions),
      counters_(std::make_shared<Counters>()) {}

std::shared_ptr<TenantArena> ArenaPath::ArenaFor(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto& arena = arenas_[tenant];
  if (!arena) arena = std::make_shared<TenantArena>(tenant, regions_, counters_);
  return arena;
}

absl::Status ArenaPath::Place(const std::shared_ptr<TenantArena>& owner, const std::string& tenant,
                              uint64_t size, bool may_wait, std::shared_ptr<ArenaSlab>* slab,
                              uint64_t* offset) {
  CudaDeviceState& d = *device_;
  TenantArena& arena = *owner;
  absl::MutexLock lock(&arena.mu);
  for (const auto& s : arena.slabs) {
    if (auto o = s->ranges.Allocate(size)) {
      *slab = s;
      *offset = *o;
      return absl::OkStatus();
    }
  }
  GPUBROKER_ASSIGN_OR_RETURN(ExportedVmm memory,
                             NewSlabMemory(d, tenant, arena.bytes, size, may_wait));
  auto made = std::make_shared<ArenaSlab>(device_, std::move(memory), owner);
  made->id = regions_.Add(tenant, made);
  arena.slabs.push_back(made);
  arena.bytes += made->size();
  counters_->slab_bytes += made->size();
  *offset = made->ranges.Allocate(size).value();  // a new slab has room for it
  spdlog::info("cuda-arena: slab {} of {} for tenant '{}' on {} (arena now {})", made->id,
               FormatBytes(made->size()), tenant, d.info.uuid, FormatBytes(arena.bytes));
  *slab = std::move(made);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> ArenaPath::Allocate(const AllocationRequest& req,
                                                                   CapacityGuard::Claim claim) {
  CudaDeviceState& d = *device_;
  std::shared_ptr<TenantArena> arena = ArenaFor(req.tenant);
  GPUBROKER_ASSIGN_OR_RETURN(FenceSlot fence, fences_.Take(req.tenant));
  const uint64_t size = RoundUp(req.size, kAlignment);
  std::shared_ptr<ArenaSlab> slab;
  uint64_t offset = 0;
  GPUBROKER_RETURN_IF_ERROR(Place(arena, req.tenant, size, req.may_wait, &slab, &offset));
  claim.Resize(size);
  ImportInfo info;
  info.kind = ImportKind::kCudaArena;
  info.region_id = slab->id;
  info.offset = offset;
  info.mapped_size = size;
  info.device_uuid = d.info.uuid;
  fence.Describe(info);
  return std::make_unique<ArenaBuffer>(std::move(arena), std::move(slab), counters_,
                                       std::move(claim), std::move(fence), std::move(info));
}

uint64_t ArenaPath::RangeLimit() { return kSlabMax; }

absl::StatusOr<std::unique_ptr<LeasedRange>> ArenaPath::LeaseRange(const RangeRequest& req,
                                                                   CapacityGuard::Claim claim) {
  std::shared_ptr<TenantArena> arena = ArenaFor(req.tenant);
  const uint64_t length = RoundUp(req.length, kAlignment);
  std::shared_ptr<ArenaSlab> slab;
  uint64_t offset = 0;
  GPUBROKER_RETURN_IF_ERROR(Place(arena, req.tenant, length, req.may_wait, &slab, &offset));
  counters_->used_bytes += length;
  ImportInfo info;
  info.kind = ImportKind::kCudaArena;
  info.region_id = slab->id;
  info.offset = offset;
  info.mapped_size = length;
  info.device_uuid = device_->info.uuid;
  // The range's claim on the capacity shrinks as its spans come back. (The
  // client makes the work that used a span complete before it gives the
  // span back or the session ends: its release synchronizes, and a dead
  // process has no work left.)
  struct Held {
    absl::Mutex mu;
    CapacityGuard::Claim claim ABSL_GUARDED_BY(mu);
  };
  auto held = std::make_shared<Held>();
  {
    absl::MutexLock lock(&held->mu);
    claim.Resize(length);
    held->claim = std::move(claim);
  }
  auto free_span = [arena, slab, held, counters = counters_, base = offset](uint64_t at,
                                                                            uint64_t size) {
    bool empty = false;
    {
      absl::MutexLock lock(&arena->mu);
      slab->ranges.Free(base + at, size);
      empty = slab->ranges.free_bytes() == slab->ranges.capacity();
    }
    counters->used_bytes -= size;
    if (empty) arena->ReleaseIfIdle(slab->id);
    absl::MutexLock lock(&held->mu);
    held->claim.Resize(held->claim.bytes() - size);
  };
  return std::make_unique<LeasedRange>(std::move(info), std::move(free_span), kAlignment);
}

void ArenaPath::AddUsage(DeviceUsage& usage) const {
  usage.reserved_bytes += counters_->slab_bytes.load();
  usage.used_bytes += counters_->used_bytes.load();
}

}  // namespace gpubroker
