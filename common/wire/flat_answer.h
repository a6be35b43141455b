#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker {

/// The answer to an Open or a Claim (and, for a client that says
/// flat_publish_answers too, to a Publish) in a flat layout, for clients
/// that ask for it in Hello (flat_answers): the same message, written as fixed
/// little-endian fields and length-prefixed strings instead of protobuf's
/// tagged varints. A process that has just woken reads it in a third to a
/// half of the time protobuf's parse takes, and writes it in a bit over half
/// (docs/performance.md, "What the frames cost cold"); it is on every
/// hand-over's critical path: the daemon writes it while the consumer waits,
/// the consumer reads it before it can map.
///
/// On the wire a flat frame is a frame whose 4-byte length has its top bit
/// (kFlatFrameBit) set; only the daemon sends them, and only to a session
/// whose Hello asked.

/// Set in a frame's length: its body is a flat answer, not a SessionFrame.
inline constexpr uint32_t kFlatFrameBit = 0x80000000u;

/// Whether `reply` is one that AppendFlatAnswer writes: an Open's, a
/// Claim's or a Publish's answer whose strings, lists and bytes fit the
/// layout's bounds.
/// The layout carries the fields this build knows (a test fails when the
/// messages gain one it does not); unknown fields, which only a message
/// parsed from a newer peer holds, are not carried. The daemon writes flat
/// only the answers it builds itself. No reflection: this is on the path.
bool FitsFlatAnswer(const v1::Reply& reply);

/// Appends `reply` to `out` in the flat layout. False, with nothing
/// written, when it is not one that FitsFlatAnswer.
bool AppendFlatAnswer(const v1::Reply& reply, std::string* out);

/// What an Open's or a Claim's answer says, field for field as the flat
/// layout carries it, with no message in between: the daemon fills it from
/// its own books and writes its answer from it. The enums are their wire
/// (v1) values; strings and lists are views, valid while it is written.
struct FlatAnswerFacts {
  /// Which answer: Reply.open, Reply.claim, or Reply.publish (a buffer and
  /// no import).
  enum class Kind : uint8_t { kOpen = 1, kClaim = 2, kPublish = 3 };
  Kind kind = Kind::kOpen;
  uint64_t request_id = 0;
  bool has_buffer = false;
  bool has_tensor = false;
  bool has_import = false;
  // BufferInfo
  uint64_t id = 0, size = 0, reserved_size = 0, owner_session = 0;
  int64_t expires_unix_ms = 0, created_unix_ms = 0;
  int32_t state = 0;
  uint32_t leases = 0;
  bool keep = false, client_made = false;
  std::string_view name, device_uuid, tenant, backing;
  std::vector<std::string_view> shared_with;
  // TensorDescriptor
  int32_t dtype = 0;
  std::span<const int64_t> shape, strides;
  uint64_t byte_offset = 0;
  // ImportDescriptor
  int32_t import_kind = 0;
  uint64_t region_id = 0, offset = 0, mapped_size = 0, fence_offset = 0, fence_value = 0,
           fence_region_id = 0, allocation_id = 0;
  std::string_view export_data, import_device_uuid;
};

/// Appends `facts` to `out` in the flat layout, the very bytes that
/// AppendFlatAnswer writes for the Reply that says the same. False, with
/// nothing written, when they do not fit the layout's bounds.
bool AppendFlatAnswer(const FlatAnswerFacts& facts, std::string* out);

/// A flat answer read in place, with no message made: the client takes its
/// facts straight into its own description of the buffer and maps from them
/// (client/src/client_impl.h, Grant). `facts` views the body it was read
/// from, which must outlive it, and `dims_` (the shape and the strides, which
/// the layout does not align). Filled in place; neither copied nor moved.
class FlatAnswerRead {
 public:
  FlatAnswerRead() = default;
  FlatAnswerRead(const FlatAnswerRead&) = delete;
  FlatAnswerRead& operator=(const FlatAnswerRead&) = delete;

  const FlatAnswerFacts& facts() const { return facts_; }

 private:
  friend absl::Status DecodeFlatAnswer(std::string_view body, FlatAnswerRead* out);
  FlatAnswerFacts facts_;
  absl::InlinedVector<int64_t, 16> dims_;  // shape, then strides
};

/// Reads a flat answer: the one reader of the layout. INVALID_ARGUMENT for
/// bytes that are not exactly one flat answer of a layout this build knows
/// (`out` is then cleared).
absl::Status DecodeFlatAnswer(std::string_view body, FlatAnswerRead* out);

/// Reads a flat answer into `out` (cleared first), through the reader
/// above. INVALID_ARGUMENT as it says.
absl::Status DecodeFlatAnswer(std::string_view body, v1::Reply* out);

}  // namespace gpubroker
