#pragma once

// What the registry's two source files share.

#include <string>

#include "absl/status/status.h"
#include "common/token.h"

namespace gpubroker::registry_internal {

inline std::string TokenKey(const Token& t) { return std::string(t.begin(), t.end()); }
inline absl::Status ShuttingDown() { return absl::UnavailableError("gpubrokerd is shutting down"); }
inline absl::Status SessionEnded() { return absl::UnauthenticatedError("session has ended"); }

}  // namespace gpubroker::registry_internal
