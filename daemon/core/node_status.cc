#include "daemon/core/node_status.h"

#include "daemon/backend/backend.h"
#include "daemon/core/registry.h"

namespace gpubroker {

NodeStatusCollector::NodeStatusCollector(const Registry& registry, const Backend& backend,
                                         ProcessProbe probe)
    : registry_(registry), backend_(backend), probe_(std::move(probe)) {}

NodeStatus NodeStatusCollector::Collect() const {
  NodeStatus status;
  status.backend = std::string(backend_.name());
  if (probe_) probe_(status.process);
  registry_.AddBooksTo(status);
  const auto& devices = backend_.devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    NodeStatus::Device d;
    d.info = devices[i];
    d.usage = backend_.Usage(static_cast<int>(i));
    status.devices.push_back(std::move(d));
  }
  for (auto& cell : status.cells) {
    if (cell.device < 0 || cell.device >= static_cast<int>(status.devices.size())) continue;
    NodeStatus::Device& d = status.devices[cell.device];
    cell.device_uuid = d.info.uuid;
    d.buffers += cell.buffers;
  }
  return status;
}

}  // namespace gpubroker
