#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpubroker::bench {

struct Options {
  std::string backend = "host";
  std::string socket_dir;
  int iterations = 2000;
  int warmup = 200;
  uint64_t size = 1 << 20;
  // The hand-over's sizes; the small buffer of the allocation cases.
  std::vector<uint64_t> sizes = {uint64_t{4} << 10, uint64_t{64} << 20, uint64_t{1} << 30,
                                 uint64_t{40} << 30};
  uint64_t small_size = 4096;
  std::vector<int> processes = {1, 8, 16};  // the throughput cases
  int throughput_ms = 1000;
  int fence_iterations = 200;
  // "all", or "handover": the hand-over cases and the batch opens only (a
  // second pass on another --small-buffers path), or "shares" (CUDA): the broker's
  // hand-over at each size alone, with no heavier case between its
  // iterations (at 40 GiB the bare and cold cases map and unmap 40 GiB).
  std::string cases = "all";
  bool json = false;
  std::string json_out;                 // also write the JSON document here
  std::string torch_script;             // the torch.multiprocessing baseline (CUDA run)
  std::string small_buffers = "arena";  // the CUDA daemon's --small-buffers
};

/// The CUDA run (cuda_cases.cc); without CUDA support, an error.
int RunCuda(const Options& options);
/// The CUDA run's peer process (B).
int ServeCudaPeer(const std::string& socket_dir, int fd);
/// The consumer process of the fence cases; without CUDA support, an error.
int RunFencePeer(int fd);

}  // namespace gpubroker::bench
