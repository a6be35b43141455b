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

void RegionTable::AddHolder(RegionId id) {
  absl::MutexLock lock(&mu_);
  if (auto it = regions_.find(id); it != regions_.end()) it->second.holders++;
}

void RegionTable::DropHolder(RegionId id) {
  std::shared_ptr<const ExportedRegion> unheld;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.holders == 0) return;
    if (--it->second.holders == 0) unheld = it->second.region;
  }
  if (unheld) unheld->Unheld();
}

uint32_t RegionTable::Holders(RegionId id) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  return it == regions_.end() ? 0 : it->second.holders;
}

void RegionTable::Remove(RegionId id) {
  std::shared_ptr<const ExportedRegion> gone;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return;
  gone = std::move(it->second.region);
  regions_.erase(it);
}

}  // namespace gpubroker
