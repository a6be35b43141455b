#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "common/wire/flat_call.h"
#include "daemon/core/registry.h"
#include "daemon/metrics/metrics.h"
#include "daemon/util/rate_limiter.h"
#include "gpubroker/v1/broker.pb.h"
#include "gpubroker/v1/session.pb.h"

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
  /// An Allocate that came on session.sock, served as the routing rule says
  /// (common/wire/routing.h, the rule Welcome advertises): FAILED_PRECONDITION
  /// for one that goes through gRPC only; at or over the quick allocation
  /// limit, served from a kept allocation or answered ABORTED ("ask through
  /// gRPC"), which is not counted as a refusal. It never waits.
  absl::Status QuickAllocate(const SessionView& s, const v1::AllocateRequest& req,
                             v1::AllocateResponse* resp);
  /// An Open that does not wait (a waiting one is refused: use OpenAsync).
  absl::Status Open(const SessionView& s, const v1::OpenRequest& req, v1::OpenResponse* resp);

  /// The answer to an Open that was parked: delivered once, from whatever
  /// thread ends the wait (see Registry::OpenOrPark), never under a lock.
  using OpenAnswer = std::function<void(absl::Status status, v1::OpenResponse resp)>;
  /// An Open that may wait without holding a thread. Answered now: returns
  /// the status (with `resp` filled in when OK). Parked: returns nullopt and
  /// sets `*parked`; `done` gets the answer later. `deadline` is the
  /// transport's (a gRPC deadline; max: none); the request's timeout_ms and
  /// the daemon's default bound it further. `absent` (optional, for an Open
  /// that does not wait): a refusal that a frame already on its way could
  /// end (the name not known yet, the buffer not sealed yet) is not counted
  /// nor logged but returned as nullopt with `*absent` set, for the caller
  /// to look ahead and ask again.
  std::optional<absl::Status> OpenAsync(const SessionView& s, const v1::OpenRequest& req,
                                        std::chrono::steady_clock::time_point deadline,
                                        v1::OpenResponse* resp, OpenAnswer done, WaitId* parked,
                                        bool* absent = nullptr);
  /// OpenAsync with the answers as the registry's grants, for a caller that
  /// writes them without a message (session.sock's flat answers,
  /// ToFlatAnswer): an answer now that is OK goes to `*grant`; a parked
  /// one to `done`, the grant or the refusal.
  using GrantAnswer = std::function<void(absl::StatusOr<BufferGrant> grant)>;
  std::optional<absl::Status> OpenAsyncGrant(const SessionView& s, const v1::OpenRequest& req,
                                             std::chrono::steady_clock::time_point deadline,
                                             BufferGrant* grant, GrantAnswer done, WaitId* parked,
                                             bool* absent = nullptr);
  /// Ends a parked Open with `why` (CANCELLED, DEADLINE_EXCEEDED) if it is still parked.
  void CancelWait(WaitId id, absl::Status why) { registry_.CancelWait(id, std::move(why)); }
  absl::Status Seal(const SessionView& s, const v1::SealRequest& req, v1::SealResponse* resp);
  absl::Status Release(const SessionView& s, const v1::ReleaseRequest& req);
  absl::Status Free(const SessionView& s, const v1::FreeRequest& req, v1::FreeResponse* resp);

  // session.sock only (docs/fast-path.md): ranges belong to a session's connection.
  absl::Status LeaseRange(const SessionView& s, const v1::LeaseRangeRequest& req,
                          v1::LeaseRangeResponse* resp);
  absl::Status ReturnRange(const SessionView& s, const v1::ReturnRangeRequest& req);
  /// A client-made buffer named and/or sealed. Its answer is the registry's
  /// grant (`*grant` when OK), which session.sock writes after answering
  /// the Opens parked on the seal (ToFlatPublishAnswer, or ToProto of its
  /// buffer for a session that reads protobuf).
  absl::Status Publish(const SessionView& s, const v1::PublishRequest& req, BufferGrant* grant);
  /// Tickets (docs/fast-path.md, "Tickets"): a lease kept for a claimer,
  /// and its claim, answered as an Open.
  absl::Status Hold(const SessionView& s, const v1::HoldRequest& req, v1::HoldResponse* resp);
  /// `grant` (optional): an OK answer goes there instead of into `resp`
  /// (as OpenAsyncGrant's).
  absl::Status Claim(const SessionView& s, const v1::ClaimRequest& req, v1::OpenResponse* resp,
                     BufferGrant* grant = nullptr);
  void RecordCounters(const SessionView& s, const v1::ClientCounters& counters);

  /// The calls of a hand-over's path as session.sock reads them flat
  /// (common/wire/flat_call.h): served from their facts, with no message,
  /// exactly as the message forms above serve them.
  std::optional<absl::Status> OpenAsyncGrant(const SessionView& s, const FlatCallFacts& call,
                                             std::chrono::steady_clock::time_point deadline,
                                             BufferGrant* grant, GrantAnswer done, WaitId* parked,
                                             bool* absent = nullptr);
  absl::Status Publish(const SessionView& s, const FlatCallFacts& call, BufferGrant* grant);
  absl::Status Release(const SessionView& s, const FlatCallFacts& call);
  void RecordCounters(const SessionView& s, const FlatCallFacts::Counters& counters);
  /// The client no longer maps these allocations.
  void Unmapped(const SessionView& s, const v1::Unmapped& unmapped);

  /// Logs a refused call (rate-limited) and returns `status`. `s` is null for
  /// a caller that could not be authenticated.
  absl::Status Refuse(std::string_view call, const SessionView* s, absl::Status status);

  Registry& registry() { return registry_; }
  Metrics& metrics() { return metrics_; }

 private:
  absl::Status DoAllocate(const SessionView& s, const AllocateParams& params,
                          v1::AllocateResponse* resp);
  /// An Open as both forms say it.
  struct OpenAsk {
    absl::StatusOr<BufferKey> key;
    bool wait = false;
    bool allow_unsealed = false;
    uint64_t timeout_ms = 0;
  };
  std::optional<absl::Status> DoOpen(const SessionView& s, OpenAsk ask,
                                     std::chrono::steady_clock::time_point deadline,
                                     BufferGrant* grant, GrantAnswer done, WaitId* parked,
                                     bool* absent);
  absl::Status DoPublish(const SessionView& s, const PublishParams& params, BufferGrant* grant);
  absl::Status DoRelease(const SessionView& s, BufferId id, bool free, bool keep_mapping);

  Registry& registry_;
  Metrics& metrics_;
  RateLimiter warn_limiter_{10.0, 50.0};
};

}  // namespace gpubroker
