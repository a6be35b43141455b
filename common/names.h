#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpubroker {

/// Longest buffer name accepted.
inline constexpr size_t kMaxNameLength = 128;

/// The most tenants a buffer may be shared with.
inline constexpr int kMaxShareWith = 64;

/// A buffer name is 1 to 128 characters from [A-Za-z0-9._:-], starting with
/// a letter or '_' (so that a name never reads as a buffer id). Names are
/// unique within their tenant. Returns INVALID_ARGUMENT saying what is wrong.
absl::Status ValidateName(std::string_view name);

/// A reference to a buffer by name: "name" in the caller's own tenant, or
/// "tenant/name" for a buffer of another tenant that shares it.
struct NameRef {
  std::string_view tenant;  // empty: the caller's
  std::string_view name;
};

/// Splits and checks a reference; INVALID_ARGUMENT saying what is wrong.
absl::StatusOr<NameRef> ParseNameRef(std::string_view ref);

/// Tenant names follow the same rule, at most 64 characters.
absl::Status ValidateTenantName(std::string_view name);

}  // namespace gpubroker
