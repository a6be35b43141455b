#include "daemon/service/broker_service.h"

#include <atomic>
#include <chrono>
#include <optional>

#include "common/status_macros.h"
#include "common/strings.h"
#include "common/token.h"
#include "daemon/service/convert.h"

namespace gpubroker {

BrokerService::BrokerService(BrokerCalls& calls, const NodeStatusCollector& status,
                             DaemonFacts facts, PeerLookup peer_of)
    : calls_(calls),
      registry_(calls.registry()),
      status_(status),
      facts_(std::move(facts)),
      peer_of_(std::move(peer_of)) {}

absl::StatusOr<SessionView> BrokerService::Authenticate(const grpc::ServerContextBase& ctx) const {
  if (registry_.shutting_down()) return absl::UnavailableError("gpubrokerd is shutting down");
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        StrCat("no session token: connect to session.sock first and send the token in '",
               kTokenMetadataKey, "' metadata"));
  }
  auto token = TokenFromHex(std::string_view(it->second.data(), it->second.size()));
  if (!token) return absl::UnauthenticatedError("malformed session token (want 32 hex digits)");
  GPUBROKER_ASSIGN_OR_RETURN(SessionView session, registry_.Authenticate(*token));
  const std::optional<PeerCredentials> peer = peer_of_(ctx.peer());
  if (!peer) return absl::UnauthenticatedError("the connection's peer is unknown to gpubrokerd");
  if (peer->uid != session.peer.uid) {
    (void)calls_.Refuse("a gRPC call", &session,
                        absl::UnauthenticatedError(StrCat("its token came from pid ", peer->pid,
                                                          " uid ", peer->uid, ", another user")));
    // The same words as for a token that matches no session: whose it is stays unsaid.
    return absl::UnauthenticatedError("unknown session token");
  }
  return session;
}

grpc::Status BrokerService::Allocate(grpc::ServerContext* ctx, const v1::AllocateRequest* req,
                                     v1::AllocateResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return ToGrpcStatus(calls_.Refuse("Allocate", nullptr, session.status()));
  return ToGrpcStatus(calls_.Allocate(*session, *req, resp));
}

namespace {

// An Open parked in the registry: no thread waits for it. The registry's
// answer finishes the call; a cancellation (the client gave up, or its
// deadline passed) unparks it.
class WaitingOpen final : public grpc::ServerUnaryReactor {
 public:
  WaitingOpen(BrokerCalls& calls, grpc::CallbackServerContext* ctx) : calls_(calls), ctx_(ctx) {}

  // Called once the wait is parked. A cancellation that came before is acted on now.
  void Parked(WaitId id) {
    id_.store(id);
    if (cancelled_.load()) Unpark(id);
  }

  void OnCancel() override {
    cancelled_.store(true);
    if (const WaitId id = id_.load(); id != 0) Unpark(id);
  }
  void OnDone() override { delete this; }

 private:
  void Unpark(WaitId id) {
    // Past its deadline the client gives up as a timeout, not a cancellation.
    const bool late = ctx_->deadline() <= std::chrono::system_clock::now();
    calls_.CancelWait(id, late ? absl::DeadlineExceededError("the call's deadline passed")
                               : absl::CancelledError("the call was cancelled"));
  }

  BrokerCalls& calls_;
  grpc::CallbackServerContext* const ctx_;
  std::atomic<WaitId> id_{0};
  std::atomic<bool> cancelled_{false};
};

}  // namespace

grpc::ServerUnaryReactor* BrokerService::Open(grpc::CallbackServerContext* ctx,
                                              const v1::OpenRequest* req, v1::OpenResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(calls_.Refuse("Open", nullptr, session.status())));
    return reactor;
  }
  // The call's own deadline bounds a wait.
  auto deadline = std::chrono::steady_clock::time_point::max();
  if (const auto call_deadline = ctx->deadline();
      call_deadline != std::chrono::system_clock::time_point::max()) {
    const auto left = call_deadline - std::chrono::system_clock::now();
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
  }
  auto* reactor = new WaitingOpen(calls_, ctx);
  // req and resp live until the reactor finishes.
  auto open = [this, reactor, view = *session, req, resp, deadline] {
    WaitId parked = 0;
    auto now = calls_.OpenAsync(
        view, *req, deadline, resp,
        [reactor, resp](absl::Status status, v1::OpenResponse out) {
          if (status.ok()) *resp = std::move(out);
          reactor->Finish(ToGrpcStatus(status));
        },
        &parked);
    if (now) {
      reactor->Finish(ToGrpcStatus(*now));
    } else {
      reactor->Parked(parked);
    }
  };
  // An Open that would be refused now is answered after session.sock's
  // thread has served what it has received: a posted seal that came before
  // this call is then in (docs/fast-path.md, "Posted seals").
  if (catch_up_ && !req->wait()) {
    auto key = FromProto(req->ref());
    if (key.ok() &&
        calls_.registry().CouldBecomeOpenable(session->id, *key, req->allow_unsealed())) {
      catch_up_(std::move(open));
      return reactor;
    }
  }
  open();
  return reactor;
}

grpc::Status BrokerService::Seal(grpc::ServerContext* ctx, const v1::SealRequest* req,
                                 v1::SealResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return ToGrpcStatus(calls_.Refuse("Seal", nullptr, session.status()));
  return ToGrpcStatus(calls_.Seal(*session, *req, resp));
}

grpc::Status BrokerService::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* /*resp*/) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return ToGrpcStatus(calls_.Refuse("Release", nullptr, session.status()));
  return ToGrpcStatus(calls_.Release(*session, *req));
}

grpc::Status BrokerService::Free(grpc::ServerContext* ctx, const v1::FreeRequest* req,
                                 v1::FreeResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return ToGrpcStatus(calls_.Refuse("Free", nullptr, session.status()));
  return ToGrpcStatus(calls_.Free(*session, *req, resp));
}

grpc::Status BrokerService::List(grpc::ServerContext* ctx, const v1::ListRequest* /*req*/,
                                 v1::ListResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return ToGrpcStatus(calls_.Refuse("List", nullptr, session.status()));
  for (const auto& v : registry_.List(session->id)) ToProto(v, resp->add_buffers());
  return grpc::Status::OK;
}

grpc::Status BrokerService::Status(grpc::ServerContext* ctx, const v1::StatusRequest* /*req*/,
                                   v1::StatusResponse* resp) {
  // Without a token: the node's totals only (what /metrics shows too), so that
  // a probe or a client in any language can see the daemon before, or
  // without, opening a session. A token that is present must be valid.
  std::optional<SessionView> session;
  if (ctx->client_metadata().count(kTokenMetadataKey) > 0) {
    auto s = Authenticate(*ctx);
    if (!s.ok()) return ToGrpcStatus(calls_.Refuse("Status", nullptr, s.status()));
    session = std::move(*s);
  } else if (registry_.shutting_down()) {
    return ToGrpcStatus(absl::UnavailableError("gpubrokerd is shutting down"));
  }
  ToProto(status_.Collect(), facts_, session ? &*session : nullptr, resp);
  return grpc::Status::OK;
}

}  // namespace gpubroker
