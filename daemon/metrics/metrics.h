#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gpubroker {

/// The state that gauges report, sampled when Prometheus scrapes: gauges are
/// read off the registry and the backend rather than kept in step with them.
struct MetricsSample {
  struct Device {
    std::string uuid;
    uint64_t capacity_bytes = 0;
    uint64_t reserved_bytes = 0;
    uint64_t used_bytes = 0;
    uint64_t free_bytes = 0;
  };
  struct Cell {
    std::string device_uuid;
    std::string tenant;
    uint32_t buffers = 0;
    uint64_t bytes = 0;
  };
  struct Tenant {
    std::string name;
    uint64_t quota_bytes = 0;  // 0: unlimited (exported as no series)
    uint64_t used_bytes = 0;   // what counts against the quota
    uint32_t sessions = 0;
  };
  uint32_t sessions = 0;
  std::vector<Device> devices;
  std::vector<Cell> cells;
  std::vector<Tenant> tenants;
};

/// Why memory was given back without a Free: the owner's session died or
/// closed with buffers it had not freed, or a TTL passed.
enum class ReclaimCause { kDied, kClosed, kTtl };

/// Every metric of the daemon, built once here. Names follow Prometheus
/// conventions (base units, _total on counters); no pid or buffer id labels.
/// No two families' names collide once a client library adds its suffixes
/// (a counter "x_total" is family "x" to OpenMetrics), and a value that has no
/// finite number (an unlimited quota or rlimit) has no series.
class Metrics {
 public:
  using Sampler = std::function<MetricsSample()>;

  explicit Metrics(Sampler sampler);

  /// What an exposer serves: the counters and histograms, the gauges, and
  /// the daemon's process_* metrics.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  /// result: ok, quota, out_of_memory, invalid (any other refusal counts as invalid).
  void Allocation(std::string_view result, double seconds);
  void Open(std::string_view result);
  void Reclaimed(uint64_t bytes, ReclaimCause cause);
  void SessionEnded(bool clean);
  void SessionStarted();

  /// The label for an Allocate outcome.
  static std::string_view AllocationResult(const absl::Status& status);
  /// The label for an Open outcome: ok, not_found, not_sealed, timeout, invalid, unavailable.
  static std::string_view OpenResult(const absl::Status& status);

 private:
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StateCollector> state_;
  std::shared_ptr<prometheus::Collectable> process_;
  prometheus::Family<prometheus::Counter>& allocations_;
  prometheus::Family<prometheus::Counter>& opens_;
  prometheus::Family<prometheus::Counter>& sessions_ended_;
  prometheus::Counter* reclaimed_died_;
  prometheus::Counter* reclaimed_closed_;
  prometheus::Counter* reclaimed_ttl_;
  prometheus::Histogram& allocation_seconds_;
  prometheus::Counter* alloc_ok_;
  prometheus::Counter* alloc_quota_;
  prometheus::Counter* alloc_oom_;
  prometheus::Counter* alloc_invalid_;
  prometheus::Counter* sessions_closed_;
  prometheus::Counter* sessions_died_;
  prometheus::Counter& sessions_started_;
  std::vector<std::pair<std::string, prometheus::Counter*>> open_results_;
};

}  // namespace gpubroker
