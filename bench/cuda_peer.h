#pragma once

// The two processes of the CUDA benchmark: A (the run) and B (its peer,
// gpubroker-bench --serve-cuda-peer), and the fixed-size messages between
// them, each of which may carry one descriptor.

#ifdef GPUBROKER_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/baselines.h"
#include "common/cuda/cuda_util.h"
#include "common/unique_fd.h"

namespace gpubroker::bench {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

enum Op : uint32_t {
  kImportPool = 1,  // fd: a bare exportable pool of A's
  kBrokerOpen = 2,  // a: buffer id
  kBarePool = 3,    // data: cudaMemPoolPtrExportData
  kBareVmm = 4,     // fd, a: size
  kOpenWait = 5,    // data: name
  kRelease = 6,
  kQuit = 7,
  kPing = 8,  // answered at once: the bare round trip between A and B
};

struct Msg {
  uint32_t op = 0;
  uint32_t pad = 0;
  uint64_t a = 0;
  uint64_t b = 0;
  char data[128] = {};
};

/// Throws std::runtime_error when a CUDA call or a status failed.
void Throw(cudaError_t err, const char* what);
void Throw(const absl::Status& s);

void Send(int fd, const Msg& m, int pass_fd = -1);
/// The next message (and the descriptor it carried, into `got_fd`).
Msg Receive(int fd, UniqueFd* got_fd = nullptr);
uint64_t NowNs();
const cuda::DriverApi& Driver();
/// A POSIX-fd VMM allocation on device 0.
CUmemAllocationProp VmmProp();

/// A's side of one hand-over to B, answered with B's own timing (ns) in `a`.
Msg Ask(int fd, const Msg& m, int pass_fd = -1);
/// Tells B to let go of what it holds from the last hand-over.
void ReleasePeer(int fd);

struct Peer {
  Child child;
  int fd() const { return child.channel.get(); }
};

/// Starts B on its own socket pair, talking to the daemon at `socket_dir`.
Peer StartPeer(const std::string& socket_dir);

}  // namespace gpubroker::bench
#endif
