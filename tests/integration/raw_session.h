#pragma once

// session.sock spoken frame by frame, as a client in another language (or a
// hostile one) speaks it: no client library in between.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "common/wire/frame.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker::testing {

class RawSession {
 public:
  RawSession() = default;
  /// Connects and says Hello; ok() when Welcome came (failures are test failures).
  explicit RawSession(const std::string& socket_dir);
  RawSession(RawSession&&) = default;
  RawSession& operator=(RawSession&&) = default;

  /// Connects to DIR/session.sock; says nothing yet.
  static absl::StatusOr<RawSession> Connect(const std::string& socket_dir);

  bool ok() const { return welcome_.token().size() == 16; }
  int fd() const { return fd_.get(); }
  const v1::Welcome& welcome() const { return welcome_; }
  /// The session token as gRPC metadata wants it (32 hex digits).
  std::string token_hex() const;

  /// From now on, Send writes the calls that have a flat layout flat
  /// (common/wire/flat_call.h), as a client does whose Welcome says flat_calls.
  void SendCallsFlat(bool on) { flat_calls_ = on; }

  /// Writes a whole frame (blocking).
  absl::Status Send(const v1::SessionFrame& frame);
  /// The next frame, or nullopt when none came within `timeout`. UNAVAILABLE
  /// once the daemon has closed the connection. Descriptors go to `fds`.
  absl::StatusOr<std::optional<v1::SessionFrame>> Read(std::chrono::milliseconds timeout,
                                                       std::vector<UniqueFd>* fds = nullptr);
  /// Hello, then Welcome: the daemon's ErrorFrame as a status otherwise.
  absl::Status Hello(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  /// One call and its answer: the Reply, or the ErrorFrame as a status.
  absl::StatusOr<v1::Reply> Call(v1::Call call,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Sends `call` with a fresh request id and returns the frame that answers
  /// it (a Reply or an ErrorFrame); nullopt when none came within 5 s.
  std::optional<v1::SessionFrame> Exchange(v1::Call call);
  uint64_t NextRequestId() { return next_id_++; }
  /// True when the daemon closes the connection within `timeout`.
  bool ClosedByDaemon(std::chrono::milliseconds timeout);

 private:
  UniqueFd fd_;
  FrameDecoder decoder_;
  v1::Welcome welcome_;
  uint64_t next_id_ = 1;
  bool flat_calls_ = false;
};

/// The status an ErrorFrame carries, its refusal reason attached (common/refusal.h).
absl::Status StatusOf(const v1::ErrorFrame& error);

}  // namespace gpubroker::testing
