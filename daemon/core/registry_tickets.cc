// The registry's books of tickets (docs/fast-path.md, "Tickets"): a lease
// kept on a buffer for whoever claims a secret, once, within a TTL. The
// lease belongs to no session, so the buffer outlives its owner's handle,
// its owner's session and its owner's process until the ticket is claimed
// or expires; a claim moves the lease to the claimer's session.
#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "daemon/core/registry.h"
#include "daemon/core/registry_internal.h"

namespace gpubroker {

namespace {

absl::Status NoTicket() {
  // One message for every case, so that a claimer learns nothing of a
  // ticket it may not have (another tenant's, or a guess).
  return absl::NotFoundError("no such ticket (claimed already, expired, or never held)");
}

}  // namespace

bool Registry::SealedForClaim(const Buffer& b) {
  return b.view.state == BufferState::kSealed || (b.freed && b.sealed_when_freed);
}

absl::StatusOr<BufferId> Registry::Hold(SessionId session_id, const HoldParams& p) {
  if (p.secret.size() < kMinTicketSecret || p.secret.size() > kMaxTicketSecret) {
    return absl::InvalidArgumentError(StrCat("a ticket's secret has ", kMinTicketSecret, " to ",
                                             kMaxTicketSecret, " bytes, not ", p.secret.size()));
  }
  if (p.ttl_ms > kMaxTicketTtlMs) {
    return absl::InvalidArgumentError(
        StrCat("a ticket's TTL is at most ", kMaxTicketTtlMs, " ms, not ", p.ttl_ms));
  }
  absl::MutexLock lock(&mu_);
  GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
  BufferId id = p.id;
  if (id == 0) {
    // A block this session published, maybe by a posted seal whose answer
    // (the id) it has not read yet.
    auto r = ranges_.find(p.range);
    if (r == ranges_.end() || r->second.session != session_id) {
      return absl::NotFoundError(StrCat("this session holds no range ", p.range));
    }
    for (BufferId b : r->second.published) {
      if (buffers_.at(b).range_offset == p.offset) id = b;
    }
    if (id == 0) {
      return absl::NotFoundError(
          StrCat("no buffer published at offset ", p.offset, " of range ", p.range));
    }
  }
  auto b = buffers_.find(id);
  if (b == buffers_.end() || !s->leases.contains(id)) {
    return absl::FailedPreconditionError(
        StrCat("a ticket needs a lease on buffer ", id, "; open it first"));
  }
  if (tickets_.contains(p.secret)) return absl::AlreadyExistsError("that ticket is held already");
  uint32_t& held = tickets_by_tenant_[b->second.view.tenant];
  if (held >= kMaxTicketsPerTenant) {
    return LimitRefusal(StrCat("tenant '", b->second.view.tenant, "' holds ", held,
                               " unclaimed tickets, the most it may (they end when claimed or "
                               "expired)"));
  }
  held++;
  const uint64_t ttl = p.ttl_ms == 0 ? kDefaultTicketTtlMs : p.ttl_ms;
  const int64_t expires = Now() + static_cast<int64_t>(ttl);
  tickets_.emplace(p.secret, Ticket{id, b->second.view.tenant, expires});
  ticket_expiries_.emplace(expires, p.secret);
  b->second.view.leases++;  // the ticket's, not the session's
  totals_.tickets_held++;
  WakeTimersFor(expires);
  return id;
}

absl::StatusOr<BufferGrant> Registry::Claim(SessionId session_id, const std::string& secret) {
  absl::MutexLock lock(&mu_);
  GPUBROKER_ASSIGN_OR_RETURN(Session * s, LiveSession(session_id));
  auto t = tickets_.find(secret);
  // Expired but not reaped yet (the timer runs late under load): gone all the same.
  if (t == tickets_.end() || t->second.expires_unix_ms <= Now()) return NoTicket();
  Buffer& b = buffers_.at(t->second.buffer);  // the ticket's lease keeps it
  if (!Visible(b, s->view.tenant)) return NoTicket();
  if (!SealedForClaim(b)) {
    return absl::FailedPreconditionError(
        StrCat("the ticket's buffer ", b.view.id, " is not sealed yet"));
  }
  ForgetTicket(t);
  s->leases[b.view.id]++;  // the ticket's lease, moved: the buffer's count stays
  HoldRegionsOf(*s, b);
  totals_.tickets_claimed++;
  BufferGrant grant{ViewFor(b, s->view.tenant), b.memory->import_info()};
  // Freed since (its owner let go, or ended) but complete: to the claimer
  // it reads as sealed, so that its stream waits for the fence.
  grant.buffer.state = BufferState::kSealed;
  return grant;
}

bool Registry::CouldBecomeClaimable(const std::string& secret) const {
  absl::ReaderMutexLock lock(&mu_);
  auto t = tickets_.find(secret);
  if (t == tickets_.end()) return true;
  return !SealedForClaim(buffers_.at(t->second.buffer));
}

void Registry::ForgetTicket(absl::flat_hash_map<std::string, Ticket>::iterator it) {
  ticket_expiries_.erase({it->second.expires_unix_ms, it->first});
  auto held = tickets_by_tenant_.find(it->second.tenant);
  if (held != tickets_by_tenant_.end() && --held->second == 0) tickets_by_tenant_.erase(held);
  tickets_.erase(it);
}

void Registry::ExpireTickets(int64_t now_unix_ms, ExpiryReport& report, Graveyard& dead) {
  while (!ticket_expiries_.empty() && ticket_expiries_.begin()->first <= now_unix_ms) {
    auto t = tickets_.find(ticket_expiries_.begin()->second);
    if (t == tickets_.end()) {  // never: the two are kept together
      ticket_expiries_.erase(ticket_expiries_.begin());
      continue;
    }
    const BufferId id = t->second.buffer;
    ForgetTicket(t);
    report.tickets_expired++;
    totals_.tickets_expired++;
    auto b = buffers_.find(id);
    if (b == buffers_.end()) continue;
    b->second.view.leases--;
    const uint64_t bytes = MaybeDestroy(id, dead);
    if (bytes > 0) {
      report.reclaimed_bytes += bytes;
      report.buffers_destroyed++;
    }
  }
}

std::optional<int64_t> Registry::NextExpiryLocked() const {
  std::optional<int64_t> next;
  if (!expiries_.empty()) next = expiries_.begin()->first;
  if (!ticket_expiries_.empty() && (!next || ticket_expiries_.begin()->first < *next)) {
    next = ticket_expiries_.begin()->first;
  }
  return next;
}

}  // namespace gpubroker
