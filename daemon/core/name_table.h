#pragma once

#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/core/types.h"

namespace gpubroker {

/// Buffer names, unique within their tenant: each (tenant, name) names one
/// buffer, or is held for a buffer being allocated. Two tenants may use the
/// same name for two buffers; neither can take, see or learn of the other's.
/// Not thread-safe: the registry's lock guards it.
class NameTable {
 public:
  /// Holds `name` in `tenant` for a buffer being allocated; ALREADY_EXISTS
  /// when the tenant uses it already.
  absl::Status Hold(const std::string& tenant, const std::string& name);
  /// The held name now names `id`.
  void Bind(const std::string& tenant, const std::string& name, BufferId id);
  /// Gives back a held name whose allocation failed.
  void Drop(const std::string& tenant, const std::string& name);
  /// Removes the name if it still names `id` (a new buffer may have taken it).
  void Remove(const std::string& tenant, const std::string& name, BufferId id);
  /// The buffer `name` names in `tenant`; nullopt when none (or while it is held).
  std::optional<BufferId> Find(const std::string& tenant, const std::string& name) const;
  void Clear() { names_.clear(); }

 private:
  using Key = std::pair<std::string, std::string>;  // tenant, name
  absl::flat_hash_map<Key, BufferId> names_;        // 0: held
};

}  // namespace gpubroker
