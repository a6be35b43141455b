#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace gpubroker {

/// What /proc/<pid>/stat says about a process, in the units the kernel uses.
struct ProcStat {
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t num_threads = 0;
  uint64_t start_ticks = 0;  // after boot
  uint64_t vsize_bytes = 0;
  uint64_t rss_pages = 0;
};

/// Parses one /proc/<pid>/stat line. The command name (field 2) may hold
/// spaces and parentheses; everything after its last ')' is positional.
absl::StatusOr<ProcStat> ParseProcStat(std::string_view text);

/// The boot time (seconds since the epoch) from /proc/stat's "btime" line.
absl::StatusOr<uint64_t> ParseBootTime(std::string_view proc_stat);

/// A process's resources as Prometheus' process_* metrics report them.
struct ProcessSample {
  double cpu_seconds = 0;
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  std::optional<uint64_t> virtual_max_bytes;  // none: RLIMIT_AS unlimited
  uint64_t open_fds = 0;
  std::optional<uint64_t> max_fds;  // none: RLIMIT_NOFILE unlimited
  double start_time_seconds = 0;
  uint64_t threads = 0;
};

/// Reads this process's sample from /proc/self and getrlimit.
absl::StatusOr<ProcessSample> ReadSelfProcessSample();

/// The families of a sample, named as Prometheus' client libraries name them
/// (process_cpu_seconds_total, process_resident_memory_bytes, ...). A limit
/// that is unlimited has no series, as no number would be true for it.
std::vector<prometheus::MetricFamily> ProcessFamilies(const ProcessSample& sample);

/// process_* metrics of the daemon itself, read from /proc at each scrape
/// (prometheus-cpp has no process collector of its own).
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace gpubroker
