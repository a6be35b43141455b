#pragma once

// What the daemon and the client share about CUDA: error conversion, the
// driver API (reached through the runtime's cudaGetDriverEntryPointByVersion,
// so that no binary links libcuda.so and each starts on a machine without an
// NVIDIA driver), and device UUIDs.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpubroker::cuda {

/// INTERNAL (RESOURCE_EXHAUSTED for out-of-memory) naming the call and the CUDA error.
absl::Status RuntimeError(cudaError_t error, std::string_view what);

/// Returns from the enclosing function with a status when a runtime call fails.
#define GPUBROKER_CUDA_TRY(call)                                     \
  do {                                                               \
    const cudaError_t _gpubroker_err = (call);                       \
    if (_gpubroker_err != cudaSuccess) {                             \
      return ::gpubroker::cuda::RuntimeError(_gpubroker_err, #call); \
    }                                                                \
  } while (false)

/// The driver entry points gpubroker uses (VMM, stream memory operations for
/// the ready fences, and errors).
struct DriverApi {
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuStreamWriteValue64_v11070 cuStreamWriteValue64 = nullptr;
  PFN_cuStreamWaitValue64_v11070 cuStreamWaitValue64 = nullptr;
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;

  /// Loads the entry points once (thread-safe). FAILED_PRECONDITION when the
  /// driver is missing or lacks one of them.
  static absl::StatusOr<const DriverApi*> Get();

  /// OK, or an error naming the call and the driver's error name.
  absl::Status Check(CUresult result, std::string_view what) const;
};

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string FormatUuid(const cudaUUID_t& uuid);

/// Number of CUDA devices this process sees, or why it sees none.
absl::StatusOr<int> DeviceCount();

/// The ordinal, in this process, of the device with this UUID (ordinals
/// differ between processes under CUDA_VISIBLE_DEVICES; UUIDs do not).
absl::StatusOr<int> OrdinalOf(std::string_view uuid);

/// Makes `device` (and its primary context) current for the calling thread,
/// and restores the thread's previous device when it goes (so a library call leaves the caller's
/// current device as it was). Where the device's primary context is current
/// already (the common case: the caller works on that device), it costs one
/// driver call that reads the thread's context, and changes nothing.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

}  // namespace gpubroker::cuda
