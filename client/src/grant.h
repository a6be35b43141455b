#pragma once

// An Open's or a Claim's answer as the client makes a Buffer from it, read
// from the daemon's flat answer or from the message: no daemon, no CUDA, so
// that the unit tests and gpubroker-frame-cold reach it (gpubroker_client_core).

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/wire/flat_answer.h"
#include "gpubroker/types.hpp"
#include "gpubroker/v1/broker.pb.h"

namespace gpubroker::detail {

/// What mapping a granted buffer reads of its ImportDescriptor, with no
/// message in between: the strings are views into what the answer came in
/// (a flat answer's bytes, or the message), valid while that lives.
struct ImportFacts {
  v1::ImportKind kind = v1::IMPORT_KIND_UNSPECIFIED;
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t mapped_size = 0;
  uint64_t fence_offset = 0;
  uint64_t fence_value = 0;
  uint64_t fence_region_id = 0;
  uint64_t allocation_id = 0;
  std::string_view export_data;
  std::string_view device_uuid;
};

/// Views into `import`, valid while it lives.
ImportFacts FactsOf(const v1::ImportDescriptor& import);

/// An Open's or a Claim's answer as a Buffer is made from it: the buffer's
/// description and how to map it (a Publish's: the description alone). Where the answer came flat
/// it is read straight from its bytes, with no message made (the consumer's half of
/// docs/architecture.md, "Flat frames"); else from the message. Filled in
/// place and never copied or moved: `import` views what it holds.
class Grant {
 public:
  Grant() = default;
  Grant(const Grant&) = delete;
  Grant& operator=(const Grant&) = delete;

  /// From a flat answer's body. INVALID_ARGUMENT, with nothing taken, for
  /// bytes that are not one.
  absl::Status TakeFlat(std::string body);
  /// From the message: an Open's or a Claim's answer.
  void Take(v1::OpenResponse response);
  /// From a Publish's answer: a description and nothing to map.
  void Take(const v1::BufferInfo& buffer);

  BufferInfo info;
  ImportFacts import;

 private:
  std::string flat_;
  v1::ImportDescriptor message_;
};

BufferInfo FromProto(const v1::BufferInfo& info);
/// The facts of a flat answer's buffer (an empty description when it has none).
BufferInfo FromFlat(const FlatAnswerFacts& facts);

}  // namespace gpubroker::detail
