#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/stats.h"
#include "common/unique_fd.h"

namespace gpubroker::bench {

/// A child process of this benchmark (fork+exec of itself in a serve mode).
struct Child {
  int pid = -1;
  UniqueFd channel;  // our end of a socketpair with the child, when it has one

  Child() = default;
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)), channel(std::move(o.channel)) {}
  Child& operator=(Child&&) = delete;
  ~Child();
};

/// Starts `gpubroker-bench --serve-echo PATH` and waits until it listens.
Child StartEchoServer(const std::string& path);
/// Runs the echo server (child side); returns when killed.
int ServeEcho(const std::string& path);
/// Bare gRPC unary echo over the Unix socket: one call per Run().
class EchoClient {
 public:
  explicit EchoClient(const std::string& path);
  ~EchoClient();
  double Run();  // microseconds

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Starts `gpubroker-bench --serve-handover` on a socketpair.
Child StartHandoverPeer();
int ServeHandover(int fd);
/// Bare memfd + SCM_RIGHTS: create, size, send; the peer maps, touches, unmaps,
/// answers. One hand-over; microseconds.
double RunHandover(Child& peer, uint64_t size);

/// Spawns this binary with `args`, giving it `child_fd` (if >= 0) as an inherited descriptor.
int SpawnSelf(const std::vector<std::string>& args, int child_fd);

}  // namespace gpubroker::bench
