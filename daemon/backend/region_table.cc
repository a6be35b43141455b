#include "daemon/backend/region_table.h"

#include "common/strings.h"

namespace gpubroker {

RegionId RegionTable::Add(std::string tenant, std::shared_ptr<const ExportedRegion> region) {
  absl::MutexLock lock(&mu_);
  const RegionId id = next_++;
  regions_.emplace(id, Entry{std::move(tenant), std::move(region)});
  return id;
}

absl::StatusOr<FdGrant> RegionTable::Export(RegionId id, std::string_view tenant) const {
  std::shared_ptr<const ExportedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(id);
    if (it != regions_.end() && it->second.tenant == tenant) region = it->second.region;
  }
  // The descriptor is duplicated outside the lock.
  if (!region) return absl::NotFoundError(StrCat("no region ", id, " for this tenant"));
  return region->Export();
}

}  // namespace gpubroker
