// The registry's books of range leases and client-made buffers
// (docs/fast-path.md): a range is charged to its tenant as a whole when
// leased; a block published from it is a buffer of the books whose bytes
// stay the range's while the range lives, and are charged by themselves
// once it has gone.
#include <algorithm>

#include "common/names.h"
#include "common/strings.h"
#include "daemon/core/registry.h"
#include "daemon/core/tensor.h"

namespace gpubroker {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
uint64_t RoundDown(uint64_t n, uint64_t to) { return n / to * to; }

}  // namespace

absl::StatusOr<RangeGrant> Registry::LeaseRange(SessionId session_id, const RangeParams& p) {
  auto device = ResolveDevice(p.device);
  if (!device.ok()) return device.status();
  const uint64_t limit = backend_.RangeLimit(*device);
  if (limit == 0) return absl::FailedPreconditionError("this daemon leases no ranges");
  const uint64_t granularity = backend_.RangeGranularity(*device);
  const uint64_t least = RoundUp(p.min_bytes, granularity);
  if (p.min_bytes == 0 || least > limit) {
    return absl::InvalidArgumentError(StrCat(
        "a range of ", p.min_bytes, " bytes cannot be leased (ranges: 1 to ", limit, " bytes)"));
  }
  uint64_t length =
      std::clamp(RoundUp(p.want_bytes, granularity), least, RoundDown(limit, granularity));

  std::string tenant;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("gpubrokerd is shutting down");
    Session* s = FindSession(session_id);
    if (s == nullptr) return absl::UnauthenticatedError("session has ended");
    tenant = s->view.tenant;
    Tenant& usage = tenant_usage_[tenant];
    const uint64_t quota = tenants_.QuotaFor(tenant);
    if (quota != 0) {
      const uint64_t left = quota > usage.used_bytes ? quota - usage.used_bytes : 0;
      if (least > left) {
        return WithReason(absl::ResourceExhaustedError(StrCat(
                              "tenant '", tenant, "' over quota: a range of ", least, " bytes, ",
                              usage.used_bytes, " of ", quota, " in use, ", left, " left")),
                          "quota");
      }
      // Of what the quota leaves, a range takes at most half beyond what it
      // needs, so that one client's free space does not starve the next
      // request (or another client of the tenant).
      length = std::max(least, std::min(length, RoundDown(left / 2, granularity)));
    }
    usage.used_bytes += length;  // reserved before the backend call, which runs unlocked
  }

  RangeRequest req;
  req.device = *device;
  req.tenant = tenant;
  req.length = length;
  auto memory = backend_.LeaseRange(req);

  Graveyard dead;
  absl::MutexLock lock(&mu_);
  Tenant& usage = tenant_usage_[tenant];
  if (!memory.ok()) {
    usage.used_bytes -= length;
    if (memory.status().code() == absl::StatusCode::kResourceExhausted) {
      return WithReason(memory.status(), "out_of_memory");
    }
    return memory.status();
  }
  Session* s = FindSession(session_id);
  if (shutting_down_ || s == nullptr) {
    usage.used_bytes -= length;
    dead.ranges.push_back(std::move(*memory));
    return shutting_down_ ? absl::UnavailableError("gpubrokerd is shutting down")
                          : absl::UnauthenticatedError("session has ended");
  }
  const RangeId id = next_range_++;
  Range& r = ranges_[id];
  r.session = session_id;
  r.tenant = tenant;
  r.device = *device;
  r.length = length;
  r.memory = std::move(*memory);
  s->ranges.insert(id);
  usage.range_bytes += length;
  usage.ranges++;
  return RangeGrant{id, length, r.memory->import_info()};
}

uint64_t Registry::EndRange(RangeId id, Graveyard& dead) {
  auto it = ranges_.find(id);
  if (it == ranges_.end()) return 0;
  Range& r = it->second;
  Tenant& usage = tenant_usage_[r.tenant];
  usage.used_bytes -= r.length;
  usage.range_bytes -= r.length;
  usage.ranges--;
  // Published blocks that live on keep their own bytes, charged by themselves.
  uint64_t kept = 0;
  for (BufferId b : r.published) {
    auto found = buffers_.find(b);
    if (found == buffers_.end()) continue;
    Buffer& buffer = found->second;
    buffer.range = 0;
    buffer.charged = true;
    usage.used_bytes += buffer.view.reserved_size;
    kept += buffer.view.reserved_size;
  }
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
  Session* s = FindSession(session_id);
  if (s == nullptr) return absl::UnauthenticatedError("session has ended");
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
  if (!p.name.empty()) {
    if (auto st = ValidateName(p.name); !st.ok()) return st;
  }
  if (p.tensor) {
    if (auto st = ValidateTensor(*p.tensor, p.size); !st.ok()) return st;
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("gpubrokerd is shutting down");
  Session* s = FindSession(session_id);
  if (s == nullptr) return absl::UnauthenticatedError("session has ended");
  auto r = ranges_.find(p.range);
  if (r == ranges_.end() || r->second.session != session_id) {
    return absl::NotFoundError(StrCat("this session holds no range ", p.range));
  }
  if (!p.name.empty() && names_.contains(p.name)) {
    return absl::AlreadyExistsError(StrCat("buffer name '", p.name, "' is taken"));
  }
  Range& range = r->second;
  auto memory = range.memory->Carve(p.offset, p.reserved, p.fence_offset, p.fence_value);
  if (!memory.ok()) return memory.status();

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
  if (!p.name.empty()) names_[p.name] = id;
  Buffer& stored = buffers_[id] = std::move(b);
  range.published.insert(id);
  tenant_usage_[range.tenant].buffers++;
  s->owned.insert(id);
  GrantLease(*s, stored);
  changed_.SignalAll();
  return BufferGrant{stored.view, stored.memory->import_info()};
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
  ClientCounters& was = s->counters;
  ClientCounters& total = tenant_usage_[s->view.tenant].client_totals;
  // Totals only grow: a report lower than the last (a bug, or a lie) adds
  // nothing, and the highest seen stays the mark.
  auto grow = [](uint64_t now, uint64_t& seen, uint64_t& sum, uint64_t& inc) {
    if (now > seen) {
      inc = now - seen;
      sum += inc;
      seen = now;
    }
  };
  grow(c.allocations, was.allocations, total.allocations, delta.allocations);
  grow(c.cache_hits, was.cache_hits, total.cache_hits, delta.cache_hits);
  grow(c.daemon_allocations, was.daemon_allocations, total.daemon_allocations,
       delta.daemon_allocations);
  grow(c.grpc_allocations, was.grpc_allocations, total.grpc_allocations, delta.grpc_allocations);
  grow(c.opens_arena, was.opens_arena, total.opens_arena, delta.opens_arena);
  grow(c.opens_cached, was.opens_cached, total.opens_cached, delta.opens_cached);
  grow(c.opens_import, was.opens_import, total.opens_import, delta.opens_import);
  grow(c.opens_grpc, was.opens_grpc, total.opens_grpc, delta.opens_grpc);
  // Gauges: as reported.
  was.in_use_blocks = c.in_use_blocks;
  was.in_use_bytes = c.in_use_bytes;
  was.range_bytes = c.range_bytes;
  return delta;
}

}  // namespace gpubroker
