#include "daemon/create_backend.h"

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "daemon/backend/host_backend.h"
#include "spdlog/spdlog.h"
#ifdef GPUBROKER_HAVE_CUDA
#include "daemon/backend/cuda/cuda_backend.h"
#include "daemon/backend/cuda/devices.h"
#endif

namespace gpubroker {
namespace {

BackendChoice Host(const DaemonOptions& options, std::string why) {
  BackendChoice choice;
  choice.backend = std::make_unique<HostBackend>(options.host_pool_bytes, options.vmm_threshold);
  choice.why = std::move(why);
  return choice;
}

#ifdef GPUBROKER_HAVE_CUDA
// The GPUs to serve, or why there are none.
absl::StatusOr<std::vector<CudaDevice>> UsableGpus(const DaemonOptions& options) {
  GPUBROKER_ASSIGN_OR_RETURN(auto all, DiscoverCudaDevices());
  GPUBROKER_ASSIGN_OR_RETURN(auto selected, SelectDevices(all, options.devices));
  std::vector<CudaDevice> usable;
  std::string refused;
  for (auto& d : selected) {
    spdlog::info(
        "{} {} (cc {}, {}): pools {}, pool fds {}, VMM {}, VMM fds {}, stream memory ops {}, IPC "
        "events {}, VMM granularity {}",
        d.uuid, d.name, d.ComputeCapability(), FormatBytes(d.total_bytes), d.memory_pools,
        d.pool_posix_fd, d.vmm, d.vmm_posix_fd, d.stream_mem_ops, d.ipc_events,
        FormatBytes(d.vmm_granularity));
    const std::string lacks = d.Lacks();
    if (lacks.empty()) {
      usable.push_back(d);
    } else {
      StrAppend(&refused, refused.empty() ? "" : "; ", d.uuid, " (", d.name, ") lacks ", lacks);
      if (!options.devices.empty()) {
        return absl::FailedPreconditionError(StrCat("--devices: ", refused));
      }
      spdlog::warn("not serving {} ({}): it lacks {}", d.uuid, d.name, lacks);
    }
  }
  if (usable.empty()) return absl::FailedPreconditionError(StrCat("no GPU qualifies: ", refused));
  return usable;
}
#endif

}  // namespace

absl::StatusOr<BackendChoice> CreateBackend(const DaemonOptions& options) {
  if (options.backend == "host") return Host(options, "asked for");
#ifdef GPUBROKER_HAVE_CUDA
  auto gpus = UsableGpus(options);
  if (!gpus.ok()) {
    if (options.backend == "cuda") {
      return absl::FailedPreconditionError(
          StrCat("--backend cuda: ", View(gpus.status().message())));
    }
    if (gpus.status().code() == absl::StatusCode::kInvalidArgument) return gpus.status();
    return Host(options, std::string(View(gpus.status().message())));
  }
  CudaBackendOptions cuda;
  cuda.pool_bytes = options.pool_bytes;
  cuda.vmm_threshold = options.vmm_threshold;
  cuda.pool_retain = options.pool_retain;
  cuda.small_buffers = options.small_buffers == "pool" ? SmallBuffers::kPool : SmallBuffers::kArena;
  const size_t n = gpus->size();
  auto backend = CudaBackend::Create(std::move(*gpus), cuda);
  if (!backend.ok()) {
    if (options.backend == "cuda" ||
        backend.status().code() == absl::StatusCode::kInvalidArgument) {
      return backend.status();
    }
    return Host(options, StrCat("CUDA backend failed: ", View(backend.status().message())));
  }
  BackendChoice choice;
  choice.backend = std::move(*backend);
  choice.why = options.backend == "cuda" ? "asked for" : StrCat(n, " GPU", n == 1 ? "" : "s");
  return choice;
#else
  const std::string no_cuda = "this build has no CUDA backend";
  if (options.backend == "cuda") {
    return absl::FailedPreconditionError(StrCat("--backend cuda: ", no_cuda));
  }
  return Host(options, no_cuda);
#endif
}

}  // namespace gpubroker
