#include "daemon/backend/cuda/vmm_path.h"

#include <algorithm>

#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "daemon/backend/cuda/fence_page.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The ready fence's word sits after the buffer's bytes, 8-byte aligned.
uint64_t FenceOffset(uint64_t size) { return RoundUp(size, kFenceBytes); }

// A VMM allocation with a POSIX fd of its own.
class VmmBuffer final : public BackendBuffer, public ExportedRegion {
 public:
  /// `keep_for`: the tenant whose next buffer of this size may reuse the
  /// allocation; empty for a buffer shared across tenants (another tenant held its fd).
  VmmBuffer(std::shared_ptr<CudaDeviceState> device,
            std::shared_ptr<std::atomic<uint64_t>> live_bytes, CapacityGuard::Claim claim,
            ExportedVmm memory, ImportInfo info, std::string keep_for)
      : device_(std::move(device)),
        live_bytes_(std::move(live_bytes)),
        claim_(std::move(claim)),
        memory_(std::move(memory)),
        info_(std::move(info)),
        keep_for_(std::move(keep_for)) {
    *live_bytes_ += memory_.size();
    device_->vmm_held += memory_.size();
  }
  ~VmmBuffer() override {
    const uint64_t size = memory_.size();
    claim_ = CapacityGuard::Claim();  // what is lent without this buffer decides below
    *live_bytes_ -= size;
    device_->vmm_held -= size;
    // Kept while the device has room for it beside what is lent; otherwise
    // released, once no client maps it any more (they are asked to unmap).
    auto memory = std::make_unique<KeptVmm>(std::move(memory_));
    if (!keep_for_.empty() &&
        device_->lent->used() + device_->kept.bytes() + size <= device_->capacity()) {
      device_->kept.Keep(keep_for_, info_.allocation_id, std::move(memory));
    } else {
      device_->kept.Retire(info_.allocation_id, std::move(memory));
    }
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  const ExportedRegion* own_region() const override { return this; }
  absl::StatusOr<FdGrant> Export() const override {
    GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd, DupFd(memory_.fd()));
    return FdGrant{std::move(fd), FdKind::kCudaVmm, info_.mapped_size, info_.device_uuid};
  }

 private:
  std::shared_ptr<CudaDeviceState> device_;
  std::shared_ptr<std::atomic<uint64_t>> live_bytes_;
  CapacityGuard::Claim claim_;
  ExportedVmm memory_;
  ImportInfo info_;
  std::string keep_for_;
};

}  // namespace

VmmPath::VmmPath(std::shared_ptr<CudaDeviceState> device)
    : device_(std::move(device)), live_bytes_(std::make_shared<std::atomic<uint64_t>>(0)) {}

uint64_t VmmPath::RoundedSize(uint64_t size, uint64_t granularity) {
  return RoundUp(FenceOffset(size) + kFenceBytes, std::max<uint64_t>(granularity, 1));
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> VmmPath::Allocate(const AllocationRequest& req,
                                                                 CapacityGuard::Claim claim) {
  CudaDeviceState& d = *device_;
  const uint64_t size = RoundedSize(req.size, d.info.vmm_granularity);
  claim.Resize(size);
  const std::string keep_for = req.isolated ? std::string() : req.tenant;
  // A buffer shared across tenants is never kept: another tenant held its fd.
  // A new allocation may take over 0.1 s: not on the session socket's thread.
  auto lent = d.Lend(req.tenant, size, "buffer",
                     {.reuse_kept = !keep_for.empty(),
                      .may_create = !req.kept_only && req.may_wait,
                      .may_wait = req.may_wait});
  if (lent.status().code() == absl::StatusCode::kResourceExhausted) {
    return OutOfMemoryRefusal(
        StrCat("out of memory on ", d.info.uuid, ": cuMemCreate of ", size, " bytes failed"));
  }
  GPUBROKER_RETURN_IF_ERROR(lent.status());
  // The kept allocation's id where it was one (clients that kept it mapped
  // find it so), else a new one for memory that may be kept.
  const AllocationId id =
      lent->kept_id != 0 ? lent->kept_id : (keep_for.empty() ? 0 : NewAllocationId());
  ImportInfo info;
  info.kind = ImportKind::kCudaVmm;
  info.region_id = 0;
  info.mapped_size = size;
  info.device_uuid = d.info.uuid;
  info.fence_offset = FenceOffset(req.size);
  info.fence_value = NewFenceValue();  // new for every buffer: a kept word never reads as ready
  info.allocation_id = id;
  return std::make_unique<VmmBuffer>(device_, live_bytes_, std::move(claim),
                                     std::move(lent->memory), std::move(info), keep_for);
}

void VmmPath::AddUsage(DeviceUsage& usage) const {
  const uint64_t live = live_bytes_->load();
  usage.reserved_bytes += live + device_->kept.bytes();
  usage.used_bytes += live;
  usage.kept_bytes += device_->kept.bytes();
  usage.unmapping_bytes += device_->kept.draining_bytes();
}

}  // namespace gpubroker
