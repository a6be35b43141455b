#pragma once

#include <deque>

#include "bench/stats.h"

namespace gpubroker::bench {

class Watchdog;

/// The fence-wait cases (cuda_fence.cc): how long a consumer's stream waits
/// on a producer's fence word, isolated from the broker, with variants that
/// test each explanation of a slow wait. Appends its rows to `results`.
void RunFenceCases(int iterations, int warmup, std::deque<Samples>& results, Watchdog& watchdog);

/// The consumer process of the fence cases.
int ServeFencePeer(int fd);

}  // namespace gpubroker::bench
