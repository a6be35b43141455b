#include "gpubroker/error.hpp"

#include "common/strings.h"

namespace gpubroker {

const char* ErrorCodeName(ErrorCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  if (i < 0 || i >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[i];
}

const char* RefusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kQuota:
      return "quota";
    case RefusalReason::kOutOfMemory:
      return "out_of_memory";
    case RefusalReason::kLimit:
      return "limit";
    case RefusalReason::kNone:
      break;
  }
  return "";
}

Error::Error(ErrorCode code, const std::string& message, RefusalReason reason)
    : std::runtime_error(StrCat(ErrorCodeName(code), ": ", message)),
      code_(code),
      message_(message),
      reason_(reason) {}

void ThrowError(ErrorCode code, const std::string& message, RefusalReason reason) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      throw InvalidArgumentError(code, message);
    case ErrorCode::kNotFound:
      throw NotFoundError(code, message);
    case ErrorCode::kAlreadyExists:
      throw AlreadyExistsError(code, message);
    case ErrorCode::kResourceExhausted:
      switch (reason) {
        case RefusalReason::kQuota:
          throw QuotaExceededError(code, message, reason);
        case RefusalReason::kOutOfMemory:
          throw OutOfMemoryError(code, message, reason);
        case RefusalReason::kLimit:
          throw LimitExceededError(code, message, reason);
        default:
          throw ResourceExhaustedError(code, message, RefusalReason::kNone);
      }
    case ErrorCode::kFailedPrecondition:
      throw FailedPreconditionError(code, message);
    case ErrorCode::kPermissionDenied:
      throw PermissionDeniedError(code, message);
    case ErrorCode::kDeadlineExceeded:
      throw DeadlineExceededError(code, message);
    case ErrorCode::kUnauthenticated:
      throw UnauthenticatedError(code, message);
    case ErrorCode::kUnavailable:
      throw UnavailableError(code, message);
    default:
      throw Error(code, message);
  }
}

}  // namespace gpubroker
