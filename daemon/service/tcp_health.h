#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpc_health/v1/health.grpc.pb.h"

namespace grpc {
class Server;
}

namespace gpubroker {

/// grpc.health.v1 on a TCP port, and nothing else: probes that can only
/// reach TCP (Kubernetes' grpc probes) learn whether the broker serves, while
/// broker calls stay on the Unix socket where the kernel names the peer.
class TcpHealthServer final : public grpc::health::v1::Health::Service {
 public:
  /// Listens on `address` (HOST:PORT; port 0 picks one). Not serving at first.
  static absl::StatusOr<std::unique_ptr<TcpHealthServer>> Start(const std::string& address);
  ~TcpHealthServer() override;

  /// HOST:PORT as bound.
  const std::string& address() const { return address_; }
  void SetServing(bool serving) { serving_ = serving; }
  void Shutdown();

  grpc::Status Check(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::Status Watch(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  TcpHealthServer() = default;
  grpc::health::v1::HealthCheckResponse::ServingStatus Current(const std::string& service) const;

  std::atomic<bool> serving_{false};
  std::atomic<bool> stopping_{false};
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gpubroker
