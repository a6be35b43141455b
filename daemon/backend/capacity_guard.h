#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpubroker {

/// The bytes that buffers hold out of one device's capacity. A buffer claims
/// its bytes before its memory is made and gives them back when it goes, so
/// that concurrent allocations can never together pass the capacity.
/// Thread-safe and lock-free. Create with std::make_shared: claims keep their
/// guard alive.
class CapacityGuard : public std::enable_shared_from_this<CapacityGuard> {
 public:
  /// `what` names the memory in refusals: "host pool", "device GPU-...".
  CapacityGuard(uint64_t capacity, std::string what);

  /// Bytes held until destroyed (or moved from).
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept;
    Claim& operator=(Claim&& other) noexcept;
    ~Claim();

    uint64_t bytes() const { return bytes_; }
    /// Replaces the claim by the bytes the memory really took, which the
    /// backend learns only once it is made (a pool's own rounding). Not checked
    /// against the capacity: the memory exists by then.
    void Resize(uint64_t bytes);

   private:
    friend class CapacityGuard;
    Claim(std::shared_ptr<CapacityGuard> guard, uint64_t bytes)
        : guard_(std::move(guard)), bytes_(bytes) {}
    void Release();

    std::shared_ptr<CapacityGuard> guard_;
    uint64_t bytes_ = 0;
  };

  /// A claim of `bytes`, or an OUT_OF_MEMORY refusal that says how full.
  absl::StatusOr<Claim> Take(uint64_t bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_.load(); }
  uint64_t free() const;

 private:
  const uint64_t capacity_;
  const std::string what_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace gpubroker
