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

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(StrCat(ErrorCodeName(code), ": ", message)),
      code_(code),
      message_(message) {}

void ThrowError(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      throw InvalidArgumentError(code, message);
    case ErrorCode::kNotFound:
      throw NotFoundError(code, message);
    case ErrorCode::kAlreadyExists:
      throw AlreadyExistsError(code, message);
    case ErrorCode::kResourceExhausted:
      throw ResourceExhaustedError(code, message);
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
