#include "daemon/backend/capacity_guard.h"

#include "common/refusal.h"
#include "common/strings.h"

namespace gpubroker {

CapacityGuard::CapacityGuard(uint64_t capacity, std::string what)
    : capacity_(capacity), what_(std::move(what)) {}

uint64_t CapacityGuard::free() const {
  const uint64_t used = used_.load();
  return capacity_ > used ? capacity_ - used : 0;
}

absl::StatusOr<CapacityGuard::Claim> CapacityGuard::Take(uint64_t bytes) {
  uint64_t used = used_.load();
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) {
      return OutOfMemoryRefusal(StrCat(what_, " full: requested ", bytes, " bytes, ", used, " of ",
                                       capacity_, " in use, ",
                                       capacity_ > used ? capacity_ - used : 0, " free"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return Claim(shared_from_this(), bytes);
}

CapacityGuard::Claim::Claim(Claim&& other) noexcept
    : guard_(std::move(other.guard_)), bytes_(std::exchange(other.bytes_, 0)) {}

CapacityGuard::Claim& CapacityGuard::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Release();
    guard_ = std::move(other.guard_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

CapacityGuard::Claim::~Claim() { Release(); }

void CapacityGuard::Claim::Resize(uint64_t bytes) {
  if (!guard_) return;
  guard_->used_ += bytes;
  guard_->used_ -= bytes_;
  bytes_ = bytes;
}

void CapacityGuard::Claim::Release() {
  if (guard_) guard_->used_ -= bytes_;
  guard_.reset();
  bytes_ = 0;
}

}  // namespace gpubroker
