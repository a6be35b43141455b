#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/unix_socket.h"

namespace gpubroker {

/// A tenant as the config file declares it.
struct TenantSpec {
  std::string name;
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
  uint64_t quota_bytes = 0;  // 0: unlimited
};

/// Maps a peer's uid/gid to a tenant and a tenant to its quota. A uid listed
/// by a tenant wins over a gid; a peer that no tenant lists is a tenant of its
/// own, "uid-<uid>", with the default quota (so "uid-" names are reserved).
/// An administrator (root, or a member of the admin group) sees every
/// tenant in Status; a tenant sees itself.
class TenantDirectory {
 public:
  TenantDirectory() = default;

  /// INVALID_ARGUMENT for a bad, reserved ("uid-...") or repeated name, or a
  /// uid/gid claimed twice. `admin_gid`: members of this group are administrators.
  static absl::StatusOr<TenantDirectory> Create(std::vector<TenantSpec> tenants,
                                                uint64_t default_quota_bytes,
                                                std::optional<gid_t> admin_gid = std::nullopt);

  std::string TenantFor(uid_t uid, gid_t gid) const;
  uint64_t QuotaFor(std::string_view tenant) const;
  const std::vector<TenantSpec>& configured() const { return tenants_; }
  uint64_t default_quota_bytes() const { return default_quota_; }
  /// Root, or a peer whose primary or supplementary group is the admin group.
  bool IsAdmin(const PeerCredentials& peer) const;

 private:
  std::vector<TenantSpec> tenants_;
  uint64_t default_quota_ = 0;
  std::optional<gid_t> admin_gid_;
  absl::flat_hash_map<uid_t, size_t> by_uid_;
  absl::flat_hash_map<gid_t, size_t> by_gid_;
  absl::flat_hash_map<std::string, size_t> by_name_;
};

}  // namespace gpubroker
