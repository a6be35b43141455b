#include "daemon/service/calls.h"

#include <chrono>

#include "common/strings.h"
#include "common/wire/routing.h"
#include "common/wire/tensor.h"
#include "daemon/service/convert.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

BrokerCalls::BrokerCalls(Registry& registry, Metrics& metrics)
    : registry_(registry), metrics_(metrics) {}

absl::Status BrokerCalls::Refuse(std::string_view call, const SessionView* s, absl::Status status) {
  uint64_t suppressed = 0;
  if (warn_limiter_.Allow(&suppressed)) {
    const std::string who = s != nullptr ? StrCat("session ", s->id, " (pid ", s->peer.pid,
                                                  " tenant '", s->tenant, "')")
                                         : std::string("an unauthenticated caller");
    const std::string more =
        suppressed > 0 ? StrCat(" (", suppressed, " similar messages suppressed)") : "";
    spdlog::warn("refused {} from {}: {}: {}{}", call, who, absl::StatusCodeToString(status.code()),
                 View(status.message()), more);
  }
  return status;
}

absl::Status BrokerCalls::Allocate(const SessionView& s, const v1::AllocateRequest& req,
                                   v1::AllocateResponse* resp) {
  return DoAllocate(s, FromProto(req), resp);
}

absl::Status BrokerCalls::QuickAllocate(const SessionView& s, const v1::AllocateRequest& req,
                                        v1::AllocateResponse* resp) {
  const uint64_t quick = WireQuickAllocationLimit(registry_.backend());
  AllocateParams params = FromProto(req);
  params.may_wait = false;
  switch (RouteAllocate(req, quick)) {
    case AllocateRoute::kGrpc:
      metrics_.Allocation("invalid", 0);
      return Refuse("Allocate", &s,
                    absl::FailedPreconditionError(
                        "an Allocate shared with other tenants goes through gRPC, not "
                        "session.sock (it makes a device allocation of its own)"));
    case AllocateRoute::kSessionIfKept:
      params.kept_only = true;
      break;
    case AllocateRoute::kSession:
      break;
  }
  return DoAllocate(s, std::move(params), resp);
}

absl::Status BrokerCalls::DoAllocate(const SessionView& s, const AllocateParams& params,
                                     v1::AllocateResponse* resp) {
  const auto start = std::chrono::steady_clock::now();
  auto grant = registry_.Allocate(s.id, params);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // "Ask through gRPC" is where the call goes next, not an outcome.
  if (IsAskThroughGrpc(grant.status())) return grant.status();
  metrics_.Allocation(Metrics::AllocationResult(grant.status()), seconds);
  if (!grant.ok()) return Refuse("Allocate", &s, grant.status());
  ToProto(*grant, resp);
  return absl::OkStatus();
}

absl::Status BrokerCalls::Open(const SessionView& s, const v1::OpenRequest& req,
                               v1::OpenResponse* resp) {
  if (req.wait()) {
    metrics_.Open("invalid");
    return Refuse("Open", &s, absl::InvalidArgumentError("this way in serves no waiting Open"));
  }
  WaitId parked = 0;
  auto now = OpenAsync(s, req, std::chrono::steady_clock::time_point::max(), resp, {}, &parked);
  return *now;  // a call that does not wait is never parked
}

std::optional<absl::Status> BrokerCalls::OpenAsync(const SessionView& s, const v1::OpenRequest& req,
                                                   std::chrono::steady_clock::time_point deadline,
                                                   v1::OpenResponse* resp, OpenAnswer done,
                                                   WaitId* parked, bool* absent) {
  BufferGrant grant;
  auto now = OpenAsyncGrant(
      s, req, deadline, &grant,
      [done = std::move(done)](absl::StatusOr<BufferGrant> g) {
        v1::OpenResponse out;
        if (g.ok()) {
          ToProto(*g, &out);
        }
        done(g.status(), std::move(out));
      },
      parked, absent);
  if (now && now->ok()) {
    ToProto(grant, resp);
  }
  return now;
}

std::optional<absl::Status> BrokerCalls::OpenAsyncGrant(
    const SessionView& s, const v1::OpenRequest& req,
    std::chrono::steady_clock::time_point deadline, BufferGrant* grant, GrantAnswer done,
    WaitId* parked, bool* absent) {
  return DoOpen(s, {FromProto(req.ref()), req.wait(), req.allow_unsealed(), req.timeout_ms()},
                deadline, grant, std::move(done), parked, absent);
}

std::optional<absl::Status> BrokerCalls::OpenAsyncGrant(
    const SessionView& s, const FlatCallFacts& call, std::chrono::steady_clock::time_point deadline,
    BufferGrant* grant, GrantAnswer done, WaitId* parked, bool* absent) {
  return DoOpen(s, {FromFlatRef(call), call.wait, call.allow_unsealed, call.timeout_ms}, deadline,
                grant, std::move(done), parked, absent);
}

std::optional<absl::Status> BrokerCalls::DoOpen(const SessionView& s, OpenAsk ask,
                                                std::chrono::steady_clock::time_point deadline,
                                                BufferGrant* grant, GrantAnswer done,
                                                WaitId* parked, bool* absent) {
  if (absent != nullptr) *absent = false;
  if (!ask.key.ok()) {
    metrics_.Open("invalid");
    return Refuse("Open", &s, ask.key.status());
  }
  OpenParams params;
  params.wait = ask.wait;
  params.allow_unsealed = ask.allow_unsealed;
  params.deadline = deadline;
  if (ask.wait && ask.timeout_ms > 0) {
    // Saturated: a timeout of centuries is no timeout, not a wrapped deadline.
    const auto timeout = std::chrono::milliseconds(
        std::min<uint64_t>(ask.timeout_ms, uint64_t{100} * 365 * 24 * 3600 * 1000));
    params.deadline = std::min(params.deadline, std::chrono::steady_clock::now() + timeout);
  }
  // Counts and logs the outcome: on this thread for an answer now, on the
  // one that ends the wait for a parked call.
  auto finish = [this, s](absl::StatusOr<BufferGrant> g) -> absl::StatusOr<BufferGrant> {
    metrics_.Open(Metrics::OpenResult(g.status()));
    if (!g.ok()) return Refuse("Open", &s, g.status());
    return g;
  };
  auto answer = registry_.OpenOrPark(
      s.id, *ask.key, params,
      [finish, done = std::move(done)](absl::StatusOr<BufferGrant> g) {
        done(finish(std::move(g)));
      },
      parked, absent != nullptr && !ask.wait ? absent : nullptr);
  if (!answer) return std::nullopt;
  if (absent != nullptr && *absent) return std::nullopt;  // the caller looks ahead, then asks again
  absl::StatusOr<BufferGrant> g = finish(std::move(*answer));
  if (!g.ok()) return g.status();
  *grant = std::move(*g);
  return absl::OkStatus();
}

absl::Status BrokerCalls::Seal(const SessionView& s, const v1::SealRequest& req,
                               v1::SealResponse* resp) {
  auto view = registry_.Seal(s.id, req.id());
  if (!view.ok()) return Refuse("Seal", &s, view.status());
  ToProto(*view, resp->mutable_buffer());
  return absl::OkStatus();
}

absl::Status BrokerCalls::Release(const SessionView& s, const v1::ReleaseRequest& req) {
  return DoRelease(s, req.id(), req.free(), req.keep_mapping());
}

absl::Status BrokerCalls::Release(const SessionView& s, const FlatCallFacts& call) {
  return DoRelease(s, call.id, call.free, call.keep_mapping);
}

absl::Status BrokerCalls::DoRelease(const SessionView& s, BufferId id, bool free,
                                    bool keep_mapping) {
  if (auto st = registry_.Release(s.id, id, free, keep_mapping); !st.ok()) {
    return Refuse("Release", &s, st);
  }
  return absl::OkStatus();
}

absl::Status BrokerCalls::Free(const SessionView& s, const v1::FreeRequest& req,
                               v1::FreeResponse* resp) {
  auto key = FromProto(req.ref());
  if (!key.ok()) return Refuse("Free", &s, key.status());
  auto view = registry_.Free(s.id, *key);
  if (!view.ok()) return Refuse("Free", &s, view.status());
  ToProto(*view, resp->mutable_buffer());
  return absl::OkStatus();
}

absl::Status BrokerCalls::LeaseRange(const SessionView& s, const v1::LeaseRangeRequest& req,
                                     v1::LeaseRangeResponse* resp) {
  RangeParams p;
  p.device = req.device();
  p.min_bytes = req.min_bytes();
  p.want_bytes = req.want_bytes();
  auto grant = registry_.LeaseRange(s.id, p);
  // A refused range is a refused allocation (the client's allocate fails
  // with it); a granted one is not an allocation yet.
  if (!grant.ok()) metrics_.Allocation(Metrics::AllocationResult(grant.status()), 0);
  if (!grant.ok()) return Refuse("LeaseRange", &s, grant.status());
  resp->set_range_id(grant->id);
  resp->set_length(grant->length);
  ToProto(grant->import, resp->mutable_import());
  return absl::OkStatus();
}

absl::Status BrokerCalls::ReturnRange(const SessionView& s, const v1::ReturnRangeRequest& req) {
  if (auto st = registry_.ReturnRange(s.id, req.range_id()); !st.ok()) {
    return Refuse("ReturnRange", &s, st);
  }
  return absl::OkStatus();
}

absl::Status BrokerCalls::Publish(const SessionView& s, const v1::PublishRequest& req,
                                  BufferGrant* grant) {
  PublishParams p;
  p.range = req.range_id();
  p.offset = req.offset();
  p.reserved = req.reserved();
  p.size = req.size();
  p.name = req.name();
  if (req.has_tensor()) p.tensor = TensorFromProto<TensorDesc>(req.tensor());
  p.seal = req.seal();
  p.fence_offset = req.fence_offset();
  p.fence_value = req.fence_value();
  return DoPublish(s, p, grant);
}

absl::Status BrokerCalls::Publish(const SessionView& s, const FlatCallFacts& call,
                                  BufferGrant* grant) {
  return DoPublish(s, FromFlatPublish(call), grant);
}

absl::Status BrokerCalls::DoPublish(const SessionView& s, const PublishParams& p,
                                    BufferGrant* grant) {
  auto published = registry_.Publish(s.id, p);
  if (!published.ok()) return Refuse("Publish", &s, published.status());
  *grant = std::move(*published);
  return absl::OkStatus();
}

absl::Status BrokerCalls::Hold(const SessionView& s, const v1::HoldRequest& req,
                               v1::HoldResponse* resp) {
  HoldParams p;
  p.id = req.id();
  p.range = req.range_id();
  p.offset = req.offset();
  p.secret = req.secret();
  p.ttl_ms = req.ttl_ms();
  auto id = registry_.Hold(s.id, p);
  if (!id.ok()) return Refuse("Hold", &s, id.status());
  resp->set_id(*id);
  return absl::OkStatus();
}

absl::Status BrokerCalls::Claim(const SessionView& s, const v1::ClaimRequest& req,
                                v1::OpenResponse* resp, BufferGrant* grant_out) {
  auto grant = registry_.Claim(s.id, req.secret());
  if (!grant.ok()) return Refuse("Claim", &s, grant.status());
  if (grant_out != nullptr) {
    *grant_out = std::move(*grant);
    return absl::OkStatus();
  }
  ToProto(*grant, resp);
  return absl::OkStatus();
}

void BrokerCalls::RecordCounters(const SessionView& s, const FlatCallFacts::Counters& c) {
  metrics_.ClientReported(registry_.RecordCounters(s.id, FromFlat(c)));
}

void BrokerCalls::RecordCounters(const SessionView& s, const v1::ClientCounters& c) {
  RecordCounters(s, CountersFromProto(c));
}

void BrokerCalls::Unmapped(const SessionView& s, const v1::Unmapped& unmapped) {
  registry_.Unmapped(s.id, std::vector<AllocationId>(unmapped.allocation_ids().begin(),
                                                     unmapped.allocation_ids().end()));
}

}  // namespace gpubroker
