#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker {

/// The calls of a hand-over's path (Open, Publish, Release, Claim) in a flat
/// layout, for a daemon whose Welcome says it reads them (flat_calls): the
/// same Call, written as fixed little-endian fields and length-prefixed
/// strings instead of protobuf's tagged varints, the answers' counterpart
/// (common/wire/flat_answer.h). With both, neither side of an Open runs
/// protobuf's generic parser or serializer, whose code, cold in a process
/// that has just woken, costs more than the bytes (docs/performance.md,
/// "What the frames cost cold").
///
/// On the wire a flat call is a frame whose 4-byte length has its top bit
/// (kFlatFrameBit) set. The daemon reads it from untrusted clients: the
/// decoder refuses anything that is not exactly one call of a layout it
/// knows, and what it accepts is a Call that a protobuf frame could have
/// carried (strings well-formed UTF-8), checked by the same code after.

/// Whether `call` is one that AppendFlatCall writes: an Open, a Publish, a
/// Release or a Claim whose strings and lists fit the layout's bounds. The
/// layout carries the fields this build knows (a test fails when the
/// messages gain one it does not); unknown fields are not carried.
bool FitsFlatCall(const v1::Call& call);

/// Appends `call` to `out` in the flat layout. False, with nothing
/// written, when it is not one that FitsFlatCall.
bool AppendFlatCall(const v1::Call& call, std::string* out);

/// Reads a flat call into `out` (cleared first). INVALID_ARGUMENT for bytes
/// that are not exactly one flat call of a layout this build knows.
absl::Status DecodeFlatCall(std::string_view body, v1::Call* out);

}  // namespace gpubroker
