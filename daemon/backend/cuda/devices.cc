#include "daemon/backend/cuda/devices.h"

#include <sstream>

#include "common/cuda/cuda_util.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace gpubroker {

std::string CudaDevice::Lacks() const {
  std::vector<std::string> missing;
  if (!memory_pools) missing.push_back("memory pools (cudaMallocAsync)");
  if (!pool_posix_fd) missing.push_back("POSIX-fd pool export");
  if (!stream_mem_ops) missing.push_back("64-bit stream memory operations");
  if (!vmm) missing.push_back("virtual memory management");
  if (!vmm_posix_fd) missing.push_back("POSIX-fd VMM export");
  std::string out;
  for (size_t i = 0; i < missing.size(); ++i) StrAppend(&out, i ? ", " : "", missing[i]);
  return out;
}

std::string CudaDevice::ComputeCapability() const { return StrCat(cc_major, ".", cc_minor); }

absl::StatusOr<std::vector<CudaDevice>> DiscoverCudaDevices() {
  GPUBROKER_ASSIGN_OR_RETURN(auto count, cuda::DeviceCount());
  auto driver = cuda::DriverApi::Get();
  std::vector<CudaDevice> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    GPUBROKER_CUDA_TRY(cudaGetDeviceProperties(&prop, i));
    CudaDevice d;
    d.ordinal = i;
    d.uuid = cuda::FormatUuid(prop.uuid);
    d.name = prop.name;
    d.total_bytes = prop.totalGlobalMem;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, i) == cudaSuccess) {
      d.memory_pools = v != 0;
    }
    v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, i) == cudaSuccess) {
      d.pool_posix_fd = (v & cudaMemHandleTypePosixFileDescriptor) != 0;
    }
    v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrIpcEventSupport, i) == cudaSuccess) {
      d.ipc_events = v != 0;
    }
    if (driver.ok()) {
      const cuda::DriverApi& api = **driver;
      CUdevice dev = i;
      if (api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   dev) == CUDA_SUCCESS) {
        d.vmm = v != 0;
      }
      if (api.cuDeviceGetAttribute(&v,
                                   CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                   dev) == CUDA_SUCCESS) {
        d.vmm_posix_fd = v != 0;
      }
      if (api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) ==
          CUDA_SUCCESS) {
        d.stream_mem_ops = v != 0;
      }
      if (d.vmm) {
        CUmemAllocationProp p{};
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = i;
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        size_t g = 0;
        if (api.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS) {
          d.vmm_granularity = g;
        }
      }
    }
    cudaGetLastError();  // attribute queries on old drivers may leave an error behind
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<std::vector<CudaDevice>> SelectDevices(const std::vector<CudaDevice>& all,
                                                      const std::string& selection) {
  if (selection.empty()) return all;
  std::vector<CudaDevice> out;
  std::stringstream in(selection);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::string_view want = Trim(item);
    if (want.empty()) continue;
    const CudaDevice* match = nullptr;
    int ordinal = -1;
    if (ParseInt(want, &ordinal)) {
      for (const auto& d : all) {
        if (d.ordinal == ordinal) match = &d;
      }
    } else {
      for (const auto& d : all) {
        if (d.uuid.compare(0, want.size(), want) == 0) {
          if (match != nullptr) {
            return absl::InvalidArgumentError(
                StrCat("--devices: '", want, "' matches more than one GPU"));
          }
          match = &d;
        }
      }
    }
    if (match == nullptr) {
      std::string known;
      for (const auto& d : all)
        StrAppend(&known, known.empty() ? "" : ", ", d.ordinal, "=", d.uuid);
      return absl::InvalidArgumentError(
          StrCat("--devices: no GPU '", want, "' (visible: ", known, ")"));
    }
    for (const auto& d : out) {
      if (d.ordinal == match->ordinal) {
        return absl::InvalidArgumentError(StrCat("--devices: GPU '", want, "' named twice"));
      }
    }
    out.push_back(*match);
  }
  if (out.empty()) return absl::InvalidArgumentError("--devices selects no GPU");
  return out;
}

}  // namespace gpubroker
