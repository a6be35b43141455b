#pragma once

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/core/types.h"

namespace gpubroker {

/// Buffer names, unique on the node: each names one buffer, or is held for a
/// buffer being allocated. The one place that decides what a name means, and
/// so where names scoped per tenant would go. Not thread-safe: the
/// registry's lock guards it.
class NameTable {
 public:
  /// Holds `name` for a buffer being allocated; ALREADY_EXISTS when taken.
  absl::Status Hold(const std::string& name);
  /// The held name now names `id`.
  void Bind(const std::string& name, BufferId id);
  /// Gives back a held name whose allocation failed.
  void Drop(const std::string& name);
  /// Removes `name` if it still names `id` (a new buffer may have taken it).
  void Remove(const std::string& name, BufferId id);
  /// The buffer `name` names; nullopt when none (or while it is held).
  std::optional<BufferId> Find(const std::string& name) const;
  void Clear() { names_.clear(); }

 private:
  absl::flat_hash_map<std::string, BufferId> names_;  // 0: held
};

}  // namespace gpubroker
