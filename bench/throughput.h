#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/stats.h"

namespace gpubroker {
class Client;
}

namespace gpubroker::bench {

/// `processes` client processes (this binary, --serve-throughput), each
/// allocating and releasing `size`-byte buffers as fast as it can for
/// `duration`, all released at once: the pairs per second over all of them,
/// and the latency of a pair (a sample of each process's pairs).
/// `daemon_path`: the clients make no buffer themselves (ConnectOptions::
/// suballocate off): every allocation is a call to the daemon, as before
/// range leases — the baseline.
Samples RunThroughput(const std::string& socket_dir, int processes, uint64_t size,
                      std::chrono::milliseconds duration, std::string name,
                      bool daemon_path = false);

/// The worker side of RunThroughput.
int ServeThroughput(const std::string& socket_dir, uint64_t size, int duration_ms, int fd,
                    bool daemon_path);

/// One allocate + release pair of `size` bytes on `client`, timed (us); a
/// host buffer's first byte is written.
double AllocateReleasePair(Client& client, uint64_t size);

/// malloc + a write to the first byte + free, timed (us): the in-process
/// floor of a small allocation on the host.
double MallocFreePair(uint64_t size);

}  // namespace gpubroker::bench
