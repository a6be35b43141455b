#include "common/unix_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>

#include "common/status_macros.h"
#include "common/strings.h"

namespace gpubroker {
namespace {

absl::Status ErrnoStatus(std::string_view what, int err) {
  return absl::UnavailableError(StrCat(what, ": ", std::strerror(err)));
}

absl::StatusOr<sockaddr_un> MakeAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(StrCat("socket path too long (", path.size(),
                                             " bytes, limit ", sizeof(addr.sun_path) - 1,
                                             "): ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, mode_t mode, int backlog) {
  GPUBROKER_ASSIGN_OR_RETURN(auto addr, MakeAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoStatus("socket", errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus(StrCat("bind ", path), errno);
  }
  if (::chmod(path.c_str(), mode) != 0) return ErrnoStatus(StrCat("chmod ", path), errno);
  if (::listen(fd.get(), backlog) != 0) return ErrnoStatus("listen", errno);
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path) {
  GPUBROKER_ASSIGN_OR_RETURN(auto addr, MakeAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("socket", errno);
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return ErrnoStatus(StrCat("connect ", path), errno);
  return fd;
}

absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return ErrnoStatus("SO_PEERCRED", errno);
  }
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, {}};
#ifdef SO_PEERGROUPS
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      peer.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;  // an old kernel: no supplementary groups
    groups.resize(bytes / sizeof(gid_t) + 1);
  }
#endif
  return peer;
}

absl::Status SendAll(int fd, std::string_view bytes, int pass_fd) {
  size_t sent = 0;
  bool fd_pending = pass_fd >= 0;
  while (sent < bytes.size() || fd_pending) {
    iovec iov{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (fd_pending) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::UnavailableError("peer is not reading its socket");
      }
      return ErrnoStatus("sendmsg", errno);
    }
    fd_pending = false;
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> SendSome(int fd, std::string_view bytes, int pass_fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return ErrnoStatus("sendmsg", errno);
  }
}

absl::StatusOr<Received> RecvSome(int fd, char* buf, size_t cap, std::vector<UniqueFd>* fds,
                                  bool dont_wait) {
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for a handful of descriptors; one frame carries at most one.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  if (fds != nullptr) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | (dont_wait ? MSG_DONTWAIT : 0));
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Received{};
    return ErrnoStatus("recvmsg", errno);
  }
  if (fds != nullptr) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->emplace_back(received);
      }
    }
  }
  return Received{static_cast<size_t>(n), n == 0};
}

absl::StatusOr<UniqueFd> DupFd(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return ErrnoStatus("dup", errno);
  return UniqueFd(copy);
}

absl::Status WaitReadable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // Rounded up: poll's whole milliseconds never cut the wait short (a
    // timeout of 1 ms, truncated a moment after the deadline was set, would
    // be a poll that does not wait at all).
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError("timed out waiting for the daemon");
    if (errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

}  // namespace gpubroker
