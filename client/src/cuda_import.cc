// Importing CUDA buffers into a client process: a pool once per process, a
// pointer per buffer; a VMM allocation per buffer; the ready fence, a word in
// the tenant's fence page or in the buffer itself.
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "client/src/client_impl.h"
#include "common/cuda/cuda_util.h"
#include "common/strings.h"
#include "gpubroker/error.hpp"

namespace gpubroker::detail {
namespace {

void Check(cudaError_t err, std::string_view what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    ThrowStatus(cuda::RuntimeError(err, what));
  }
}

int Ordinal(std::string_view uuid) {
  auto ordinal = cuda::OrdinalOf(uuid);
  if (!ordinal.ok()) ThrowStatus(ordinal.status());
  return *ordinal;
}

const cuda::DriverApi& Driver() {
  auto api = cuda::DriverApi::Get();
  if (!api.ok()) ThrowStatus(api.status());
  return **api;
}

// Unmapping does not wait for kernels that still use the range: synchronize first.
void UnmapVmm(int device, CUdeviceptr ptr, size_t size) {
  const cuda::DriverApi& api = Driver();
  cuda::ScopedDevice on(device);
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  api.cuMemUnmap(ptr, size);
  api.cuMemAddressFree(ptr, size);
}

// One stream per device that the library owns, for ReadyStream. Never
// destroyed: interfaces hand it out, and a consumer may still hold it at exit.
CUstream OwnStream(int device) {
  static std::mutex mu;
  static auto* streams = new std::map<int, cudaStream_t>();
  std::lock_guard lock(mu);
  cudaStream_t& s = (*streams)[device];
  if (s == nullptr) {
    cuda::ScopedDevice on(device);
    if (!on.status().ok()) ThrowStatus(on.status());
    Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  return reinterpret_cast<CUstream>(s);
}

// Events for RecordDone, kept per device for reuse (made without timing, the
// cheapest kind to record and query). Never destroyed, as OwnStream's.
std::mutex events_mu;
std::map<int, std::vector<cudaEvent_t>>* events = new std::map<int, std::vector<cudaEvent_t>>();

cudaEvent_t TakeEvent(int device) {
  {
    std::lock_guard lock(events_mu);
    auto& free = (*events)[device];
    if (!free.empty()) {
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void GiveEvent(int device, cudaEvent_t e) {
  std::lock_guard lock(events_mu);
  (*events)[device].push_back(e);
}

class CudaMapping : public Mapping {
 public:
  CudaMapping(int device, void* ptr, uint64_t fence_page, const ImportFacts& import)
      : device_(device),
        ptr_(ptr),
        fence_((fence_page != 0 ? fence_page : reinterpret_cast<CUdeviceptr>(ptr)) +
               import.fence_offset),
        fence_value_(import.fence_value) {}
  void* data() const override { return ptr_; }
  int device_ordinal() const override { return device_; }

  // The fence is a word of device memory: the producer sets it in stream
  // order after its writes; a consumer's stream waits until it holds the
  // value. (The default write orders the producer's earlier writes before it,
  // as a release would.)
  void RecordReady(void* stream) override {
    const cuda::DriverApi& api = Driver();
    cuda::ScopedDevice on(device_);
    if (auto s = api.Check(api.cuStreamWriteValue64(static_cast<CUstream>(stream), fence_,
                                                    fence_value_, CU_STREAM_WRITE_VALUE_DEFAULT),
                           "cuStreamWriteValue64");
        !s.ok()) {
      ThrowStatus(s);
    }
  }
  void WaitReady(void* stream) override {
    const cuda::DriverApi& api = Driver();
    cuda::ScopedDevice on(device_);
    if (auto s = api.Check(api.cuStreamWaitValue64(static_cast<CUstream>(stream), fence_,
                                                   fence_value_, CU_STREAM_WAIT_VALUE_EQ),
                           "cuStreamWaitValue64");
        !s.ok()) {
      ThrowStatus(s);
    }
  }
  void* ReadyStream() override {
    CUstream stream = OwnStream(device_);
    WaitReady(stream);
    return stream;
  }
  void* RecordDone(void* stream) override {
    cuda::ScopedDevice on(device_);
    if (!on.status().ok()) ThrowStatus(on.status());
    cudaEvent_t e = TakeEvent(device_);
    if (cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
        err != cudaSuccess) {
      GiveEvent(device_, e);
      Check(err, "cudaEventRecord (release_on: is the stream of the buffer's device?)");
    }
    return e;
  }

 protected:
  // CUDA does not work in a process made by fork(): there the mapping is
  // left as the parent made it.
  bool forked() const { return ForkedSince(fork_generation_); }

  const int device_;
  void* const ptr_;
  const CUdeviceptr fence_;
  const uint64_t fence_value_;
  const uint64_t fork_generation_ = ForkGeneration();
};

class PoolPointer final : public CudaMapping {
 public:
  using CudaMapping::CudaMapping;
  ~PoolPointer() override {
    // cudaFree of an imported pointer waits for the work that uses it, which
    // is what must precede the lease's release (and so the owner's free).
    if (forked()) return;
    cuda::ScopedDevice on(device_);
    if (cudaFree(ptr_) != cudaSuccess) cudaGetLastError();
  }
};

// A range of an arena slab that the client keeps mapped: nothing to unmap.
class ArenaView final : public CudaMapping {
 public:
  using CudaMapping::CudaMapping;
  ~ArenaView() override {
    // What cudaFree does for a pool import: the work that uses the range
    // completes before the lease's release lets the daemon lend it again.
    if (forked() || done_) return;
    cuda::ScopedDevice on(device_);
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  }
};

// A client-made buffer in one of this client's ranges: nothing to unmap.
class LocalArenaBlock final : public CudaMapping {
 public:
  LocalArenaBlock(int device, void* ptr, const ImportFacts& fence, const LocalBlock& block)
      : CudaMapping(device, ptr, 0, fence), block_(block) {}
  ~LocalArenaBlock() override {
    // As for a range of the daemon's arena: the work that uses the block
    // completes before the block can be handed out again.
    if (done_) return;
    cuda::ScopedDevice on(device_);
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  }
  const LocalBlock* local_block() const override { return &block_; }

 private:
  LocalBlock block_;
};

// A VMM allocation imported and mapped here: it may outlive the buffer that
// brought it, in the mapping cache, for the next buffer served from it.
class VmmMemory final : public CachedMapping {
 public:
  VmmMemory(int device, CUdeviceptr ptr, size_t size) : device_(device), ptr_(ptr), size_(size) {}
  ~VmmMemory() override {
    // CUDA does not work in a process made by fork(): left as the parent made it.
    if (!ForkedSince(fork_generation_)) UnmapVmm(device_, ptr_, size_);
  }
  void* data() const override { return reinterpret_cast<void*>(ptr_); }
  uint64_t size() const override { return size_; }

 private:
  const int device_;
  const CUdeviceptr ptr_;
  const size_t size_;
  const uint64_t fork_generation_ = ForkGeneration();
};

// A buffer of memory of its own: a view of its VMM mapping, with its fence.
class VmmView final : public CudaMapping {
 public:
  VmmView(int device, std::unique_ptr<CachedMapping> memory, uint64_t fence_page,
          const ImportFacts& import)
      : CudaMapping(device, memory->data(), fence_page, import),
        memory_(std::move(memory)),
        allocation_id_(import.allocation_id) {}

  uint64_t allocation_id() const override { return allocation_id_; }
  std::unique_ptr<CachedMapping> TakeMemory() override {
    // What unmapping would wait for: the work that uses the buffer completes
    // before its lease drops, and with it the daemon may serve the memory
    // to the next buffer.
    if (!forked() && !done_) {
      cuda::ScopedDevice on(device_);
      if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    }
    return std::move(memory_);
  }

 private:
  std::unique_ptr<CachedMapping> memory_;  // unmaps, unless the cache took it
  const uint64_t allocation_id_;
};

}  // namespace

void* ImportCudaPool(UniqueFd fd, const std::string& device_uuid) {
  cuda::ScopedDevice on(Ordinal(device_uuid));
  if (!on.status().ok()) ThrowStatus(on.status());
  cudaMemPool_t pool = nullptr;
  // The descriptor goes in by value (it comes out of the export by pointer).
  Check(cudaMemPoolImportFromShareableHandle(
            &pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
            cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolImportFromShareableHandle");
  return pool;  // fd closes here: the import holds the pool
}

std::unique_ptr<Mapping> MapCudaPoolBuffer(void* pool, uint64_t fence_page,
                                           const ImportFacts& import) {
  const int device = Ordinal(import.device_uuid);
  cuda::ScopedDevice on(device);
  if (!on.status().ok()) ThrowStatus(on.status());
  if (import.export_data.size() != sizeof(cudaMemPoolPtrExportData)) {
    ThrowError(ErrorCode::kInternal, "malformed pool export data from the daemon");
  }
  cudaMemPoolPtrExportData data;
  std::memcpy(&data, import.export_data.data(), sizeof(data));
  void* ptr = nullptr;
  Check(cudaMemPoolImportPointer(&ptr, static_cast<cudaMemPool_t>(pool), &data),
        "cudaMemPoolImportPointer");
  return std::make_unique<PoolPointer>(device, ptr, fence_page, import);
}

namespace {

// Imports a VMM descriptor (consumed) and maps it, readable and writable by
// `device`; the device address.
CUdeviceptr MapVmm(UniqueFd fd, int device, size_t size) {
  const cuda::DriverApi& api = Driver();
  CUmemGenericAllocationHandle handle = 0;
  auto check = [&](CUresult r, const char* what) {
    if (auto s = api.Check(r, what); !s.ok()) ThrowStatus(s);
  };
  check(api.cuMemImportFromShareableHandle(
            &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  fd.reset();
  CUdeviceptr ptr = 0;
  CUresult r = api.cuMemAddressReserve(&ptr, size, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    api.cuMemRelease(handle);
    check(r, "cuMemAddressReserve");
  }
  r = api.cuMemMap(ptr, size, 0, handle, 0);
  api.cuMemRelease(handle);  // the mapping keeps the allocation alive
  if (r != CUDA_SUCCESS) {
    api.cuMemAddressFree(ptr, size);
    check(r, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = api.cuMemSetAccess(ptr, size, &access, 1);
  if (r != CUDA_SUCCESS) {
    api.cuMemUnmap(ptr, size);
    api.cuMemAddressFree(ptr, size);
    check(r, "cuMemSetAccess");
  }
  return ptr;
}

}  // namespace

uint64_t MapCudaShared(UniqueFd fd, const std::string& device_uuid, uint64_t size) {
  const int device = Ordinal(device_uuid);
  cuda::ScopedDevice on(device);
  if (!on.status().ok()) ThrowStatus(on.status());
  return MapVmm(std::move(fd), device, size);
}

void UnmapCudaShared(uint64_t address, uint64_t size, const std::string& device_uuid) {
  // Called from a destructor: nothing to undo when CUDA never came up.
  auto device = cuda::OrdinalOf(device_uuid);
  if (!device.ok() || !cuda::DriverApi::Get().ok()) return;
  UnmapVmm(*device, address, size);
}

std::unique_ptr<Mapping> MapCudaArenaBuffer(uint64_t slab, uint64_t fence_page,
                                            const ImportFacts& import) {
  const int device = Ordinal(import.device_uuid);
  return std::make_unique<ArenaView>(device, reinterpret_cast<void*>(slab + import.offset),
                                     fence_page, import);
}

std::unique_ptr<Mapping> MapCudaLocalBlock(const LocalBlock& block, uint64_t address,
                                           const std::string& device_uuid) {
  ImportFacts fence;
  fence.fence_offset = block.fence_offset;
  fence.fence_value = block.fence_value;
  return std::make_unique<LocalArenaBlock>(Ordinal(device_uuid), reinterpret_cast<void*>(address),
                                           fence, block);
}

std::unique_ptr<CachedMapping> ImportCudaVmm(UniqueFd fd, const ImportFacts& import) {
  const int device = Ordinal(import.device_uuid);
  cuda::ScopedDevice on(device);
  if (!on.status().ok()) ThrowStatus(on.status());
  const size_t size = import.mapped_size;
  const CUdeviceptr ptr = MapVmm(std::move(fd), device, size);
  return std::make_unique<VmmMemory>(device, ptr, size);
}

std::unique_ptr<Mapping> MapCudaVmmBuffer(std::unique_ptr<CachedMapping> memory,
                                          uint64_t fence_page, const ImportFacts& import) {
  return std::make_unique<VmmView>(Ordinal(import.device_uuid), std::move(memory), fence_page,
                                   import);
}

void CudaSynchronize(int device) {
  cuda::ScopedDevice on(device);
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
}

bool CudaWorkDone(int device, void* event, bool wait) {
  auto e = static_cast<cudaEvent_t>(event);
  cudaError_t err = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
  if (err == cudaErrorNotReady) return false;
  if (err != cudaSuccess) {
    cudaGetLastError();
    cuda::ScopedDevice on(device);
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  }
  GiveEvent(device, e);
  return true;
}

}  // namespace gpubroker::detail
