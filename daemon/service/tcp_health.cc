#include "daemon/service/tcp_health.h"

#include <chrono>
#include <thread>

#include "common/strings.h"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpcpp/ext/health_check_service_server_builder_option.h"
#include "grpcpp/grpcpp.h"

namespace gpubroker {

using grpc::health::v1::HealthCheckResponse;

absl::StatusOr<std::unique_ptr<TcpHealthServer>> TcpHealthServer::Start(
    const std::string& address) {
  std::unique_ptr<TcpHealthServer> self(new TcpHealthServer());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  // This service instead of the default one (which the daemon enables for
  // its Unix-socket server, and which would be registered here twice).
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.RegisterService(self.get());
  self->server_ = builder.BuildAndStart();
  if (!self->server_ || port == 0) {
    return absl::FailedPreconditionError(StrCat("cannot serve health checks on ", address));
  }
  self->address_ = StrCat(address.substr(0, address.rfind(':')), ":", port);
  return self;
}

TcpHealthServer::~TcpHealthServer() { Shutdown(); }

void TcpHealthServer::Shutdown() {
  stopping_ = true;
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

HealthCheckResponse::ServingStatus TcpHealthServer::Current(const std::string& service) const {
  if (!service.empty() && service != v1::Broker::service_full_name()) {
    return HealthCheckResponse::SERVICE_UNKNOWN;
  }
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status TcpHealthServer::Check(grpc::ServerContext*,
                                    const grpc::health::v1::HealthCheckRequest* req,
                                    HealthCheckResponse* resp) {
  const auto status = Current(req->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
  }
  resp->set_status(status);
  return grpc::Status::OK;
}

grpc::Status TcpHealthServer::Watch(grpc::ServerContext* context,
                                    const grpc::health::v1::HealthCheckRequest* req,
                                    grpc::ServerWriter<HealthCheckResponse>* writer) {
  // The protocol: the status now, then each change, until the caller leaves.
  bool first = true;
  HealthCheckResponse::ServingStatus last = HealthCheckResponse::UNKNOWN;
  while (!context->IsCancelled() && !stopping_) {
    const auto now = Current(req->service());
    if (first || now != last) {
      HealthCheckResponse resp;
      resp.set_status(now);
      if (!writer->Write(resp)) break;
      first = false;
      last = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return grpc::Status::OK;
}

}  // namespace gpubroker
