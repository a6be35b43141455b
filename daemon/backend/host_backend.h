#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/backend/backend.h"
#include "daemon/backend/capacity_guard.h"

namespace gpubroker {

/// Host memory shared between processes with no copy: one sealed memfd arena
/// per tenant, sub-allocated in pages, and a memfd of its own for each buffer
/// that is shared across tenants. Clients map the arena's descriptor (fetched
/// once) at each buffer's offset. Freed ranges are punched out of the memfd,
/// so their pages go back to the kernel and the next buffer starts zeroed.
///
/// The memfds are sealed against shrinking and growing: a client holding the
/// descriptor cannot truncate memory out from under the other mappers.
///
/// A buffer at or over `own_memfd_threshold` gets a memfd of its own too, as
/// a large GPU buffer gets a VMM allocation of its own: when it is freed the
/// memfd is kept (pages and all) for its tenant's next buffer of the same
/// size, and clients may keep it mapped (docs/fast-path.md, "Mappings that
/// outlive buffers"), so that both backends behave alike.
class HostBackend final : public Backend {
 public:
  /// `capacity`: bytes that all buffers together may take.
  explicit HostBackend(uint64_t capacity, uint64_t own_memfd_threshold = UINT64_MAX);
  ~HostBackend() override;

  std::string_view name() const override { return "host"; }
  const std::vector<DeviceInfo>& devices() const override { return devices_; }
  uint64_t RoundedSize(int device, uint64_t size, bool isolated) const override;
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) override;
  absl::StatusOr<FdGrant> ExportRegion(RegionId region, std::string_view tenant) override;
  DeviceUsage Usage(int device) const override;
  uint64_t RangeLimit(int device) const override;
  uint64_t RangeGranularity(int /*device*/) const override { return page_size_; }
  absl::StatusOr<std::unique_ptr<LeasedRange>> LeaseRange(const RangeRequest& req) override;
  uint64_t QuickAllocationLimit() const override { return own_memfd_threshold_; }
  void SetMappingHolders(MappingHolders* holders) override { kept_->set_holders(holders); }
  void AllocationUnheld(AllocationId id) override { kept_->Unheld(id); }
  void RegionHeld(RegionId region) override;
  void RegionUnheld(RegionId region) override;

  class Arena;      // one tenant's memfd and its range allocator
  class Arenas;     // the tenants' arenas: made on first use, gone once empty and unmapped
  class OwnMemfds;  // the memfds of buffers with one of their own, for Usage

 private:
  /// Room for `bytes` in `tenant`'s arena: the arena and the offset, or the
  /// refusal, in whose words `what` names what was asked ("requested", "a range of").
  absl::StatusOr<std::pair<std::shared_ptr<Arena>, uint64_t>> TakeFromArena(
      const std::string& tenant, uint64_t bytes, std::string_view what);
  /// A buffer with a memfd of its own (shared across tenants, or large).
  absl::StatusOr<std::unique_ptr<BackendBuffer>> AllocateOwn(const AllocationRequest& req);
  /// Room for `bytes` more in the pool beside the kept memfds (KeptAllocations::MakeRoom).
  absl::Status MakeRoom(uint64_t bytes, bool may_wait);

  const uint64_t capacity_;
  const uint64_t own_memfd_threshold_;
  const uint64_t page_size_;
  std::vector<DeviceInfo> devices_;
  std::shared_ptr<CapacityGuard> lent_;
  std::shared_ptr<OwnMemfds> own_memfds_;
  std::shared_ptr<KeptAllocations> kept_;  // freed memfds of their own, for the next buffer
  std::shared_ptr<Arenas> arenas_;         // shared with the arenas, which outlive it in buffers
};

/// Creates a sealed (no shrink, no grow) memfd of `size` bytes.
absl::StatusOr<UniqueFd> CreateSealedMemfd(const std::string& name, uint64_t size);

}  // namespace gpubroker
