#include "daemon/core/name_table.h"

#include "common/strings.h"

namespace gpubroker {

absl::Status NameTable::Hold(const std::string& tenant, const std::string& name) {
  if (!names_.emplace(Key{tenant, name}, 0).second) {
    return absl::AlreadyExistsError(
        StrCat("buffer name '", name, "' is taken in tenant '", tenant, "'"));
  }
  return absl::OkStatus();
}

void NameTable::Bind(const std::string& tenant, const std::string& name, BufferId id) {
  names_[Key{tenant, name}] = id;
}

void NameTable::Drop(const std::string& tenant, const std::string& name) {
  if (auto it = names_.find(Key{tenant, name}); it != names_.end() && it->second == 0) {
    names_.erase(it);
  }
}

void NameTable::Remove(const std::string& tenant, const std::string& name, BufferId id) {
  if (auto it = names_.find(Key{tenant, name}); it != names_.end() && it->second == id) {
    names_.erase(it);
  }
}

std::optional<BufferId> NameTable::Find(const std::string& tenant, const std::string& name) const {
  auto it = names_.find(Key{tenant, name});
  if (it == names_.end() || it->second == 0) return std::nullopt;
  return it->second;
}

}  // namespace gpubroker
