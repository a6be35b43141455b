#include "common/cuda/cuda_util.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "common/refusal.h"
#include "common/strings.h"

namespace gpubroker::cuda {

absl::Status RuntimeError(cudaError_t error, std::string_view what) {
  const std::string message =
      StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  if (error == cudaErrorMemoryAllocation) return OutOfMemoryRefusal(message);
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

namespace {

template <typename F>
absl::Status Load(const char* name, F* fn) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, reinterpret_cast<void**>(fn),
                                                           12000, cudaEnableDefault, &found);
  if (err != cudaSuccess) return RuntimeError(err, StrCat("cudaGetDriverEntryPoint(", name, ")"));
  if (found != cudaDriverEntryPointSuccess || *fn == nullptr) {
    return absl::FailedPreconditionError(StrCat("the CUDA driver has no ", name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const DriverApi*> DriverApi::Get() {
  static DriverApi api;
  static absl::Status status = [] {
    absl::Status s;
    auto load = [&](const char* name, auto* fn) {
      if (s.ok()) s = Load(name, fn);
    };
    load("cuMemCreate", &api.cuMemCreate);
    load("cuMemRelease", &api.cuMemRelease);
    load("cuMemExportToShareableHandle", &api.cuMemExportToShareableHandle);
    load("cuMemImportFromShareableHandle", &api.cuMemImportFromShareableHandle);
    load("cuMemAddressReserve", &api.cuMemAddressReserve);
    load("cuMemAddressFree", &api.cuMemAddressFree);
    load("cuMemMap", &api.cuMemMap);
    load("cuMemUnmap", &api.cuMemUnmap);
    load("cuMemSetAccess", &api.cuMemSetAccess);
    load("cuMemGetAllocationGranularity", &api.cuMemGetAllocationGranularity);
    load("cuDeviceGetAttribute", &api.cuDeviceGetAttribute);
    load("cuStreamWriteValue64", &api.cuStreamWriteValue64);
    load("cuStreamWaitValue64", &api.cuStreamWaitValue64);
    load("cuGetErrorName", &api.cuGetErrorName);
    load("cuCtxGetCurrent", &api.cuCtxGetCurrent);
    return s;
  }();
  if (!status.ok()) return status;
  return &api;
}

absl::Status DriverApi::Check(CUresult result, std::string_view what) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "?";
  const std::string message = StrCat(what, ": ", name, " (", static_cast<int>(result), ")");
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return OutOfMemoryRefusal(message);
  return absl::InternalError(message);
}

std::string FormatUuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  if (err == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        "no usable NVIDIA driver (missing, or older than this CUDA runtime)");
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return RuntimeError(err, "cudaGetDeviceCount");
  }
  return count;
}

absl::StatusOr<int> OrdinalOf(std::string_view uuid) {
  static std::once_flag once;
  static std::vector<std::string> uuids;
  static absl::Status status;
  std::call_once(once, [] {
    auto count = DeviceCount();
    if (!count.ok()) {
      status = count.status();
      return;
    }
    for (int i = 0; i < *count; ++i) {
      cudaDeviceProp prop{};
      uuids.push_back(cudaGetDeviceProperties(&prop, i) == cudaSuccess ? FormatUuid(prop.uuid)
                                                                       : std::string());
    }
  });
  if (!status.ok()) return status;
  for (size_t i = 0; i < uuids.size(); ++i) {
    if (uuids[i] == uuid) return static_cast<int>(i);
  }
  return absl::FailedPreconditionError(
      StrCat("device ", uuid, " is not visible in this process (check CUDA_VISIBLE_DEVICES)"));
}

namespace {

// Each device's primary context, once seen current after a cudaSetDevice:
// a thread on which it is current needs nothing set (nor restored).
constexpr int kKnownDevices = 64;
std::atomic<CUcontext> primary_contexts[kKnownDevices];

CUcontext CurrentContext() {
  static const DriverApi* const api = [] {
    const auto a = DriverApi::Get();
    return a.ok() ? *a : nullptr;
  }();
  CUcontext current = nullptr;
  if (api == nullptr || api->cuCtxGetCurrent(&current) != CUDA_SUCCESS) return nullptr;
  return current;
}

}  // namespace

ScopedDevice::ScopedDevice(int device) {
  const bool known = device >= 0 && device < kKnownDevices;
  if (known) {
    const CUcontext primary = primary_contexts[device].load(std::memory_order_relaxed);
    if (primary != nullptr && CurrentContext() == primary) return;  // previous_ -1: nothing to undo
  }
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  // Always set it, even when cudaGetDevice already says `device`: that answer
  // can come from a thread on which no context is current yet, and the driver
  // calls that follow (stream memory operations) need one (on the H200 a seal
  // failed with CUDA_ERROR_INVALID_CONTEXT when this was skipped).
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    status_ = RuntimeError(err, "cudaSetDevice");
  } else if (known) {
    if (const CUcontext now = CurrentContext(); now != nullptr) {
      primary_contexts[device].store(now, std::memory_order_relaxed);
    }
  }
}

ScopedDevice::~ScopedDevice() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) {
    cudaSetDevice(previous_);
  }
}

}  // namespace gpubroker::cuda
