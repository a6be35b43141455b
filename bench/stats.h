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
  // For the plot of latency against size (bench/plot_latency.py): which
  // curve the case belongs to ("gpubroker", "torch.mp", "copy", "floor",
  // ...) and at which size. Empty: not plotted.
  std::string series;
  uint64_t size_bytes = 0;
  // Throughput cases: operations per second over all processes (0: none),
  // and the baseline's, for the ratio (ours / theirs: higher is better).
  double per_second = 0;
  double baseline_per_second = 0;
  int processes = 0;

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

/// CLOCK_MONOTONIC in ns: comparable between processes of one machine.
inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

inline double ElapsedUs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

/// A case with a plotted position.
inline Samples Plotted(std::string name, std::string series, uint64_t size) {
  Samples s;
  s.name = std::move(name);
  s.series = std::move(series);
  s.size_bytes = size;
  return s;
}

}  // namespace gpubroker::bench
