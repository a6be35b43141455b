#pragma once

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

/// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define GPUBROKER_RETURN_IF_ERROR(expr)        \
  do {                                         \
    ::absl::Status _gpubroker_status = (expr); \
    if (!_gpubroker_status.ok()) {             \
      return _gpubroker_status;                \
    }                                          \
  } while (false)

#define GPUBROKER_CONCAT_INNER(a, b) a##b
#define GPUBROKER_CONCAT(a, b) GPUBROKER_CONCAT_INNER(a, b)

/// `GPUBROKER_ASSIGN_OR_RETURN(auto x, StatusOrExpr())`: binds the value or
/// returns the error.
#define GPUBROKER_ASSIGN_OR_RETURN(lhs, expr) \
  GPUBROKER_ASSIGN_OR_RETURN_IMPL(GPUBROKER_CONCAT(_gpubroker_or_, __LINE__), lhs, expr)
#define GPUBROKER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) {                                      \
    return tmp.status();                                \
  }                                                     \
  lhs = std::move(tmp).value()

namespace gpubroker::detail {
[[noreturn]] void ThrowLogicError(const char* file, int line, const std::string& what);
}  // namespace gpubroker::detail

/// A broken internal invariant (a bug, not bad input): throws std::logic_error
/// with file and line. Input from clients is checked with absl::Status instead.
#define GPUBROKER_EXPECTS(cond, msg)                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      ::gpubroker::detail::ThrowLogicError(__FILE__, __LINE__, (msg)); \
    }                                                                  \
  } while (false)
