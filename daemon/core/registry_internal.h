#pragma once

// What the registry's two source files share.

#include <string>

#include "absl/status/status.h"
#include "common/token.h"
#include "daemon/backend/types.h"

namespace gpubroker::registry_internal {

inline std::string TokenKey(const Token& t) { return std::string(t.begin(), t.end()); }
inline absl::Status ShuttingDown() { return absl::UnavailableError("gpubrokerd is shutting down"); }
inline absl::Status SessionEnded() { return absl::UnauthenticatedError("session has ended"); }

/// BufferInfo.backing: where a buffer's memory is.
inline std::string BackingName(ImportKind kind) {
  switch (kind) {
    case ImportKind::kHostArena:
      return "host-arena";
    case ImportKind::kHostFd:
      return "host-fd";
    case ImportKind::kCudaPool:
      return "cuda-pool";
    case ImportKind::kCudaVmm:
      return "cuda-vmm";
    case ImportKind::kCudaArena:
      return "cuda-arena";
  }
  return "unknown";
}

}  // namespace gpubroker::registry_internal
