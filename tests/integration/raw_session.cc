#include "tests/integration/raw_session.h"

#include <sys/socket.h>

#include <cstring>

#include "common/paths.h"
#include "common/refusal.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/unix_socket.h"
#include "common/version.h"
#include "gtest/gtest.h"

namespace gpubroker::testing {

absl::Status StatusOf(const v1::ErrorFrame& error) {
  return WithRefusal(absl::Status(static_cast<absl::StatusCode>(error.code()), error.message()),
                     static_cast<Refusal>(error.reason()));
}

RawSession::RawSession(const std::string& socket_dir) {
  auto fd = ConnectUnix(StrCat(socket_dir, "/", kSessionSocketName));
  if (!fd.ok()) {
    ADD_FAILURE() << fd.status();
    return;
  }
  fd_ = std::move(*fd);
  if (auto s = Hello(); !s.ok()) ADD_FAILURE() << "Hello: " << s;
}

std::optional<v1::SessionFrame> RawSession::Exchange(v1::Call call) {
  const uint64_t id = NextRequestId();
  call.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_call() = std::move(call);
  if (!Send(frame).ok()) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto answer = Read(std::max(left, std::chrono::milliseconds(0)));
    if (!answer.ok() || !answer->has_value()) return std::nullopt;
    const v1::SessionFrame& f = **answer;
    if ((f.has_reply() && f.reply().request_id() == id) ||
        (f.has_error() && f.error().request_id() == id)) {
      return f;
    }
  }
}

absl::StatusOr<RawSession> RawSession::Connect(const std::string& socket_dir) {
  auto fd = ConnectUnix(StrCat(socket_dir, "/", kSessionSocketName));
  if (!fd.ok()) return fd.status();
  RawSession s;
  s.fd_ = std::move(*fd);
  return s;
}

std::string RawSession::token_hex() const {
  Token token{};
  if (welcome_.token().size() == token.size()) {
    std::memcpy(token.data(), welcome_.token().data(), token.size());
  }
  return TokenToHex(token);
}

absl::Status RawSession::Send(const v1::SessionFrame& frame) {
  return SendAll(fd_.get(),
                 EncodeFrameFor(frame, flat_calls_ ? FlatFrames::kCalls : FlatFrames::kNone));
}

absl::StatusOr<std::optional<v1::SessionFrame>> RawSession::Read(std::chrono::milliseconds timeout,
                                                                 std::vector<UniqueFd>* fds) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[64 * 1024];
  for (;;) {
    auto frame = decoder_.Next();
    if (!frame.ok()) return frame.status();
    if (frame->has_value()) return std::move(*frame);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !WaitReadable(fd_.get(), left).ok()) {
      return std::optional<v1::SessionFrame>();
    }
    std::vector<UniqueFd> got;
    auto r = RecvSome(fd_.get(), buf, sizeof(buf), &got);
    if (!r.ok()) return r.status();
    if (r->eof) return absl::UnavailableError("the daemon closed the connection");
    if (fds != nullptr) {
      for (auto& g : got) fds->push_back(std::move(g));
    }
    decoder_.Append(std::string_view(buf, r->bytes));
  }
}

absl::Status RawSession::Hello(std::chrono::milliseconds timeout) {
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_client_name("raw");
  const absl::Status sent = Send(hello);
  // A connection that is turned away is told why, maybe before Hello arrives.
  auto reply = Read(timeout);
  if (!reply.ok()) return sent.ok() ? reply.status() : sent;
  if (!reply->has_value()) return absl::DeadlineExceededError("no answer to Hello");
  if ((*reply)->has_error()) return StatusOf((*reply)->error());
  if (!(*reply)->has_welcome()) return absl::InternalError("Hello answered with neither");
  welcome_ = (*reply)->welcome();
  return absl::OkStatus();
}

absl::StatusOr<v1::Reply> RawSession::Call(v1::Call call, std::chrono::milliseconds timeout) {
  const uint64_t id = NextRequestId();
  call.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_call() = std::move(call);
  if (auto s = Send(frame); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto answer = Read(std::max(left, std::chrono::milliseconds(0)));
    if (!answer.ok()) return answer.status();
    if (!answer->has_value()) return absl::DeadlineExceededError("no answer to the call");
    const v1::SessionFrame& f = **answer;
    if (f.has_error() && f.error().request_id() == id) return StatusOf(f.error());
    if (f.has_reply() && f.reply().request_id() == id) return f.reply();
  }
}

bool RawSession::ClosedByDaemon(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = Read(std::chrono::milliseconds(50));
    if (!r.ok()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace gpubroker::testing
