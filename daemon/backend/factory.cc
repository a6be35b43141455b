#include "daemon/backend/factory.h"

#include "common/strings.h"
#include "daemon/backend/host_backend.h"

namespace gpubroker {

absl::StatusOr<BackendChoice> CreateBackend(const DaemonOptions& options) {
  const std::string no_cuda = "this build has no CUDA backend";
  if (options.backend == "cuda") {
    return absl::FailedPreconditionError(StrCat("--backend cuda: ", no_cuda));
  }
  BackendChoice choice;
  choice.backend = std::make_unique<HostBackend>(options.host_pool_bytes);
  choice.why = options.backend == "host" ? "asked for" : no_cuda;
  return choice;
}

}  // namespace gpubroker
