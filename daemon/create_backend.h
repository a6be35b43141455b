#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/backend/backend.h"
#include "daemon/config/options.h"

namespace gpubroker {

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string why;  // why this backend, for the start line
};

/// The daemon's wiring: the backend that the options ask for.
/// --backend auto: CUDA where a GPU qualifies, host otherwise (saying why);
/// --backend cuda: CUDA or a clear error; --backend host: host.
absl::StatusOr<BackendChoice> CreateBackend(const DaemonOptions& options);

}  // namespace gpubroker
