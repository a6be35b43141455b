#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/backend/region_table.h"
#include "daemon/backend/types.h"

namespace gpubroker {

/// One allocation. Destroying it gives the memory back to its pool; the
/// registry destroys buffers only outside its lock, and only once no lease
/// remains (an importer must have unmapped first: CUDA's free-order rule).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  /// Bytes taken from the device (the request rounded to the granularity).
  virtual uint64_t reserved_size() const = 0;
  virtual const ImportInfo& import_info() const = 0;
  /// A buffer with an fd of its own (import_info().region_id == 0): the
  /// memory behind that fd, which exposes this buffer and nothing else. Null
  /// for a buffer that lives in a region of its tenant.
  virtual const ExportedRegion* own_region() const { return nullptr; }
};

struct AllocationRequest {
  int device = 0;  // index into Backend::devices()
  std::string tenant;
  uint64_t size = 0;
  // Shared across tenants: the memory must come with an fd of its own, so
  // that a descriptor handed to one tenant exposes no memory of another.
  bool isolated = false;
};

/// A source of device memory: host (memfd arenas) or cuda (arena slabs,
/// cudaMallocAsync IPC pools, cuMemCreate). Thread-safe; never called with
/// the registry's lock held. A backend outlives the buffers it made.
class Backend {
 public:
  virtual ~Backend() = default;

  /// "host" or "cuda".
  virtual std::string_view name() const = 0;
  virtual const std::vector<DeviceInfo>& devices() const = 0;

  /// The bytes an allocation of `size` would take (granularity, VMM routing).
  virtual uint64_t RoundedSize(int device, uint64_t size, bool isolated) const = 0;

  /// RESOURCE_EXHAUSTED (OUT_OF_MEMORY, or LIMIT for a count the device
  /// keeps) when there is no room, with the numbers.
  virtual absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& req) = 0;

  /// The descriptor of region `region` for a client of `tenant`; NOT_FOUND
  /// when the region does not exist or belongs to another tenant.
  virtual absl::StatusOr<FdGrant> ExportRegion(RegionId region, std::string_view tenant) = 0;

  /// A session received region `region`'s descriptor for its first time
  /// (RegionHeld), or ended having received it (RegionUnheld): the sessions
  /// that may have it mapped. A path may give a region that no buffer uses
  /// back to the device once no session holds it. Unknown ids are ignored.
  virtual void RegionHeld(RegionId /*region*/) {}
  virtual void RegionUnheld(RegionId /*region*/) {}

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
