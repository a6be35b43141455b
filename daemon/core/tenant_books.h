#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/core/node_status.h"
#include "daemon/core/tenants.h"

namespace gpubroker {

/// What each tenant holds: bytes (against its quota), buffers and sessions.
/// Where a tenant's limits are enforced: its byte quota today, and counts
/// (sessions, buffers) when they come. Not thread-safe: the registry's lock
/// guards it.
class TenantBooks {
 public:
  explicit TenantBooks(const TenantDirectory& directory) : directory_(directory) {}

  void SessionOpened(const std::string& tenant);
  void SessionEnded(const std::string& tenant);

  /// Books `bytes` for a new buffer of `tenant`, before its memory is made.
  /// QUOTA refusal, with the numbers, when the quota would be passed.
  absl::Status ReserveBuffer(const std::string& tenant, uint64_t bytes);
  /// The buffer booked as `reserved` bytes took `actual`.
  void Settle(const std::string& tenant, uint64_t reserved, uint64_t actual);
  /// A buffer of `bytes` is gone (or its reservation rolled back).
  void ReleaseBuffer(const std::string& tenant, uint64_t bytes);

  /// Every tenant that holds something or has a quota, and every configured one, by name.
  std::vector<NodeStatus::Tenant> Tally() const;
  void Clear() { usage_.clear(); }

 private:
  struct Usage {
    uint64_t bytes = 0;  // reserved bytes of its buffers, pending ones included
    uint32_t buffers = 0;
    uint32_t sessions = 0;
  };

  const TenantDirectory& directory_;
  absl::flat_hash_map<std::string, Usage> usage_;
};

}  // namespace gpubroker
