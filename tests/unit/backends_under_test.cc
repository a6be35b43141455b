#include "tests/unit/backends_under_test.h"

#include "daemon/backend/host_backend.h"
#ifdef GPUBROKER_HAVE_CUDA
#include "daemon/backend/cuda/cuda_backend.h"
#include "daemon/backend/cuda/devices.h"
#endif

namespace gpubroker {

#ifdef GPUBROKER_HAVE_CUDA
namespace {

// A CUDA backend on the first GPU with a 1 GiB capacity, or why not.
std::unique_ptr<Backend> MakeCuda(uint64_t vmm_threshold, SmallBuffers small, std::string* why) {
  auto devices = DiscoverCudaDevices();
  if (!devices.ok()) {
    *why = std::string(devices.status().message());
    return nullptr;
  }
  if (!devices->front().Lacks().empty()) {
    *why = devices->front().uuid + " lacks " + devices->front().Lacks();
    return nullptr;
  }
  CudaBackendOptions options;
  options.pool_bytes = "1GiB";
  options.vmm_threshold = vmm_threshold;
  options.small_buffers = small;
  auto backend = CudaBackend::Create({devices->front()}, options);
  if (!backend.ok()) {
    *why = std::string(backend.status().message());
    return nullptr;
  }
  return std::move(*backend);
}

}  // namespace
#endif

std::vector<BackendUnderTest> BackendsUnderTest() {
  std::vector<BackendUnderTest> out = {
      {"host",
       [](std::string*) -> std::unique_ptr<Backend> {
         return std::make_unique<HostBackend>(uint64_t{64} << 20);
       },
       true},
  };
#ifdef GPUBROKER_HAVE_CUDA
  out.push_back(
      {"cuda_arena",
       [](std::string* why) { return MakeCuda(uint64_t{1} << 40, SmallBuffers::kArena, why); },
       true});
  out.push_back(
      {"cuda_pool",
       [](std::string* why) { return MakeCuda(uint64_t{1} << 40, SmallBuffers::kPool, why); },
       false});
  out.push_back(
      {"cuda_vmm", [](std::string* why) { return MakeCuda(1, SmallBuffers::kArena, why); }, true});
#else
  out.push_back({"cuda", [](std::string* why) -> std::unique_ptr<Backend> {
                   *why = "this build has no CUDA backend";
                   return nullptr;
                 }});
#endif
  return out;
}

}  // namespace gpubroker
