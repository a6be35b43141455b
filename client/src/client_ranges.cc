// Client-made buffers (docs/fast-path.md): ranges of the tenant's memory that
// this client leases and maps once, a sub-allocator over them, publication of
// a block in one frame, and the blocks that come back once nobody else holds
// them.
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "client/src/client_impl.h"
#include "client/src/device_arena.h"
#include "common/names.h"
#include "common/strings.h"
#include "common/tensor_check.h"
#include "common/units.h"
#include "common/wire/tensor.h"
#include "gpubroker/error.hpp"

namespace gpubroker::detail {

DeviceArena::DeviceArena(ClientImpl& impl, std::string device, uint64_t retain_bytes)
    : impl_(impl),
      device_(std::move(device)),
      allocator_(
          Options(retain_bytes),
          [this](uint64_t want, uint64_t need, bool) { return Lease(want, need); },
          [this](uint64_t range) { Return(range); }) {}

DeviceArena::~DeviceArena() {
  // The session's end gives the ranges back; only our mappings are ours to undo.
  for (const auto& [id, r] : ranges_) {
    if (r.host_mapped) ::munmap(reinterpret_cast<void*>(r.base), r.length);
  }
}

SubAllocator::Range DeviceArena::Lease(uint64_t want, uint64_t need) {
  v1::Call call;
  auto* req = call.mutable_lease_range();
  req->set_device(device_);
  req->set_min_bytes(need);
  req->set_want_bytes(want);
  v1::Reply reply;
  impl_.Call(std::move(call), &reply);  // throws the daemon's refusal
  const v1::LeaseRangeResponse& lease = reply.lease_range();
  RangeView view;
  view.length = lease.length();
  try {
    view.base = impl_.MapRange(lease, &view.host_mapped);
  } catch (const Error&) {
    Return(lease.range_id());
    throw;
  }
  {
    std::lock_guard lock(mu_);
    ranges_[lease.range_id()] = view;
    device_uuid_ = lease.import().device_uuid();
  }
  if (ClientImpl::DebugOn())
    ClientImpl::Debug(StrCat("leased range ", lease.range_id(), " of ", FormatBytes(view.length),
                             " on ", lease.import().device_uuid()));
  return {lease.range_id(), lease.length()};
}

void DeviceArena::Return(uint64_t range) {
  RangeView view;
  {
    std::lock_guard lock(mu_);
    auto it = ranges_.find(range);
    if (it != ranges_.end()) {
      view = it->second;
      ranges_.erase(it);
    }
  }
  if (view.host_mapped) ::munmap(reinterpret_cast<void*>(view.base), view.length);
  v1::Call call;
  call.mutable_return_range()->set_range_id(range);
  v1::Reply reply;
  try {
    impl_.Call(std::move(call), &reply);
    ClientImpl::Debug(StrCat("returned range ", range));
  } catch (const Error& e) {
    // Nothing to undo: a daemon that is gone, or a session that ended, has
    // taken the range back with the session.
    ClientImpl::Debug(StrCat("range ", range, " not returned: ", e.what()));
  }
}

namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// A value no stale fence word is likely to hold, never 0.
uint64_t FenceValue() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() | 1;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A client-made buffer on the host: a pointer into its mapped range.
class HostBlock final : public Mapping {
 public:
  HostBlock(LocalBlock block, void* data) : block_(block), data_(data) {}
  void* data() const override { return data_; }
  const LocalBlock* local_block() const override { return &block_; }

 private:
  LocalBlock block_;
  void* data_;
};

}  // namespace

bool ClientImpl::DebugOn() {
  static const bool on = [] {
    const char* v = std::getenv("GPUBROKER_LOG");
    return v != nullptr && std::strcmp(v, "debug") == 0;
  }();
  return on;
}

std::string ClientImpl::CallTiming() {
  const SessionChannel::Timing& t = SessionChannel::LastTiming();
  return StrCat("; the call: frame written in ", FormatMicros(t.send_us), ", answered ",
                FormatMicros(t.answer_us), " later, ", t.how);
}

void ClientImpl::Debug(const std::string& line) {
  if (DebugOn()) std::fprintf(stderr, "gpubroker: %s\n", line.c_str());
}

void ClientImpl::Warn(const std::string& line) {
  std::fprintf(stderr, "gpubroker: warning: %s\n", line.c_str());
}

uint64_t ClientImpl::PostCall(v1::Call call) {
  CheckProcess();
  AttachCounters(call);
  return session_channel_->Post(std::move(call));
}

uint64_t ClientImpl::PostCall(FlatCallFacts call) {
  CheckProcess();
  AttachCounters(call);
  return session_channel_->Post(call);
}

v1::Reply ClientImpl::CollectCall(uint64_t id) {
  v1::Reply reply = session_channel_->Collect(id, options_.call_timeout);
  DrainReturned();
  ServeUnmapRequests();
  return reply;
}

void ClientImpl::CollectCall(uint64_t id, Grant* grant) {
  session_channel_->Collect(id, options_.call_timeout, grant);
  DrainReturned();
  ServeUnmapRequests();
}

bool ClientImpl::CountersToSend(CounterValues* now, bool always) {
  *now = Counters();
  std::lock_guard lock(counters_mu_);
  if (!always && *now == sent_counters_) return false;  // cheaper than the daemon's books
  sent_counters_ = *now;
  return true;
}

void ClientImpl::AttachCounters(FlatCallFacts& call) {
  CounterValues now;
  if (call.has_counters || !CountersToSend(&now, false)) return;
  call.has_counters = true;
  call.counters = now;
}

void ClientImpl::AttachCounters(v1::Call& call, bool always) {
  CounterValues now;
  if (call.has_counters() || !CountersToSend(&now, always)) return;
  CountersToProto(now, call.mutable_counters());
}

void ClientImpl::Count(Path path) { paths_[static_cast<int>(path)]++; }

template <typename CallT, typename Out>
bool ClientImpl::CallOn(CallT call, Out* out, std::chrono::milliseconds extra,
                        std::chrono::microseconds awake) {
  CheckProcess();
  AttachCounters(call);
  const bool sent =
      session_channel_->Call(std::move(call), out, options_.call_timeout + extra, awake);
  DrainReturned();
  ServeUnmapRequests();
  return sent;
}

bool ClientImpl::Call(v1::Call call, v1::Reply* reply, std::chrono::milliseconds extra,
                      std::chrono::microseconds awake) {
  return CallOn(std::move(call), reply, extra, awake);
}

bool ClientImpl::Call(v1::Call call, Grant* grant, std::chrono::milliseconds extra,
                      std::chrono::microseconds awake) {
  return CallOn(std::move(call), grant, extra, awake);
}

bool ClientImpl::Call(FlatCallFacts call, v1::Reply* reply, std::chrono::milliseconds extra,
                      std::chrono::microseconds awake) {
  return CallOn(call, reply, extra, awake);
}

bool ClientImpl::Call(FlatCallFacts call, Grant* grant, std::chrono::milliseconds extra,
                      std::chrono::microseconds awake) {
  return CallOn(call, grant, extra, awake);
}

DeviceArena& ClientImpl::ArenaFor(const std::string& device) {
  std::lock_guard lock(arenas_mu_);
  auto& a = arenas_[device];
  if (!a) a = std::make_unique<DeviceArena>(*this, device, options_.retain_bytes);
  return *a;
}

uint64_t ClientImpl::MapRange(const v1::LeaseRangeResponse& range, bool* host_mapped) {
  const v1::ImportDescriptor& import = range.import();
  auto pool = Region(import.region_id(), import.device_uuid());
  if (import.offset() + range.length() > pool->size) {
    ThrowError(ErrorCode::kInternal, "range lies outside its pool");
  }
  if (import.kind() == v1::IMPORT_KIND_HOST_ARENA) {
    void* p = ::mmap(nullptr, range.length(), PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd.get(),
                     static_cast<off_t>(import.offset()));
    if (p == MAP_FAILED) {
      ThrowError(ErrorCode::kInternal,
                 StrCat("mmap of a range of ", range.length(), " bytes: ", std::strerror(errno)));
    }
    *host_mapped = true;
    return reinterpret_cast<uint64_t>(p);
  }
  if (import.kind() == v1::IMPORT_KIND_CUDA_ARENA && pool->cuda_mapped != 0) {
    *host_mapped = false;
    return pool->cuda_mapped + import.offset();
  }
  ThrowError(ErrorCode::kInternal, StrCat("a range of import kind ",
                                          static_cast<int>(import.kind()), " cannot be mapped"));
}

std::unique_ptr<Mapping> ClientImpl::AllocateLocal(uint64_t size, const AllocateOptions& options,
                                                   BufferInfo* info) {
  if (!suballocate_ || size == 0 || options.keep || options.ttl.count() != 0 ||
      !options.share_with.empty()) {
    return nullptr;
  }
  // A forked child's copy of the allocator is the parent's books: using it
  // would hand out blocks that the parent hands out too.
  CheckProcess();
  const bool cuda = session_.backend == "cuda";
  // On CUDA the ready fence is a word after the bytes, in the block.
  const uint64_t fence_offset = cuda ? RoundUp(size, 8) : 0;
  const uint64_t need = cuda ? fence_offset + 8 : size;
  const uint64_t quick = quick_allocation_limit();
  if (need > session_channel_->welcome().range_limit() || (quick != 0 && size >= quick)) {
    return nullptr;
  }
  // What the daemon would refuse at allocation is refused here too.
  if (!options.name.empty()) {
    if (auto s = ValidateName(options.name); !s.ok()) ThrowStatus(s);
  }
  if (options.tensor) {
    const TensorDesc& t = *options.tensor;
    if (auto s = CheckTensor(static_cast<int>(t.dtype), DTypeSize(t.dtype), t.shape, t.strides,
                             t.byte_offset, size);
        !s.ok()) {
      ThrowStatus(s);
    }
  }
  DeviceArena& arena = ArenaFor(options.device);
  LocalBlock lb;
  lb.arena = &arena;
  try {
    try {
      lb.block = arena.allocator().Allocate(need);
    } catch (const Error&) {
      // Blocks released here that wait for a device synchronize may be
      // what the allocation lacks.
      if (unsynced_releases() == 0) throw;
      FlushUnsynced();
      lb.block = arena.allocator().Allocate(need);
    }
  } catch (const Error& e) {
    // A range the daemon would have to wait for (memory that clients are
    // unmapping): the daemon makes this buffer instead, through gRPC, which waits.
    if (e.code() != ErrorCode::kAborted) throw;
    if (DebugOn()) Debug(StrCat("allocate ", FormatBytes(size), ": no range now: ", e.what()));
    return nullptr;
  }
  lb.size = size;
  if (cuda) {
    lb.fence_offset = fence_offset;
    lb.fence_value = FenceValue();
  }
  {
    std::lock_guard lock(arenas_mu_);
    range_arena_[lb.block.range_id] = &arena;
  }
  const uint64_t address = arena.AddressOf(lb.block);
  const std::string uuid = arena.device_uuid();
  std::unique_ptr<Mapping> mapping;
  try {
#ifdef GPUBROKER_HAVE_CUDA
    if (cuda) mapping = MapCudaLocalBlock(lb, address, uuid);
#endif
    if (!mapping) mapping = std::make_unique<HostBlock>(lb, reinterpret_cast<void*>(address));
  } catch (...) {
    arena.allocator().Free(lb.block);
    throw;
  }
  info->id = 0;  // until published
  info->name = options.name;
  info->size = size;
  info->reserved_size = lb.block.size;
  info->device_uuid = uuid;
  info->tenant = session_.tenant;
  info->state = BufferState::kAllocated;
  info->tensor = options.tensor;
  info->leases = 1;
  info->owner_session = session_.id;
  info->created_unix_ms = NowUnixMs();
  info->backing = cuda ? "cuda-arena" : "host-arena";
  info->client_made = true;
  Count(Path::kClientMade);
  if (DebugOn()) {
    Debug(StrCat("allocate ", FormatBytes(size), ": client-made (range ", lb.block.range_id,
                 " offset ", lb.block.offset, ")"));
  }
  return mapping;
}

uint64_t ClientImpl::PostPublish(const LocalBlock& lb, const BufferInfo& info) {
  const uint64_t id = PostCall(PublishCall(lb, info, true));
  if (id == 0) return 0;  // not sent: the caller publishes as Publish does
  publishes_++;
  if (DebugOn()) {
    Debug(StrCat("publish+seal ", FormatBytes(lb.size), ": posted (its answer is read later)"));
  }
  return id;
}

BufferInfo ClientImpl::Publish(const LocalBlock& lb, const BufferInfo& info, bool seal) {
  // The answer read in place where it comes flat (Hello.flat_publish_answers):
  // a confirmed seal waits for it.
  Grant published;
  Call(PublishCall(lb, info, seal), &published);  // always fits in a frame
  publishes_++;
  BufferInfo out = std::move(published.info);
  if (DebugOn())
    Debug(StrCat("publish", seal ? "+seal" : "", " ", FormatBytes(lb.size), ": buffer ", out.id,
                 CallTiming()));
  return out;
}

FlatCallFacts ClientImpl::PublishCall(const LocalBlock& lb, const BufferInfo& info, bool seal) {
  FlatCallFacts call;
  call.kind = FlatCallFacts::Kind::kPublish;
  call.range_id = lb.block.range_id;
  call.offset = lb.block.offset;
  call.reserved = lb.block.size;
  call.size = lb.size;
  call.name = info.name;
  TensorToFacts(info.tensor, &call);
  call.seal = seal;
  call.fence_offset = lb.fence_offset;
  call.fence_value = lb.fence_value;
  return call;
}

void ClientImpl::FreeLocal(const LocalBlock& lb, bool published) {
  if (published) {
    // Another process may hold it: reusable once the daemon returns it.
    lb.arena->Quarantine(lb.block);
  } else {
    lb.arena->allocator().Free(lb.block);
  }
}

void ClientImpl::OnBlocksReturned(const v1::BlocksReturned& returned) {
  std::lock_guard lock(returned_mu_);
  for (const auto& b : returned.blocks()) returned_.push_back(b);
}

void ClientImpl::DrainReturned() {
  std::vector<v1::BlocksReturned::Block> blocks;
  {
    std::lock_guard lock(returned_mu_);
    if (returned_.empty()) return;
    blocks.swap(returned_);
  }
  for (const auto& b : blocks) {
    DeviceArena* arena = nullptr;
    {
      std::lock_guard lock(arenas_mu_);
      auto it = range_arena_.find(b.range_id());
      if (it != range_arena_.end()) arena = it->second;
    }
    if (arena == nullptr) continue;
    const SubAllocator::Block block = arena->Release(b.range_id(), b.offset());
    if (block) arena->allocator().Free(block);
  }
}

void ClientImpl::Report() {
  v1::Call call;  // no request: the counters alone, and the blocks that came back
  AttachCounters(call, true);
  v1::Reply reply;
  Call(std::move(call), &reply);
}

void ClientImpl::Trim() {
  FinishReleases(true);  // what waits for its stream's work is given back too
  std::vector<DeviceArena*> arenas;
  bool quarantined = false;
  {
    std::lock_guard lock(arenas_mu_);
    for (auto& [device, a] : arenas_) {
      arenas.push_back(a.get());
      quarantined = quarantined || a->quarantined_bytes() > 0;
    }
  }
  // Published blocks that others have let go may be waiting to be told.
  if (quarantined) Report();
  for (DeviceArena* a : arenas) a->allocator().Trim();
}

ClientStats ClientImpl::Stats() const {
  ClientStats s;
  s.client_made = paths_[static_cast<int>(Path::kClientMade)];
  s.daemon_session = paths_[static_cast<int>(Path::kDaemonSession)];
  s.daemon_grpc = paths_[static_cast<int>(Path::kDaemonGrpc)];
  s.maps_mapped = paths_[static_cast<int>(Path::kMapped)];
  s.maps_imported = paths_[static_cast<int>(Path::kImported)];
  s.opens_grpc = paths_[static_cast<int>(Path::kOpenGrpc)];
  s.maps_cached = paths_[static_cast<int>(Path::kCached)];
  s.seal_wakes = session_channel_->seal_wakes();
  s.publishes = publishes_;
  s.pending_releases = pending_releases();
  s.unsynced_releases = unsynced_releases();
  const MappingCache::Stats cache = cache_.stats();
  s.mapping_cache_hits = cache.hits;
  s.mapping_cache_misses = cache.misses;
  s.mapping_cache_evictions = cache.evictions;
  s.mapping_cache_entries = cache.entries;
  s.mapping_cache_bytes = cache.mapped_bytes;
  std::lock_guard lock(arenas_mu_);
  for (const auto& [device, a] : arenas_) {
    const SubAllocator::Stats b = a->allocator().stats();
    s.cache_hits += b.cache_hits;
    s.ranges += b.ranges;
    s.range_bytes += b.range_bytes;
    s.in_use_blocks += b.in_use_blocks;
    s.in_use_bytes += b.in_use_bytes;
    s.cached_bytes += b.cached_bytes;
    s.free_bytes += b.free_bytes;
    s.quarantined_bytes += a->quarantined_bytes();
  }
  return s;
}

ClientImpl::CounterValues ClientImpl::Counters() const {
  const ClientStats s = Stats();
  CounterValues v;
  v.allocations = s.client_made;
  v.in_use_blocks = s.in_use_blocks;
  v.in_use_bytes = s.in_use_bytes;
  v.range_bytes = s.range_bytes;
  v.cache_hits = s.cache_hits;
  v.daemon_allocations = s.daemon_session;
  v.grpc_allocations = s.daemon_grpc;
  v.opens_arena = s.maps_mapped;
  v.opens_import = s.maps_imported;
  v.opens_grpc = s.opens_grpc;
  v.opens_cached = s.maps_cached;
  v.mapping_cache_misses = s.mapping_cache_misses;
  v.mapping_cache_evictions = s.mapping_cache_evictions;
  v.mapping_cache_bytes = s.mapping_cache_bytes;
  return v;
}

}  // namespace gpubroker::detail
