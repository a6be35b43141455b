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
  /// Called (outside the table's lock) when the last session that fetched
  /// its descriptor has ended: no live client maps it any more.
  virtual void Unheld() const {}
};

/// The regions of one backend that clients fetch by id, each for its own
/// tenant's clients only, with the number of live sessions that fetched each
/// (its holders: they may have it mapped). A region stays until its path
/// removes it; ids are never reused. Thread-safe; never calls out under its lock.
class RegionTable {
 public:
  /// Enters `region` as `tenant`'s and returns its id (never 0).
  RegionId Add(std::string tenant, std::shared_ptr<const ExportedRegion> region);

  /// A descriptor of region `id` for a client of `tenant`. NOT_FOUND, with the
  /// same words, when there is no such region and when it is another tenant's.
  absl::StatusOr<FdGrant> Export(RegionId id, std::string_view tenant) const;

  /// A session now holds region `id` (it received its descriptor), or no
  /// longer does (it ended); the region's Unheld() runs when the last goes.
  /// Unknown ids are ignored.
  void AddHolder(RegionId id);
  void DropHolder(RegionId id);
  /// Live sessions holding region `id`; 0 for an unknown one.
  uint32_t Holders(RegionId id) const;
  /// Takes region `id` out: it is no longer exported (NOT_FOUND).
  void Remove(RegionId id);

 private:
  struct Entry {
    std::string tenant;
    std::shared_ptr<const ExportedRegion> region;
    uint32_t holders = 0;
  };

  mutable absl::Mutex mu_;
  RegionId next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<RegionId, Entry> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpubroker
