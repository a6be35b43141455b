#include "daemon/backend/host_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/range_allocator.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

// One tenant's memfd, exported to the tenant's clients as a region.
class HostBackend::Arena final : public ExportedRegion {
 public:
  Arena(std::string tenant, UniqueFd fd, uint64_t size)
      : tenant_(std::move(tenant)), fd_(std::move(fd)), size_(size), ranges_(size) {}

  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd copy, DupFd(fd_.get()));
    return FdGrant{std::move(copy), FdKind::kHostArena, size_, "host"};
  }

  RegionId id() const { return id_; }
  void set_id(RegionId id) { id_ = id; }
  int fd() const { return fd_.get(); }
  const std::string& tenant() const { return tenant_; }

  std::optional<uint64_t> Take(uint64_t bytes, uint64_t* largest_free) {
    absl::MutexLock lock(&mu_);
    auto offset = ranges_.Allocate(bytes);
    if (!offset) *largest_free = ranges_.largest_free_range();
    return offset;
  }
  void Give(uint64_t offset, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    ranges_.Free(offset, bytes);
  }

 private:
  const std::string tenant_;
  const UniqueFd fd_;
  const uint64_t size_;
  RegionId id_ = 0;
  absl::Mutex mu_;
  RangeAllocator ranges_ ABSL_GUARDED_BY(mu_);
};

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

// A buffer with a memfd of its own (shared across tenants).
class IsolatedBuffer final : public BackendBuffer, public ExportedRegion {
 public:
  IsolatedBuffer(UniqueFd fd, CapacityGuard::Claim claim,
                 std::shared_ptr<HostBackend::OwnMemfds> registry)
      : fd_(std::move(fd)), claim_(std::move(claim)), own_memfds_(std::move(registry)) {
    info_.kind = ImportKind::kHostFd;
    info_.mapped_size = claim_.bytes();
    info_.device_uuid = "host";
    own_memfds_->Add(this, fd_.get());
  }
  ~IsolatedBuffer() override { own_memfds_->Remove(this); }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  const ExportedRegion* own_region() const override { return this; }
  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd copy, DupFd(fd_.get()));
    return FdGrant{std::move(copy), FdKind::kHostBuffer, info_.mapped_size, "host"};
  }

 private:
  UniqueFd fd_;
  CapacityGuard::Claim claim_;
  std::shared_ptr<HostBackend::OwnMemfds> own_memfds_;
  ImportInfo info_;
};

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

HostBackend::HostBackend(uint64_t capacity)
    : capacity_(capacity),
      page_size_(static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))),
      lent_(std::make_shared<CapacityGuard>(capacity, "host pool")),
      own_memfds_(std::make_shared<OwnMemfds>()) {
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

absl::StatusOr<std::shared_ptr<HostBackend::Arena>> HostBackend::ArenaFor(
    const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  if (auto it = arenas_.find(tenant); it != arenas_.end()) return it->second;
  // The arena spans the whole capacity; memfds are sparse, so only pages in
  // use cost memory.
  GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd,
                             CreateSealedMemfd(StrCat("gpubroker:", tenant), capacity_));
  auto arena = std::make_shared<Arena>(tenant, std::move(fd), capacity_);
  arena->set_id(regions_.Add(tenant, arena));
  arenas_[tenant] = arena;
  spdlog::info("host backend: arena {} for tenant '{}' ({} of address space)", arena->id(), tenant,
               FormatBytes(capacity_));
  return arena;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::Allocate(const AllocationRequest& req) {
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim,
                             lent_->Take(RoundedSize(req.device, req.size, req.isolated)));
  if (req.isolated) return AllocateIsolated(std::move(claim));
  GPUBROKER_ASSIGN_OR_RETURN(std::shared_ptr<Arena> arena, ArenaFor(req.tenant));
  uint64_t largest = 0;
  const std::optional<uint64_t> offset = arena->Take(claim.bytes(), &largest);
  if (!offset) {
    return OutOfMemoryRefusal(StrCat("host pool of tenant '", req.tenant,
                                     "' fragmented: requested ", claim.bytes(),
                                     " bytes, largest free range ", largest));
  }
  return std::make_unique<ArenaBuffer>(std::move(arena), std::move(claim), *offset);
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::AllocateIsolated(
    CapacityGuard::Claim claim) {
  GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd, CreateSealedMemfd("gpubroker:shared", claim.bytes()));
  return std::make_unique<IsolatedBuffer>(std::move(fd), std::move(claim), own_memfds_);
}

absl::StatusOr<FdGrant> HostBackend::ExportRegion(RegionId region, std::string_view tenant) {
  return regions_.Export(region, tenant);
}

DeviceUsage HostBackend::Usage(int /*device*/) const {
  DeviceUsage u;
  u.capacity_bytes = capacity_;
  u.used_bytes = lent_->used();
  std::vector<std::shared_ptr<Arena>> arenas;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [tenant, arena] : arenas_) arenas.push_back(arena);
  }
  for (const auto& arena : arenas) u.reserved_bytes += AllocatedBytes(arena->fd());
  own_memfds_->ForEach([&](int fd) { u.reserved_bytes += AllocatedBytes(fd); });
  u.free_bytes = MemAvailable();
  return u;
}

}  // namespace gpubroker
