#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/backend/types.h"

namespace gpubroker {

class Backend;
class Registry;

/// What the node holds right now: one value, built by one collector, that the
/// Status call (and with it the CLI) and the metrics report.
struct NodeStatus {
  struct Device {
    DeviceInfo info;
    DeviceUsage usage;
    uint32_t buffers = 0;  // buffers holding memory on it
  };
  struct Tenant {
    std::string name;
    uint64_t quota_bytes = 0;  // 0: unlimited
    uint64_t used_bytes = 0;
    uint32_t buffers = 0;
    uint32_t sessions = 0;
  };
  /// Buffers and bytes of one tenant on one device.
  struct Cell {
    int device = 0;
    std::string device_uuid;
    std::string tenant;
    uint32_t buffers = 0;
    uint64_t bytes = 0;
  };

  std::string backend;
  std::vector<Device> devices;
  std::vector<Tenant> tenants;  // by name; configured tenants with nothing held too
  std::vector<Cell> cells;      // by device, then tenant
  uint32_t sessions = 0;
  uint32_t buffers = 0;  // buffers holding memory, freed ones whose last lease is out included
};

/// Builds NodeStatus from the registry's books and the backend's devices.
/// Thread-safe; takes the registry's lock once and calls the backend outside it.
class NodeStatusCollector {
 public:
  NodeStatusCollector(const Registry& registry, const Backend& backend);
  NodeStatus Collect() const;

 private:
  const Registry& registry_;
  const Backend& backend_;
};

}  // namespace gpubroker
