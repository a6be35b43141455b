#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace gpubroker {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS), where the kernel gives them
};

/// A listening SOCK_STREAM socket bound to `path` with permissions `mode`.
/// The caller removes stale files first; an existing file is an error here.
absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, mode_t mode, int backlog = 128);

/// Connects to a path socket. Close-on-exec.
absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path);

/// Credentials of the process that connected (SO_PEERCRED and SO_PEERGROUPS,
/// taken at connect time).
absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd);

/// Writes all of `bytes`, attaching `pass_fd` (if >= 0) to the first byte.
/// Blocks on a blocking socket; on a non-blocking one, fails with
/// UNAVAILABLE when the peer's buffer is full. Never raises SIGPIPE.
absl::Status SendAll(int fd, std::string_view bytes, int pass_fd = -1);

/// Writes what the socket takes now of `bytes` (non-blocking), attaching
/// `pass_fd` (if >= 0) to the first byte written. Returns the bytes written:
/// 0 when the peer's buffer is full (nothing written, the descriptor not sent).
/// Never raises SIGPIPE; UNAVAILABLE when the peer is gone.
absl::StatusOr<size_t> SendSome(int fd, std::string_view bytes, int pass_fd = -1);

struct Received {
  size_t bytes = 0;
  bool eof = false;  // the peer closed; bytes == 0 and !eof means "would block"
};

/// Reads what is available (up to cap bytes). Descriptors that arrive are
/// appended to `fds`; with fds == nullptr the kernel drops them.
absl::StatusOr<Received> RecvSome(int fd, char* buf, size_t cap, std::vector<UniqueFd>* fds,
                                  bool dont_wait = false);

/// A close-on-exec duplicate of `fd` (what a descriptor handed to a client is).
absl::StatusOr<UniqueFd> DupFd(int fd);

/// Waits until fd is readable, for at least `timeout` (a nonzero one is
/// never cut to a poll that does not wait). DEADLINE_EXCEEDED when it passes.
absl::Status WaitReadable(int fd, std::chrono::milliseconds timeout);

}  // namespace gpubroker
