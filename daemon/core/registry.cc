// Over 500 lines on purpose: a buffer's whole life under the registry's one
// lock (allocate, name, open, seal, lease, free, TTL, descriptors). Sessions,
// waits, ranges and tickets live in registry_sessions.cc, registry_waits.cc,
// registry_ranges.cc and registry_tickets.cc.
#include "daemon/core/registry.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/names.h"
#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "daemon/core/registry_internal.h"
#include "daemon/core/tensor.h"

namespace gpubroker {

using registry_internal::BackingName;
using registry_internal::SessionEnded;
using registry_internal::ShuttingDown;

namespace {

// Unix ms at which a TTL that starts at `now` passes, without signed overflow
// (ttl_ms is at most kMaxTtlMs, checked before this is called).
int64_t ExpiryTime(int64_t now, uint64_t ttl_ms) {
  const auto ttl = static_cast<int64_t>(std::min<uint64_t>(ttl_ms, kMaxTtlMs));
  if (now > std::numeric_limits<int64_t>::max() - ttl) return std::numeric_limits<int64_t>::max();
  return now + ttl;
}

}  // namespace

std::string BufferKey::ToString() const {
  return id != 0 ? StrCat("id ", id) : StrCat("'", name, "'");
}

// Buffers ------------------------------------------------------------------

BufferView Registry::ViewFor(const Buffer& b, const std::string& tenant) {
  if (b.view.tenant == tenant) return b.view;
  // Another tenant learns that the buffer is shared with it, not with whom
  // else, nor which of the owner's sessions holds it.
  BufferView view = b.view;
  view.shared_with = {tenant};
  view.owner_session = 0;
  return view;
}

bool Registry::Visible(const Buffer& b, const std::string& tenant) {
  if (b.view.tenant == tenant) return true;
  return std::find(b.view.shared_with.begin(), b.view.shared_with.end(), tenant) !=
         b.view.shared_with.end();
}

absl::StatusOr<Registry::Buffer*> Registry::FindVisible(const Session& s, const BufferKey& key) {
  if (key.id != 0) {
    auto it = buffers_.find(key.id);
    // Another tenant's buffer reads exactly like one that does not exist.
    if (it == buffers_.end() || it->second.freed || !Visible(it->second, s.view.tenant)) {
      return absl::NotFoundError(StrCat("no buffer with id ", key.id));
    }
    return &it->second;
  }
  // A bare name is the caller's tenant's; another tenant's share is named
  // "tenant/name". Either way a buffer the caller may not see reads as missing.
  auto ref = ParseNameRef(key.name);
  if (!ref.ok()) return ref.status();
  const std::string owner = ref->tenant.empty() ? s.view.tenant : std::string(ref->tenant);
  const std::optional<BufferId> id = names_.Find(owner, std::string(ref->name));
  if (!id) return absl::NotFoundError(StrCat("no buffer named '", key.name, "'"));
  Buffer& b = buffers_.at(*id);
  if (!Visible(b, s.view.tenant)) {
    return absl::NotFoundError(StrCat("no buffer named '", key.name, "'"));
  }
  return &b;
}

absl::StatusOr<int> Registry::ResolveDevice(const std::string& device) const {
  const auto& devices = backend_.devices();
  if (devices.empty()) return absl::FailedPreconditionError("the backend has no devices");
  if (device.empty()) return 0;
  int ordinal = -1;
  if (ParseInt(device, &ordinal)) {
    if (ordinal >= 0 && ordinal < static_cast<int>(devices.size())) return ordinal;
  } else {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].uuid == device) return static_cast<int>(i);
    }
  }
  std::vector<std::string> known;
  for (size_t i = 0; i < devices.size(); ++i) known.push_back(StrCat(i, "=", devices[i].uuid));
  return absl::InvalidArgumentError(
      StrCat("unknown device '", device, "' (devices: ", absl::StrJoin(known, ", "), ")"));
}

void Registry::GrantLease(Session& s, Buffer& b) {
  s.leases[b.view.id]++;
  b.view.leases++;
  HoldRegionsOf(s, b);
}

// A session holds a region of its tenant from the first buffer it is told of
// there, not only once it fetches the descriptor: a client fetches a fence
// page at its first seal or wait, and a region that no buffer uses goes once
// no session holds it, so a client that allocates and frees without sealing
// would otherwise have its fence page made and given back each time. The
// backend only counts here (RegionHeld never calls out), so this runs under
// the lock, together with the grant that EndSession undoes.
void Registry::HoldRegionsOf(Session& s, const Buffer& b) {
  if (b.view.tenant != s.view.tenant) return;  // another tenant's: never fetched by it
  const ImportInfo& info = b.memory->import_info();
  for (const RegionId r : {info.region_id, info.fence_region_id}) {
    if (r != 0 && s.regions.insert(r).second) backend_.RegionHeld(r);
  }
}

void Registry::MarkFreed(Buffer& b, Answers& answers) {
  if (b.freed) return;
  b.freed = true;
  b.sealed_when_freed = b.view.state == BufferState::kSealed;
  b.view.state = BufferState::kFreed;
  if (!b.view.name.empty()) names_.Remove(b.view.tenant, b.view.name, b.view.id);
  if (!b.sealed_when_freed) {
    // Waiting by id for a seal that cannot come now (its producer freed it,
    // or died): told at once rather than at their deadline. Opens waiting
    // for its name keep waiting, for the next buffer of that name.
    for (WaitId w : waits_.Wakeable(b.view.id, {}, {})) {
      Answer(w,
             absl::NotFoundError(StrCat("buffer ", b.view.id, " was freed before it was sealed")),
             answers);
    }
  }
  if (b.in_expiries) {
    expiries_.erase({b.view.expires_unix_ms, b.view.id});
    b.in_expiries = false;
  }
}

uint64_t Registry::MaybeDestroy(BufferId id, Graveyard& dead) {
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return 0;
  Buffer& b = it->second;
  if (!b.freed || b.view.leases > 0) return 0;
  const uint64_t bytes = b.charged ? b.view.reserved_size : 0;
  books_.ReleaseBuffer(b.view.tenant, bytes, b.owns_descriptor);
  if (b.range != 0) {
    // A published block of a live range: its bytes are the range's again,
    // and the range's client may reuse them once it is told.
    if (auto r = ranges_.find(b.range); r != ranges_.end()) {
      r->second.published.erase(id);
      if (Session* owner = FindSession(r->second.session)) {
        owner->returned.push_back({b.range, b.range_offset, b.view.reserved_size});
      }
    }
  }
  dead.push_back(std::move(b.memory));
  buffers_.erase(it);
  return bytes;
}

// Checks that need no lock.
absl::Status Registry::ValidateAllocation(const AllocateParams& p) const {
  if (p.size == 0) return absl::InvalidArgumentError("size must be at least 1 byte");
  if (p.ttl_ms > kMaxTtlMs) {
    return absl::InvalidArgumentError(
        StrCat("ttl_ms ", p.ttl_ms, " exceeds the limit of ", kMaxTtlMs,
               " ms (10 years); a buffer meant to stay is allocated with keep and no TTL"));
  }
  if (!p.name.empty()) GPUBROKER_RETURN_IF_ERROR(ValidateName(p.name));
  if (p.tensor) GPUBROKER_RETURN_IF_ERROR(ValidateTensor(*p.tensor, p.size));
  if (p.share_with.size() > static_cast<size_t>(kMaxShareWith)) {
    return absl::InvalidArgumentError(StrCat("share_with names ", p.share_with.size(),
                                             " tenants; a buffer is shared with at most ",
                                             kMaxShareWith));
  }
  for (const auto& t : p.share_with) GPUBROKER_RETURN_IF_ERROR(ValidateTenantName(t));
  return absl::OkStatus();
}

absl::StatusOr<BufferGrant> Registry::Allocate(SessionId session_id, const AllocateParams& p) {
  GPUBROKER_RETURN_IF_ERROR(ValidateAllocation(p));
  GPUBROKER_ASSIGN_OR_RETURN(const int device, ResolveDevice(p.device));
  const DeviceInfo& dev = backend_.devices()[device];
  if (p.size > dev.capacity_bytes) {
    return absl::InvalidArgumentError(StrCat("size ", p.size,
                                             " bytes exceeds the capacity of device ", dev.uuid,
                                             " (", dev.capacity_bytes, " bytes)"));
  }

  std::string tenant;
  // Deduplicated before the lock; only the caller's own tenant is taken out under it.
  std::vector<std::string> share_with = p.share_with;
  std::sort(share_with.begin(), share_with.end());
  share_with.erase(std::unique(share_with.begin(), share_with.end()), share_with.end());
  const uint64_t rounded = backend_.RoundedSize(device, p.size, !p.share_with.empty());
  bool owns_descriptor = false;
  {
    absl::MutexLock lock(&mu_);
    GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
    tenant = s->view.tenant;
    std::erase(share_with, tenant);
    // Hold the name and book the bytes before the backend call, which runs unlocked.
    if (!p.name.empty()) GPUBROKER_RETURN_IF_ERROR(names_.Hold(tenant, p.name));
    owns_descriptor = backend_.OwnsDescriptor(device, p.size, !share_with.empty());
    if (absl::Status booked = books_.ReserveBuffer(tenant, rounded, owns_descriptor);
        !booked.ok()) {
      if (!p.name.empty()) names_.Drop(tenant, p.name);
      return booked;
    }
  }

  AllocationRequest req;
  req.device = device;
  req.tenant = tenant;
  req.size = p.size;
  req.isolated = !share_with.empty();
  req.may_wait = p.may_wait;
  req.kept_only = p.kept_only;
  auto memory = backend_.Allocate(req);

  Graveyard dead;
  Answers answers;  // delivered after the unlock
  absl::MutexLock lock(&mu_);
  auto roll_back = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    books_.ReleaseBuffer(tenant, rounded, owns_descriptor);
    if (!p.name.empty()) names_.Drop(tenant, p.name);
  };
  if (!memory.ok()) {
    roll_back();
    return memory.status();  // a refusal for want of memory carries its reason from the backend
  }
  auto live = LiveSession(session_id);
  if (!live.ok()) {
    roll_back();
    dead.push_back(std::move(*memory));
    return live.status();
  }
  Session& s = **live;
  const uint64_t reserved = (*memory)->reserved_size();
  books_.Settle(tenant, rounded, reserved);

  Buffer b;
  b.view.id = next_buffer_++;
  b.view.name = p.name;
  b.view.size = p.size;
  b.view.reserved_size = reserved;
  b.view.device = device;
  b.view.device_uuid = dev.uuid;
  b.view.tenant = tenant;
  b.view.state = BufferState::kAllocated;
  b.view.tensor = p.tensor;
  b.view.keep = p.keep;
  b.view.shared_with = std::move(share_with);
  b.view.owner_session = session_id;
  b.view.created_unix_ms = Now();
  b.owns_descriptor = owns_descriptor;
  if (p.ttl_ms != 0) {
    b.view.expires_unix_ms = ExpiryTime(b.view.created_unix_ms, p.ttl_ms);
    expiries_.emplace(b.view.expires_unix_ms, b.view.id);
    b.in_expiries = true;
    WakeTimersFor(b.view.expires_unix_ms);
  }
  b.memory = std::move(*memory);
  b.view.backing = BackingName(b.memory->import_info().kind);
  if (!p.name.empty()) names_.Bind(tenant, p.name, b.view.id);
  const BufferId id = b.view.id;
  Buffer& stored = buffers_[id] = std::move(b);
  s.owned.insert(id);
  GrantLease(s, stored);
  BufferGrant grant{stored.view, stored.memory->import_info()};
  Wake(id, answers);  // Opens that wait for this name, allow_unsealed ones get it now
  return grant;
}

Registry::OpenAttempt Registry::TryOpen(Session& s, const BufferKey& key, bool allow_unsealed) {
  auto found = FindVisible(s, key);
  if (!found.ok()) {
    // Only a name can come into existence later; an unknown id never will.
    return {found.status(), key.id == 0};
  }
  Buffer& b = **found;
  if (b.view.state == BufferState::kSealed || allow_unsealed) {
    GrantLease(s, b);
    return {BufferGrant{ViewFor(b, s.view.tenant), b.memory->import_info()}, false};
  }
  return {absl::FailedPreconditionError(StrCat(
              "buffer ", key.ToString(), " is not sealed yet (open with wait, or allow_unsealed)")),
          true};
}

bool Registry::CouldBecomeOpenable(SessionId session_id, const BufferKey& key,
                                   bool allow_unsealed) {
  absl::MutexLock lock(&mu_);
  const Session* s = FindSession(session_id);
  if (s == nullptr) return false;
  auto found = FindVisible(*s, key);
  if (!found.ok()) return key.id == 0;  // as in TryOpen: only a name can appear later
  return (*found)->view.state != BufferState::kSealed && !allow_unsealed;
}

absl::StatusOr<BufferView> Registry::Seal(SessionId session_id, BufferId id) {
  Answers answers;  // delivered after the unlock
  absl::MutexLock lock(&mu_);
  GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
  GPUBROKER_ASSIGN_OR_RETURN(Buffer * b, FindVisible(*s, BufferKey{id, {}}));
  if (!s->leases.contains(id)) {
    return absl::FailedPreconditionError(
        StrCat("seal needs a lease on buffer ", id, "; open it first"));
  }
  if (b->view.tenant != s->view.tenant) {
    return absl::PermissionDeniedError(StrCat("buffer ", id, " belongs to tenant '", b->view.tenant,
                                              "'; only its tenant may seal it"));
  }
  if (b->view.state != BufferState::kSealed) {
    b->view.state = BufferState::kSealed;
    BufferView sealed = b->view;
    Wake(id, answers);  // the Opens that wait for it are answered by this thread
    return sealed;
  }
  return b->view;
}

absl::Status Registry::Release(SessionId session_id, BufferId id, bool free, bool keep_mapping) {
  Answers answers;  // delivered after the unlock
  Graveyard dead;
  absl::MutexLock lock(&mu_);
  Session* s = FindSession(session_id);  // also during shutdown: a release only gives back
  if (s == nullptr) return SessionEnded();
  auto lease = s->leases.find(id);
  if (lease == s->leases.end()) {
    return absl::NotFoundError(StrCat("this session holds no lease on buffer ", id));
  }
  Buffer& b = buffers_.at(id);
  if (free && b.view.tenant != s->view.tenant) {
    return absl::PermissionDeniedError(StrCat("buffer ", id, " belongs to tenant '", b.view.tenant,
                                              "'; only its tenant may free it"));
  }
  if (--lease->second == 0) s->leases.erase(lease);
  b.view.leases--;
  if (free) MarkFreed(b, answers);
  // Recorded before the memory can go (MaybeDestroy): the backend, keeping
  // or freeing it, finds this session among its holders.
  if (const AllocationId a = b.memory->import_info().allocation_id; keep_mapping && a != 0) {
    s->mapped.insert(a);
    mapped_by_[a].insert(session_id);
  }
  MaybeDestroy(id, dead);
  return absl::OkStatus();
}

// Mappings that outlive buffers ---------------------------------------------

bool Registry::Unmap(SessionId s, AllocationId id) {
  auto it = mapped_by_.find(id);
  if (it == mapped_by_.end()) return false;
  it->second.erase(s);
  if (!it->second.empty()) return false;
  mapped_by_.erase(it);
  return true;
}

void Registry::Unmapped(SessionId session_id, const std::vector<AllocationId>& ids) {
  std::vector<AllocationId> unheld;
  {
    absl::MutexLock lock(&mu_);
    Session* s = FindSession(session_id);
    if (s == nullptr) return;
    for (AllocationId id : ids) {
      // Only what this session said it keeps: another's holds are not its to drop.
      if (s->mapped.erase(id) == 0) continue;
      if (Unmap(session_id, id)) unheld.push_back(id);
    }
  }
  for (AllocationId id : unheld) backend_.AllocationUnheld(id);
}

std::vector<std::pair<SessionId, std::vector<AllocationId>>> Registry::TakeUnmapRequests() {
  std::vector<std::pair<SessionId, std::vector<AllocationId>>> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, s] : sessions_) {
    if (s.unmap_asked.empty()) continue;
    out.emplace_back(id, std::move(s.unmap_asked));
    s.unmap_asked.clear();
  }
  return out;
}

void Registry::set_unmap_notifier(std::function<void()> notify) {
  absl::MutexLock lock(&mu_);
  unmap_notifier_ = std::move(notify);
}

bool Registry::Held(AllocationId id) const {
  absl::ReaderMutexLock lock(&mu_);
  return mapped_by_.contains(id);
}

void Registry::AskToUnmap(AllocationId id) {
  std::function<void()> notify;
  {
    absl::MutexLock lock(&mu_);
    auto it = mapped_by_.find(id);
    if (it == mapped_by_.end()) return;
    for (SessionId holder : it->second) {
      if (Session* s = FindSession(holder)) s->unmap_asked.push_back(id);
    }
    notify = unmap_notifier_;
  }
  if (notify) notify();
}

absl::StatusOr<BufferView> Registry::Free(SessionId session_id, const BufferKey& key) {
  if (key.id == 0) GPUBROKER_RETURN_IF_ERROR(ParseNameRef(key.name).status());
  Answers answers;  // delivered after the unlock
  Graveyard dead;
  absl::MutexLock lock(&mu_);
  GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
  GPUBROKER_ASSIGN_OR_RETURN(Buffer * b, FindVisible(*s, key));
  if (b->view.tenant != s->view.tenant) {
    return absl::PermissionDeniedError(StrCat("buffer ", key.ToString(), " belongs to tenant '",
                                              b->view.tenant, "'; only its tenant may free it"));
  }
  MarkFreed(*b, answers);
  BufferView view = b->view;
  MaybeDestroy(view.id, dead);
  return view;
}

std::vector<BufferView> Registry::List(SessionId session_id) const {
  std::vector<BufferView> out;
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return out;
  const std::string& tenant = it->second.view.tenant;
  for (const auto& [id, b] : buffers_) {
    // Freed buffers still holding memory are shown to their own tenant only.
    if (b.freed ? b.view.tenant == tenant : Visible(b, tenant)) out.push_back(ViewFor(b, tenant));
  }
  std::sort(out.begin(), out.end(),
            [](const BufferView& a, const BufferView& b) { return a.id < b.id; });
  return out;
}

// Descriptors ----------------------------------------------------------------

absl::StatusOr<FdGrant> Registry::ExportRegionFd(SessionId session_id, RegionId region) {
  std::string tenant;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return SessionEnded();
    tenant = it->second.view.tenant;
  }
  absl::StatusOr<FdGrant> grant = backend_.ExportRegion(region, tenant);
  if (!grant.ok()) return grant;
  // Counted as held before the session's books say so, and uncounted when
  // they do not take it (held already, or the session ended meanwhile): the
  // backend's count never misses a holder, whatever runs in between.
  backend_.RegionHeld(region);
  bool counted = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end()) counted = it->second.regions.insert(region).second;
  }
  if (!counted) backend_.RegionUnheld(region);
  return grant;
}

absl::StatusOr<FdGrant> Registry::ExportBufferFd(SessionId session_id, BufferId id) {
  std::shared_ptr<BackendBuffer> memory;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return SessionEnded();
    if (!it->second.leases.contains(id)) {
      return absl::NotFoundError(StrCat("this session holds no lease on buffer ", id));
    }
    memory = buffers_.at(id).memory;
  }
  const ExportedRegion* own = memory->own_region();
  if (own == nullptr) {
    return absl::FailedPreconditionError(StrCat(
        "buffer ", id, " lives in region ", memory->import_info().region_id, "; fetch the region"));
  }
  return own->Export();  // `memory` keeps the region alive until the descriptor is made
}

// Time, state, shutdown --------------------------------------------------------

ExpiryReport Registry::ExpireDue(int64_t now_unix_ms) {
  ExpiryReport report;
  Answers answers;  // delivered after the unlock
  Graveyard dead;
  absl::MutexLock lock(&mu_);
  ExpireTickets(now_unix_ms, report, dead);
  while (!expiries_.empty() && expiries_.begin()->first <= now_unix_ms) {
    // The entry goes before anything else happens, so that each pass of this
    // loop consumes one entry whatever the books say about its buffer.
    const BufferId id = expiries_.begin()->second;
    expiries_.erase(expiries_.begin());
    auto it = buffers_.find(id);
    if (it == buffers_.end()) continue;
    it->second.in_expiries = false;
    MarkFreed(it->second, answers);
    report.buffers_expired++;
    const uint64_t bytes = MaybeDestroy(id, dead);
    if (bytes > 0) {
      report.reclaimed_bytes += bytes;
      report.buffers_destroyed++;
    }
  }
  totals_.reclaimed_ttl += report.reclaimed_bytes;
  return report;
}

std::optional<int64_t> Registry::NextExpiry() const {
  absl::ReaderMutexLock lock(&mu_);
  return NextExpiryLocked();
}

std::shared_ptr<const TenantDirectory> Registry::tenants() const {
  absl::ReaderMutexLock lock(&mu_);
  return tenants_;
}

void Registry::ReplaceTenants(TenantDirectory tenants) {
  auto fresh = std::make_shared<const TenantDirectory>(std::move(tenants));
  std::shared_ptr<const TenantDirectory> old;
  {
    absl::MutexLock lock(&mu_);
    books_.SetDirectory(fresh);
    old = std::exchange(tenants_, std::move(fresh));
  }
  // `old` is destroyed here, outside the lock.
}

void Registry::AddBooksTo(NodeStatus& status) const {
  absl::ReaderMutexLock lock(&mu_);
  status.sessions = static_cast<uint32_t>(sessions_.size());
  status.buffers = static_cast<uint32_t>(buffers_.size());
  status.waiting_opens = static_cast<uint32_t>(waits_.size());
  status.totals = totals_;
  status.tenants = books_.Tally();
  // Gauges of the clients' own books: what the live sessions last reported.
  for (auto& t : status.tenants) {
    for (const auto& [id, s] : sessions_) {
      if (s.view.tenant != t.name) continue;
      t.clients.in_use_blocks += s.counters.in_use_blocks;
      t.clients.in_use_bytes += s.counters.in_use_bytes;
      t.clients.range_bytes += s.counters.range_bytes;
      t.clients.mapping_cache_bytes += s.counters.mapping_cache_bytes;
    }
  }
  absl::flat_hash_map<std::pair<int, std::string>, NodeStatus::Cell> cells;
  for (const auto& [id, b] : buffers_) {
    NodeStatus::Cell& c = cells[{b.view.device, b.view.tenant}];
    c.device = b.view.device;
    c.tenant = b.view.tenant;
    c.buffers++;
    if (b.charged) c.bytes += b.view.reserved_size;  // else its range holds its bytes
  }
  for (const auto& [id, r] : ranges_) {
    NodeStatus::Cell& c = cells[{r.device, r.tenant}];
    c.device = r.device;
    c.tenant = r.tenant;
    c.bytes += r.length;
  }
  status.cells.clear();
  for (auto& [key, c] : cells) status.cells.push_back(std::move(c));
  std::sort(status.cells.begin(), status.cells.end(), [](const auto& a, const auto& b) {
    return std::tie(a.device, a.tenant) < std::tie(b.device, b.tenant);
  });
}

}  // namespace gpubroker
