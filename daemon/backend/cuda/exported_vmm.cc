#include "daemon/backend/cuda/exported_vmm.h"

#include <utility>

#include "common/status_macros.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

absl::StatusOr<ExportedVmm> ExportedVmm::Create(const cuda::DriverApi& api, int ordinal,
                                                uint64_t size, std::string_view what) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  ExportedVmm m;
  m.api_ = &api;
  m.size_ = size;
  if (auto s = api.Check(api.cuMemCreate(&m.handle_, size, &prop, 0),
                         StrCat("cuMemCreate (", what, ")"));
      !s.ok()) {
    m.handle_ = 0;
    return s;
  }
  int fd = -1;
  GPUBROKER_RETURN_IF_ERROR(api.Check(
      api.cuMemExportToShareableHandle(&fd, m.handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      StrCat("cuMemExportToShareableHandle (", what, ")")));
  m.fd_.reset(fd);
  return m;
}

ExportedVmm::ExportedVmm(ExportedVmm&& o) noexcept
    : api_(o.api_),
      handle_(std::exchange(o.handle_, 0)),
      fd_(std::move(o.fd_)),
      size_(o.size_),
      lent_to_(std::move(o.lent_to_)) {}

ExportedVmm& ExportedVmm::operator=(ExportedVmm&& o) noexcept {
  if (this != &o) {
    Release();
    api_ = o.api_;
    handle_ = std::exchange(o.handle_, 0);
    fd_ = std::move(o.fd_);
    size_ = o.size_;
    lent_to_ = std::move(o.lent_to_);
  }
  return *this;
}

absl::Status ExportedVmm::Zero(int ordinal, cudaStream_t stream) const {
  const cuda::DriverApi& api = *api_;
  CUdeviceptr ptr = 0;
  GPUBROKER_RETURN_IF_ERROR(
      api.Check(api.cuMemAddressReserve(&ptr, size_, 0, 0, 0), "cuMemAddressReserve (zero)"));
  absl::Status status = api.Check(api.cuMemMap(ptr, size_, 0, handle_, 0), "cuMemMap (zero)");
  const bool mapped = status.ok();
  if (status.ok()) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = ordinal;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = api.Check(api.cuMemSetAccess(ptr, size_, &access, 1), "cuMemSetAccess (zero)");
  }
  if (status.ok()) {
    void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
    if (cudaError_t e = cudaMemsetAsync(p, 0, size_, stream); e != cudaSuccess) {
      status = cuda::RuntimeError(e, "cudaMemsetAsync (zero)");
    } else if (e = cudaStreamSynchronize(stream); e != cudaSuccess) {
      status = cuda::RuntimeError(e, "cudaStreamSynchronize (zero)");
    }
  }
  // Unmapped whatever happened: the daemon keeps no mapping of lent memory.
  if (mapped) {
    if (auto s = api.Check(api.cuMemUnmap(ptr, size_), "cuMemUnmap (zero)"); !s.ok()) {
      spdlog::error("cuda: {}", std::string(View(s.message())));
    }
  }
  if (auto s = api.Check(api.cuMemAddressFree(ptr, size_), "cuMemAddressFree (zero)"); !s.ok()) {
    spdlog::error("cuda: {}", std::string(View(s.message())));
  }
  return status;
}

ExportedVmm::~ExportedVmm() { Release(); }

void ExportedVmm::Release() {
  fd_.reset();
  if (handle_ == 0) return;
  if (auto s = api_->Check(api_->cuMemRelease(handle_), "cuMemRelease"); !s.ok()) {
    spdlog::error("cuda: {}", std::string(View(s.message())));
  }
  handle_ = 0;
}

}  // namespace gpubroker
