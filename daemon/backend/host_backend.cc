#include "daemon/backend/host_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/leased_range.h"
#include "daemon/backend/range_allocator.h"
#include "daemon/backend/region_table.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

// One tenant's memfd, exported to the tenant's clients as a region. It goes
// (Arenas::RetireIfIdle) once it is empty and no live session holds its
// descriptor; a take from it after that finds it retired.
class HostBackend::Arena final : public ExportedRegion {
 public:
  Arena(std::string tenant, UniqueFd fd, uint64_t size, std::weak_ptr<Arenas> arenas)
      : tenant_(std::move(tenant)),
        fd_(std::move(fd)),
        size_(size),
        arenas_(std::move(arenas)),
        ranges_(size) {}

  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd copy, DupFd(fd_.get()));
    return FdGrant{std::move(copy), FdKind::kHostArena, size_, "host"};
  }
  // The last session that fetched the descriptor has ended.
  void Unheld() const override { RetireIfIdle(); }

  RegionId id() const { return id_; }
  void set_id(RegionId id) { id_ = id; }
  int fd() const { return fd_.get(); }
  const std::string& tenant() const { return tenant_; }

  /// An offset for `bytes`; none with `*largest_free` set when no free range
  /// fits, or with `*retired` set when the arena has gone.
  std::optional<uint64_t> Take(uint64_t bytes, uint64_t* largest_free, bool* retired) {
    absl::MutexLock lock(&mu_);
    if (retired_) {
      *retired = true;
      return std::nullopt;
    }
    auto offset = ranges_.Allocate(bytes);
    if (!offset) *largest_free = ranges_.largest_free_range();
    return offset;
  }
  void Give(uint64_t offset, uint64_t bytes) {
    bool empty = false;
    {
      absl::MutexLock lock(&mu_);
      ranges_.Free(offset, bytes);
      empty = ranges_.free_bytes() == ranges_.capacity();
    }
    if (empty) RetireIfIdle();
  }

  /// Marks the arena gone where it is empty and `holders` (the live sessions
  /// that fetched its descriptor) is 0; true if this call did.
  bool Retire(uint32_t holders) const {
    absl::MutexLock lock(&mu_);
    if (retired_ || holders > 0 || ranges_.free_bytes() != ranges_.capacity()) return false;
    retired_ = true;
    return true;
  }
  bool retired() const {
    absl::MutexLock lock(&mu_);
    return retired_;
  }

 private:
  void RetireIfIdle() const;

  const std::string tenant_;
  const UniqueFd fd_;
  const uint64_t size_;
  const std::weak_ptr<Arenas> arenas_;  // gone with the backend
  RegionId id_ = 0;
  mutable absl::Mutex mu_;
  RangeAllocator ranges_ ABSL_GUARDED_BY(mu_);
  mutable bool retired_ ABSL_GUARDED_BY(mu_) = false;
};

// The tenants' arenas, and the table through which their clients fetch them.
// A tenant keeps its arena while it has buffers in it or live clients that
// mapped it; then the arena goes. So a node that sees many tenants come and
// go (a pod whose uids map to a range of the host's is a tenant of its own)
// does not keep a memfd, uncounted by the descriptor budget, for each tenant
// it ever served.
class HostBackend::Arenas : public std::enable_shared_from_this<HostBackend::Arenas> {
 public:
  explicit Arenas(uint64_t capacity) : capacity_(capacity) {}

  /// `tenant`'s arena, made where it has none (or its last has gone).
  absl::StatusOr<std::shared_ptr<Arena>> For(const std::string& tenant) {
    absl::MutexLock lock(&mu_);
    auto it = by_tenant_.find(tenant);
    if (it != by_tenant_.end() && !it->second->retired()) return it->second;
    // The arena spans the whole capacity; memfds are sparse, so only pages in
    // use cost memory.
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd,
                               CreateSealedMemfd(StrCat("gpubroker:", tenant), capacity_));
    auto arena = std::make_shared<Arena>(tenant, std::move(fd), capacity_, weak_from_this());
    arena->set_id(regions.Add(tenant, arena));
    by_tenant_[tenant] = arena;
    spdlog::info("host backend: arena {} for tenant '{}' ({} of address space)", arena->id(),
                 tenant, FormatBytes(capacity_));
    return arena;
  }

  /// Takes `arena` out (no longer exported, its memfd closed with the last
  /// reference) if it is empty and no live session holds its descriptor.
  void RetireIfIdle(const Arena& arena) {
    if (!arena.Retire(regions.Holders(arena.id()))) return;
    {
      absl::MutexLock lock(&mu_);
      auto it = by_tenant_.find(arena.tenant());
      if (it != by_tenant_.end() && it->second.get() == &arena) by_tenant_.erase(it);
    }
    regions.Remove(arena.id());
    spdlog::info("host backend: arena {} of tenant '{}' closed (empty, unmapped)", arena.id(),
                 arena.tenant());
  }

  std::vector<std::shared_ptr<Arena>> All() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<Arena>> out;
    out.reserve(by_tenant_.size());
    for (const auto& [tenant, arena] : by_tenant_) out.push_back(arena);
    return out;
  }

  RegionTable regions;

 private:
  const uint64_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Arena>> by_tenant_ ABSL_GUARDED_BY(mu_);
};

void HostBackend::Arena::RetireIfIdle() const {
  if (auto arenas = arenas_.lock()) arenas->RetireIfIdle(*this);
}

// The memfds of live buffers shared across tenants: what they hold counts as
// reserved memory.
class HostBackend::OwnMemfds {
 public:
  void Add(const void* buffer, int fd) {
    absl::MutexLock lock(&mu_);
    fds_[buffer] = fd;
  }
  void Remove(const void* buffer) {
    absl::MutexLock lock(&mu_);
    fds_.erase(buffer);
  }
  template <typename F>
  void ForEach(F&& f) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [buffer, fd] : fds_) f(fd);
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, int> fds_ ABSL_GUARDED_BY(mu_);
};

namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

absl::Status ErrnoError(std::string_view what) {
  return absl::InternalError(StrCat(what, ": ", std::strerror(errno)));
}

void PunchHole(int fd, uint64_t offset, uint64_t length) {
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(length)) != 0) {
    spdlog::warn("host backend: could not release pages [{}, +{}): {}", offset, length,
                 std::strerror(errno));
  }
}

uint64_t AllocatedBytes(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) return static_cast<uint64_t>(si.freeram) * si.mem_unit;
  return 0;
}

// A buffer carved out of its tenant's arena.
class ArenaBuffer final : public BackendBuffer {
 public:
  ArenaBuffer(std::shared_ptr<HostBackend::Arena> arena, CapacityGuard::Claim claim,
              uint64_t offset)
      : arena_(std::move(arena)), claim_(std::move(claim)) {
    info_.kind = ImportKind::kHostArena;
    info_.region_id = arena_->id();
    info_.offset = offset;
    info_.mapped_size = claim_.bytes();
    info_.device_uuid = "host";
  }
  ~ArenaBuffer() override {
    // Punch first: the range must be zero and unbacked before it can be handed out again.
    PunchHole(arena_->fd(), info_.offset, info_.mapped_size);
    arena_->Give(info_.offset, info_.mapped_size);
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }

 private:
  std::shared_ptr<HostBackend::Arena> arena_;
  CapacityGuard::Claim claim_;
  ImportInfo info_;
};

// A memfd of a buffer's own: kept, when its buffer goes, for the tenant's
// next buffer of its size. Counts in Usage while it lives.
class OwnMemfd final : public KeptAllocations::Memory {
 public:
  OwnMemfd(UniqueFd fd, uint64_t size, std::shared_ptr<HostBackend::OwnMemfds> registry)
      : fd_(std::move(fd)), size_(size), own_memfds_(std::move(registry)) {
    own_memfds_->Add(this, fd_.get());
  }
  ~OwnMemfd() override { own_memfds_->Remove(this); }
  uint64_t size() const override { return size_; }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  uint64_t size_;
  std::shared_ptr<HostBackend::OwnMemfds> own_memfds_;
};

// A buffer with a memfd of its own: shared across tenants (never kept: it
// exposes nothing of another tenant's), or large (kept for its tenant, with
// its allocation id, so that clients that kept it mapped find it again).
class OwnBuffer final : public BackendBuffer, public ExportedRegion {
 public:
  OwnBuffer(std::unique_ptr<OwnMemfd> memory, CapacityGuard::Claim claim, AllocationId id,
            std::string keep_for, std::shared_ptr<KeptAllocations> kept,
            std::shared_ptr<CapacityGuard> lent)
      : memory_(std::move(memory)),
        claim_(std::move(claim)),
        keep_for_(std::move(keep_for)),
        kept_(std::move(kept)),
        lent_(std::move(lent)) {
    info_.kind = ImportKind::kHostFd;
    info_.mapped_size = memory_->size();
    info_.device_uuid = "host";
    info_.allocation_id = id;
  }
  ~OwnBuffer() override {
    const uint64_t size = memory_->size();
    claim_ = CapacityGuard::Claim();  // what is lent without this buffer decides below
    // Kept while the pool has room for it beside what is lent; otherwise
    // released, once no client maps it any more (they are asked to unmap).
    if (!keep_for_.empty() && lent_->used() + kept_->bytes() + size <= lent_->capacity()) {
      kept_->Keep(keep_for_, info_.allocation_id, std::move(memory_));
    } else {
      kept_->Retire(info_.allocation_id, std::move(memory_));
    }
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  const ExportedRegion* own_region() const override { return this; }
  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd copy, DupFd(memory_->fd()));
    return FdGrant{std::move(copy), FdKind::kHostBuffer, info_.mapped_size, "host"};
  }

 private:
  std::unique_ptr<OwnMemfd> memory_;
  CapacityGuard::Claim claim_;
  std::string keep_for_;
  std::shared_ptr<KeptAllocations> kept_;
  std::shared_ptr<CapacityGuard> lent_;
  ImportInfo info_;
};

// How long an allocation waits for clients to unmap kept memory it needs.
constexpr auto kDrainWait = std::chrono::seconds(2);

}  // namespace

absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size) {
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return ErrnoError("memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return ErrnoError("ftruncate");
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoError("F_ADD_SEALS");
  }
  return fd;
}

HostBackend::HostBackend(uint64_t capacity, uint64_t own_memfd_threshold)
    : capacity_(capacity),
      own_memfd_threshold_(own_memfd_threshold),
      page_size_(static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))),
      lent_(std::make_shared<CapacityGuard>(capacity, "host pool")),
      own_memfds_(std::make_shared<OwnMemfds>()),
      kept_(std::make_shared<KeptAllocations>()),
      arenas_(std::make_shared<Arenas>(capacity)) {
  struct sysinfo si {};
  uint64_t total = 0;
  if (::sysinfo(&si) == 0) total = static_cast<uint64_t>(si.totalram) * si.mem_unit;
  DeviceInfo dev;
  dev.uuid = "host";
  dev.name = "host memory (memfd)";
  dev.backend = "host";
  dev.ordinal = 0;
  dev.total_bytes = total;
  dev.capacity_bytes = capacity;
  devices_.push_back(dev);
}

HostBackend::~HostBackend() = default;

uint64_t HostBackend::RoundedSize(int /*device*/, uint64_t size, bool /*isolated*/) const {
  return RoundUp(size, page_size_);
}

absl::StatusOr<std::pair<std::shared_ptr<HostBackend::Arena>, uint64_t>> HostBackend::TakeFromArena(
    const std::string& tenant, uint64_t bytes, std::string_view what) {
  for (;;) {
    GPUBROKER_ASSIGN_OR_RETURN(std::shared_ptr<Arena> arena, arenas_->For(tenant));
    uint64_t largest = 0;
    bool retired = false;
    if (const std::optional<uint64_t> offset = arena->Take(bytes, &largest, &retired)) {
      return std::make_pair(std::move(arena), *offset);
    }
    // Gone between the look-up and the take (emptied and unmapped): the
    // tenant's next arena serves.
    if (retired) continue;
    return OutOfMemoryRefusal(StrCat("host pool of tenant '", tenant, "' fragmented: ", what, " ",
                                     bytes, " bytes, largest free range ", largest));
  }
}

absl::Status HostBackend::MakeRoom(uint64_t bytes, bool may_wait) {
  return kept_->MakeRoom(lent_->used(), bytes, capacity_, may_wait, kDrainWait, "the host pool");
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::Allocate(const AllocationRequest& req) {
  const uint64_t bytes = RoundedSize(req.device, req.size, req.isolated);
  if (req.isolated || req.size >= own_memfd_threshold_) {
    return AllocateOwn(req);
  }
  GPUBROKER_RETURN_IF_ERROR(MakeRoom(bytes, req.may_wait));
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim, lent_->Take(bytes));
  GPUBROKER_ASSIGN_OR_RETURN(auto taken, TakeFromArena(req.tenant, claim.bytes(), "requested"));
  return std::make_unique<ArenaBuffer>(std::move(taken.first), std::move(claim), taken.second);
}

uint64_t HostBackend::RangeLimit(int /*device*/) const {
  // A quarter of the capacity, so that one client's ranges leave room for
  // others; at most 2 GiB, as the GPU arena's slabs are.
  return std::min<uint64_t>(uint64_t{2} << 30, capacity_ / 4 / page_size_ * page_size_);
}

absl::StatusOr<std::unique_ptr<LeasedRange>> HostBackend::LeaseRange(const RangeRequest& req) {
  const uint64_t length = RoundUp(req.length, page_size_);
  GPUBROKER_RETURN_IF_ERROR(MakeRoom(length, req.may_wait));
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim, lent_->Take(length));
  GPUBROKER_ASSIGN_OR_RETURN(auto taken, TakeFromArena(req.tenant, length, "a range of"));
  std::shared_ptr<Arena> arena = std::move(taken.first);
  const uint64_t offset = taken.second;
  ImportInfo info;
  info.kind = ImportKind::kHostArena;
  info.region_id = arena->id();
  info.offset = offset;
  info.mapped_size = length;
  info.device_uuid = "host";
  // The range's claim on the capacity shrinks as its spans come back.
  struct Held {
    absl::Mutex mu;
    CapacityGuard::Claim claim ABSL_GUARDED_BY(mu);
  };
  auto held = std::make_shared<Held>();
  {
    absl::MutexLock lock(&held->mu);
    held->claim = std::move(claim);
  }
  // A span that comes back is punched out (its pages return to the kernel,
  // and the next buffer there starts zeroed) before it can be handed out again.
  auto free_span = [arena, held, base = offset](uint64_t at, uint64_t size) {
    PunchHole(arena->fd(), base + at, size);
    arena->Give(base + at, size);
    absl::MutexLock lock(&held->mu);
    held->claim.Resize(held->claim.bytes() - size);
  };
  return std::make_unique<LeasedRange>(std::move(info), std::move(free_span), page_size_);
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::AllocateOwn(
    const AllocationRequest& req) {
  const uint64_t size = RoundUp(req.size, page_size_);
  // A buffer shared across tenants is never kept: another tenant held its fd.
  const std::string keep_for = req.isolated ? std::string() : req.tenant;
  if (!keep_for.empty()) {
    if (auto kept = kept_->Take(keep_for, size)) {
      // The same memory, with its id: clients that kept it mapped find it so.
      auto claim = lent_->Take(size);
      if (!claim.ok()) {
        kept_->Keep(keep_for, kept->first, std::move(kept->second));
        return claim.status();
      }
      std::unique_ptr<OwnMemfd> memory(static_cast<OwnMemfd*>(kept->second.release()));
      return std::make_unique<OwnBuffer>(std::move(memory), *std::move(claim), kept->first,
                                         keep_for, kept_, lent_);
    }
    if (req.kept_only) {
      return AskThroughGrpc(
          StrCat("no kept memfd of ", FormatBytes(size), " for tenant '", req.tenant, "'"));
    }
  }
  GPUBROKER_RETURN_IF_ERROR(MakeRoom(size, req.may_wait));
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim, lent_->Take(size));
  GPUBROKER_ASSIGN_OR_RETURN(
      UniqueFd fd,
      CreateSealedMemfd(keep_for.empty() ? "gpubroker:shared" : "gpubroker:own", size));
  auto memory = std::make_unique<OwnMemfd>(std::move(fd), size, own_memfds_);
  const AllocationId id = keep_for.empty() ? 0 : NewAllocationId();
  return std::make_unique<OwnBuffer>(std::move(memory), std::move(claim), id, keep_for, kept_,
                                     lent_);
}

absl::StatusOr<FdGrant> HostBackend::ExportRegion(RegionId region, std::string_view tenant) {
  return arenas_->regions.Export(region, tenant);
}

void HostBackend::RegionHeld(RegionId region) { arenas_->regions.AddHolder(region); }

void HostBackend::RegionUnheld(RegionId region) { arenas_->regions.DropHolder(region); }

DeviceUsage HostBackend::Usage(int /*device*/) const {
  DeviceUsage u;
  u.capacity_bytes = capacity_;
  u.used_bytes = lent_->used();
  for (const auto& arena : arenas_->All()) u.reserved_bytes += AllocatedBytes(arena->fd());
  own_memfds_->ForEach([&](int fd) { u.reserved_bytes += AllocatedBytes(fd); });
  u.kept_bytes = kept_->bytes();
  u.unmapping_bytes = kept_->draining_bytes();
  u.free_bytes = MemAvailable();
  return u;
}

}  // namespace gpubroker
