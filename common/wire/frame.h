#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker {

/// Largest frame body accepted on session.sock.
inline constexpr size_t kMaxFrameBytes = 64 * 1024;
inline constexpr size_t kFrameHeaderBytes = 4;

/// Serializes a frame: 4-byte little-endian length, then the message.
std::string EncodeFrame(const v1::SessionFrame& frame);

/// The same, for a session that reads flat answers (Hello.flat_answers): an
/// answer to Open or Claim goes as a flat frame (common/wire/flat_answer.h),
/// anything else as EncodeFrame writes it.
std::string EncodeFrameFor(const v1::SessionFrame& frame, bool flat_answers);

/// Reassembles frames from a byte stream that arrives in arbitrary pieces.
/// A malformed stream (length over kMaxFrameBytes, a body that does not parse,
/// a frame with no body) is an error after which the decoder must not be used:
/// the connection is to be dropped.
class FrameDecoder {
 public:
  /// Reads flat frames too (a client that asked for flat answers); without
  /// it, one is a malformed stream.
  void AcceptFlatAnswers() { accept_flat_ = true; }

  /// Appends bytes as they were read from the socket.
  void Append(std::string_view bytes);

  /// The next complete frame, std::nullopt while more bytes are needed, or
  /// INVALID_ARGUMENT for a malformed stream.
  absl::StatusOr<std::optional<v1::SessionFrame>> Next();

  /// Bytes received but not yet decoded.
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
  bool accept_flat_ = false;
};

}  // namespace gpubroker
