#pragma once

/// @file error.hpp
/// @brief Typed exceptions of the gpubroker C++ client.

#include <stdexcept>
#include <string>

#include "gpubroker/export.h"

namespace gpubroker {

/// @brief The daemon's answer codes; the numbers are gRPC's status codes.
enum class ErrorCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

/// @brief Why the daemon refused with kResourceExhausted; the values are
/// gpubroker.v1.RefusalReason's.
enum class RefusalReason : int {
  kNone = 0,         ///< no reason given (or not a refusal for want of resources)
  kQuota = 1,        ///< the tenant's byte quota
  kOutOfMemory = 2,  ///< the device or host pool has no room, fragmentation included
  kLimit = 3,        ///< a count limit: sessions, buffers, descriptors, waiters
};

/// @brief "INVALID_ARGUMENT", "NOT_FOUND", ...
GPUBROKER_API const char* ErrorCodeName(ErrorCode code);

/// @brief "quota", "out_of_memory", "limit"; "" for kNone.
GPUBROKER_API const char* RefusalReasonName(RefusalReason reason);

/// @brief Base of every error the client throws: the code and the daemon's message.
class GPUBROKER_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, RefusalReason reason = RefusalReason::kNone);
  /// @brief The gRPC status code of the failure.
  ErrorCode code() const noexcept { return code_; }
  /// @brief The message alone, without the code prefix that what() carries.
  const std::string& message() const noexcept { return message_; }
  /// @brief Why a kResourceExhausted refusal was made; kNone otherwise.
  RefusalReason reason() const noexcept { return reason_; }

 private:
  ErrorCode code_;
  std::string message_;
  RefusalReason reason_;
};

/// @brief Bad request: size 0, size over the device, bad name, unknown device.
class GPUBROKER_API InvalidArgumentError : public Error {
 public:
  using Error::Error;
};
/// @brief No such buffer, or one that this tenant may not see.
class GPUBROKER_API NotFoundError : public Error {
 public:
  using Error::Error;
};
/// @brief The buffer name is taken.
class GPUBROKER_API AlreadyExistsError : public Error {
 public:
  using Error::Error;
};
/// @brief Quota, device full or a count limit; the message has the numbers,
/// reason() says which (and the subclasses below are thrown for each).
class GPUBROKER_API ResourceExhaustedError : public Error {
 public:
  ResourceExhaustedError(ErrorCode code, const std::string& message,
                         RefusalReason reason = RefusalReason::kNone)
      : Error(code, message, reason) {}
};
/// @brief The tenant's byte quota would be exceeded.
class GPUBROKER_API QuotaExceededError : public ResourceExhaustedError {
 public:
  using ResourceExhaustedError::ResourceExhaustedError;
};
/// @brief The device (or host pool) has no room for the buffer.
class GPUBROKER_API OutOfMemoryError : public ResourceExhaustedError {
 public:
  using ResourceExhaustedError::ResourceExhaustedError;
};
/// @brief A count limit (sessions, buffers, descriptors, waiters) was reached.
class GPUBROKER_API LimitExceededError : public ResourceExhaustedError {
 public:
  using ResourceExhaustedError::ResourceExhaustedError;
};
/// @brief E.g. opening an unsealed buffer without wait.
class GPUBROKER_API FailedPreconditionError : public Error {
 public:
  using Error::Error;
};
/// @brief Another tenant's buffer may be opened but not sealed or freed.
class GPUBROKER_API PermissionDeniedError : public Error {
 public:
  using Error::Error;
};
/// @brief A wait ran out.
class GPUBROKER_API DeadlineExceededError : public Error {
 public:
  using Error::Error;
};
/// @brief No valid session token (the session ended, or the token is wrong).
class GPUBROKER_API UnauthenticatedError : public Error {
 public:
  using Error::Error;
};
/// @brief The daemon is not running, not reachable, or shutting down.
class GPUBROKER_API UnavailableError : public Error {
 public:
  using Error::Error;
};

/// @brief Throws the Error subclass that matches `code` (and, for
/// kResourceExhausted, `reason`: QuotaExceededError, OutOfMemoryError,
/// LimitExceededError, or ResourceExhaustedError itself for kNone).
[[noreturn]] GPUBROKER_API void ThrowError(ErrorCode code, const std::string& message,
                                           RefusalReason reason = RefusalReason::kNone);

}  // namespace gpubroker
