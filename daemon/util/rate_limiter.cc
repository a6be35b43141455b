#include "daemon/util/rate_limiter.h"

#include <algorithm>

namespace gpubroker {

RateLimiter::RateLimiter(double per_second, double burst)
    : per_second_(per_second),
      burst_(burst),
      tokens_(burst),
      last_(std::chrono::steady_clock::now()) {}

bool RateLimiter::Allow(uint64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed * per_second_);
  if (tokens_ < 1.0) {
    ++suppressed_;
    return false;
  }
  tokens_ -= 1.0;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace gpubroker
