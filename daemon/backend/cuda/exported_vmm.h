#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_util.h"
#include "common/unique_fd.h"
#include "daemon/backend/kept_allocations.h"

namespace gpubroker {

/// One VMM allocation with a POSIX-fd handle, exported once: what fence
/// pages, arena slabs and VMM buffers are made of. Releases the allocation
/// when it goes (importers' mappings keep the memory until they unmap).
/// It reaches a tenant only through CudaDeviceState::Lend, which zeroes it
/// when it was another tenant's or is fresh from the driver.
class ExportedVmm {
 public:
  /// cuMemCreate + cuMemExportToShareableHandle of `size` bytes (a multiple of
  /// the granularity) on device `ordinal`, whose context the caller has made
  /// current. OUT_OF_MEMORY when the device is full.
  static absl::StatusOr<ExportedVmm> Create(const cuda::DriverApi& api, int ordinal, uint64_t size,
                                            std::string_view what);

  ExportedVmm() = default;
  ExportedVmm(ExportedVmm&& other) noexcept;
  ExportedVmm& operator=(ExportedVmm&& other) noexcept;
  ~ExportedVmm();

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  /// The tenant it was last lent to; empty while no tenant has had it.
  const std::string& lent_to() const { return lent_to_; }
  void set_lent_to(std::string tenant) { lent_to_ = std::move(tenant); }

  /// Writes zeros over all of it: maps it into the daemon on device
  /// `ordinal` (whose context the caller has made current), sets it on
  /// `stream`, waits, and unmaps.
  absl::Status Zero(int ordinal, cudaStream_t stream) const;

 private:
  void Release();

  const cuda::DriverApi* api_ = nullptr;
  CUmemGenericAllocationHandle handle_ = 0;
  UniqueFd fd_;
  uint64_t size_ = 0;
  std::string lent_to_;
};

/// An ExportedVmm as a kept allocation (KeptAllocations, by tenant and
/// size, for the tenant's next buffer of the same size, taken through
/// CudaDeviceState::Lend: a new one costs ~0.35 ms at 40 GiB at best and far
/// more when the driver has memory to clear). Only the tenant's own sessions
/// ever held descriptors of it.
class KeptVmm final : public KeptAllocations::Memory {
 public:
  explicit KeptVmm(ExportedVmm memory) : memory_(std::move(memory)) {}
  uint64_t size() const override { return memory_.size(); }
  ExportedVmm Take() && { return std::move(memory_); }

 private:
  ExportedVmm memory_;
};

}  // namespace gpubroker
