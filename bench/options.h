#pragma once

#include <cstdint>
#include <string>

namespace gpubroker::bench {

struct Options {
  std::string backend = "host";
  std::string socket_dir;
  int iterations = 2000;
  int warmup = 200;
  uint64_t size = 1 << 20;
  bool json = false;
  std::string json_out;                 // also write the JSON document here
  std::string torch_script;             // the torch.multiprocessing baseline (CUDA run)
  std::string small_buffers = "arena";  // the CUDA daemon's --small-buffers
};

/// The CUDA run (cuda_cases.cc); without CUDA support, an error.
int RunCuda(const Options& options);
/// The CUDA run's peer process (B).
int ServeCudaPeer(const std::string& socket_dir, int fd);

}  // namespace gpubroker::bench
