// The registry's books of range leases and client-made buffers
// (docs/fast-path.md): a range is charged to its tenant as a whole when
// leased; a block published from it is a buffer of the books whose bytes
// stay the range's while the range lives, and are charged by themselves
// once it has gone.
#include <algorithm>

#include "common/names.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/trace.h"
#include "daemon/core/registry.h"
#include "daemon/core/registry_internal.h"
#include "daemon/core/tensor.h"

namespace gpubroker {

using registry_internal::BackingName;
using registry_internal::SessionEnded;

namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
uint64_t RoundDown(uint64_t n, uint64_t to) { return n / to * to; }

}  // namespace

absl::StatusOr<RangeGrant> Registry::LeaseRange(SessionId session_id, const RangeParams& p) {
  GPUBROKER_ASSIGN_OR_RETURN(const int device, ResolveDevice(p.device));
  const uint64_t limit = backend_.RangeLimit(device);
  if (limit == 0) return absl::FailedPreconditionError("this daemon leases no ranges");
  const uint64_t granularity = backend_.RangeGranularity(device);
  const uint64_t least = RoundUp(p.min_bytes, granularity);
  if (p.min_bytes == 0 || least > limit) {
    return absl::InvalidArgumentError(StrCat(
        "a range of ", p.min_bytes, " bytes cannot be leased (ranges: 1 to ", limit, " bytes)"));
  }
  const uint64_t want = std::min(RoundUp(p.want_bytes, granularity), RoundDown(limit, granularity));

  std::string tenant;
  uint64_t length = 0;
  {
    absl::MutexLock lock(&mu_);
    GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
    tenant = s->view.tenant;
    // Booked before the backend call, which runs unlocked.
    GPUBROKER_ASSIGN_OR_RETURN(length, books_.ReserveRange(tenant, least, want, granularity));
  }

  RangeRequest req;
  req.device = device;
  req.tenant = tenant;
  req.length = length;
  auto memory = backend_.LeaseRange(req);

  Graveyard dead;
  absl::MutexLock lock(&mu_);
  if (!memory.ok()) {
    books_.UnreserveRange(tenant, length);
    return memory.status();  // a refusal for want of memory carries its reason from the backend
  }
  auto live = LiveSession(session_id);
  if (!live.ok()) {
    books_.UnreserveRange(tenant, length);
    dead.ranges.push_back(std::move(*memory));
    return live.status();
  }
  const RangeId id = next_range_++;
  Range& r = ranges_[id];
  r.session = session_id;
  r.tenant = tenant;
  r.device = device;
  r.length = length;
  r.memory = std::move(*memory);
  (*live)->ranges.insert(id);
  books_.RangeLeased(tenant, length);
  return RangeGrant{id, length, r.memory->import_info()};
}

uint64_t Registry::EndRange(RangeId id, Graveyard& dead) {
  auto it = ranges_.find(id);
  if (it == ranges_.end()) return 0;
  Range& r = it->second;
  // Published blocks that live on keep their own bytes, charged by themselves.
  uint64_t kept = 0;
  for (BufferId b : r.published) {
    auto found = buffers_.find(b);
    if (found == buffers_.end()) continue;
    Buffer& buffer = found->second;
    buffer.range = 0;
    buffer.charged = true;
    kept += buffer.view.reserved_size;
  }
  books_.ReleaseRange(r.tenant, r.length, kept);
  if (Session* s = FindSession(r.session)) {
    s->ranges.erase(id);
    std::erase_if(s->returned, [id](const ReturnedBlock& b) { return b.range == id; });
  }
  const uint64_t back = r.length - kept;
  dead.ranges.push_back(std::move(r.memory));
  ranges_.erase(it);
  return back;
}

absl::Status Registry::ReturnRange(SessionId session_id, RangeId id) {
  Graveyard dead;
  absl::MutexLock lock(&mu_);
  Session* s = FindSession(session_id);  // also during shutdown: a return only gives back
  if (s == nullptr) return SessionEnded();
  if (!s->ranges.contains(id)) {
    return absl::NotFoundError(StrCat("this session holds no range ", id));
  }
  EndRange(id, dead);
  return absl::OkStatus();
}

absl::StatusOr<BufferGrant> Registry::Publish(SessionId session_id, const PublishParams& p) {
  if (p.size == 0 || p.size > p.reserved) {
    return absl::InvalidArgumentError(
        StrCat("a published buffer of ", p.size, " bytes in a block of ", p.reserved));
  }
  if (!p.name.empty()) GPUBROKER_RETURN_IF_ERROR(ValidateName(p.name));
  if (p.tensor) GPUBROKER_RETURN_IF_ERROR(ValidateTensor(*p.tensor, p.size));
  Answers answers;  // the Opens parked on its name: delivered after the unlock
  Trace(TraceMark::kDaemonPublishBegun);
  absl::MutexLock lock(&mu_);
  GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
  auto r = ranges_.find(p.range);
  if (r == ranges_.end() || r->second.session != session_id) {
    return absl::NotFoundError(StrCat("this session holds no range ", p.range));
  }
  Range& range = r->second;
  Trace(TraceMark::kDaemonPublishLocked);
  if (!p.name.empty()) GPUBROKER_RETURN_IF_ERROR(names_.Hold(range.tenant, p.name));
  if (absl::Status counted = books_.BufferPublished(range.tenant); !counted.ok()) {
    if (!p.name.empty()) names_.Drop(range.tenant, p.name);
    return counted;
  }
  auto memory = range.memory->Carve(p.offset, p.reserved, p.fence_offset, p.fence_value);
  if (!memory.ok()) {
    if (!p.name.empty()) names_.Drop(range.tenant, p.name);
    books_.ReleaseBuffer(range.tenant, 0, false);
    return memory.status();
  }

  const DeviceInfo& dev = backend_.devices()[range.device];
  Buffer b;
  b.view.id = next_buffer_++;
  b.view.name = p.name;
  b.view.size = p.size;
  b.view.reserved_size = p.reserved;
  b.view.device = range.device;
  b.view.device_uuid = dev.uuid;
  b.view.tenant = range.tenant;
  b.view.state = p.seal ? BufferState::kSealed : BufferState::kAllocated;
  b.view.tensor = p.tensor;
  b.view.owner_session = session_id;
  b.view.created_unix_ms = Now();
  b.view.client_made = true;
  b.memory = std::move(*memory);
  b.view.backing = BackingName(b.memory->import_info().kind);
  b.range = p.range;
  b.range_offset = p.offset;
  b.charged = false;  // its bytes are the range's
  const BufferId id = b.view.id;
  if (!p.name.empty()) names_.Bind(range.tenant, p.name, id);
  Buffer& stored = buffers_[id] = std::move(b);
  range.published.insert(id);
  s->owned.insert(id);
  GrantLease(*s, stored);
  BufferGrant grant{stored.view, stored.memory->import_info()};
  Trace(TraceMark::kDaemonPublishStored);
  // Publish and seal in one frame: the Opens waiting for this name are
  // answered by this same thread (the session socket's, for a Publish there).
  Wake(id, answers);
  return grant;
}

std::vector<ReturnedBlock> Registry::TakeReturnedBlocks(SessionId session_id) {
  std::vector<ReturnedBlock> out;
  absl::MutexLock lock(&mu_);
  if (Session* s = FindSession(session_id)) out.swap(s->returned);
  return out;
}

ClientCounters Registry::RecordCounters(SessionId session_id, const ClientCounters& c) {
  ClientCounters delta;
  absl::MutexLock lock(&mu_);
  Session* s = FindSession(session_id);
  if (s == nullptr) return delta;
  ClientCounters& seen = s->counters;
  // Totals only grow: a report lower than the last (a bug, or a lie) adds
  // nothing, and the highest seen stays the mark.
  auto grow = [](uint64_t now, uint64_t& mark, uint64_t& inc) {
    if (now > mark) {
      inc = now - mark;
      mark = now;
    }
  };
  grow(c.allocations, seen.allocations, delta.allocations);
  grow(c.cache_hits, seen.cache_hits, delta.cache_hits);
  grow(c.daemon_allocations, seen.daemon_allocations, delta.daemon_allocations);
  grow(c.grpc_allocations, seen.grpc_allocations, delta.grpc_allocations);
  grow(c.opens_arena, seen.opens_arena, delta.opens_arena);
  grow(c.opens_cached, seen.opens_cached, delta.opens_cached);
  grow(c.opens_import, seen.opens_import, delta.opens_import);
  grow(c.opens_grpc, seen.opens_grpc, delta.opens_grpc);
  grow(c.mapping_cache_misses, seen.mapping_cache_misses, delta.mapping_cache_misses);
  grow(c.mapping_cache_evictions, seen.mapping_cache_evictions, delta.mapping_cache_evictions);
  books_.AddClientTotals(s->view.tenant, delta);
  // Gauges: as reported.
  seen.in_use_blocks = c.in_use_blocks;
  seen.in_use_bytes = c.in_use_bytes;
  seen.range_bytes = c.range_bytes;
  seen.mapping_cache_bytes = c.mapping_cache_bytes;
  return delta;
}

}  // namespace gpubroker
