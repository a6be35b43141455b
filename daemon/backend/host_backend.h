#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/capacity_guard.h"
#include "daemon/backend/region_table.h"

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
  absl::StatusOr<FdGrant> ExportRegion(RegionId region, std::string_view tenant) override;
  DeviceUsage Usage(int device) const override;

  class Arena;      // one tenant's memfd and its range allocator
  class OwnMemfds;  // the memfds of buffers shared across tenants, for Usage

 private:
  absl::StatusOr<std::shared_ptr<Arena>> ArenaFor(const std::string& tenant);
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateIsolated(CapacityGuard::Claim claim);

  const uint64_t capacity_;
  const uint64_t page_size_;
  std::vector<DeviceInfo> devices_;
  std::shared_ptr<CapacityGuard> lent_;
  std::shared_ptr<OwnMemfds> own_memfds_;
  RegionTable regions_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Arena>> arenas_ ABSL_GUARDED_BY(mu_);
};

/// Creates a sealed (no shrink, no grow) memfd of `size` bytes.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size);

}  // namespace gpubroker
