#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/cuda/device.h"
#include "daemon/backend/cuda/exported_vmm.h"
#include "daemon/backend/region_table.h"

namespace gpubroker {

inline constexpr uint64_t kFenceBytes = 8;

/// A value no stale word is likely to hold (the fence waits for equality),
/// never 0 (the value of fresh memory).
uint64_t NewFenceValue();

class FencePages;

/// One tenant's fence words on one device: a VMM allocation of 8-byte slots,
/// exported to the tenant's clients as a region and mapped once per client
/// process. Stream memory operations refuse pool memory (INVALID_VALUE on
/// driver 580), so pool and arena buffers keep their words here. It goes
/// back to the device (FencePages::RetireIfIdle) once no slot is taken and
/// no live session holds it; a take from it after that finds it retired.
class FencePage final : public ExportedRegion {
 public:
  FencePage(std::shared_ptr<CudaDeviceState> device, ExportedVmm memory, std::string tenant,
            std::weak_ptr<FencePages> pages);
  ~FencePage() override;

  absl::StatusOr<FdGrant> Export() const override;
  // The last session that held it has ended.
  void Unheld() const override;

  RegionId id() const { return id_; }
  void set_id(RegionId id) { id_ = id; }
  uint64_t size() const { return memory_.size(); }
  const std::string& tenant() const { return tenant_; }

  /// A free slot; nullopt when every slot is taken, or with `*retired` set
  /// when the page has gone.
  std::optional<uint32_t> Take(bool* retired);
  void Give(uint32_t slot);

  /// Marks the page gone where no slot is taken and `holders` (the live
  /// sessions that hold it) is 0; true if this call did.
  bool Retire(uint32_t holders) const;
  bool retired() const;

 private:
  void RetireIfIdle() const;

  const std::shared_ptr<CudaDeviceState> device_;
  const ExportedVmm memory_;
  const std::string tenant_;
  const std::weak_ptr<FencePages> pages_;  // gone with the backend
  RegionId id_ = 0;
  mutable absl::Mutex mu_;
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  uint32_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  mutable bool retired_ ABSL_GUARDED_BY(mu_) = false;
};

/// A buffer's slot in its tenant's fence page, given back when it goes.
class FenceSlot {
 public:
  FenceSlot(FenceSlot&& other) noexcept;
  FenceSlot& operator=(FenceSlot&&) = delete;
  ~FenceSlot();

  /// Where the buffer's fence word is, with a value of its own.
  void Describe(ImportInfo& info) const;

 private:
  friend class FencePages;
  FenceSlot(std::shared_ptr<FencePage> page, uint32_t slot) : page_(std::move(page)), slot_(slot) {}

  std::shared_ptr<FencePage> page_;
  uint32_t slot_;
};

/// The fence pages of one device, one per tenant, made on first use and
/// given back once the tenant has no buffer on its page and no live session
/// holds it (a session holds the page from the first buffer it is told of
/// until it ends, so a client's next buffer finds the page it has mapped).
/// So a node that sees many tenants come and go keeps no page, 2 MiB of
/// device memory, for each tenant it ever served. Held by shared_ptr: pages
/// point back to it.
class FencePages : public std::enable_shared_from_this<FencePages> {
 public:
  FencePages(std::shared_ptr<CudaDeviceState> device, RegionTable& regions);

  /// A slot of `tenant`'s page. LIMIT when the tenant has a live buffer on
  /// every slot; OUT_OF_MEMORY when the page cannot be made.
  absl::StatusOr<FenceSlot> Take(const std::string& tenant);

  /// Takes `page` out (no longer exported, its memory given back with the
  /// last reference) if no slot is taken and no live session holds it.
  void RetireIfIdle(const FencePage& page);

  /// Adds the pages' memory to what is reserved.
  void AddUsage(DeviceUsage& usage) const;

 private:
  /// `tenant`'s page, made where it has none (or its last has gone).
  absl::StatusOr<std::shared_ptr<FencePage>> PageFor(const std::string& tenant);

  const std::shared_ptr<CudaDeviceState> device_;
  RegionTable& regions_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<FencePage>> pages_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace gpubroker
