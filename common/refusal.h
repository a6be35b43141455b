#pragma once

// Why a request was refused with RESOURCE_EXHAUSTED, carried on the
// absl::Status itself from where the refusal is made (the registry for quotas
// and count limits, the backend for memory) to both sockets and the metrics.

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace gpubroker {

/// The values are gpubroker.v1.RefusalReason's (and the client's RefusalReason's).
enum class Refusal : int {
  kNone = 0,
  kQuota = 1,        // the tenant's byte quota
  kOutOfMemory = 2,  // the device or host pool has no room, fragmentation included
  kLimit = 3,        // a count limit: sessions, buffers, descriptors, waiters
};

/// The payload's type URL. The payload is a serialized gpubroker.v1.ErrorInfo,
/// so that the gRPC edge passes it on as a google.protobuf.Any as it is.
inline constexpr const char* kErrorInfoTypeUrl = "type.googleapis.com/gpubroker.v1.ErrorInfo";

/// `status` with `refusal` attached (a no-op for OK, kNone and values out of range).
inline absl::Status WithRefusal(absl::Status status, Refusal refusal) {
  const int value = static_cast<int>(refusal);
  if (status.ok() || value < 1 || value > 3) return status;
  // ErrorInfo{reason} in protobuf's wire form: field 1 as a varint, one byte for every value.
  const char bytes[2] = {0x08, static_cast<char>(value)};
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(absl::string_view(bytes, sizeof(bytes))));
  return status;
}

/// The refusal attached to `status`; kNone when it carries none.
inline Refusal RefusalOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kErrorInfoTypeUrl);
  if (!payload) return Refusal::kNone;
  const std::string bytes(*payload);
  if (bytes.size() != 2 || bytes[0] != 0x08 || bytes[1] < 1 || bytes[1] > 3) return Refusal::kNone;
  return static_cast<Refusal>(bytes[1]);
}

/// "quota", "out_of_memory", "limit"; "" for kNone.
inline std::string_view RefusalName(Refusal refusal) {
  switch (refusal) {
    case Refusal::kQuota:
      return "quota";
    case Refusal::kOutOfMemory:
      return "out_of_memory";
    case Refusal::kLimit:
      return "limit";
    case Refusal::kNone:
      break;
  }
  return "";
}

/// RESOURCE_EXHAUSTED, each with its refusal attached.
inline absl::Status QuotaRefusal(std::string_view message) {
  return WithRefusal(
      absl::ResourceExhaustedError(absl::string_view(message.data(), message.size())),
      Refusal::kQuota);
}
inline absl::Status OutOfMemoryRefusal(std::string_view message) {
  return WithRefusal(
      absl::ResourceExhaustedError(absl::string_view(message.data(), message.size())),
      Refusal::kOutOfMemory);
}
inline absl::Status LimitRefusal(std::string_view message) {
  return WithRefusal(
      absl::ResourceExhaustedError(absl::string_view(message.data(), message.size())),
      Refusal::kLimit);
}

}  // namespace gpubroker
