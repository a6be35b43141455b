#include "daemon/backend/host_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/refusal.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/range_allocator.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

struct HostBackend::Accounting {
  const uint64_t capacity;
  absl::Mutex mu;
  uint64_t used ABSL_GUARDED_BY(mu) = 0;
  // Buffers with a memfd of their own, by address of their record, for the
  // reserved-bytes figure.
  absl::flat_hash_map<const void*, int> isolated_fds ABSL_GUARDED_BY(mu);

  explicit Accounting(uint64_t cap) : capacity(cap) {}
};

struct HostBackend::Arena {
  PoolId id;
  std::string tenant;
  UniqueFd fd;
  uint64_t size;
  absl::Mutex mu;
  RangeAllocator ranges ABSL_GUARDED_BY(mu);

  Arena(PoolId i, std::string t, UniqueFd f, uint64_t s)
      : id(i), tenant(std::move(t)), fd(std::move(f)), size(s), ranges(s) {}
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
  ArenaBuffer(std::shared_ptr<HostBackend::Arena> arena,
              std::shared_ptr<HostBackend::Accounting> accounting, uint64_t offset, uint64_t size)
      : arena_(std::move(arena)), accounting_(std::move(accounting)) {
    info_.kind = ImportKind::kHostArena;
    info_.pool_id = arena_->id;
    info_.offset = offset;
    info_.mapped_size = size;
    info_.device_uuid = "host";
  }
  ~ArenaBuffer() override;

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    return absl::FailedPreconditionError("buffer lives in its tenant's arena; import the pool");
  }

 private:
  std::shared_ptr<HostBackend::Arena> arena_;
  std::shared_ptr<HostBackend::Accounting> accounting_;
  ImportInfo info_;
};

// A buffer with a memfd of its own (shared across tenants).
class IsolatedBuffer final : public BackendBuffer {
 public:
  IsolatedBuffer(UniqueFd fd, uint64_t size, std::shared_ptr<HostBackend::Accounting> accounting)
      : fd_(std::move(fd)), accounting_(std::move(accounting)) {
    info_.kind = ImportKind::kHostFd;
    info_.pool_id = 0;
    info_.offset = 0;
    info_.mapped_size = size;
    info_.device_uuid = "host";
  }
  ~IsolatedBuffer() override;

  int fd() const { return fd_.get(); }
  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    auto copy = DupFd(fd_.get());
    if (!copy.ok()) return copy.status();
    return FdGrant{std::move(*copy), FdKind::kHostBuffer, info_.mapped_size, "host"};
  }

 private:
  UniqueFd fd_;
  std::shared_ptr<HostBackend::Accounting> accounting_;
  ImportInfo info_;
};

}  // namespace

ArenaBuffer::~ArenaBuffer() {
  // Punch first: the range must be zero and unbacked before it can be handed out again.
  PunchHole(arena_->fd.get(), info_.offset, info_.mapped_size);
  {
    absl::MutexLock lock(&arena_->mu);
    arena_->ranges.Free(info_.offset, info_.mapped_size);
  }
  absl::MutexLock lock(&accounting_->mu);
  accounting_->used -= info_.mapped_size;
}

IsolatedBuffer::~IsolatedBuffer() {
  absl::MutexLock lock(&accounting_->mu);
  accounting_->used -= info_.mapped_size;
  accounting_->isolated_fds.erase(this);
}

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
      accounting_(std::make_shared<Accounting>(capacity)) {
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
  if (auto it = arenas_by_tenant_.find(tenant); it != arenas_by_tenant_.end()) return it->second;
  // The arena spans the whole capacity; memfds are sparse, so only pages in
  // use cost memory.
  auto fd = CreateSealedMemfd(StrCat("gpubroker:", tenant), capacity_);
  if (!fd.ok()) return fd.status();
  auto arena = std::make_shared<Arena>(next_pool_id_++, tenant, std::move(*fd), capacity_);
  arenas_by_tenant_[tenant] = arena;
  arenas_by_id_[arena->id] = arena;
  spdlog::info("host backend: arena {} for tenant '{}' ({} of address space)", arena->id, tenant,
               FormatBytes(capacity_));
  return arena;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::Allocate(const AllocationRequest& req) {
  const uint64_t rounded = RoundedSize(req.device, req.size, req.isolated);
  {
    absl::MutexLock lock(&accounting_->mu);
    if (accounting_->used + rounded > capacity_) {
      return OutOfMemoryRefusal(StrCat("host pool full: requested ", rounded, " bytes, ",
                                       accounting_->used, " of ", capacity_, " in use, ",
                                       capacity_ - accounting_->used, " free"));
    }
    accounting_->used += rounded;
  }
  auto give_back = [&] {
    absl::MutexLock lock(&accounting_->mu);
    accounting_->used -= rounded;
  };
  if (req.isolated) {
    auto buffer = AllocateIsolated(rounded);
    if (!buffer.ok()) give_back();
    return buffer;
  }
  std::shared_ptr<Arena> arena;
  {
    absl::MutexLock lock(&mu_);
    auto a = ArenaFor(req.tenant);
    if (!a.ok()) {
      give_back();
      return a.status();
    }
    arena = std::move(*a);
  }
  std::optional<uint64_t> offset;
  uint64_t largest = 0;
  {
    absl::MutexLock lock(&arena->mu);
    offset = arena->ranges.Allocate(rounded);
    if (!offset) largest = arena->ranges.largest_free_range();
  }
  if (!offset) {
    give_back();
    return OutOfMemoryRefusal(StrCat("host pool of tenant '", req.tenant,
                                     "' fragmented: requested ", rounded,
                                     " bytes, largest free range ", largest));
  }
  return std::make_unique<ArenaBuffer>(arena, accounting_, *offset, rounded);
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> HostBackend::AllocateIsolated(uint64_t rounded) {
  auto fd = CreateSealedMemfd("gpubroker:shared", rounded);
  if (!fd.ok()) return fd.status();
  const int raw = fd->get();
  auto buffer = std::make_unique<IsolatedBuffer>(std::move(*fd), rounded, accounting_);
  absl::MutexLock lock(&accounting_->mu);
  accounting_->isolated_fds[buffer.get()] = raw;
  return buffer;
}

absl::StatusOr<FdGrant> HostBackend::ExportPool(PoolId pool, std::string_view tenant) {
  std::shared_ptr<Arena> arena;
  {
    absl::MutexLock lock(&mu_);
    auto it = arenas_by_id_.find(pool);
    if (it != arenas_by_id_.end() && it->second->tenant == tenant) arena = it->second;
  }
  if (!arena) return absl::NotFoundError(StrCat("no pool ", pool, " for this tenant"));
  auto copy = DupFd(arena->fd.get());
  if (!copy.ok()) return copy.status();
  return FdGrant{std::move(*copy), FdKind::kHostArena, arena->size, "host"};
}

DeviceUsage HostBackend::Usage(int /*device*/) const {
  DeviceUsage u;
  u.capacity_bytes = capacity_;
  std::vector<int> fds;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, arena] : arenas_by_id_) fds.push_back(arena->fd.get());
  }
  {
    absl::MutexLock lock(&accounting_->mu);
    u.used_bytes = accounting_->used;
    for (const auto& [buffer, fd] : accounting_->isolated_fds)
      u.reserved_bytes += AllocatedBytes(fd);
  }
  for (int fd : fds) u.reserved_bytes += AllocatedBytes(fd);
  u.free_bytes = MemAvailable();
  return u;
}

}  // namespace gpubroker
