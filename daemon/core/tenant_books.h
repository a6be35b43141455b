#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/core/node_status.h"
#include "daemon/core/tenants.h"
#include "daemon/util/descriptors.h"

namespace gpubroker {

/// Count limits that keep one tenant from exhausting what all tenants share.
struct TenantLimits {
  /// Buffers a tenant may hold at once (freed ones that still hold memory
  /// included); 0: no limit.
  uint32_t max_buffers_per_tenant = 0;
  /// Buffers with a descriptor of their own (shared across tenants, or large
  /// GPU buffers) a tenant may hold at once: the daemon holds one descriptor
  /// for each. 0: no limit.
  uint32_t max_descriptors_per_tenant = 0;
  /// The daemon's descriptor budget, charged one per such buffer (shared with
  /// the sockets' connections); null: not charged.
  DescriptorBudget* descriptors = nullptr;
};

/// What each tenant holds: bytes (against its quota), buffers and sessions.
/// Where a tenant's limits are enforced: its byte quota today, and counts
/// (sessions, buffers) when they come. Not thread-safe: the registry's lock
/// guards it.
class TenantBooks {
 public:
  TenantBooks(std::shared_ptr<const TenantDirectory> directory, TenantLimits limits)
      : directory_(std::move(directory)), limits_(limits) {}

  /// The directory whose quotas hold from now on (a config reload).
  void SetDirectory(std::shared_ptr<const TenantDirectory> directory) {
    directory_ = std::move(directory);
  }

  void SessionOpened(const std::string& tenant);
  void SessionEnded(const std::string& tenant);

  /// Books `bytes` for a new buffer of `tenant` (one with a descriptor of its
  /// own when `owns_descriptor`), before its memory is made. QUOTA refusal,
  /// with the numbers, when the quota would be passed; LIMIT when a count
  /// limit would (the tenant's buffers or descriptors, the daemon's budget).
  absl::Status ReserveBuffer(const std::string& tenant, uint64_t bytes, bool owns_descriptor);
  /// The buffer booked as `reserved` bytes took `actual`.
  void Settle(const std::string& tenant, uint64_t reserved, uint64_t actual);
  /// A buffer of `bytes` is gone (or its reservation rolled back).
  void ReleaseBuffer(const std::string& tenant, uint64_t bytes, bool owns_descriptor);

  // Ranges (docs/fast-path.md).
  /// Books a range of at least `least` bytes and at most `want`, taking at
  /// most half of what the quota leaves beyond `least` (so that one client's
  /// free space does not starve the next request), in multiples of
  /// `granularity`; the length booked. QUOTA refusal when `least` does not fit.
  absl::StatusOr<uint64_t> ReserveRange(const std::string& tenant, uint64_t least, uint64_t want,
                                        uint64_t granularity);
  /// The booked range was made (it counts as a range now), or not (rolled back).
  void RangeLeased(const std::string& tenant, uint64_t length);
  void UnreserveRange(const std::string& tenant, uint64_t length);
  /// A range is gone; `kept` bytes of it live on in published blocks, now
  /// charged by themselves.
  void ReleaseRange(const std::string& tenant, uint64_t length, uint64_t kept);
  /// A client-made buffer is to be published: a buffer, whose bytes its
  /// range holds. LIMIT when the tenant holds as many buffers as it may.
  absl::Status BufferPublished(const std::string& tenant);
  /// Adds to the tenant's client totals.
  void AddClientTotals(const std::string& tenant, const ClientCounters& increments);

  /// Every tenant that holds something or has a quota, and every configured one, by name.
  std::vector<NodeStatus::Tenant> Tally() const;
  void Clear() { usage_.clear(); }

 private:
  struct Usage {
    uint64_t bytes = 0;  // charged bytes: buffers (pending ones included), ranges
    uint32_t buffers = 0;
    uint32_t descriptors = 0;  // buffers with a descriptor of their own
    uint32_t sessions = 0;
    uint64_t range_bytes = 0;
    uint32_t ranges = 0;
    ClientCounters client_totals;
  };

  std::shared_ptr<const TenantDirectory> directory_;
  const TenantLimits limits_;
  absl::flat_hash_map<std::string, Usage> usage_;
};

}  // namespace gpubroker
