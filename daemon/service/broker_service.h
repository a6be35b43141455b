#pragma once

#include <string>

#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "daemon/service/calls.h"
#include "daemon/service/convert.h"
#include "gpubroker/v1/broker.grpc.pb.h"

namespace gpubroker {

/// gpubroker.v1.Broker: authenticates the caller by its token and hands the
/// call to BrokerCalls (shared with session.sock). No business logic lives here.
class BrokerService final : public v1::Broker::Service {
 public:
  BrokerService(BrokerCalls& calls, const NodeStatusCollector& status, DaemonFacts facts);

  grpc::Status Allocate(grpc::ServerContext* ctx, const v1::AllocateRequest* req,
                        v1::AllocateResponse* resp) override;
  grpc::Status Open(grpc::ServerContext* ctx, const v1::OpenRequest* req,
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
  absl::StatusOr<SessionView> Authenticate(const grpc::ServerContext& ctx) const;

  BrokerCalls& calls_;
  Registry& registry_;
  const NodeStatusCollector& status_;
  const DaemonFacts facts_;
};

}  // namespace gpubroker
