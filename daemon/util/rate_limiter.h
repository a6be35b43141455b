#pragma once

#include <chrono>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpubroker {

/// Token bucket for log lines about refused requests, so that a client that
/// misbehaves in a loop cannot flood the log. Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double per_second, double burst);

  /// True when a line may be written now. Then `*suppressed` is the number of
  /// lines refused since the last one allowed (to be mentioned in the line).
  bool Allow(uint64_t* suppressed);

 private:
  const double per_second_;
  const double burst_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_ ABSL_GUARDED_BY(mu_);
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpubroker
