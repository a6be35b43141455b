#pragma once

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

/// One tenant's fence words on one device: a VMM allocation of 8-byte slots,
/// exported to the tenant's clients as a region and mapped once per client
/// process. Stream memory operations refuse pool memory (INVALID_VALUE on
/// driver 580), so pool and arena buffers keep their words here.
class FencePage final : public ExportedRegion {
 public:
  FencePage(std::shared_ptr<CudaDeviceState> device, ExportedVmm memory);
  ~FencePage() override;

  absl::StatusOr<FdGrant> Export() const override;
  RegionId id() const { return id_; }
  void set_id(RegionId id) { id_ = id; }
  uint64_t size() const { return memory_.size(); }

  /// A free slot; nullopt when every slot is taken.
  std::optional<uint32_t> Take();
  void Give(uint32_t slot);

 private:
  const std::shared_ptr<CudaDeviceState> device_;
  const ExportedVmm memory_;
  RegionId id_ = 0;
  absl::Mutex mu_;
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  uint32_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
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

/// The fence pages of one device, one per tenant, made on first use.
class FencePages {
 public:
  FencePages(std::shared_ptr<CudaDeviceState> device, RegionTable& regions);

  /// A slot of `tenant`'s page. LIMIT when the tenant has a live buffer on
  /// every slot; OUT_OF_MEMORY when the page cannot be made.
  absl::StatusOr<FenceSlot> Take(const std::string& tenant);

  /// Adds the pages' memory to what is reserved.
  void AddUsage(DeviceUsage& usage) const;

 private:
  absl::StatusOr<std::shared_ptr<FencePage>> PageFor(const std::string& tenant);

  const std::shared_ptr<CudaDeviceState> device_;
  RegionTable& regions_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<FencePage>> pages_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace gpubroker
