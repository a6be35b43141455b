#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/core/types.h"

namespace gpubroker {

/// How a client maps a buffer into its address space.
enum class ImportKind {
  kHostArena,  // map the tenant arena's fd at `offset`
  kHostFd,     // map the buffer's own memfd at 0
  kCudaPool,   // import the pool's fd once, then `export_data` per buffer
  kCudaVmm,    // import the buffer's own fd, reserve, map, set access
  kCudaArena,  // map the slab's fd (pool_id) once; the buffer is at `offset`
};

struct ImportInfo {
  ImportKind kind = ImportKind::kHostArena;
  PoolId pool_id = 0;  // 0: the buffer has an fd of its own
  uint64_t offset = 0;
  uint64_t mapped_size = 0;
  std::string export_data;  // cuda-pool: cudaMemPoolPtrExportData
  std::string device_uuid;
  // CUDA: the ready fence, a word that the producer sets to fence_value at
  // seal (see broker.proto): at fence_offset in the fence page fence_pool_id,
  // or, when that is 0, in the buffer itself.
  uint64_t fence_pool_id = 0;
  uint64_t fence_offset = 0;
  uint64_t fence_value = 0;
};

/// What travels with a descriptor on session.sock.
enum class FdKind { kHostArena, kHostBuffer, kCudaPool, kCudaVmm, kCudaFences, kCudaSlab };

struct FdGrant {
  UniqueFd fd;
  FdKind kind = FdKind::kHostArena;
  uint64_t size = 0;
  std::string device_uuid;
};

/// One allocation. Destroying it gives the memory back to its pool; the
/// registry destroys buffers only outside its lock, and only once no lease
/// remains (an importer must have unmapped first: CUDA's free-order rule).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  /// Bytes taken from the device (the request rounded to the granularity).
  virtual uint64_t reserved_size() const = 0;
  virtual const ImportInfo& import_info() const = 0;
  /// A fresh descriptor that exposes this buffer and nothing else. Only for
  /// buffers with an fd of their own (import_info().pool_id == 0).
  virtual absl::StatusOr<FdGrant> ExportFd() = 0;
};

struct AllocationRequest {
  int device = 0;  // index into Backend::devices()
  std::string tenant;
  uint64_t size = 0;
  // Shared across tenants: the memory must come with an fd of its own, so
  // that a descriptor handed to one tenant exposes no memory of another.
  bool isolated = false;
};

/// A source of device memory. One implementation per kind of memory: host
/// (memfd arenas), cuda-pool (cudaMallocAsync IPC pools), cuda-vmm (cuMemCreate).
/// Thread-safe; never called with the registry's lock held.
class Backend {
 public:
  virtual ~Backend() = default;

  /// "host" or "cuda".
  virtual std::string_view name() const = 0;
  virtual const std::vector<DeviceInfo>& devices() const = 0;

  /// The bytes an allocation of `size` would take (granularity, VMM routing).
  virtual uint64_t RoundedSize(int device, uint64_t size, bool isolated) const = 0;

  /// RESOURCE_EXHAUSTED when the device or pool is full, with the numbers.
  virtual absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) = 0;

  /// The descriptor of pool `pool` for a client of `tenant`; NOT_FOUND when the
  /// pool does not exist or belongs to another tenant.
  virtual absl::StatusOr<FdGrant> ExportPool(PoolId pool, std::string_view tenant) = 0;

  virtual DeviceUsage Usage(int device) const = 0;

  /// Allocations under this size, and not shared across tenants, are quick
  /// (no new device allocation of that size): they may be served on the
  /// session socket's one thread. Larger ones go through gRPC, whose threads
  /// may take the time a new VMM allocation takes (over 0.1 s at 40 GiB).
  virtual uint64_t QuickAllocationLimit() const { return UINT64_MAX; }

  /// Whether an allocation of `size` makes memory with a descriptor of its own
  /// (which the daemon holds while the buffer lives) rather than a range of a
  /// tenant's pool: shares across tenants always do, and on the CUDA backends
  /// so do the allocations that are not quick (VMM allocations).
  virtual bool OwnsDescriptor(int /*device*/, uint64_t size, bool isolated) const {
    return isolated || size >= QuickAllocationLimit();
  }
};

}  // namespace gpubroker
