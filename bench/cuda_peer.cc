// B's side of the CUDA hand-over cases: it opens (broker), imports (bare pool,
// bare VMM) or finds in a mapping it keeps (the floor) what A hands it, writes
// 4 bytes there on its stream, synchronizes, and answers with its timings.
#include "bench/options.h"

#ifdef GPUBROKER_HAVE_CUDA
#include <chrono>
#include <cstdio>
#include <optional>

#include "bench/cuda_common.h"
#include "bench/cuda_fence.h"
#include "bench/cuda_peer.h"
#include "bench/timeline/marks.h"
#include "gpubroker/client.hpp"
#endif

namespace gpubroker::bench {

#ifndef GPUBROKER_HAVE_CUDA

int ServeCudaPeer(const std::string&, int) { return 1; }
int RunFencePeer(int) { return 1; }

#else

namespace {

// What the peer holds between a hand-over and its release.
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

int RunFencePeer(int fd) { return ServeFencePeer(fd); }

int ServeCudaPeer(const std::string& socket_dir, int fd) {
  Throw(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  Throw(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto client = Client::connect(socket_dir, {"bench-peer"});
  cudaMemPool_t bare_pool = nullptr;
  PeerState state;
  CUdeviceptr floor = 0;  // the floor case's allocation, mapped once
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
      case kBrokerOpen:
      case kBrokerOpenName: {
        OpenOptions oo;
        oo.stream = stream;
        state.buffer.emplace(m.op == kBrokerOpen ? client.open(static_cast<BufferId>(m.a), oo)
                                                 : client.open(std::string_view(m.data), oo));
        reply.a = NowNs() - t0;
        reply.b = write_and_sync(state.buffer->data());
        break;
      }
      case kBrokerClaim: {
        // Posted: the answer is taken by wait_ready, whose stream then waits
        // on the fence, as an Open with a stream does.
        state.buffer.emplace(client.claim_posted(std::string_view(m.data, m.b)));
        state.buffer->wait_ready(stream);
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
      case kBareVmm:
        state.vmm_size = m.a;
        state.vmm = ImportAndMap(std::move(got), m.a);
        reply.a = NowNs() - t0;
        reply.b = write_and_sync(reinterpret_cast<void*>(state.vmm));
        break;
      case kFloorSetup:
        floor = ImportAndMap(std::move(got), m.a);
        break;
      case kFloor: {
        const auto& api = Driver();
        Throw(api.Check(api.cuStreamWaitValue64(stream, floor + m.b, m.a, CU_STREAM_WAIT_VALUE_EQ),
                        "cuStreamWaitValue64"));
        reply.b = write_and_sync(reinterpret_cast<void*>(floor));
        break;
      }
      case kOpenWait: {
        Msg ready;
        ready.op = kOpenWait;
        Send(fd, ready);  // about to wait
        OpenOptions oo;
        oo.wait = true;
        oo.allow_unsealed = m.variant == kOpenEarly;
        if (m.variant == kOpenAwake) oo.awake = std::chrono::microseconds(kOpenAwakeUs);
        if (m.variant == kOpenDaemonAwake) {
          oo.daemon_awake = std::chrono::microseconds(kOpenAwakeUs);
        }
        state.buffer.emplace(client.open(std::string_view(m.data), oo));
        reply.c = NowNs();  // answered and mapped
        Mark(kMarkOpenReturned);
        state.buffer->wait_ready(stream);  // unsealed: waits for the seal's fence all the same
        reply.b = NowNs();
        Mark(kMarkWaitReturned);
        if (m.variant == kOpenEarly) {
          Throw(cudaMemsetAsync(state.buffer->data(), 1, 4, stream), "cudaMemsetAsync");
        }
        Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        reply.a = NowNs();
        Mark(kMarkSynced);
        break;
      }
      case kRelease:
        Release(state);
        break;
      case kPing:
        break;
      case kEvict:
        client.evict_mappings();
        break;
      case kQuit: {
        Release(state);
        const ClientStats p = client.stats();
        std::fprintf(stderr,
                     "gpubroker-bench: B's maps: mapped %llu, cached %llu, imported %llu; "
                     "B's mapping cache: %llu hits, %llu misses\n",
                     static_cast<unsigned long long>(p.maps_mapped),
                     static_cast<unsigned long long>(p.maps_cached),
                     static_cast<unsigned long long>(p.maps_imported),
                     static_cast<unsigned long long>(p.mapping_cache_hits),
                     static_cast<unsigned long long>(p.mapping_cache_misses));
        return 0;
      }
      default:
        return 1;
    }
    Send(fd, reply);
  }
}

#endif

}  // namespace gpubroker::bench
