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

/// @brief "INVALID_ARGUMENT", "NOT_FOUND", ...
GPUBROKER_API const char* ErrorCodeName(ErrorCode code);

/// @brief Base of every error the client throws: the code and the daemon's message.
class GPUBROKER_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  /// @brief The gRPC status code of the failure.
  ErrorCode code() const noexcept { return code_; }
  /// @brief The message alone, without the code prefix that what() carries.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
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
/// @brief Quota or device full; the message has the numbers.
class GPUBROKER_API ResourceExhaustedError : public Error {
 public:
  using Error::Error;
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

/// @brief Throws the Error subclass that matches `code`.
[[noreturn]] GPUBROKER_API void ThrowError(ErrorCode code, const std::string& message);

}  // namespace gpubroker
