#include "daemon/core/tenants.h"

#include <algorithm>

#include "common/names.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace gpubroker {
namespace {
constexpr std::string_view kUidTenantPrefix = "uid-";
}  // namespace

absl::StatusOr<TenantDirectory> TenantDirectory::Create(std::vector<TenantSpec> tenants,
                                                        uint64_t default_quota_bytes,
                                                        std::optional<gid_t> admin_gid) {
  TenantDirectory dir;
  dir.default_quota_ = default_quota_bytes;
  dir.admin_gid_ = admin_gid;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const TenantSpec& t = tenants[i];
    GPUBROKER_RETURN_IF_ERROR(ValidateTenantName(t.name));
    if (t.name.starts_with(kUidTenantPrefix)) {
      // Such a tenant would silently take in the user of that uid (and its
      // buffers' names) from the tenant of its own that it has otherwise.
      return absl::InvalidArgumentError(
          StrCat("tenant '", t.name, "': names beginning with '", kUidTenantPrefix,
                 "' are reserved for the users that no tenant lists"));
    }
    if (!dir.by_name_.emplace(t.name, i).second) {
      return absl::InvalidArgumentError(StrCat("tenant '", t.name, "' is declared twice"));
    }
    for (uid_t uid : t.uids) {
      auto [it, fresh] = dir.by_uid_.emplace(uid, i);
      if (!fresh) {
        return absl::InvalidArgumentError(StrCat("uid ", uid, " is in tenants '",
                                                 tenants[it->second].name, "' and '", t.name, "'"));
      }
    }
    for (gid_t gid : t.gids) {
      auto [it, fresh] = dir.by_gid_.emplace(gid, i);
      if (!fresh) {
        return absl::InvalidArgumentError(StrCat("gid ", gid, " is in tenants '",
                                                 tenants[it->second].name, "' and '", t.name, "'"));
      }
    }
  }
  dir.tenants_ = std::move(tenants);
  return dir;
}

std::string TenantDirectory::TenantFor(uid_t uid, gid_t gid) const {
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) return tenants_[it->second].name;
  if (auto it = by_gid_.find(gid); it != by_gid_.end()) return tenants_[it->second].name;
  return StrCat(kUidTenantPrefix, uid);
}

bool TenantDirectory::IsAdmin(const PeerCredentials& peer) const {
  if (peer.uid == 0) return true;
  if (!admin_gid_) return false;
  return peer.gid == *admin_gid_ ||
         std::find(peer.groups.begin(), peer.groups.end(), *admin_gid_) != peer.groups.end();
}

uint64_t TenantDirectory::QuotaFor(std::string_view tenant) const {
  if (auto it = by_name_.find(absl::string_view(tenant.data(), tenant.size()));
      it != by_name_.end()) {
    return tenants_[it->second].quota_bytes;
  }
  return default_quota_;
}

}  // namespace gpubroker
