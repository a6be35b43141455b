#pragma once

#include <cstdint>
#include <functional>
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

  /// The daemon process's connections and descriptors.
  struct Process {
    uint64_t session_connections = 0;  // on session.sock, Hello said or not
    uint64_t grpc_connections = 0;
    uint64_t client_descriptors = 0;  // charged to the descriptor budget
  };

  std::string backend;
  Process process;
  std::vector<Device> devices;
  std::vector<Tenant> tenants;  // by name; configured tenants with nothing held too
  std::vector<Cell> cells;      // by device, then tenant
  uint32_t sessions = 0;
  uint32_t buffers = 0;  // buffers holding memory, freed ones whose last lease is out included
  uint32_t waiting_opens = 0;  // Opens parked until their buffer appears or is sealed

  /// Counts since the daemon started, kept with the books and read in the
  /// same snapshot, so that an observer never sees a session's end or a
  /// reclaim without its count (nor the count without it).
  struct Totals {
    uint64_t sessions_started = 0;
    uint64_t sessions_closed = 0;   // said Goodbye
    uint64_t sessions_died = 0;     // the connection ended without one
    uint64_t reclaimed_closed = 0;  // bytes given back without a Free, by cause
    uint64_t reclaimed_died = 0;
    uint64_t reclaimed_ttl = 0;
  };
  Totals totals;
};

/// Builds NodeStatus from the registry's books and the backend's devices.
/// Thread-safe; takes the registry's lock once and calls the backend outside it.
class NodeStatusCollector {
 public:
  /// Fills in NodeStatus::Process (the wiring knows the sockets).
  using ProcessProbe = std::function<void(NodeStatus::Process&)>;

  NodeStatusCollector(const Registry& registry, const Backend& backend, ProcessProbe probe = {});
  NodeStatus Collect() const;

 private:
  const Registry& registry_;
  const Backend& backend_;
  const ProcessProbe probe_;
};

}  // namespace gpubroker
