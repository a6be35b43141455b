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
// How long an allocation waits for clients to unmap kept memory it needs.
constexpr auto kDrainWait = std::chrono::seconds(2);

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

absl::StatusOr<CudaDeviceState::Lent> CudaDeviceState::Lend(const std::string& tenant,
                                                            uint64_t size, std::string_view what,
                                                            const LendOptions& options) {
  cuda::ScopedDevice on(info.ordinal);
  GPUBROKER_RETURN_IF_ERROR(on.status());
  std::optional<ExportedVmm> memory;
  AllocationId kept_id = 0;
  if (options.reuse_kept) {
    if (auto found = kept.Take(tenant, size)) {
      kept_id = found->first;  // the same memory: clients that kept it mapped find it so
      memory = std::move(static_cast<KeptVmm&>(*found->second)).Take();
    }
  }
  if (!memory) {
    if (!options.may_create) {
      // A new allocation may take over 0.1 s: not on the session socket's thread.
      return AskThroughGrpc(StrCat("no kept allocation of ", FormatBytes(size), " on ", info.uuid,
                                   " for tenant '", tenant, "'"));
    }
    GPUBROKER_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::DriverApi::Get());
    GPUBROKER_RETURN_IF_ERROR(
        kept.MakeRoom(lent->used(), 0, capacity(), options.may_wait, kDrainWait, info.uuid));
    const auto start = std::chrono::steady_clock::now();
    auto made = ExportedVmm::Create(*api, info.ordinal, size, what);
    if (made.status().code() == absl::StatusCode::kResourceExhausted) {
      // Fuller than the books say (someone else took device memory): kept
      // memory goes first; what clients still map goes once they have
      // unmapped it (they are asked to), which only a caller that may wait
      // waits for.
      bool retry = kept.Drop() > 0;
      if (kept.draining_bytes() > 0) {
        if (!options.may_wait) {
          return AskThroughGrpc(StrCat("a ", what, " for tenant '", tenant, "' on ", info.uuid,
                                       " needs memory that clients are unmapping"));
        }
        retry = kept.WaitDrained(kDrainWait) || retry;
      }
      if (retry) made = ExportedVmm::Create(*api, info.ordinal, size, what);
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
  return Lent{std::move(*memory), kept_id};
}

}  // namespace gpubroker
