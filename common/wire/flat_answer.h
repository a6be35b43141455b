#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker {

/// The answer to an Open or a Claim in a flat layout, for clients that ask
/// for it in Hello (flat_answers): the same message, written as fixed
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

/// Whether `reply` is one that AppendFlatAnswer writes: an Open's or a
/// Claim's answer whose strings, lists and bytes fit the layout's bounds.
/// The layout carries the fields this build knows (a test fails when the
/// messages gain one it does not); unknown fields, which only a message
/// parsed from a newer peer holds, are not carried. The daemon writes flat
/// only the answers it builds itself. No reflection: this is on the path.
bool FitsFlatAnswer(const v1::Reply& reply);

/// Appends `reply` (FitsFlatAnswer) to `out` in the flat layout.
void AppendFlatAnswer(const v1::Reply& reply, std::string* out);

/// Reads a flat answer into `out` (cleared first). INVALID_ARGUMENT for bytes
/// that are not exactly one flat answer of a layout this build knows.
absl::Status DecodeFlatAnswer(std::string_view body, v1::Reply* out);

}  // namespace gpubroker
