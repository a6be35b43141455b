// B, the peer process of the CUDA benchmark, and the messages A and B exchange.
#include "bench/cuda_peer.h"

#ifdef GPUBROKER_HAVE_CUDA
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <vector>

#include "bench/options.h"
#include "common/unix_socket.h"
#include "gpubroker/client.hpp"

namespace gpubroker::bench {

void Throw(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

void Throw(const absl::Status& s) {
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
}

void Send(int fd, const Msg& m, int pass_fd) {
  Throw(SendAll(fd, std::string_view(reinterpret_cast<const char*>(&m), sizeof(m)), pass_fd));
}

Msg Receive(int fd, UniqueFd* got_fd) {
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

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

const cuda::DriverApi& Driver() {
  auto api = cuda::DriverApi::Get();
  Throw(api.status());
  return **api;
}

CUmemAllocationProp VmmProp() {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}
Msg Ask(int fd, const Msg& m, int pass_fd) {
  Send(fd, m, pass_fd);
  return Receive(fd);
}

void ReleasePeer(int fd) {
  Msg m;
  m.op = kRelease;
  Ask(fd, m);
}

Peer StartPeer(const std::string& socket_dir) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  Peer p;
  p.child.pid = SpawnSelf({"--serve-cuda-peer", socket_dir, std::to_string(sv[1])}, sv[1]);
  ::close(sv[1]);
  p.child.channel.reset(sv[0]);
  return p;
}
namespace {

// B: what the peer holds between a hand-over and its release.
struct PeerState {
  std::optional<Buffer> buffer;
  void* bare = nullptr;
  CUdeviceptr vmm = 0;
  size_t vmm_size = 0;
};

void Release(PeerState& s) {
  if (s.buffer) {
    s.buffer->release();
    s.buffer.reset();
  }
  if (s.bare != nullptr) {
    cudaFree(s.bare);
    s.bare = nullptr;
  }
  if (s.vmm != 0) {
    const auto& api = Driver();
    cudaDeviceSynchronize();
    api.cuMemUnmap(s.vmm, s.vmm_size);
    api.cuMemAddressFree(s.vmm, s.vmm_size);
    s.vmm = 0;
  }
}
}  // namespace

int ServeCudaPeer(const std::string& socket_dir, int fd) {
  Throw(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  Throw(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto client = Client::connect(socket_dir, {"bench-peer"});
  cudaMemPool_t bare_pool = nullptr;
  PeerState state;
  // B's write once it has the buffer; its duration (ns), which includes the
  // stream's wait on the fence for a broker buffer.
  auto write_and_sync = [&](void* p) -> uint64_t {
    const uint64_t t = NowNs();
    Throw(cudaMemsetAsync(p, 1, 4, stream), "cudaMemsetAsync");
    Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return NowNs() - t;
  };
  for (;;) {
    UniqueFd got;
    Msg m;
    try {
      m = Receive(fd, &got);
    } catch (const std::exception&) {
      return 0;
    }
    Msg reply;
    reply.op = m.op;
    const uint64_t t0 = NowNs();
    switch (m.op) {
      case kImportPool:
        Throw(cudaMemPoolImportFromShareableHandle(
                  &bare_pool, reinterpret_cast<void*>(static_cast<uintptr_t>(got.get())),
                  cudaMemHandleTypePosixFileDescriptor, 0),
              "cudaMemPoolImportFromShareableHandle");
        break;
      case kBrokerOpen: {
        OpenOptions oo;
        oo.stream = stream;
        state.buffer.emplace(client.open(static_cast<BufferId>(m.a), oo));
        reply.a = NowNs() - t0;
        reply.b = write_and_sync(state.buffer->data());
        break;
      }
      case kBarePool: {
        cudaMemPoolPtrExportData data;
        std::memcpy(&data, m.data, sizeof(data));
        Throw(cudaMemPoolImportPointer(&state.bare, bare_pool, &data), "cudaMemPoolImportPointer");
        reply.a = NowNs() - t0;
        reply.b = write_and_sync(state.bare);
        break;
      }
      case kBareVmm: {
        const auto& api = Driver();
        CUmemGenericAllocationHandle h = 0;
        Throw(api.Check(api.cuMemImportFromShareableHandle(
                            &h, reinterpret_cast<void*>(static_cast<uintptr_t>(got.get())),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                        "cuMemImportFromShareableHandle"));
        got.reset();
        state.vmm_size = m.a;
        Throw(api.Check(api.cuMemAddressReserve(&state.vmm, m.a, 0, 0, 0), "cuMemAddressReserve"));
        Throw(api.Check(api.cuMemMap(state.vmm, m.a, 0, h, 0), "cuMemMap"));
        api.cuMemRelease(h);
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        Throw(api.Check(api.cuMemSetAccess(state.vmm, m.a, &access, 1), "cuMemSetAccess"));
        reply.a = NowNs() - t0;
        reply.b = write_and_sync(reinterpret_cast<void*>(state.vmm));
        break;
      }
      case kOpenWait: {
        Msg ready;
        ready.op = kOpenWait;
        Send(fd, ready);  // about to wait
        OpenOptions oo;
        oo.wait = true;
        oo.stream = stream;
        state.buffer.emplace(client.open(std::string_view(m.data), oo));
        Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        reply.a = NowNs();
        break;
      }
      case kRelease:
        Release(state);
        break;
      case kPing:
        break;
      case kQuit:
        Release(state);
        return 0;
      default:
        return 1;
    }
    Send(fd, reply);
  }
}

}  // namespace gpubroker::bench
#endif
