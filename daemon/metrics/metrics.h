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
    uint64_t quota_bytes = 0;
  };
  uint32_t sessions = 0;
  uint64_t session_connections = 0;  // on session.sock, Hello said or not
  uint64_t grpc_connections = 0;
  int64_t open_descriptors = -1;    // -1: unknown
  uint64_t descriptor_limit = 0;    // RLIMIT_NOFILE (soft)
  uint64_t client_descriptors = 0;  // charged to the descriptor budget
  std::vector<Device> devices;
  std::vector<Cell> cells;
  std::vector<Tenant> tenants;
};

/// Every metric of the daemon, built once here. Names follow Prometheus
/// conventions (base units, _total on counters); no pid or buffer id labels.
class Metrics {
 public:
  using Sampler = std::function<MetricsSample()>;

  explicit Metrics(Sampler sampler);

  /// What an exposer serves: the counters and histograms, and the gauges.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  /// The socket a connection came to.
  enum class Socket { kSession, kGrpc };
  /// Why a connection was turned away at accept.
  enum class Refusal {
    kUidLimit,     // the uid holds as many connections as it may
    kDescriptors,  // the daemon's descriptor budget, or the kernel's limit, is reached
  };

  /// result: ok, quota, out_of_memory, limit, invalid (any other refusal counts as invalid).
  void Allocation(std::string_view result, double seconds);
  void Open(std::string_view result);
  void Reclaimed(uint64_t bytes);
  void SessionEnded(bool clean);
  void SessionStarted();
  void ConnectionRefused(Socket socket, Refusal why);

  /// The label for an Allocate outcome.
  static std::string_view AllocationResult(const absl::Status& status);
  /// The label for an Open outcome: ok, not_found, not_sealed, timeout, invalid, unavailable.
  static std::string_view OpenResult(const absl::Status& status);

 private:
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StateCollector> state_;
  prometheus::Family<prometheus::Counter>& allocations_;
  prometheus::Family<prometheus::Counter>& opens_;
  prometheus::Family<prometheus::Counter>& sessions_total_;
  prometheus::Counter& reclaimed_;
  prometheus::Histogram& allocation_seconds_;
  prometheus::Counter* alloc_ok_;
  prometheus::Counter* alloc_quota_;
  prometheus::Counter* alloc_oom_;
  prometheus::Counter* alloc_invalid_;
  prometheus::Counter* alloc_limit_;
  prometheus::Counter* refused_[2][2];  // [Socket][Refusal]
  prometheus::Counter* sessions_closed_;
  prometheus::Counter* sessions_died_;
  prometheus::Counter& sessions_started_;
  std::vector<std::pair<std::string, prometheus::Counter*>> open_results_;
};

}  // namespace gpubroker
