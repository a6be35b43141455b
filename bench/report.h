#pragma once

#include <string>
#include <vector>

#include "bench/stats.h"
#include "nlohmann/json.hpp"

namespace gpubroker::bench {

/// Prints the cases as a table (p50, p99, baseline, ratio), or as one JSON
/// document with `facts` merged in.
void Report(const std::string& title, const std::vector<Samples>& results, bool json,
            nlohmann::json facts, const std::string& json_out = "");

}  // namespace gpubroker::bench
