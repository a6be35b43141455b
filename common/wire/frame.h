#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/wire/flat_answer.h"
#include "common/wire/flat_call.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker {

/// Largest frame body accepted on session.sock.
inline constexpr size_t kMaxFrameBytes = 64 * 1024;
inline constexpr size_t kFrameHeaderBytes = 4;

/// Serializes a frame: 4-byte little-endian length, then the message.
std::string EncodeFrame(const v1::SessionFrame& frame);

/// Which flat frames (the length's top bit set) a peer reads: the daemon's
/// answers to Open and Claim (common/wire/flat_answer.h; a client whose
/// Hello asked; a Publish's answer only through AppendFlatAnswerFrame, to a
/// client that said flat_publish_answers too), or a client's calls of a hand-over's path
/// (common/wire/flat_call.h; a daemon whose Welcome says so). Each side
/// sends flat frames of one kind only, and reads those of the other.
enum class FlatFrames : uint8_t { kNone, kAnswers, kCalls };

/// The same, for a peer that reads `flat` frames: a frame of that kind that
/// fits the layout goes flat, anything else as EncodeFrame writes it.
std::string EncodeFrameFor(const v1::SessionFrame& frame, FlatFrames flat);

/// Appends to `out` the flat frame of an Open's or a Claim's answer written
/// straight from its facts (the daemon's own books, no message in between):
/// the same bytes as EncodeFrameFor writes for the Reply that says the same.
/// False, with nothing written, when they do not fit the layout.
bool AppendFlatAnswerFrame(const FlatAnswerFacts& facts, std::string* out);
/// The same from the Reply (an Open's, a Claim's or a Publish's).
bool AppendFlatAnswerFrame(const v1::Reply& reply, std::string* out);

/// Appends to `out` the flat frame of a call written straight from its facts
/// (the client's own books, no message in between): the same bytes as
/// EncodeFrameFor writes for the Call that says the same. False, with
/// nothing written, when they do not fit the layout.
bool AppendFlatCallFrame(const FlatCallFacts& facts, std::string* out);

/// Reassembles frames from a byte stream that arrives in arbitrary pieces.
/// A malformed stream (length over kMaxFrameBytes, a body that does not parse,
/// a frame with no body) is an error after which the decoder must not be used:
/// the connection is to be dropped.
class FrameDecoder {
 public:
  /// Reads flat frames too: answers (a client that asked for them) or calls
  /// (the daemon). Without it, a flat frame is a malformed stream.
  void AcceptFlat(FlatFrames kind) { accept_flat_ = kind; }
  void AcceptFlatAnswers() { AcceptFlat(FlatFrames::kAnswers); }
  void AcceptFlatCalls() { AcceptFlat(FlatFrames::kCalls); }

  /// Appends bytes as they were read from the socket.
  void Append(std::string_view bytes);

  /// The next complete frame, std::nullopt while more bytes are needed, or
  /// INVALID_ARGUMENT for a malformed stream.
  absl::StatusOr<std::optional<v1::SessionFrame>> Next();

  /// A complete frame's body, not yet decoded: a SessionFrame, or with
  /// `flat` a flat frame of the kind this decoder accepts. The view is valid
  /// until the next Append.
  struct Body {
    std::string_view bytes;
    bool flat = false;
  };
  /// The next complete frame's body, for a reader that decodes it itself
  /// (the client reads a flat answer in place: FlatAnswerRead);
  /// std::nullopt while more bytes are needed; INVALID_ARGUMENT for a
  /// length over the limit. Next() is this and Decode().
  absl::StatusOr<std::optional<Body>> NextBody();
  /// Decodes a body as Next() does: a SessionFrame (which must carry a
  /// message), or a flat frame of `flat`'s kind read into one.
  static absl::Status Decode(Body body, FlatFrames flat, v1::SessionFrame* out);

  /// Bytes received but not yet decoded.
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
  FlatFrames accept_flat_ = FlatFrames::kNone;
};

}  // namespace gpubroker
