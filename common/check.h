#pragma once

#include <string_view>

namespace gpubroker::detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message) noexcept;
}  // namespace gpubroker::detail

/// A broken internal invariant, which is a bug and not bad input: writes
/// file:line, the condition and `msg` to stderr and aborts. Safe in
/// destructors and noexcept code. Input from clients is answered with an
/// absl::Status instead.
#define GPUBROKER_CHECK(cond, msg)                                        \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::gpubroker::detail::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
    }                                                                     \
  } while (false)
