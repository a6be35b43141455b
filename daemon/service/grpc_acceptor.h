#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "daemon/metrics/metrics.h"
#include "daemon/util/descriptors.h"
#include "daemon/util/rate_limiter.h"

namespace grpc {
class Server;
}

namespace gpubroker {

/// Accepts the connections to gpubroker.sock itself and hands each to the
/// gRPC server (grpc::AddInsecureChannelFromFd), instead of letting gRPC
/// listen. That gives the daemon what gRPC's own listener does not:
///  * a uid holds at most `max_connections_per_uid` connections, and each is
///    charged to the descriptor budget; a connection over either is closed at once;
///  * when the kernel refuses a descriptor (EMFILE), one waiting peer is
///    turned away through the reserve descriptor and accepting pauses for a
///    moment, and resumes by itself (gRPC 1.51's listener stops for good);
///  * the credentials of a call's peer (SO_PEERCRED, taken at accept), by
///    the peer string that gRPC gives the connection ("fd:N").
///
/// To learn when gRPC is done with a connection, the acceptor keeps a
/// duplicate of its descriptor and watches it for hang-up only (gRPC shuts a
/// connection's socket down when it drops it, and a peer that leaves closes
/// it): then the duplicate is closed and the connection is no longer counted.
class GrpcAcceptor {
 public:
  struct Options {
    uint32_t max_connections_per_uid = 0;  // 0: no cap
  };

  GrpcAcceptor(DescriptorBudget& descriptors, ReserveDescriptor& reserve, Metrics& metrics,
               Options options);
  ~GrpcAcceptor();
  GrpcAcceptor(const GrpcAcceptor&) = delete;
  GrpcAcceptor& operator=(const GrpcAcceptor&) = delete;

  /// Starts accepting on `listener` for `server` (built with no listening port).
  absl::Status Start(UniqueFd listener, grpc::Server* server);
  /// Stops accepting; connections already handed over stay gRPC's.
  void Stop();

  /// The credentials of the peer whose connection gRPC names `peer`
  /// (grpc::ServerContext::peer()); nullopt for a name it did not hand out.
  std::optional<PeerCredentials> PeerOf(std::string_view peer) const;

  /// Connections handed to gRPC and not ended yet.
  uint64_t connections() const { return per_uid_.total(); }

 private:
  struct Handed {
    PeerCredentials peer;
    int grpc_fd = -1;         // the number gRPC knows it by
    uint64_t generation = 0;  // tells it from a later connection given the same number
  };

  void Loop();
  void AcceptAll();
  void Admit(UniqueFd fd);
  void OutOfDescriptors();
  void Ended(int dup_fd);
  void Warn(const std::string& message);

  DescriptorBudget& descriptors_;
  ReserveDescriptor& reserve_;
  Metrics& metrics_;
  PerUidConnections per_uid_;
  grpc::Server* server_ = nullptr;
  UniqueFd listener_;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  RateLimiter warn_limiter_{5.0, 20.0};
  bool listening_ = true;  // loop thread only
  std::chrono::steady_clock::time_point resume_accepting_;
  // Loop thread only: the duplicates, by their own number.
  std::unordered_map<int, std::pair<UniqueFd, Handed>> watched_;

  mutable absl::Mutex mu_;
  // gRPC's descriptor number -> its peer. A number is entered before gRPC
  // gets the descriptor, so it always names the connection that has it now.
  absl::flat_hash_map<int, std::pair<PeerCredentials, uint64_t>> peers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace gpubroker
