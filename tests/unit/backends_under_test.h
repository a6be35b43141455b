#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "daemon/backend/backend.h"

namespace gpubroker {

/// A backend the typed suites run against. `make` returns nullptr (and says
/// why) where the machine cannot run it, and the test is skipped.
struct BackendUnderTest {
  std::string name;
  std::function<std::unique_ptr<Backend>(std::string* why)> make;
  /// RoundedSize predicts reserved_size exactly (host pages, VMM granularity);
  /// a CUDA pool's own rounding is known only once it has allocated.
  bool exact_rounding = true;
};

std::vector<BackendUnderTest> BackendsUnderTest();

inline void PrintTo(const BackendUnderTest& b, std::ostream* os) { *os << b.name; }

}  // namespace gpubroker
