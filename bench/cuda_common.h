#pragma once

// What the CUDA cases of gpubroker-bench share: the message between A and a
// peer process, CUDA error checks, and the watchdog. CUDA builds only.

#include <cuda_runtime_api.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "common/cuda/cuda_util.h"
#include "common/unix_socket.h"

namespace gpubroker::bench {

/// One message between A and a peer (fixed size: no framing needed).
struct Msg {
  uint32_t op = 0;
  uint32_t variant = 0;
  uint64_t a = 0;
  uint64_t b = 0;
  uint64_t c = 0;
  char data[512] = {};  // a name, a pool's export data, or a ticket
};

inline void Throw(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline void Throw(const absl::Status& s) {
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
}

inline void Send(int fd, const Msg& m, int pass_fd = -1) {
  Throw(SendAll(fd, std::string_view(reinterpret_cast<const char*>(&m), sizeof(m)), pass_fd));
}

inline Msg Receive(int fd, UniqueFd* got_fd = nullptr) {
  Msg m;
  size_t have = 0;
  std::vector<UniqueFd> fds;
  while (have < sizeof(m)) {
    auto r = RecvSome(fd, reinterpret_cast<char*>(&m) + have, sizeof(m) - have, &fds);
    if (!r.ok() || r->eof) throw std::runtime_error("bench peer is gone");
    have += r->bytes;
  }
  if (got_fd != nullptr && !fds.empty()) *got_fd = std::move(fds.front());
  return m;
}

/// A's side of one exchange: the peer's answer.
inline Msg Ask(int fd, const Msg& m, int pass_fd = -1) {
  Send(fd, m, pass_fd);
  return Receive(fd);
}

inline const cuda::DriverApi& Driver() {
  auto api = cuda::DriverApi::Get();
  Throw(api.status());
  return **api;
}

inline CUmemAllocationProp VmmProp() {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

/// Imports a VMM descriptor and maps it, read-write, for device 0.
inline CUdeviceptr ImportAndMap(UniqueFd fd, uint64_t size) {
  const auto& api = Driver();
  CUmemGenericAllocationHandle h = 0;
  Throw(api.Check(api.cuMemImportFromShareableHandle(
                      &h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  "cuMemImportFromShareableHandle"));
  fd.reset();
  CUdeviceptr p = 0;
  Throw(api.Check(api.cuMemAddressReserve(&p, size, 0, 0, 0), "cuMemAddressReserve"));
  Throw(api.Check(api.cuMemMap(p, size, 0, h, 0), "cuMemMap"));
  api.cuMemRelease(h);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Throw(api.Check(api.cuMemSetAccess(p, size, &access, 1), "cuMemSetAccess"));
  return p;
}

/// A stuck CUDA call or peer must not become a silent hang: the run says
/// which step made no progress for `limit` and ends, killing its children.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) : limit_(limit), thread_([this] { Watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Step(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = std::move(what);
    last_ = std::chrono::steady_clock::now();
  }
  void Guard(int pid) {
    std::lock_guard<std::mutex> lock(mu_);
    pids_.push_back(pid);
  }

 private:
  void Watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      cv_.wait_for(lock, std::chrono::seconds(1));
      if (done_ || std::chrono::steady_clock::now() - last_ < limit_) continue;
      std::fprintf(stderr, "gpubroker-bench: no progress for %llds in: %s; giving up\n",
                   static_cast<long long>(limit_.count()), step_.c_str());
      for (int pid : pids_) ::kill(pid, SIGKILL);
      std::_Exit(3);
    }
  }

  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string step_ = "start";
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<int> pids_;
  std::thread thread_;  // last: starts once the rest is initialized
};

}  // namespace gpubroker::bench
