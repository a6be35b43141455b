#pragma once

// Early returns on a failed absl::Status or absl::StatusOr, so that the
// success path reads straight down. (Prefixed: protobuf's stubs define
// unprefixed macros of the same names.)

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GPUBROKER_STATUS_CONCAT_INNER(a, b) a##b
#define GPUBROKER_STATUS_CONCAT(a, b) GPUBROKER_STATUS_CONCAT_INNER(a, b)

/// Returns the status of `expr` (an absl::Status) from the enclosing function
/// when it is not OK.
#define GPUBROKER_RETURN_IF_ERROR(expr)                                       \
  do {                                                                        \
    if (::absl::Status _gpubroker_status = (expr); !_gpubroker_status.ok()) { \
      return _gpubroker_status;                                               \
    }                                                                         \
  } while (false)

/// `lhs = value of expr` (an absl::StatusOr), or returns its status from the
/// enclosing function. `lhs` may declare a variable: `GPUBROKER_ASSIGN_OR_RETURN(auto x, F());`
#define GPUBROKER_ASSIGN_OR_RETURN(lhs, expr) \
  GPUBROKER_ASSIGN_OR_RETURN_IMPL(GPUBROKER_STATUS_CONCAT(_gpubroker_or_, __LINE__), lhs, expr)

#define GPUBROKER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()
