#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/unique_fd.h"
#include "daemon/config/options.h"
#include "daemon/core/tenants.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
}

namespace gpubroker {

class Backend;
class Registry;
class NodeStatusCollector;
class Metrics;
class SessionServer;
class BrokerService;
class BrokerCalls;
class GrpcAcceptor;
class DescriptorBudget;
class ReserveDescriptor;
class TcpHealthServer;

/// gpubrokerd's parts, wired together: backend, registry, session socket,
/// gRPC service, metrics, TTL reaper.
class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// Brings every part up and prints the start line. A live daemon on the same
  /// socket directory, a bad option or a port in use is an error here.
  absl::Status Start();

  /// Stops taking sessions, answers UNAVAILABLE, releases everything and
  /// removes the sockets. Idempotent.
  void Shutdown();

  /// Puts a re-read configuration in force (SIGHUP): tenants, quotas, the
  /// admin group and the log level change at once and no session is dropped; a change to any
  /// other option is logged as taking effect at the next restart. A
  /// configuration that fails Check is refused with an error in the log, and
  /// the running one stays.
  absl::Status Reload(const DaemonOptions& options);

  /// What start and reload require of parsed options beyond the parser's own
  /// checks (the tenants, the socket group); the tenant directory they make.
  /// `gpubrokerd --check-config` reports exactly this.
  static absl::StatusOr<TenantDirectory> Check(const DaemonOptions& options);

 private:
  absl::Status PrepareSocketDir();
  absl::Status StartMetrics();
  absl::Status StartGrpc();
  absl::Status StartHealth();
  void ReapExpired();
  void SetServing(bool serving);
  // STATUS= lines for the service manager, and WATCHDOG=1 while the books
  // can be read (a deadlocked registry stops the pings and systemd restarts us).
  void NotifyServiceManager();
  std::string StatusText() const;

  DaemonOptions options_;
  std::string session_path_;
  std::string grpc_path_;
  std::string lock_path_;
  UniqueFd lock_fd_;
  std::string backend_why_;
  std::string metrics_bound_;
  std::unique_ptr<DescriptorBudget> descriptors_;
  std::unique_ptr<ReserveDescriptor> reserve_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<NodeStatusCollector> status_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<BrokerCalls> calls_;  // used by both of the next two
  std::unique_ptr<SessionServer> sessions_;
  std::unique_ptr<BrokerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAcceptor> grpc_acceptor_;
  std::unique_ptr<TcpHealthServer> health_;  // --health-address
  std::string health_bound_;
  std::thread reaper_;
  absl::Notification stop_notifier_;
  std::thread notifier_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace gpubroker
