#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "daemon/core/registry.h"
#include "daemon/metrics/metrics.h"
#include "daemon/util/rate_limiter.h"
#include "gpubroker/v1/broker.pb.h"

namespace gpubroker {

/// The broker's calls, once, for both ways in: the gRPC service and the calls
/// that arrive on a session's own connection (session.sock). Converts
/// messages, counts outcomes, logs refusals (rate-limited); the rules live in
/// the registry. Thread-safe.
class BrokerCalls {
 public:
  BrokerCalls(Registry& registry, Metrics& metrics);

  absl::Status Allocate(const SessionView& s, const v1::AllocateRequest& req,
                        v1::AllocateResponse* resp);
  /// An Allocate that came on session.sock: FAILED_PRECONDITION unless the
  /// socket serves it (AllocateIsQuick, the rule Welcome advertises).
  absl::Status QuickAllocate(const SessionView& s, const v1::AllocateRequest& req,
                             v1::AllocateResponse* resp);
  /// `params` carries what the transport adds (deadline, cancellation); the
  /// request's own fields are applied on top.
  absl::Status Open(const SessionView& s, const v1::OpenRequest& req, OpenParams params,
                    v1::OpenResponse* resp);
  absl::Status Seal(const SessionView& s, const v1::SealRequest& req, v1::SealResponse* resp);
  absl::Status Release(const SessionView& s, const v1::ReleaseRequest& req);
  absl::Status Free(const SessionView& s, const v1::FreeRequest& req, v1::FreeResponse* resp);

  /// Logs a refused call (rate-limited) and returns `status`. `s` is null for
  /// a caller that could not be authenticated.
  absl::Status Refuse(std::string_view call, const SessionView* s, absl::Status status);

  Registry& registry() { return registry_; }
  Metrics& metrics() { return metrics_; }

 private:
  Registry& registry_;
  Metrics& metrics_;
  RateLimiter warn_limiter_{10.0, 50.0};
};

}  // namespace gpubroker
