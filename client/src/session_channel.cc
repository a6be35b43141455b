#include <poll.h>

#include <cerrno>
#include <cstring>

#include "client/src/client_impl.h"
#include "common/strings.h"
#include "common/unix_socket.h"
#include "common/version.h"
#include "gpubroker/error.hpp"

namespace gpubroker::detail {

SessionChannel::SessionChannel(const std::string& path, const std::string& client_name,
                               std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  auto fd = ConnectUnix(path);
  if (!fd.ok()) {
    ThrowError(ErrorCode::kUnavailable,
               StrCat("no gpubrokerd answers at ", path, ": ", View(fd.status().message())));
  }
  fd_ = std::move(*fd);
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_client_name(client_name);
  const absl::Status sent = SendAll(fd_.get(), EncodeFrame(hello));
  std::lock_guard lock(mu_);
  v1::SessionFrame reply;
  try {
    reply = ReadFrame(timeout, nullptr);
  } catch (const Error&) {
    // A daemon that turns a connection away (too many of this uid's, or no
    // descriptors left) says why and closes, maybe before our Hello arrived:
    // its answer is what to report, not the failed write.
    if (!sent.ok())
      ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(sent.message())));
    throw;
  }
  if (reply.has_error()) ThrowErrorFrame(reply.error());
  if (!reply.has_welcome() || reply.welcome().token().size() != 16) {
    ThrowError(ErrorCode::kInternal, "session.sock: the daemon did not answer Hello with Welcome");
  }
  welcome_ = reply.welcome();
}

SessionChannel::~SessionChannel() = default;

v1::SessionFrame SessionChannel::ReadFrame(std::chrono::milliseconds timeout, UniqueFd* fd) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  std::vector<UniqueFd> received;
  for (;;) {
    auto frame = decoder_.Next();
    if (!frame.ok()) {
      ThrowError(ErrorCode::kInternal, StrCat("session.sock: bad frame from the daemon: ",
                                              View(frame.status().message())));
    }
    if (frame->has_value()) {
      v1::SessionFrame f = std::move(**frame);
      if (f.has_fd_grant()) {
        // The descriptor travelled in the same sendmsg as this frame, so it
        // has arrived by the time the frame is complete.
        if (fds_.empty())
          ThrowError(ErrorCode::kInternal, "session.sock: FdGrant without a descriptor");
        if (fd != nullptr) *fd = std::move(fds_.front());
        fds_.pop_front();
      }
      return f;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (auto s = WaitReadable(fd_.get(), std::max(left, std::chrono::milliseconds(0))); !s.ok()) {
      ThrowError(ErrorCode::kDeadlineExceeded, "session.sock: the daemon did not answer in time");
    }
    received.clear();
    auto got = RecvSome(fd_.get(), buf, sizeof(buf), &received);
    if (!got.ok()) {
      ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(got.status().message())));
    }
    if (got->eof) ThrowError(ErrorCode::kUnavailable, "gpubrokerd closed the session");
    for (auto& r : received) fds_.push_back(std::move(r));
    decoder_.Append(std::string_view(buf, got->bytes));
  }
}

v1::SessionFrame SessionChannel::Exchange(const std::string& frame, uint64_t id, UniqueFd* fd,
                                          std::chrono::milliseconds timeout) {
  if (!fd_) ThrowError(ErrorCode::kUnavailable, "the session is closed");
  if (auto s = SendAll(fd_.get(), frame); !s.ok()) {
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(s.message())));
  }
  for (;;) {
    UniqueFd got;
    v1::SessionFrame reply = ReadFrame(timeout, &got);
    if (Unasked(reply)) continue;
    if (reply.has_goodbye()) {
      ThrowError(ErrorCode::kUnavailable,
                 StrCat("gpubrokerd ended the session: ", reply.goodbye().reason()));
    }
    if (reply.has_error() && reply.error().request_id() == id) ThrowErrorFrame(reply.error());
    const bool ours = (reply.has_fd_grant() && reply.fd_grant().request_id() == id) ||
                      (reply.has_reply() && reply.reply().request_id() == id);
    if (ours) {
      if (fd != nullptr) *fd = std::move(got);
      return reply;
    }
    // Anything else answers an earlier request that gave up; skip it.
  }
}

bool SessionChannel::Unasked(const v1::SessionFrame& frame) {
  if (frame.has_blocks_returned()) {
    if (on_returned_) on_returned_(frame.blocks_returned());
    return true;
  }
  if (frame.has_unmap_request()) {
    if (on_unmap_) on_unmap_(frame.unmap_request());
    return true;
  }
  return false;
}

bool SessionChannel::Poll(int wake_fd, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mu_);
    if (!fd_) return false;
  }
  // Waits without the lock: a call may run meanwhile, and read what comes.
  pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
  if (::poll(fds, 2, static_cast<int>(timeout.count())) <= 0) return true;
  if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) return true;
  std::lock_guard lock(mu_);
  if (!fd_) return false;
  char buf[4096];
  std::vector<UniqueFd> received;
  for (;;) {
    auto frame = decoder_.Next();
    if (!frame.ok()) return false;  // the next call says what is wrong
    if (frame->has_value()) {
      const v1::SessionFrame& f = **frame;
      if (f.has_goodbye()) return false;
      if (f.has_fd_grant() && !fds_.empty()) fds_.pop_front();  // answers a call that gave up
      Unasked(f);
      continue;
    }
    // Only what has arrived: a call in flight may have read the rest.
    if (!WaitReadable(fd_.get(), std::chrono::milliseconds(0)).ok()) return true;
    received.clear();
    auto got = RecvSome(fd_.get(), buf, sizeof(buf), &received);
    if (!got.ok() || got->eof) return false;
    for (auto& r : received) fds_.push_back(std::move(r));
    decoder_.Append(std::string_view(buf, got->bytes));
  }
}

void SessionChannel::Send(const v1::SessionFrame& frame) {
  std::lock_guard lock(mu_);
  if (!fd_) ThrowError(ErrorCode::kUnavailable, "the session is closed");
  if (auto s = SendAll(fd_.get(), EncodeFrame(frame)); !s.ok()) {
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(s.message())));
  }
}

UniqueFd SessionChannel::RequestFd(v1::FdRequest request, v1::FdGrant* grant) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_request_id_++;
  request.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_fd_request() = std::move(request);
  UniqueFd fd;
  v1::SessionFrame reply = Exchange(EncodeFrame(frame), id, &fd, timeout_);
  if (!reply.has_fd_grant())
    ThrowError(ErrorCode::kInternal, "session.sock: FdRequest answered with a Reply");
  if (grant != nullptr) *grant = reply.fd_grant();
  return fd;
}

bool SessionChannel::Call(v1::Call call, v1::Reply* reply, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_request_id_++;
  call.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_call() = std::move(call);
  if (frame.ByteSizeLong() > kMaxFrameBytes) return false;
  v1::SessionFrame answer = Exchange(EncodeFrame(frame), id, nullptr, timeout);
  if (!answer.has_reply())
    ThrowError(ErrorCode::kInternal, "session.sock: Call answered with an FdGrant");
  *reply = std::move(*answer.mutable_reply());
  return true;
}

void SessionChannel::SayGoodbye() noexcept {
  std::lock_guard lock(mu_);
  if (!fd_) return;
  v1::SessionFrame bye;
  bye.mutable_goodbye()->set_reason("client closed");
  (void)SendAll(fd_.get(), EncodeFrame(bye));
  fd_.reset();
}

}  // namespace gpubroker::detail
