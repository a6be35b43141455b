#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/node_status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gpubroker {

/// Every metric of the daemon, built once here. Names follow Prometheus
/// conventions (base units, _total on counters); no pid or buffer id labels.
/// No two families' names collide once a client library adds its suffixes
/// (a counter "x_total" is family "x" to OpenMetrics), and a value that has no
/// finite number (an unlimited quota or rlimit) has no series.
class Metrics {
 public:
  /// Gauges are read off `status` when Prometheus scrapes, rather than kept in
  /// step with the registry and the backend.
  explicit Metrics(const NodeStatusCollector& status);

  /// What an exposer serves: the counters and histograms, the gauges, and
  /// the daemon's process_* metrics.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  /// The socket a connection came to.
  enum class Socket { kSession, kGrpc };
  /// Why a connection was turned away at accept.
  enum class TurnedAway {
    kUidLimit,     // the uid holds as many connections as it may
    kDescriptors,  // the daemon's descriptor budget, or the kernel's limit, is reached
  };

  /// result: ok, quota, out_of_memory, limit, unavailable, invalid (any other refusal).
  void Allocation(std::string_view result, double seconds);
  void Open(std::string_view result);
  /// What clients reported doing since their last report (the increments
  /// of their totals): client-made allocations count as successful
  /// allocations too, and every path is counted (no slow path is silent).
  void ClientReported(const ClientCounters& delta);
  /// Requests sent to a client to unmap `allocations` before their memory is freed.
  void UnmapRequested(uint64_t allocations);
  void ConnectionRefused(Socket socket, TurnedAway why);
  /// An Open that would have been refused (not found, not sealed) made
  /// session.sock's thread serve the frames other sessions had sent first
  /// (posted seals); `found`: it was served after that.
  void OpenLookedAhead(bool found);
  /// An Open that waits for a seal and asked to wait awake was parked.
  void WaitAwakeAsked();
  /// session.sock's thread polled `seconds` (instead of sleeping) for such waits.
  void WaitedAwake(double seconds);
  /// Turns of session.sock's thread that served client frames since the last
  /// report: those that found it asleep (each paid its wake-up) and those that
  /// found it polling.
  void SessionTurns(uint64_t asleep, uint64_t polling);
  /// session.sock's thread polled `seconds` for the next frame after serving
  /// (its busy poll), and the poll's window is now `window`.
  void BusyPolled(double seconds, std::chrono::nanoseconds window);
  /// An Ahead frame: a producer's client woke session.sock's thread ahead
  /// of a seal's frame.
  void AheadTaken();

  /// A frame that session.sock's thread serves, by what it asks.
  enum class SessionCall {
    kAllocate,
    kOpen,
    kPublish,
    kSeal,
    kRelease,
    kLeaseRange,
    kReturnRange,
    kFdRequest,
    kHold,
    kClaim,
    kOther,
  };
  static constexpr int kSessionCalls = static_cast<int>(SessionCall::kOther) + 1;
  /// The thread's time on one frame, from decoded to answered (a parked
  /// Open: until parked), whatever the answer.
  void SessionCallServed(SessionCall call, double seconds);

  /// The label for an Allocate outcome.
  static std::string_view AllocationResult(const absl::Status& status);
  /// The label for an Open outcome: ok, not_found, not_sealed, timeout, cancelled, limit, invalid,
  /// unavailable.
  static std::string_view OpenResult(const absl::Status& status);

 private:
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StateCollector> state_;
  std::shared_ptr<prometheus::Collectable> process_;
  prometheus::Family<prometheus::Counter>& allocations_;
  prometheus::Family<prometheus::Counter>& opens_;
  prometheus::Histogram& allocation_seconds_;
  prometheus::Family<prometheus::Counter>& client_allocations_;
  prometheus::Family<prometheus::Counter>& client_maps_;
  prometheus::Counter* by_client_;
  prometheus::Counter* by_session_;
  prometheus::Counter* by_grpc_;
  prometheus::Counter* maps_mapped_;
  prometheus::Counter* maps_imported_;
  prometheus::Counter* maps_cached_;
  prometheus::Family<prometheus::Counter>& cache_lookups_;
  prometheus::Counter& cache_hits_;
  prometheus::Counter& cache_misses_;
  prometheus::Counter& cache_evictions_;
  prometheus::Counter& unmap_requests_;
  prometheus::Counter* looked_ahead_[2];  // [found]
  prometheus::Counter* awake_waits_;
  prometheus::Counter* awake_seconds_;
  prometheus::Counter* session_turns_[2];  // [polling]
  prometheus::Counter* busy_polled_seconds_;
  prometheus::Gauge* busy_poll_window_;
  prometheus::Counter* aheads_;
  prometheus::Counter* turned_away_[2][2];  // [Socket][TurnedAway]
  prometheus::Histogram* session_calls_[kSessionCalls];
  std::vector<std::pair<std::string, prometheus::Counter*>> allocation_results_;
  std::vector<std::pair<std::string, prometheus::Counter*>> open_results_;
};

}  // namespace gpubroker
