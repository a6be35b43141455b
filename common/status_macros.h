#pragma once

#include <stdexcept>
#include <string>

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
