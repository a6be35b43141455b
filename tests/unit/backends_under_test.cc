#include "tests/unit/backends_under_test.h"

#include "daemon/backend/host_backend.h"

namespace gpubroker {

std::vector<BackendUnderTest> BackendsUnderTest() {
  return {
      {"host",
       [](std::string*) -> std::unique_ptr<Backend> {
         return std::make_unique<HostBackend>(uint64_t{64} << 20);
       }},
  };
}

}  // namespace gpubroker
