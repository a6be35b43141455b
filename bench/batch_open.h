#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "bench/stats.h"

namespace gpubroker::bench {

/// A consumer that needs `count` sealed buffers of `size` bytes (made by
/// another client of the daemon at `dir`) opens each and reads its first
/// byte: one open after another, each waiting for its answer, against every
/// open posted first and then used (Client::open_posted). Interleaved; two
/// rows, the first with the second as its baseline.
void AddBatchOpenCases(const std::string& dir, uint64_t size, int count, int warmup, int iterations,
                       std::deque<Samples>& results);

}  // namespace gpubroker::bench
