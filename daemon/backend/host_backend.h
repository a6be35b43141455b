#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/backend.h"

namespace gpubroker {

/// Host memory shared between processes with no copy: one sealed memfd arena
/// per tenant, sub-allocated in pages, and a memfd of its own for each buffer
/// that is shared across tenants. Clients map the arena's descriptor (fetched
/// once) at each buffer's offset. Freed ranges are punched out of the memfd,
/// so their pages go back to the kernel and the next buffer starts zeroed.
///
/// The memfds are sealed against shrinking and growing: a client holding the
/// descriptor cannot truncate memory out from under the other mappers.
class HostBackend final : public Backend {
 public:
  /// `capacity`: bytes that all buffers together may take.
  explicit HostBackend(uint64_t capacity);
  ~HostBackend() override;

  std::string_view name() const override { return "host"; }
  const std::vector<DeviceInfo>& devices() const override { return devices_; }
  uint64_t RoundedSize(int device, uint64_t size, bool isolated) const override;
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) override;
  absl::StatusOr<FdGrant> ExportPool(PoolId pool, std::string_view tenant) override;
  DeviceUsage Usage(int device) const override;
  uint64_t RangeLimit(int device) const override;
  uint64_t RangeGranularity(int /*device*/) const override { return page_size_; }
  absl::StatusOr<std::unique_ptr<LeasedRange>> LeaseRange(const RangeRequest& req) override;

  struct Arena;       // one tenant's memfd and its range allocator
  struct Accounting;  // bytes in use, shared with live buffers

 private:
  absl::StatusOr<std::shared_ptr<Arena>> ArenaFor(const std::string& tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateIsolated(uint64_t rounded);

  const uint64_t capacity_;
  const uint64_t page_size_;
  std::vector<DeviceInfo> devices_;

  // Shared with live buffers, which give their bytes back when destroyed.
  std::shared_ptr<Accounting> accounting_;

  mutable absl::Mutex mu_;
  PoolId next_pool_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, std::shared_ptr<Arena>> arenas_by_tenant_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PoolId, std::shared_ptr<Arena>> arenas_by_id_ ABSL_GUARDED_BY(mu_);
};

/// Creates a sealed (no shrink, no grow) memfd of `size` bytes.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size);

}  // namespace gpubroker
