#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "common/wire/frame.h"
#include "daemon/core/registry.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/calls.h"
#include "daemon/util/rate_limiter.h"

namespace gpubroker {

/// Serves session.sock: one epoll thread for all clients. A client says Hello
/// and gets its session id and token; then it may ask for descriptors (pool
/// and buffer fds, sent with SCM_RIGHTS) and make the data path's calls
/// (Allocate, Open without waiting, Seal, Release), answered by the same
/// BrokerCalls as gRPC. The connection's end, however it comes (Goodbye,
/// close, kill -9), ends the session and reclaims its memory.
///
/// A peer that sends garbage, a frame over the limit or nothing at all within
/// the hello timeout is dropped; no peer can stall the others, since every
/// socket is non-blocking and a peer that does not read its replies is dropped
/// rather than waited for.
class SessionServer {
 public:
  struct Options {
    std::chrono::milliseconds hello_timeout{5000};
  };

  SessionServer(BrokerCalls& calls, Options options);
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  /// Starts serving on a listening socket.
  absl::Status Start(UniqueFd listener);
  /// Stops accepting, says Goodbye to every client and ends their sessions.
  void Stop();

 private:
  struct Connection {
    UniqueFd fd;
    PeerCredentials peer;
    FrameDecoder decoder;
    SessionId session = 0;
    SessionView view;  // once the session is open
    bool said_goodbye = false;
    std::chrono::steady_clock::time_point hello_deadline;
  };
  enum class Outcome { kKeep, kDrop };

  void Loop();
  void AcceptAll();
  Outcome OnReadable(Connection& c);
  Outcome OnFrame(Connection& c, const v1::SessionFrame& frame);
  Outcome OnHello(Connection& c, const v1::Hello& hello);
  Outcome OnFdRequest(Connection& c, const v1::FdRequest& request);
  Outcome OnCall(Connection& c, const v1::Call& call);
  Outcome SendFrame(Connection& c, const v1::SessionFrame& frame, int fd = -1);
  /// Sends the registry's requests to unmap to their sessions' clients.
  void SendUnmapRequests();
  void EndSession(Connection& c, bool clean);
  void Warn(const std::string& message);

  BrokerCalls& calls_;
  Registry& registry_;
  Metrics& metrics_;
  Options options_;
  UniqueFd listener_;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: Stop() wakes the loop
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  RateLimiter warn_limiter_{5.0, 20.0};
  // Touched by the loop thread only (and by Stop after the thread has ended).
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
};

}  // namespace gpubroker
