#include "common/spin.h"

#include <cstdlib>

#include "absl/strings/numbers.h"

namespace gpubroker {

std::chrono::microseconds SpinFromEnv(const char* env, std::chrono::microseconds given) {
  const char* value = std::getenv(env);
  uint32_t us = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &us)) return given;
  return std::chrono::microseconds(us);
}

}  // namespace gpubroker
