#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/backend/types.h"

namespace gpubroker {

class Backend;
class Registry;

/// What a client says its own allocator and calls did (docs/fast-path.md):
/// totals since its session began, and gauges as of its last call.
struct ClientCounters {
  uint64_t allocations = 0;  // client-made buffers
  uint64_t in_use_blocks = 0;
  uint64_t in_use_bytes = 0;
  uint64_t range_bytes = 0;
  uint64_t cache_hits = 0;
  uint64_t daemon_allocations = 0;  // buffers the daemon made, asked on session.sock
  uint64_t grpc_allocations = 0;    // ... through gRPC
  uint64_t opens_arena = 0;         // maps of memory mapped already
  uint64_t opens_cached = 0;        // maps served by the mapping cache
  uint64_t opens_import = 0;        // maps that imported anew
  uint64_t opens_grpc = 0;          // opens that went through gRPC
  // The mapping cache: maps of memory of its own that it did not have (its
  // hits are opens_cached), mappings it let go; bytes it maps now (a gauge).
  uint64_t mapping_cache_misses = 0;
  uint64_t mapping_cache_evictions = 0;
  uint64_t mapping_cache_bytes = 0;
};

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
    uint64_t used_bytes = 0;   // charged: ranges, buffers of the daemon's, orphaned blocks
    uint32_t buffers = 0;
    uint32_t sessions = 0;
    uint64_t range_bytes = 0;  // of used_bytes: the ranges its clients lease
    uint32_t ranges = 0;
    ClientCounters clients;  // totals of its sessions, ended ones too; gauges of the live ones
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
    uint64_t tickets_held = 0;  // tickets: held, claimed, expired unclaimed
    uint64_t tickets_claimed = 0;
    uint64_t tickets_expired = 0;
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
