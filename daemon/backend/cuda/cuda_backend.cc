#include "daemon/backend/cuda/cuda_backend.h"

#include <algorithm>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "daemon/backend/cuda/arena_path.h"
#include "daemon/backend/cuda/device.h"
#include "daemon/backend/cuda/fence_page.h"
#include "daemon/backend/cuda/pool_path.h"
#include "daemon/backend/cuda/vmm_path.h"
#include "daemon/backend/leased_range.h"

namespace gpubroker {
namespace {

constexpr uint64_t kSmallAlignment = 512;

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

// One served GPU: its shared state and its paths.
struct CudaBackend::Device {
  std::shared_ptr<CudaDeviceState> state;
  std::shared_ptr<FencePages> fences;  // shared: its pages point back to it
  std::unique_ptr<BufferPath> small;
  ArenaPath* arena = nullptr;  // `small`, when it is the arena
  std::unique_ptr<VmmPath> vmm;
};

absl::StatusOr<uint64_t> ParsePoolBytes(const std::string& spec, uint64_t device_bytes) {
  auto parsed = ParseSizeOrShare(spec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(StrCat("--pool-bytes: ", View(parsed.status().message())));
  }
  const uint64_t bytes = parsed->Of(device_bytes);
  if (bytes > device_bytes) {
    return absl::InvalidArgumentError(StrCat("--pool-bytes: ", FormatBytes(bytes),
                                             " is more than the device has (",
                                             FormatBytes(device_bytes), ")"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("--pool-bytes must be positive");
  return bytes;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    std::vector<CudaDevice> devices, const CudaBackendOptions& options) {
  GPUBROKER_RETURN_IF_ERROR(cuda::DriverApi::Get().status());
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  backend->options_ = options;
  for (size_t i = 0; i < devices.size(); ++i) {
    CudaDevice& found = devices[i];
    GPUBROKER_ASSIGN_OR_RETURN(uint64_t capacity,
                               ParsePoolBytes(options.pool_bytes, found.total_bytes));
    GPUBROKER_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(found.ordinal));
    DeviceInfo info;
    info.uuid = found.uuid;
    info.name = found.name;
    info.backend = "cuda";
    info.ordinal = found.ordinal;
    info.total_bytes = found.total_bytes;
    info.capacity_bytes = capacity;
    info.compute_capability = found.ComputeCapability();
    backend->infos_.push_back(info);

    auto d = std::make_unique<Device>();
    d->state = std::make_shared<CudaDeviceState>(std::move(found), static_cast<int>(i), capacity,
                                                 std::move(stream));
    d->fences = std::make_shared<FencePages>(d->state, backend->regions_);
    if (options.small_buffers == SmallBuffers::kArena) {
      auto arena = std::make_unique<ArenaPath>(d->state, *d->fences, backend->regions_);
      d->arena = arena.get();
      d->small = std::move(arena);
    } else {
      d->small =
          std::make_unique<PoolPath>(d->state, *d->fences, backend->regions_, options.pool_retain);
    }
    d->vmm = std::make_unique<VmmPath>(d->state);
    backend->devices_.push_back(std::move(d));
  }
  return backend;
}

CudaBackend::~CudaBackend() = default;

bool CudaBackend::UsesVmm(uint64_t size, bool isolated) const {
  return isolated || size >= options_.vmm_threshold;
}

uint64_t CudaBackend::RoundedSize(int device, uint64_t size, bool isolated) const {
  if (UsesVmm(size, isolated)) {
    return VmmPath::RoundedSize(size, devices_[device]->state->info.vmm_granularity);
  }
  return RoundUp(size, kSmallAlignment);
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> CudaBackend::Allocate(const AllocationRequest& req) {
  if (req.device < 0 || req.device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(StrCat("no device ", req.device));
  }
  Device& d = *devices_[req.device];
  // Claim the estimate against the capacity first; the path resizes it to
  // what the buffer really takes.
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim,
                             d.state->lent->Take(RoundedSize(req.device, req.size, req.isolated)));
  BufferPath& path = UsesVmm(req.size, req.isolated) ? *d.vmm : *d.small;
  return path.Allocate(req, std::move(claim));
}

uint64_t CudaBackend::RangeLimit(int device) const {
  if (device < 0 || device >= static_cast<int>(devices_.size())) return 0;
  if (devices_[device]->arena == nullptr) return 0;
  // Under the VMM threshold, as every buffer of the arena is.
  const uint64_t below = options_.vmm_threshold > 512 ? options_.vmm_threshold - 512 : 0;
  return std::min(ArenaPath::RangeLimit(), below) / 512 * 512;
}

absl::StatusOr<std::unique_ptr<LeasedRange>> CudaBackend::LeaseRange(const RangeRequest& req) {
  if (req.device < 0 || req.device >= static_cast<int>(devices_.size()) ||
      devices_[req.device]->arena == nullptr) {
    return absl::FailedPreconditionError("ranges are leased on the cuda-arena path only");
  }
  Device& d = *devices_[req.device];
  GPUBROKER_ASSIGN_OR_RETURN(CapacityGuard::Claim claim, d.state->lent->Take(req.length));
  return d.arena->LeaseRange(req, std::move(claim));
}

void CudaBackend::SetMappingHolders(MappingHolders* holders) {
  for (auto& d : devices_) d->state->kept.set_holders(holders);
}

void CudaBackend::AllocationUnheld(AllocationId id) {
  for (auto& d : devices_) d->state->kept.Unheld(id);
}

absl::StatusOr<FdGrant> CudaBackend::ExportRegion(RegionId region, std::string_view tenant) {
  return regions_.Export(region, tenant);
}

DeviceUsage CudaBackend::Usage(int device) const {
  DeviceUsage u;
  if (device < 0 || device >= static_cast<int>(devices_.size())) return u;
  const Device& d = *devices_[device];
  u.capacity_bytes = d.state->capacity();
  u.zeroed_bytes = d.state->zeroed_bytes.load();
  d.fences->AddUsage(u);
  d.small->AddUsage(u);
  d.vmm->AddUsage(u);
  cuda::ScopedDevice on(d.state->info.ordinal);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    u.free_bytes = free;
  } else {
    cudaGetLastError();
  }
  return u;
}

}  // namespace gpubroker
