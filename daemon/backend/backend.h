#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/backend/kept_allocations.h"
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
  // The caller may wait (a gRPC thread): for a new VMM allocation, or for
  // clients to unmap kept memory that must go. False on session.sock's one
  // thread: such an allocation is refused with ABORTED, and the client
  // asks again through gRPC.
  bool may_wait = true;
  // Serve it only from a kept allocation of the tenant's (session.sock, at or
  // over QuickAllocationLimit: common/wire/routing.h); otherwise ABORTED.
  bool kept_only = false;
};

class LeasedRange;

/// A range of a tenant's arena for one session to carve buffers from.
struct RangeRequest {
  int device = 0;
  std::string tenant;
  uint64_t length = 0;  // a multiple of RangeGranularity()
  // As AllocationRequest::may_wait: ranges are leased on session.sock, whose
  // thread may not wait for clients to unmap memory that must make room.
  bool may_wait = false;
};

/// A source of device memory: host (memfd arenas) or cuda (arena slabs,
/// cudaMallocAsync IPC pools, cuMemCreate). Thread-safe; never called with
/// the registry's lock held, but for RegionHeld. A backend outlives the buffers it made.
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

  /// A session holds region `region` from now on (RegionHeld: it was told
  /// of a buffer there, or received its descriptor), or ended holding it
  /// (RegionUnheld): the sessions that may have it mapped. A path may give a
  /// region that no buffer uses back to the device once no session holds it.
  /// Unknown ids are ignored. RegionHeld only counts, and may be called under
  /// the registry's lock (the one call that is).
  virtual void RegionHeld(RegionId /*region*/) {}
  virtual void RegionUnheld(RegionId /*region*/) {}

  virtual DeviceUsage Usage(int device) const = 0;

  /// Allocations under this size, and not shared across tenants, are quick
  /// (no new device allocation of that size): they may be served on the
  /// session socket's one thread. Larger ones go through gRPC, whose threads
  /// may take the time a new VMM allocation takes (over 0.1 s at 40 GiB).
  virtual uint64_t QuickAllocationLimit() const { return UINT64_MAX; }

  // Range leases (docs/fast-path.md) ---------------------------------------

  /// The largest range this backend leases on `device`; 0: none.
  virtual uint64_t RangeLimit(int /*device*/) const { return 0; }
  /// Ranges are multiples of this, and so are their offsets in their region.
  virtual uint64_t RangeGranularity(int /*device*/) const { return 4096; }
  /// A range of the tenant's arena; RESOURCE_EXHAUSTED when there is no room.
  /// (The default leases none: UNIMPLEMENTED.)
  virtual absl::StatusOr<std::unique_ptr<LeasedRange>> LeaseRange(const RangeRequest& req);

  // Kept allocations and the clients' mappings of them (docs/fast-path.md) ---

  /// Who keeps allocations mapped (the registry); set once, before serving.
  virtual void SetMappingHolders(MappingHolders* /*holders*/) {}
  /// The last session that kept `id` mapped has unmapped it (or ended).
  virtual void AllocationUnheld(AllocationId /*id*/) {}
  /// Whether an allocation of `size` makes memory with a descriptor of its own
  /// (which the daemon holds while the buffer lives) rather than a range of a
  /// tenant's pool: shares across tenants always do, and on the CUDA backends
  /// so do the allocations that are not quick (VMM allocations).
  virtual bool OwnsDescriptor(int /*device*/, uint64_t size, bool isolated) const {
    return isolated || size >= QuickAllocationLimit();
  }
};

}  // namespace gpubroker
