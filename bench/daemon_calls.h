#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <string>

#include "bench/stats.h"

namespace gpubroker::bench {

/// The daemon's own time per session.sock call, read off its metrics
/// endpoint (gpubroker_session_call_duration_seconds): what of a call's
/// round trip is the daemon's work, and what is the wire and the wake-ups.
class DaemonCalls {
 public:
  /// `metrics_address`: host:port of the daemon's /metrics; empty: nothing is read.
  explicit DaemonCalls(std::string metrics_address);

  /// Remembers the sums and counts as of now. Each reading first waits
  /// 0.12 s, so that the daemon has reported every turn served before it.
  void Mark();
  /// A row per call made since Mark(), "<prefix><call>", whose one sample is
  /// the mean time per call in µs (the histogram gives sums, not samples).
  /// Returns, from the same reading, "N of M": of the turns of session.sock's
  /// thread that served frames since Mark(), those whose frames found it
  /// asleep (gpubroker_session_turns_total), then what the daemon's busy
  /// poll cost over that time (its CPU seconds polled, and its window now);
  /// empty when none were read.
  std::string AddRows(std::deque<Samples>& results, const std::string& prefix) const;

 private:
  struct Total {
    double seconds = 0;
    double count = 0;
  };
  struct Reading {
    std::map<std::string, Total> calls;
    double turns_asleep = 0;
    double turns_polling = 0;
    double polled_seconds = 0;
    double window_seconds = 0;
    std::chrono::steady_clock::time_point at;
  };
  Reading Read() const;

  std::string address_;
  Reading marked_;
};

}  // namespace gpubroker::bench
