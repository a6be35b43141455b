#include "client/src/client_impl.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "client/src/device_arena.h"
#include "common/paths.h"
#include "common/refusal.h"
#include "common/spin.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/units.h"
#include "gpubroker/error.hpp"

namespace gpubroker::detail {
namespace {

constexpr auto kHelloTimeout = std::chrono::seconds(10);

class HostMapping final : public Mapping {
 public:
  HostMapping(void* base, size_t length, size_t skip)
      : base_(base), length_(length), data_(static_cast<char*>(base) + skip) {}
  ~HostMapping() override { ::munmap(base_, length_); }
  void* data() const override { return data_; }

 private:
  void* base_;
  size_t length_;
  void* data_;
};

// Maps the pages that hold [offset, offset + length): a client-made buffer
// starts anywhere in a page (its blocks are 512-byte aligned).
std::unique_ptr<Mapping> MapHost(int fd, uint64_t offset, uint64_t length) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const uint64_t skip = offset - start;
  void* p = ::mmap(nullptr, length + skip, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   static_cast<off_t>(start));
  if (p == MAP_FAILED) {
    ThrowError(ErrorCode::kInternal,
               StrCat("mmap of ", length, " bytes at offset ", offset, ": ", std::strerror(errno)));
  }
  return std::make_unique<HostMapping>(p, length + skip, skip);
}

// A host buffer's memfd of its own, mapped whole: it may outlive the buffer
// in the mapping cache.
class HostMemory final : public CachedMapping {
 public:
  HostMemory(void* base, size_t length) : base_(base), length_(length) {}
  ~HostMemory() override { ::munmap(base_, length_); }
  void* data() const override { return base_; }
  uint64_t size() const override { return length_; }

 private:
  void* base_;
  size_t length_;
};

// A buffer of memory of its own on the host: a view of its mapping.
class HostFdView final : public Mapping {
 public:
  HostFdView(std::unique_ptr<CachedMapping> memory, uint64_t allocation_id)
      : memory_(std::move(memory)), allocation_id_(allocation_id) {}
  void* data() const override { return memory_->data(); }
  uint64_t allocation_id() const override { return allocation_id_; }
  std::unique_ptr<CachedMapping> TakeMemory() override { return std::move(memory_); }

 private:
  std::unique_ptr<CachedMapping> memory_;  // unmaps, unless the cache took it
  const uint64_t allocation_id_;
};

std::unique_ptr<CachedMapping> MapHostMemory(int fd, uint64_t length) {
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ThrowError(ErrorCode::kInternal, StrCat("mmap of ", length, " bytes: ", std::strerror(errno)));
  }
  return std::make_unique<HostMemory>(p, length);
}

}  // namespace

void ThrowStatus(const absl::Status& status) {
  ThrowError(static_cast<ErrorCode>(status.code()), std::string(View(status.message())),
             static_cast<RefusalReason>(RefusalOf(status)));
}

void ThrowErrorFrame(const v1::ErrorFrame& error) {
  ThrowError(static_cast<ErrorCode>(error.code()), error.message(),
             static_cast<RefusalReason>(error.reason()));
}

RefusalReason ReasonOf(const grpc::Status& status) {
  if (status.error_details().empty()) return RefusalReason::kNone;
  v1::RpcStatus details;
  if (!details.ParseFromString(status.error_details())) return RefusalReason::kNone;
  for (const auto& any : details.details()) {
    v1::ErrorInfo info;
    if (any.Is<v1::ErrorInfo>() && any.UnpackTo(&info)) {
      return static_cast<RefusalReason>(info.reason());
    }
  }
  return RefusalReason::kNone;
}

ClientImpl::ClientImpl(std::string socket_dir, ConnectOptions options)
    : socket_dir_(std::move(socket_dir)),
      options_(std::move(options)),
      pid_(::getpid()),
      cache_(CacheOptions(options_)),
      reader_wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  // Against the directory this process is in now: a later chdir() does not
  // change which daemon this client reaches, nor what its tickets say.
  std::error_code cwd_unknown;
  const std::filesystem::path absolute = std::filesystem::absolute(socket_dir_, cwd_unknown);
  absolute_socket_dir_ = cwd_unknown ? socket_dir_ : absolute.lexically_normal().string();
  session_channel_ = std::make_unique<SessionChannel>(
      StrCat(socket_dir_, "/", kSessionSocketName), options_.client_name, kHelloTimeout,
      SpinFromEnv("GPUBROKER_SPIN_US", options_.spin));
  const v1::Welcome& w = session_channel_->welcome();
  Token token{};
  std::memcpy(token.data(), w.token().data(), token.size());
  token_hex_ = TokenToHex(token);
  session_.id = w.session_id();
  session_.tenant = w.tenant();
  session_.daemon_version = w.daemon_version();
  session_.backend = w.backend();
  grpc::ChannelArguments args;
  // Local socket: fail fast instead of retrying with backoff when the daemon is gone.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A connection of its own: a process made by fork() inherits the parent's
  // connections, and with gRPC's global pool a child's new client would send
  // on the parent's one and wreck its HTTP/2 state.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(StrCat("unix:", socket_dir_, "/", kGrpcSocketName),
                                       grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Broker::NewStub(channel_);
  const char* env = std::getenv("GPUBROKER_SUBALLOCATE");
  suballocate_ = options_.suballocate && w.range_limit() > 0 &&
                 !(env != nullptr && std::strcmp(env, "0") == 0);
  session_channel_->set_returned_handler(
      [this](const v1::BlocksReturned& returned) { OnBlocksReturned(returned); });
  session_channel_->set_unmap_handler(
      [this](const v1::UnmapRequest& request) { OnUnmapRequest(request); });
}

ClientImpl::~ClientImpl() {
  if (forked()) {
    // The channel's threads live in the parent only: tearing it down here
    // could hang. Closing our copy of the session socket leaves the
    // parent's session as it was; a Goodbye would end it.
    (void)stub_.release();
    new std::shared_ptr<grpc::Channel>(std::move(channel_));
    // So is the reader thread: its handle is the parent's (joining it here
    // would wait for nothing; destroying it joinable would abort). Nor are
    // the kept mappings this process's to undo.
    new std::thread(std::move(reader_));
    return;
  }
  // Releases still waiting for their streams' work go first, in order.
  FinishReleases(true);
  StopReader();
  session_channel_->SayGoodbye();
}

void ClientImpl::CheckProcess() const {
  if (forked()) {
    ThrowError(ErrorCode::kFailedPrecondition,
               StrCat("this client was connected by process ", pid_,
                      "; a process made by fork() cannot use it: connect anew in the child"));
  }
}

void ClientImpl::Prepare(grpc::ClientContext& ctx, std::chrono::milliseconds extra) const {
  CheckProcess();
  ctx.AddMetadata(kTokenMetadataKey, token_hex_);
  ctx.set_deadline(std::chrono::system_clock::now() + options_.call_timeout + extra);
}

void ClientImpl::Throw(const grpc::Status& status) const {
  const auto code = static_cast<ErrorCode>(status.error_code());
  if (code == ErrorCode::kUnavailable || code == ErrorCode::kDeadlineExceeded) {
    // Transport failures carry gRPC's words; say where we were calling too.
    if (status.error_message().find("gpubrokerd") == std::string::npos) {
      ThrowError(code, StrCat("gpubrokerd at ", socket_dir_, ": ", status.error_message()));
    }
  }
  ThrowError(code, status.error_message(), ReasonOf(status));
}

ImportedRegion::~ImportedRegion() {
#ifdef GPUBROKER_HAVE_CUDA
  if (cuda_mapped != 0 && !ForkedSince(fork_generation)) {
    UnmapCudaShared(cuda_mapped, size, device_uuid);
  }
#endif
}

std::shared_ptr<ImportedRegion> ClientImpl::Region(uint64_t region_id, std::string_view device_uuid,
                                                   bool* fetched) {
  std::lock_guard lock(regions_mu_);
  if (fetched != nullptr) *fetched = false;
  if (auto it = regions_.find(region_id); it != regions_.end()) return it->second;
  if (fetched != nullptr) *fetched = true;
  v1::FdRequest req;
  req.set_region_id(region_id);
  v1::FdGrant grant;
  auto region = std::make_shared<ImportedRegion>();
  UniqueFd fd = session_channel_->RequestFd(std::move(req), &grant);
  region->size = grant.size();
  region->device_uuid = device_uuid;
  switch (grant.kind()) {
#ifdef GPUBROKER_HAVE_CUDA
    case v1::FD_KIND_CUDA_POOL:
      region->cuda_pool = ImportCudaPool(std::move(fd), region->device_uuid);
      break;
    case v1::FD_KIND_CUDA_FENCES:
    case v1::FD_KIND_CUDA_SLAB:
      region->cuda_mapped = MapCudaShared(std::move(fd), region->device_uuid, grant.size());
      break;
#endif
    default:
      region->fd = std::move(fd);
  }
  regions_[region_id] = region;
  return region;
}

uint64_t ClientImpl::FencePage(const ImportFacts& import) {
  if (import.fence_region_id == 0) return 0;  // the word is inside the buffer
  return Region(import.fence_region_id, import.device_uuid)->cuda_mapped;
}

std::unique_ptr<Mapping> ClientImpl::Map(const ImportFacts& import, BufferId id) {
  // No slow path is silent: each map says whether the memory was mapped
  // here already (an arena, a slab: a pointer), was kept mapped from a
  // buffer before (the mapping cache), or had to be imported.
  Path path = Path::kImported;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Mapping> m = MapMemory(import, id, &path);
  Count(path);
  if (DebugOn()) {
    const char* how =
        path == Path::kMapped ? "mapped already"
        : path == Path::kCached
            ? "mapping-cache hit"
            : (import.allocation_id != 0 ? "imported (mapping-cache miss)" : "imported");
    Debug(StrCat("map buffer ", id, " (", FormatBytes(import.mapped_size), "): ", how, " in ",
                 FormatMicros(std::chrono::steady_clock::now() - start)));
  }
  return m;
}

std::unique_ptr<CachedMapping> ClientImpl::TakeCached(const ImportFacts& import) {
  if (import.allocation_id == 0 || !cache_.enabled()) return nullptr;
  std::unique_ptr<CachedMapping> m = cache_.Take(import.allocation_id);
  // One allocation has one size; anything else is not the memory we kept.
  if (m && m->size() != import.mapped_size) {
    m.reset();
    SendUnmapped({import.allocation_id});
  }
  return m;
}

std::unique_ptr<Mapping> ClientImpl::MapMemory(const ImportFacts& import, BufferId id, Path* path) {
  switch (import.kind) {
    case v1::IMPORT_KIND_HOST_ARENA: {
      bool fetched = false;
      auto pool = Region(import.region_id, import.device_uuid, &fetched);
      *path = fetched ? Path::kImported : Path::kMapped;
      if (import.offset + import.mapped_size > pool->size) {
        ThrowError(ErrorCode::kInternal, "buffer lies outside its arena");
      }
      return MapHost(pool->fd.get(), import.offset, import.mapped_size);
    }
    case v1::IMPORT_KIND_HOST_FD: {
      if (auto cached = TakeCached(import)) {
        *path = Path::kCached;
        return std::make_unique<HostFdView>(std::move(cached), import.allocation_id);
      }
      v1::FdRequest req;
      req.set_buffer_id(id);
      v1::FdGrant grant;
      UniqueFd fd = session_channel_->RequestFd(std::move(req), &grant);
      // The mapping outlives the fd.
      return std::make_unique<HostFdView>(MapHostMemory(fd.get(), import.mapped_size),
                                          import.allocation_id);
    }
#ifdef GPUBROKER_HAVE_CUDA
    case v1::IMPORT_KIND_CUDA_POOL:
      return MapCudaPoolBuffer(Region(import.region_id, import.device_uuid)->cuda_pool,
                               FencePage(import), import);
    case v1::IMPORT_KIND_CUDA_ARENA: {
      bool fetched = false;
      auto slab = Region(import.region_id, import.device_uuid, &fetched);
      *path = fetched ? Path::kImported : Path::kMapped;
      if (import.offset + import.mapped_size > slab->size) {
        ThrowError(ErrorCode::kInternal, "buffer lies outside its slab");
      }
      return MapCudaArenaBuffer(slab->cuda_mapped, FencePage(import), import);
    }
    case v1::IMPORT_KIND_CUDA_VMM: {
      const uint64_t fences = FencePage(import);
      if (auto cached = TakeCached(import)) {
        *path = Path::kCached;
        return MapCudaVmmBuffer(std::move(cached), fences, import);
      }
      v1::FdRequest req;
      req.set_buffer_id(id);
      v1::FdGrant grant;
      return MapCudaVmmBuffer(
          ImportCudaVmm(session_channel_->RequestFd(std::move(req), &grant), import), fences,
          import);
    }
#else
    case v1::IMPORT_KIND_CUDA_POOL:
    case v1::IMPORT_KIND_CUDA_VMM:
    case v1::IMPORT_KIND_CUDA_ARENA:
      ThrowError(ErrorCode::kUnimplemented,
                 "this client library was built without CUDA support; cannot map a CUDA buffer");
#endif
    default:
      ThrowError(ErrorCode::kInternal,
                 StrCat("unknown import kind ", static_cast<int>(import.kind)));
  }
}

}  // namespace gpubroker::detail
