#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "daemon/core/types.h"

namespace gpubroker {

using WaitId = uint64_t;

/// Opens parked until their buffer appears or is sealed, their deadline
/// passes, their session ends or the daemon shuts down. No thread waits for
/// them: each is filed under what can wake it (a (tenant, name) or a buffer
/// id) and under its deadline, so that an allocation or a seal looks at the
/// waiters of that one buffer and the timer at the waiters that are due.
/// The list files waiters and finds them; what a waiter asked for and whom
/// to answer stay with the registry. Not thread-safe: the registry's lock
/// guards it.
class WaitList {
 public:
  using Clock = std::chrono::steady_clock;
  /// Where a waiter is filed: a name in its owner's tenant, or a buffer id.
  struct Target {
    std::string tenant;  // with a name: the tenant the name belongs to
    std::string name;
    BufferId id = 0;
  };
  /// Files a waiter and returns its id (never 0).
  WaitId Add(SessionId session, std::string tenant, Target target, Clock::time_point deadline);
  /// Unfiles a waiter; false when it is not (or no longer) here.
  bool Remove(WaitId id);
  bool Contains(WaitId id) const { return entries_.contains(id); }

  /// The waiters a change to this buffer may wake: those filed under its id,
  /// and under its name (when it has one) in its tenant.
  std::vector<WaitId> Wakeable(BufferId id, const std::string& tenant,
                               const std::string& name) const;
  /// The waiters of a session, and every waiter.
  std::vector<WaitId> OfSession(SessionId session) const;
  std::vector<WaitId> All() const;
  /// The waiters whose deadline is at or before `now`, earliest first.
  std::vector<WaitId> Due(Clock::time_point now) const;
  std::optional<Clock::time_point> NextDeadline() const;

  uint32_t CountForSession(SessionId session) const;
  uint32_t CountForTenant(const std::string& tenant) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Filed {
    SessionId session;
    std::string tenant;
    Target target;
    Clock::time_point deadline;
  };
  using NameKey = std::pair<std::string, std::string>;  // tenant, name
  // Looked up by views: a seal's wake-up copies no string to find its waiters.
  using NameView = std::pair<std::string_view, std::string_view>;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(const NameView& k) const { return absl::HashOf(k.first, k.second); }
  };
  struct NameEq {
    using is_transparent = void;
    bool operator()(const NameView& a, const NameView& b) const { return a == b; }
  };

  WaitId next_id_ = 1;
  absl::flat_hash_map<WaitId, Filed> entries_;
  absl::flat_hash_map<NameKey, absl::flat_hash_set<WaitId>, NameHash, NameEq> by_name_;
  absl::flat_hash_map<BufferId, absl::flat_hash_set<WaitId>> by_buffer_;
  absl::flat_hash_map<SessionId, absl::flat_hash_set<WaitId>> by_session_;
  absl::flat_hash_map<std::string, uint32_t> per_tenant_;
  std::set<std::pair<Clock::time_point, WaitId>> by_deadline_;
};

}  // namespace gpubroker
