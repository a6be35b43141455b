#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "daemon/service/calls.h"
#include "daemon/service/convert.h"
#include "gpubroker/v1/broker.grpc.pb.h"

namespace gpubroker {

/// gpubroker.v1.Broker: authenticates the caller and hands the call to
/// BrokerCalls (shared with session.sock). No business logic lives here.
///
/// A caller is authenticated by its session token and by who it is: the
/// token must belong to a session of the same uid as the peer of the gRPC
/// connection (SO_PEERCRED, taken when the daemon accepted it), so that a
/// token that leaks to another user is worth nothing to them.
///
/// Open is served by gRPC's callback API: a waiting Open is parked in the
/// registry and finished by whichever thread answers it, so that waiters hold
/// no thread of the server's (the other calls are short and synchronous).
class BrokerService final : public v1::Broker::WithCallbackMethod_Open<v1::Broker::Service> {
 public:
  /// The credentials of the peer of a connection by gRPC's name for it
  /// (ServerContext::peer()); nullopt for one the daemon did not accept.
  using PeerLookup = std::function<std::optional<PeerCredentials>(std::string_view peer)>;

  BrokerService(BrokerCalls& calls, const NodeStatusCollector& status, DaemonFacts facts,
                PeerLookup peer_of);

  /// How an Open that would be refused waits for session.sock's thread to
  /// serve what it has received first (SessionServer::AfterCatchUp); unset:
  /// it does not.
  using CatchUp = std::function<void(std::function<void()> then)>;
  void set_catch_up(CatchUp catch_up) { catch_up_ = std::move(catch_up); }

  grpc::Status Allocate(grpc::ServerContext* ctx, const v1::AllocateRequest* req,
                        v1::AllocateResponse* resp) override;
  grpc::ServerUnaryReactor* Open(grpc::CallbackServerContext* ctx, const v1::OpenRequest* req,
                                 v1::OpenResponse* resp) override;
  grpc::Status Seal(grpc::ServerContext* ctx, const v1::SealRequest* req,
                    v1::SealResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override;
  grpc::Status Free(grpc::ServerContext* ctx, const v1::FreeRequest* req,
                    v1::FreeResponse* resp) override;
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListRequest* req,
                    v1::ListResponse* resp) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;

 private:
  CatchUp catch_up_;
  absl::StatusOr<SessionView> Authenticate(const grpc::ServerContextBase& ctx) const;

  BrokerCalls& calls_;
  Registry& registry_;
  const NodeStatusCollector& status_;
  const DaemonFacts facts_;
  const PeerLookup peer_of_;
};

}  // namespace gpubroker
