#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/backend/types.h"

namespace gpubroker {

/// Memory behind one descriptor that may be handed to clients: a tenant's
/// arena, slab, CUDA pool or fence page (exported by id through a
/// RegionTable), or a buffer's own allocation (exported through its buffer,
/// to the sessions that hold a lease on it).
class ExportedRegion {
 public:
  virtual ~ExportedRegion() = default;
  /// A fresh descriptor, with what travels with it.
  virtual absl::StatusOr<FdGrant> Export() const = 0;
};

/// The regions of one backend that clients fetch by id, each for its own
/// tenant's clients only. Regions stay for the backend's life; ids are never
/// reused. Thread-safe.
class RegionTable {
 public:
  /// Enters `region` as `tenant`'s and returns its id (never 0).
  RegionId Add(std::string tenant, std::shared_ptr<const ExportedRegion> region);

  /// A descriptor of region `id` for a client of `tenant`. NOT_FOUND, with the
  /// same words, when there is no such region and when it is another tenant's.
  absl::StatusOr<FdGrant> Export(RegionId id, std::string_view tenant) const;

 private:
  struct Entry {
    std::string tenant;
    std::shared_ptr<const ExportedRegion> region;
  };

  mutable absl::Mutex mu_;
  RegionId next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<RegionId, Entry> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpubroker
