#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace gpubroker {

/// Longest buffer name accepted.
inline constexpr size_t kMaxNameLength = 128;

/// The most tenants a buffer may be shared with.
inline constexpr int kMaxShareWith = 64;

/// A buffer name is 1 to 128 characters from [A-Za-z0-9._:-], starting with
/// a letter or '_' (so that a name never reads as a buffer id). Names are
/// unique on the node. Returns INVALID_ARGUMENT saying what is wrong.
absl::Status ValidateName(std::string_view name);

/// Tenant names follow the same rule, at most 64 characters.
absl::Status ValidateTenantName(std::string_view name);

}  // namespace gpubroker
