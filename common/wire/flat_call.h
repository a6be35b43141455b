#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
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

/// What a flat call says, field for field, with no message in between: the
/// client fills it from its own books and writes its call from it (the
/// calls' counterpart of FlatAnswerFacts). Strings and lists are views,
/// valid while it is written; the fields of the other kinds stay zero.
struct FlatCallFacts {
  enum class Kind : uint8_t { kOpen = 1, kPublish = 2, kRelease = 3, kClaim = 4 };
  Kind kind = Kind::kOpen;
  uint64_t request_id = 0;
  // ClientCounters, when the call carries them.
  bool has_counters = false;
  struct Counters {
    uint64_t allocations = 0, in_use_blocks = 0, in_use_bytes = 0, range_bytes = 0, cache_hits = 0,
             daemon_allocations = 0, grpc_allocations = 0, opens_arena = 0, opens_cached = 0,
             opens_import = 0, opens_grpc = 0, mapping_cache_misses = 0,
             mapping_cache_evictions = 0, mapping_cache_bytes = 0;
    bool operator==(const Counters&) const = default;
  } counters;
  // Open: its BufferRef (by id, by name, or neither), and Release: its id.
  bool by_id = false, by_name = false;
  uint64_t id = 0;
  std::string_view name;  // Open (by name) and Publish
  bool wait = false, allow_unsealed = false;
  uint64_t timeout_ms = 0, awake_us = 0;
  // Publish.
  bool seal = false, has_tensor = false;
  int32_t dtype = 0;
  uint64_t range_id = 0, offset = 0, reserved = 0, size = 0, fence_offset = 0, fence_value = 0,
           byte_offset = 0;
  std::span<const int64_t> shape, strides;
  // Release.
  bool free = false, keep_mapping = false;
  // Claim.
  std::string_view secret;
};

/// Appends `facts` to `out` in the flat layout, the very bytes that
/// AppendFlatCall writes for the Call that says the same. False, with
/// nothing written, when they do not fit the layout's bounds.
bool AppendFlatCall(const FlatCallFacts& facts, std::string* out);

/// The Call that `facts` say, for a daemon that reads protobuf only.
void ToCall(const FlatCallFacts& facts, v1::Call* out);

/// A client's counters between the message and the facts: the one copy of
/// their fields (the client keeps its counters as facts, the daemon reads
/// either form).
FlatCallFacts::Counters CountersFromProto(const v1::ClientCounters& counters);
void CountersToProto(const FlatCallFacts::Counters& counters, v1::ClientCounters* out);

/// Whether `call` is one that AppendFlatCall writes: an Open, a Publish, a
/// Release or a Claim whose strings and lists fit the layout's bounds. The
/// layout carries the fields this build knows (a test fails when the
/// messages gain one it does not); unknown fields are not carried.
bool FitsFlatCall(const v1::Call& call);

/// Appends `call` to `out` in the flat layout. False, with nothing
/// written, when it is not one that FitsFlatCall.
bool AppendFlatCall(const v1::Call& call, std::string* out);

/// A flat call read in place, with no message made: the daemon serves the
/// calls of a hand-over's path from it. `facts` views the body it was read
/// from, which must outlive it, and `dims_` (a Publish's shape and strides,
/// which the layout does not align). Filled in place; neither copied nor
/// moved.
class FlatCallRead {
 public:
  FlatCallRead() = default;
  FlatCallRead(const FlatCallRead&) = delete;
  FlatCallRead& operator=(const FlatCallRead&) = delete;

  const FlatCallFacts& facts() const { return facts_; }

 private:
  friend absl::Status DecodeFlatCall(std::string_view body, FlatCallRead* out);
  FlatCallFacts facts_;
  absl::InlinedVector<int64_t, 8> dims_;  // shape, then strides
};

/// Reads a flat call: the one reader of the layout. INVALID_ARGUMENT for
/// bytes that are not exactly one flat call of a layout this build knows,
/// or not a Call that protobuf could have carried (`out` is then cleared).
absl::Status DecodeFlatCall(std::string_view body, FlatCallRead* out);

/// Reads a flat call into `out` (cleared first), through the reader above:
/// the Call its facts say. INVALID_ARGUMENT as it says.
absl::Status DecodeFlatCall(std::string_view body, v1::Call* out);

}  // namespace gpubroker
