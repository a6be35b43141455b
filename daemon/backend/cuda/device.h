#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/cuda/cuda_util.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/capacity_guard.h"
#include "daemon/backend/cuda/devices.h"
#include "daemon/backend/cuda/exported_vmm.h"

namespace gpubroker {

/// A CUDA stream of one device, destroyed with it.
class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create(int ordinal);
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&&) = delete;
  ~CudaStream();
  cudaStream_t get() const { return stream_; }

 private:
  CudaStream(int ordinal, cudaStream_t stream) : ordinal_(ordinal), stream_(stream) {}
  int ordinal_;
  cudaStream_t stream_;
};

/// A CUDA memory pool, destroyed with it.
class CudaMemPool {
 public:
  static absl::StatusOr<CudaMemPool> Create(int ordinal, const cudaMemPoolProps& props);
  CudaMemPool(CudaMemPool&& other) noexcept;
  CudaMemPool& operator=(CudaMemPool&&) = delete;
  ~CudaMemPool();
  cudaMemPool_t get() const { return pool_; }
  /// An attribute's value; 0 when the driver refuses.
  uint64_t Attribute(cudaMemPoolAttr attr) const;

 private:
  CudaMemPool(int ordinal, cudaMemPool_t pool) : ordinal_(ordinal), pool_(pool) {}
  int ordinal_;
  cudaMemPool_t pool_;
};

/// One GPU that the backend serves, and what every path on it shares: the
/// bytes lent out of its capacity, a stream, the VMM allocations held and the
/// ones kept for reuse. Buffers hold it (shared) as long as they live.
///
/// Lend() is the one place where VMM memory changes tenant: every slab, fence
/// page and VMM buffer comes from it, and so does every reuse of a kept
/// allocation. Its rule: memory reaches a tenant holding none of another
/// tenant's bytes.
struct CudaDeviceState {
  CudaDevice info;
  int index = 0;  // position in Backend::devices()
  std::shared_ptr<CapacityGuard> lent;
  CudaStream stream;
  // VMM allocations in use on the device (slabs, fence pages, VMM buffers;
  // not the kept ones), which bound the size of a new slab.
  std::atomic<uint64_t> vmm_held{0};
  KeptAllocations kept;                   // freed tenant-private VMM allocations (KeptVmm)
  std::atomic<uint64_t> zeroed_bytes{0};  // by Lend, since start

  CudaDeviceState(CudaDevice d, int i, uint64_t capacity, CudaStream s);
  uint64_t capacity() const { return lent->capacity(); }
  /// The VMM granularity, at least 2 MiB.
  uint64_t granularity() const;
  /// Where Lend may take memory from.
  struct LendOptions {
    bool reuse_kept = false;  // one of the tenant's kept allocations of the size, if one is
    bool may_create = true;   // false: a miss is ABORTED (AskThroughGrpc), nothing is made
    bool may_wait = true;     // may wait for clients to unmap kept memory the room needs
  };
  /// What Lend gives: the memory, and the id of the kept allocation it was
  /// (0 when it is new).
  struct Lent {
    ExportedVmm memory;
    AllocationId kept_id = 0;
  };

  /// `size` bytes of VMM memory (a multiple of the granularity) for `tenant`:
  /// one of the tenant's kept allocations of that size where allowed and one
  /// is kept, else a new one. Lent plus kept stays within the capacity: kept
  /// memory goes first, and memory that clients still map goes once they
  /// have unmapped it (KeptAllocations::MakeRoom), which only a caller that
  /// may wait waits for (the others get ABORTED, to ask again through gRPC).
  /// Memory that was last lent to another tenant, and memory new from the
  /// driver (which may hand back pages this daemon released for another
  /// tenant: CUDA does not promise to clear them), is zeroed on the device
  /// before it is returned; a tenant's own kept memory is not (as with any
  /// caching allocator). RESOURCE_EXHAUSTED when the device has no room (the
  /// caller words the refusal). Makes the device current itself.
  absl::StatusOr<Lent> Lend(const std::string& tenant, uint64_t size, std::string_view what,
                            const LendOptions& options);
};

/// One way of making GPU buffers on one device: arena slabs, CUDA pools, or
/// VMM allocations of their own. The backend routes each request to one.
class BufferPath {
 public:
  virtual ~BufferPath() = default;
  /// A buffer of `req.size` bytes for `req.tenant`, holding `claim` (the
  /// bytes it may take out of the device's capacity, resized to what it took).
  virtual absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req,
                                                                  CapacityGuard::Claim claim) = 0;
  /// Adds what this path has reserved and lent on the device.
  virtual void AddUsage(DeviceUsage& usage) const = 0;
};

}  // namespace gpubroker
