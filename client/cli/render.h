#pragma once

// How the command-line tool prints the daemon's answers for people.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gpubroker/types.hpp"

namespace gpubroker::cli {

int64_t NowMs();

/// Left-aligned columns, two spaces apart; the first row is the header.
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

void PrintStatus(std::ostream& out, const BrokerStatus& status);
void PrintBuffers(std::ostream& out, const std::vector<BufferInfo>& buffers);

/// One frame of `gpubroker top`: the daemon's line, devices with their use,
/// tenants against their quotas, and the largest `max_buffers` buffers.
std::string TopFrame(const BrokerStatus& status, std::vector<BufferInfo> buffers,
                     size_t max_buffers);

}  // namespace gpubroker::cli
