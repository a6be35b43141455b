#pragma once

// What the GPU test programs share: skipping where no GPU is usable, and
// reading a test helper's answers.

#include <map>
#include <string>

#include "common/cuda/cuda_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {

/// Why no GPU is usable here; empty when one is.
inline std::string GpuProblem() {
  auto count = cuda::DeviceCount();
  return count.ok() ? "" : std::string(count.status().message());
}

#define SKIP_WITHOUT_GPU()                                      \
  do {                                                          \
    const std::string why = ::gpubroker::testing::GpuProblem(); \
    if (!why.empty()) GTEST_SKIP() << "no usable GPU: " << why; \
  } while (false)

/// The daemon's status, as a helper's "status" answers it.
inline nlohmann::json Status(Helper& h) { return nlohmann::json::parse(h.Ok("status")); }

/// The KEY=VALUE fields of a helper's answer ("ok backing=... size=...").
inline std::map<std::string, std::string> Fields(const std::string& info) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < info.size()) {
    size_t sp = info.find(' ', pos);
    if (sp == std::string::npos) sp = info.size();
    const std::string kv = info.substr(pos, sp - pos);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
    pos = sp + 1;
  }
  return out;
}

}  // namespace gpubroker::testing
