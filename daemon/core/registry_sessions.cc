// The registry's sessions, and its life: construction, shutdown, release.
// (Buffers, leases and descriptors are in registry.cc, waiting Opens in registry_waits.cc.)
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/registry.h"
#include "daemon/core/registry_internal.h"

namespace gpubroker {

using registry_internal::SessionEnded;
using registry_internal::ShuttingDown;
using registry_internal::TokenKey;

Registry::Registry(Backend& backend, TenantDirectory tenants, Clock clock, TenantLimits limits,
                   WaitLimits waits)
    : backend_(backend),
      clock_(std::move(clock)),
      wait_limits_(waits),
      tenants_(std::make_shared<const TenantDirectory>(std::move(tenants))),
      books_(tenants_, limits) {
  backend_.SetMappingHolders(this);
}

Registry::~Registry() {
  backend_.SetMappingHolders(nullptr);
  ReleaseAll();
}

int64_t Registry::Now() const {
  if (clock_) return clock_();
  return absl::ToUnixMillis(absl::Now());
}

// Sessions -----------------------------------------------------------------

absl::StatusOr<SessionView> Registry::OpenSession(const PeerCredentials& peer,
                                                  std::string client_name) {
  SessionView view;
  view.peer = peer;
  view.token = RandomToken();
  view.client_name = std::move(client_name);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return ShuttingDown();
  view.tenant = tenants_->TenantFor(peer.uid, peer.gid);
  view.admin = tenants_->IsAdmin(peer);
  view.id = next_session_++;
  by_token_[TokenKey(view.token)] = view.id;
  sessions_[view.id].view = view;
  books_.SessionOpened(view.tenant);
  totals_.sessions_started++;
  return view;
}

namespace {

// Tells the backend, when it goes, that a session no longer holds these
// regions: after the lock is released and the session's dead buffers are gone.
class UnholdOnExit {
 public:
  explicit UnholdOnExit(Backend& backend) : backend_(backend) {}
  UnholdOnExit(const UnholdOnExit&) = delete;
  UnholdOnExit& operator=(const UnholdOnExit&) = delete;
  ~UnholdOnExit() {
    for (RegionId r : regions) backend_.RegionUnheld(r);
  }
  std::vector<RegionId> regions;

 private:
  Backend& backend_;
};

}  // namespace

SessionEndReport Registry::EndSession(SessionId id, SessionEnd how) {
  SessionEndReport report;
  std::vector<AllocationId> unheld;  // told to the backend last, outside the lock
  {
    UnholdOnExit unhold(backend_);  // after the buffers below, outside the lock
    Graveyard dead;                 // destroyed after the lock is released
    Answers answers;                // delivered after the lock is released
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return report;
    // Its waits end with it (gRPC ones among them are answered so).
    AnswerAll(id, SessionEnded(), answers);
    Session session = std::move(it->second);
    sessions_.erase(it);
    unhold.regions.assign(session.regions.begin(), session.regions.end());
    by_token_.erase(TokenKey(session.view.token));
    books_.SessionEnded(session.view.tenant);
    report.session = session.view;
    // A session that ended maps nothing: forgotten first, so that memory its
    // end frees below is not held for it.
    for (AllocationId a : session.mapped) {
      if (Unmap(id, a)) unheld.push_back(a);
    }
    EndSessionBooks(session, report, dead, answers);
    // Counted with the books, in the same locked step: a scrape sees a
    // session's end together with what it gave back.
    if (how == SessionEnd::kClosed) {
      totals_.sessions_closed++;
      totals_.reclaimed_closed += report.reclaimed_bytes;
    } else if (how == SessionEnd::kDied) {
      totals_.sessions_died++;
      totals_.reclaimed_died += report.reclaimed_bytes;
    }
  }
  for (AllocationId a : unheld) backend_.AllocationUnheld(a);
  return report;
}

void Registry::EndSessionBooks(const Session& session, SessionEndReport& report, Graveyard& dead,
                               Answers& answers) {
  std::vector<BufferId> touched;
  for (const auto& [buffer_id, count] : session.leases) {
    auto b = buffers_.find(buffer_id);
    if (b == buffers_.end()) continue;
    b->second.view.leases -= count;
    report.leases_dropped += count;
    touched.push_back(buffer_id);
  }
  for (BufferId buffer_id : session.owned) {
    auto b = buffers_.find(buffer_id);
    if (b == buffers_.end()) continue;
    b->second.view.owner_session = 0;
    if (!b->second.view.keep && !b->second.freed) {
      MarkFreed(b->second, answers);
      report.buffers_freed++;
    }
    touched.push_back(buffer_id);
  }
  for (BufferId buffer_id : touched) {
    const bool existed = buffers_.contains(buffer_id);
    report.reclaimed_bytes += MaybeDestroy(buffer_id, dead);
    if (existed && !buffers_.contains(buffer_id)) report.buffers_destroyed++;
  }
  // Its ranges go back but for the published blocks that others still hold.
  for (RangeId range_id : session.ranges) {
    const uint64_t length = ranges_.at(range_id).length;
    const uint64_t back = EndRange(range_id, dead);
    report.reclaimed_bytes += back;
    report.bytes_kept_for_others += length - back;
    report.ranges_returned++;
  }
}

absl::StatusOr<SessionView> Registry::Authenticate(const Token& token) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = by_token_.find(TokenKey(token));
  if (it == by_token_.end()) return absl::UnauthenticatedError("unknown session token");
  return sessions_.at(it->second).view;
}

Registry::Session* Registry::FindSession(SessionId id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

absl::StatusOr<Registry::Session*> Registry::LiveSession(SessionId id) {
  if (shutting_down_) return ShuttingDown();
  Session* s = FindSession(id);
  if (s == nullptr) return SessionEnded();
  return s;
}

void Registry::BeginShutdown() {
  Answers answers;
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  AnswerAll(0, ShuttingDown(), answers);
}

bool Registry::shutting_down() const {
  absl::ReaderMutexLock lock(&mu_);
  return shutting_down_;
}

uint64_t Registry::ReleaseAll() {
  Graveyard dead;
  Answers answers;
  uint64_t bytes = 0;
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  AnswerAll(0, ShuttingDown(), answers);
  for (auto& [id, b] : buffers_) {
    if (b.charged) bytes += b.view.reserved_size;
    // Given back through the books, so that the descriptor budget they charge is returned too.
    books_.ReleaseBuffer(b.view.tenant, b.charged ? b.view.reserved_size : 0, b.owns_descriptor);
    dead.push_back(std::move(b.memory));
  }
  for (auto& [id, r] : ranges_) {
    bytes += r.length;
    dead.ranges.push_back(std::move(r.memory));
  }
  ranges_.clear();
  buffers_.clear();
  mapped_by_.clear();
  names_.Clear();
  expiries_.clear();
  tickets_.clear();
  ticket_expiries_.clear();
  tickets_by_tenant_.clear();
  sessions_.clear();
  by_token_.clear();
  books_.Clear();
  return bytes;
}

}  // namespace gpubroker
