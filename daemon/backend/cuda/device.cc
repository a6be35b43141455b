#include "daemon/backend/cuda/device.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

// New allocations, and zeroing, slower than these are logged with what they took.
constexpr auto kSlowAllocation = std::chrono::milliseconds(20);
constexpr auto kSlowZeroing = std::chrono::milliseconds(5);

}  // namespace

absl::StatusOr<CudaStream> CudaStream::Create(int ordinal) {
  cuda::ScopedDevice on(ordinal);
  GPUBROKER_RETURN_IF_ERROR(on.status());
  cudaStream_t stream = nullptr;
  GPUBROKER_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(ordinal, stream);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : ordinal_(other.ordinal_), stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  cuda::ScopedDevice on(ordinal_);
  if (const cudaError_t err = cudaStreamDestroy(stream_); err != cudaSuccess) {
    spdlog::error("cuda: cudaStreamDestroy: {}", cudaGetErrorString(err));
    cudaGetLastError();
  }
}

absl::StatusOr<CudaMemPool> CudaMemPool::Create(int ordinal, const cudaMemPoolProps& props) {
  cuda::ScopedDevice on(ordinal);
  GPUBROKER_RETURN_IF_ERROR(on.status());
  cudaMemPool_t pool = nullptr;
  GPUBROKER_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
  return CudaMemPool(ordinal, pool);
}

CudaMemPool::CudaMemPool(CudaMemPool&& other) noexcept
    : ordinal_(other.ordinal_), pool_(std::exchange(other.pool_, nullptr)) {}

CudaMemPool::~CudaMemPool() {
  if (pool_ == nullptr) return;
  cuda::ScopedDevice on(ordinal_);
  if (const cudaError_t err = cudaMemPoolDestroy(pool_); err != cudaSuccess) {
    spdlog::error("cuda: cudaMemPoolDestroy: {}", cudaGetErrorString(err));
    cudaGetLastError();
  }
}

uint64_t CudaMemPool::Attribute(cudaMemPoolAttr attr) const {
  cuuint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool_, attr, &value) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<uint64_t>(value);
}

CudaDeviceState::CudaDeviceState(CudaDevice d, int i, uint64_t capacity, CudaStream s)
    : info(std::move(d)),
      index(i),
      lent(std::make_shared<CapacityGuard>(capacity, StrCat("device ", info.uuid))),
      stream(std::move(s)) {}

uint64_t CudaDeviceState::granularity() const {
  return std::max<uint64_t>(info.vmm_granularity, uint64_t{2} << 20);
}

void CudaDeviceState::MakeRoomForLent() {
  if (lent->used() + kept.bytes() > lent->capacity()) kept.Drop();
}

absl::StatusOr<ExportedVmm> CudaDeviceState::Lend(const std::string& tenant, uint64_t size,
                                                  std::string_view what, bool reuse_kept) {
  cuda::ScopedDevice on(info.ordinal);
  GPUBROKER_RETURN_IF_ERROR(on.status());
  std::optional<ExportedVmm> memory;
  if (reuse_kept) memory = kept.Take(tenant, size);
  if (!memory) {
    GPUBROKER_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::DriverApi::Get());
    MakeRoomForLent();
    const auto start = std::chrono::steady_clock::now();
    auto made = ExportedVmm::Create(*api, info.ordinal, size, what);
    if (made.status().code() == absl::StatusCode::kResourceExhausted && kept.Drop() > 0) {
      made = ExportedVmm::Create(*api, info.ordinal, size, what);
    }
    GPUBROKER_RETURN_IF_ERROR(made.status());
    memory = std::move(*made);
    if (const auto took = std::chrono::steady_clock::now() - start; took > kSlowAllocation) {
      spdlog::info("cuda: a new {} {} on {} took {:.1f} ms", FormatBytes(size), what, info.uuid,
                   std::chrono::duration<double, std::milli>(took).count());
    }
  }
  if (memory->lent_to() != tenant) {
    const auto start = std::chrono::steady_clock::now();
    GPUBROKER_RETURN_IF_ERROR(memory->Zero(info.ordinal, stream.get()));
    zeroed_bytes += size;
    const auto took = std::chrono::steady_clock::now() - start;
    if (took > kSlowZeroing) {
      spdlog::info("cuda: zeroing a {} {} for tenant '{}' on {} took {:.1f} ms", FormatBytes(size),
                   what, tenant, info.uuid,
                   std::chrono::duration<double, std::milli>(took).count());
    }
    memory->set_lent_to(tenant);
  }
  return std::move(*memory);
}

}  // namespace gpubroker
