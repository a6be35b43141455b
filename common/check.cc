#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace gpubroker::detail {

void CheckFailed(const char* file, int line, const char* condition,
                 std::string_view message) noexcept {
  std::fprintf(stderr, "%s:%d: check failed: %s: %.*s\n", file, line, condition,
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace gpubroker::detail
