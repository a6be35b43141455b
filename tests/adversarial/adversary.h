#pragma once

// The test side of gpubroker-adversary: a hostile client process, run as a
// uid of the test's choosing.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>

#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {

class Adversary {
 public:
  /// Starts gpubroker-adversary on `socket_dir`, as `uid` (>= 0, through
  /// setpriv) or as this process's user (-1).
  Adversary(const std::string& socket_dir, int uid, const std::vector<gid_t>& groups = {});
  ~Adversary();

  bool ok() const { return ok_; }
  pid_t pid() const { return process_.pid(); }
  /// Sends a command and returns the reply line ("" on timeout or death).
  std::string Send(const std::string& command,
                   std::chrono::milliseconds timeout = std::chrono::seconds(120));
  void Kill9() { process_.Signal(SIGKILL); }

 private:
  Process process_;
  bool ok_ = false;
};

/// The key=value fields of a reply ("ok a=1 b=2 | text": {a: 1, b: 2, "|": text}).
std::map<std::string, std::string> Fields(const std::string& reply);
/// A field as a number (-1 when absent).
long Field(const std::string& reply, const std::string& key);

/// Runs the gpubroker CLI against `socket_dir` to completion: its exit code,
/// with stdout and stderr in `output`.
int RunCli(const std::string& socket_dir, std::vector<std::string> args, std::string* output);

/// A gRPC stub on DIR/gpubroker.sock, and a context carrying `token_hex`
/// with a deadline (no call of these tests may hang the test).
std::unique_ptr<v1::Broker::Stub> BrokerStub(const std::string& socket_dir);
std::unique_ptr<grpc::ClientContext> CallContext(
    const std::string& token_hex, std::chrono::milliseconds deadline = std::chrono::seconds(5));

/// True when the tests may start processes as other users.
bool CanSwitchUsers();

}  // namespace gpubroker::testing
