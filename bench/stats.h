#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace gpubroker::bench {

/// Latencies of one case, in microseconds, and what it is compared with.
struct Samples {
  std::string name;
  std::string baseline;    // what it is compared with, if anything
  double baseline_us = 0;  // that baseline's p50, filled in once measured
  std::vector<double> us;

  double Percentile(double p) const {
    if (us.empty()) return 0;
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    const size_t i =
        std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())));
    return sorted[i];
  }
  double p50() const { return Percentile(0.50); }
  double p99() const { return Percentile(0.99); }
};

inline double ElapsedUs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace gpubroker::bench
