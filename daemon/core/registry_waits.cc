// The registry's waiting Opens: parked, woken, timed out, cancelled.
// (Buffers and leases are in registry.cc, sessions in registry_sessions.cc.)
#include <algorithm>
#include <chrono>

#include "absl/synchronization/notification.h"
#include "common/names.h"
#include "common/refusal.h"
#include "common/strings.h"
#include "daemon/core/registry.h"
#include "daemon/core/registry_internal.h"

namespace gpubroker {

std::chrono::steady_clock::time_point Registry::WaitDeadline(const OpenParams& params) const {
  if (params.deadline != std::chrono::steady_clock::time_point::max()) return params.deadline;
  return std::chrono::steady_clock::now() + wait_limits_.default_timeout;
}

std::optional<absl::StatusOr<BufferGrant>> Registry::OpenOrPark(SessionId session_id,
                                                                const BufferKey& key,
                                                                const OpenParams& params,
                                                                OpenDone done, WaitId* parked,
                                                                bool* may_appear) {
  if (may_appear != nullptr) *may_appear = false;
  // The name is parsed for the wait list only when the Open may wait: one
  // that does not (most) parses it once, in TryOpen's lookup.
  WaitList::Target target;
  target.id = key.id;
  if (key.id == 0 && params.wait) {
    auto ref = ParseNameRef(key.name);
    if (!ref.ok()) return ref.status();
    target.tenant = std::string(ref->tenant);
    target.name = std::string(ref->name);
  }
  const auto deadline = WaitDeadline(params);
  absl::MutexLock lock(&mu_);
  auto live = LiveSession(session_id);
  if (!live.ok()) return live.status();
  Session& s = **live;
  OpenAttempt attempt = TryOpen(s, key, params.allow_unsealed);
  if (!attempt.result.ok() && may_appear != nullptr) *may_appear = attempt.may_wait;
  if (attempt.result.ok() || !params.wait || !attempt.may_wait) return std::move(attempt.result);
  if (std::chrono::steady_clock::now() >= deadline) {
    const bool exists = attempt.result.status().code() == absl::StatusCode::kFailedPrecondition;
    return absl::DeadlineExceededError(StrCat("buffer ", key.ToString(),
                                              exists ? " was not sealed" : " did not appear",
                                              " before the deadline"));
  }
  if (wait_limits_.max_per_session != 0 &&
      waits_.CountForSession(session_id) >= wait_limits_.max_per_session) {
    return LimitRefusal(StrCat("session ", session_id, " has ", waits_.CountForSession(session_id),
                               " Opens waiting, the limit (max_waiters_per_session)"));
  }
  if (wait_limits_.max_per_tenant != 0 &&
      waits_.CountForTenant(s.view.tenant) >= wait_limits_.max_per_tenant) {
    return LimitRefusal(StrCat("tenant '", s.view.tenant, "' has ",
                               waits_.CountForTenant(s.view.tenant),
                               " Opens waiting, the limit (max_waiters_per_tenant)"));
  }
  // A bare name waits in the caller's own tenant, "tenant/name" in that one.
  if (key.id == 0 && target.tenant.empty()) target.tenant = s.view.tenant;
  const WaitId id = waits_.Add(session_id, s.view.tenant, std::move(target), deadline);
  parked_.emplace(id, Parked{session_id, key, params.allow_unsealed, std::move(done)});
  WakeTimersFor(deadline);
  *parked = id;
  return std::nullopt;
}

absl::StatusOr<BufferGrant> Registry::Open(SessionId session_id, const BufferKey& key,
                                           const OpenParams& params) {
  absl::Notification answered;
  absl::StatusOr<BufferGrant> result;
  WaitId id = 0;
  const auto deadline = WaitDeadline(params);
  OpenParams bounded = params;
  bounded.deadline = deadline;
  auto now = OpenOrPark(
      session_id, key, bounded,
      [&](absl::StatusOr<BufferGrant> r) {
        result = std::move(r);
        answered.Notify();
      },
      &id);
  if (now) return std::move(*now);
  // No timer need run for this caller: it ends its own wait at the deadline.
  const auto left = deadline - std::chrono::steady_clock::now();
  if (!answered.WaitForNotificationWithTimeout(absl::FromChrono(left))) {
    ExpireWaits(deadline);
  }
  answered.WaitForNotification();
  return result;
}

bool Registry::CancelWait(WaitId id, absl::Status why) {
  Answers answers;
  absl::MutexLock lock(&mu_);
  if (!parked_.contains(id)) return false;
  Answer(id, std::move(why), answers);
  return true;
}

void Registry::Answer(WaitId id, absl::StatusOr<BufferGrant> result, Answers& answers) {
  auto it = parked_.find(id);
  if (it == parked_.end()) return;
  answers.Add(std::move(it->second.done), std::move(result));
  parked_.erase(it);
  waits_.Remove(id);
}

void Registry::AnswerAll(SessionId session, const absl::Status& why, Answers& answers) {
  for (WaitId id : session != 0 ? waits_.OfSession(session) : waits_.All()) {
    Answer(id, why, answers);
  }
}

void Registry::Wake(BufferId buffer, Answers& answers) {
  auto it = buffers_.find(buffer);
  if (it == buffers_.end()) return;
  // The waiters are listed before any is answered: the view is not read after.
  for (WaitId id : waits_.Wakeable(buffer, it->second.view.tenant, it->second.view.name)) {
    const Parked& p = parked_.at(id);
    Session* s = FindSession(p.session);
    if (s == nullptr) continue;  // cannot be: a session's end answers its waiters
    OpenAttempt attempt = TryOpen(*s, p.key, p.allow_unsealed);
    // Still missing to this waiter (another tenant's unshared buffer of that
    // name reads so) or not sealed yet: it keeps waiting.
    if (!attempt.result.ok() && attempt.may_wait) continue;
    Answer(id, std::move(attempt.result), answers);
  }
}

Registry::Answers::~Answers() {
  for (auto& [done, result] : items_) done(std::move(result));
}

void Registry::Answers::Add(OpenDone done, absl::StatusOr<BufferGrant> result) {
  items_.emplace_back(std::move(done), std::move(result));
}

uint32_t Registry::ExpireWaits(std::chrono::steady_clock::time_point now) {
  Answers answers;
  absl::MutexLock lock(&mu_);
  const std::vector<WaitId> due = waits_.Due(now);
  for (WaitId id : due) {
    const Parked& p = parked_.at(id);
    Session* s = FindSession(p.session);
    bool exists = false;
    if (s != nullptr) exists = FindVisible(*s, p.key).ok();
    Answer(id,
           absl::DeadlineExceededError(StrCat("buffer ", p.key.ToString(),
                                              exists ? " was not sealed" : " did not appear",
                                              " before the deadline")),
           answers);
  }
  return static_cast<uint32_t>(due.size());
}

bool Registry::AwaitTimers(absl::Duration at_most) {
  absl::MutexLock lock(&mu_);
  if (timers_stopped_) return false;
  absl::Duration wait = at_most;
  if (auto next = NextExpiryLocked()) wait = std::min(wait, absl::Milliseconds(*next - Now()));
  if (auto next = waits_.NextDeadline()) {
    wait = std::min(wait, absl::FromChrono(*next - std::chrono::steady_clock::now()));
  }
  if (wait > absl::ZeroDuration()) {
    // Rounded up: a time before the look is surely signalled.
    timers_look_unix_ms_ =
        Now() + absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1)));
    timers_look_steady_ = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(wait);
    timers_asleep_ = true;
    timers_.WaitWithTimeout(&mu_, wait);
    timers_asleep_ = false;
  }
  return !timers_stopped_;
}

void Registry::WakeTimersFor(int64_t unix_ms) {
  if (timers_asleep_ && unix_ms < timers_look_unix_ms_) timers_.Signal();
}

void Registry::WakeTimersFor(std::chrono::steady_clock::time_point deadline) {
  if (timers_asleep_ && deadline < timers_look_steady_) timers_.Signal();
}

void Registry::StopTimers() {
  absl::MutexLock lock(&mu_);
  timers_stopped_ = true;
  timers_.SignalAll();
}

}  // namespace gpubroker
