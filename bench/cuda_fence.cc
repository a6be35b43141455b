// The fence wait, isolated: A (this process) sets a 64-bit word in stream
// order, as Buffer::seal does, and tells B (a peer process); B's stream waits
// until the word holds the value (cuStreamWaitValue64, as Buffer::wait_ready
// does), then writes 4 bytes of its own memory and synchronizes. B's time
// from enqueuing the wait to the end of its synchronize, against the same
// write with no wait, is what the wait costs.
//
// On some machines that wait cost ~135 us more than the bare write. Each
// variant tests one explanation:
//   signalled   A synchronizes its stream before telling B: the word is
//               surely in memory, so whatever remains is B's side alone;
//   default     the broker's way: A writes (CU_STREAM_WRITE_VALUE_DEFAULT)
//               and tells B at once;
//   query       + cudaStreamQuery on A's stream after the write, which makes
//               the driver submit the work at once (a producer flush);
//   no-barrier  A writes with CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER (memory
//               ordering of the write);
//   wait-flush  B waits with CU_STREAM_WAIT_VALUE_FLUSH (needs
//               CAN_FLUSH_REMOTE_WRITES);
//   host        the word in pinned host memory (a shared memfd registered
//               in both processes) instead of device memory;
//   host-cpu    the host word set by A's CPU (a release store), no stream op;
//   host-check  host word; B reads it on the CPU first and enqueues no wait
//               when it already holds the value;
//   late        B's stream waits first; A writes once B says it waits: the
//               time from A's write to B's synchronize returning, i.e. how
//               soon a blocked wait wakes up (device word and host word).
#include "bench/cuda_fence.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <random>

#include "bench/baselines.h"
#include "bench/cuda_common.h"
#include "common/strings.h"

namespace gpubroker::bench {
namespace {

enum FenceOp : uint32_t {
  kSetupDevice = 1,  // fd: the VMM page of device fence words; a: its size
  kSetupHost = 2,    // fd: the memfd of host fence words; a: its size
  kWait = 3,         // variant, a: value; answer: b = B's ns
  kWaitLate = 4,     // variant, a: value; B answers "waiting", then its end time in b
  kQuit = 5,
};

enum Variant : uint32_t {
  kBare,
  kSignalled,
  kDefault,
  kQuery,
  kNoBarrier,
  kWaitFlush,
  kHost,
  kHostCpu,
  kHostCheck,
  kLateDevice,
  kLateHost,
  kVariants,
};

const char* const kNames[kVariants] = {
    "fence: B's write+sync, no wait (bare)",
    "fence signalled: A synced its stream before telling B (device word)",
    "fence default: A writes, tells B at once (device word; the broker's way)",
    "fence query: + cudaStreamQuery on A's stream after the write",
    "fence no-barrier: A writes with NO_MEMORY_BARRIER",
    "fence wait-flush: B waits with CU_STREAM_WAIT_VALUE_FLUSH",
    "fence host: the word in pinned host memory, A writes on its stream",
    "fence host-cpu: host word set by A's CPU (release store)",
    "fence host-check: host word, B reads it first, waits only if unset",
    "fence late: B waits first, then A writes (A's write -> B's sync returns)",
    "fence late host: the same with the host word",
};

constexpr uint64_t kPageBytes = 2 << 20;
constexpr uint64_t kHostBytes = 4096;

bool UsesHostWord(uint32_t v) {
  return v == kHost || v == kHostCpu || v == kHostCheck || v == kLateHost;
}

uint64_t Slot(uint32_t v) { return uint64_t{v} * 64; }  // a cache line per variant

// B: its mappings of both words, its stream and 4 bytes to write.
struct FencePeer {
  CUdeviceptr device_words = 0;
  uint64_t device_size = 0;
  void* host = nullptr;  // B's mapping of the memfd
  CUdeviceptr host_words = 0;
  bool host_ok = false;
  void* scratch = nullptr;
  cudaStream_t stream = nullptr;
};

// Maps a memfd of host words and registers it with CUDA; its device address
// (0, with the reason on stderr, where the device cannot do it).
CUdeviceptr RegisterHostWords(int fd, void** host) {
  *host = ::mmap(nullptr, kHostBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*host == MAP_FAILED) throw std::runtime_error("mmap of the host fence words failed");
  cudaError_t err =
      cudaHostRegister(*host, kHostBytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "gpubroker-bench: host fence words: cudaHostRegister: %s\n",
                 cudaGetErrorString(err));
    cudaGetLastError();
    return 0;
  }
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, *host, 0);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "gpubroker-bench: host fence words: cudaHostGetDevicePointer: %s\n",
                 cudaGetErrorString(err));
    cudaGetLastError();
    return 0;
  }
  return reinterpret_cast<CUdeviceptr>(dev);
}

CUdeviceptr Word(const FencePeer& p, uint32_t v) {
  return (UsesHostWord(v) ? p.host_words : p.device_words) + Slot(v);
}

// B's stream waits for `value` (unless bare, or host-check finds it set),
// then writes and synchronizes.
void WaitAndWrite(FencePeer& p, uint32_t v, uint64_t value) {
  const auto& api = Driver();
  bool wait = v != kBare;
  if (v == kHostCheck) {
    const auto* word =
        reinterpret_cast<const std::atomic<uint64_t>*>(static_cast<char*>(p.host) + Slot(v));
    wait = word->load(std::memory_order_acquire) != value;
  }
  if (wait) {
    const unsigned flags =
        CU_STREAM_WAIT_VALUE_EQ | (v == kWaitFlush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
    Throw(api.Check(api.cuStreamWaitValue64(p.stream, Word(p, v), value, flags),
                    "cuStreamWaitValue64"));
  }
  Throw(cudaMemsetAsync(p.scratch, 1, 4, p.stream), "cudaMemsetAsync");
}

}  // namespace

int ServeFencePeer(int fd) {
  Throw(cudaSetDevice(0), "cudaSetDevice");
  FencePeer p;
  Throw(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Throw(cudaMalloc(&p.scratch, 4096), "cudaMalloc");
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
    switch (m.op) {
      case kSetupDevice:
        p.device_size = m.a;
        p.device_words = ImportAndMap(std::move(got), m.a);
        break;
      case kSetupHost:
        p.host_words = RegisterHostWords(got.get(), &p.host);
        p.host_ok = p.host_words != 0;
        reply.a = p.host_ok ? 1 : 0;
        break;
      case kWait: {
        const uint64_t t0 = NowNs();
        WaitAndWrite(p, m.variant, m.a);
        Throw(cudaStreamSynchronize(p.stream), "cudaStreamSynchronize");
        reply.b = NowNs() - t0;
        break;
      }
      case kWaitLate: {
        WaitAndWrite(p, m.variant, m.a);
        Msg waiting;
        waiting.op = kWaitLate;
        Send(fd, waiting);
        Throw(cudaStreamSynchronize(p.stream), "cudaStreamSynchronize");
        reply.b = NowNs();
        break;
      }
      case kQuit:
        return 0;
      default:
        return 1;
    }
    Send(fd, reply);
  }
}

void RunFenceCases(int iterations, int warmup, std::deque<Samples>& results, Watchdog& watchdog) {
  watchdog.Step("fence cases: set-up");
  const auto& api = Driver();
  int flush_ok = 0;
  int host_ptr_ok = 0;
  cudaDeviceGetAttribute(&flush_ok, cudaDevAttrCanFlushRemoteWrites, 0);
  cudaDeviceGetAttribute(&host_ptr_ok, cudaDevAttrCanUseHostPointerForRegisteredMem, 0);

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  Child peer;
  peer.pid = SpawnSelf({"--serve-fence-peer", std::to_string(sv[1])}, sv[1]);
  ::close(sv[1]);
  peer.channel.reset(sv[0]);
  watchdog.Guard(peer.pid);
  const int fd = peer.channel.get();

  // Device words: a VMM page that both map (what a tenant's fence page is).
  CUmemAllocationProp prop = VmmProp();
  CUmemGenericAllocationHandle h = 0;
  Throw(api.Check(api.cuMemCreate(&h, kPageBytes, &prop, 0), "cuMemCreate"));
  int exported = -1;
  Throw(api.Check(
      api.cuMemExportToShareableHandle(&exported, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      "cuMemExportToShareableHandle"));
  UniqueFd page_fd(exported);
  CUdeviceptr words = 0;
  Throw(api.Check(api.cuMemAddressReserve(&words, kPageBytes, 0, 0, 0), "cuMemAddressReserve"));
  Throw(api.Check(api.cuMemMap(words, kPageBytes, 0, h, 0), "cuMemMap"));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Throw(api.Check(api.cuMemSetAccess(words, kPageBytes, &access, 1), "cuMemSetAccess"));
  Throw(cudaMemset(reinterpret_cast<void*>(words), 0, kPageBytes), "cudaMemset");
  Msg setup;
  setup.op = kSetupDevice;
  setup.a = kPageBytes;
  Ask(fd, setup, page_fd.get());

  // Host words: a memfd that both map and register.
  UniqueFd host_fd(::memfd_create("gpubroker-bench-fences", MFD_CLOEXEC));
  if (!host_fd || ::ftruncate(host_fd.get(), kHostBytes) != 0) {
    throw std::runtime_error("memfd for the host fence words failed");
  }
  void* host = nullptr;
  const CUdeviceptr host_words = RegisterHostWords(host_fd.get(), &host);
  setup.op = kSetupHost;
  const bool host_ok = host_words != 0 && host_ptr_ok != 0 && Ask(fd, setup, host_fd.get()).a == 1;
  if (!host_ok) {
    std::fprintf(stderr,
                 "gpubroker-bench: host fence words unusable here (registered: %d, "
                 "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: %d): host variants skipped\n",
                 host_words != 0, host_ptr_ok);
  }
  if (flush_ok == 0) {
    std::fprintf(stderr,
                 "gpubroker-bench: CAN_FLUSH_REMOTE_WRITES is 0: the wait-flush variant skipped\n");
  }

  cudaStream_t stream = nullptr;
  Throw(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // A variant's fence word, and the flags of its stream write.
  auto word_of = [&](uint32_t v) { return (UsesHostWord(v) ? host_words : words) + Slot(v); };
  auto flags_of = [](uint32_t v) -> unsigned {
    return v == kNoBarrier ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER
                           : CU_STREAM_WRITE_VALUE_DEFAULT;
  };
  // Each variant's write is tried once first: one that this machine's driver
  // refuses (e.g. a stream write to registered host memory) is reported and
  // skipped, and the other cases still run.
  auto refused = [&](uint32_t v) -> bool {
    if (v == kBare || v == kHostCpu) return false;
    const absl::Status written = api.Check(
        api.cuStreamWriteValue64(stream, word_of(v), 0, flags_of(v)), "cuStreamWriteValue64");
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (written.ok() && synced == cudaSuccess) return false;
    std::fprintf(
        stderr, "gpubroker-bench: fence variant '%s' skipped: %s\n", kNames[v],
        written.ok() ? cudaGetErrorString(synced) : std::string(written.message()).c_str());
    cudaGetLastError();
    return true;
  };
  std::vector<Samples*> rows(kVariants, nullptr);
  for (uint32_t v = 0; v < kVariants; ++v) {
    if (UsesHostWord(v) && !host_ok) continue;
    if (v == kWaitFlush && flush_ok == 0) continue;
    if (refused(v)) continue;
    rows[v] = &results.emplace_back();
    rows[v]->name = kNames[v];
    if (v != kBare) rows[v]->baseline = "bare write+sync";
  }
  std::vector<uint32_t> order;
  for (uint32_t v = 0; v < kVariants; ++v) {
    if (rows[v] != nullptr) order.push_back(v);
  }
  std::mt19937 rng(11);
  uint64_t value = 0x5eed000000000000ULL;
  for (int i = 0; i < warmup + iterations; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t v : order) {
      watchdog.Step(StrCat("fence cases: iteration ", i, ", ", kNames[v]));
      ++value;
      auto write = [&] {
        if (v == kHostCpu) {
          reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(host) + Slot(v))
              ->store(value, std::memory_order_release);
          return;
        }
        Throw(api.Check(api.cuStreamWriteValue64(stream, word_of(v), value, flags_of(v)),
                        "cuStreamWriteValue64"));
        if (v == kQuery) (void)cudaStreamQuery(stream);
        if (v == kSignalled) Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      };
      Msg m;
      m.variant = v;
      m.a = value;
      double us = 0;
      if (v == kLateDevice || v == kLateHost) {
        m.op = kWaitLate;
        Send(fd, m);
        Receive(fd);  // B's stream is waiting
        const uint64_t t0 = NowNs();
        write();
        (void)cudaStreamQuery(stream);
        const Msg r = Receive(fd);
        us = static_cast<double>(r.b - t0) / 1e3;
      } else {
        m.op = kWait;
        if (v != kBare) write();
        us = static_cast<double>(Ask(fd, m).b) / 1e3;
      }
      Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      if (i >= warmup) rows[v]->us.push_back(us);
    }
  }
  const double bare = rows[kBare]->p50();
  for (uint32_t v = 1; v < kVariants; ++v) {
    if (rows[v] != nullptr) rows[v]->baseline_us = bare;
  }
  Msg quit;
  quit.op = kQuit;
  Send(fd, quit);
  cudaStreamDestroy(stream);
  if (host_words != 0) cudaHostUnregister(host);
  ::munmap(host, kHostBytes);
  api.cuMemUnmap(words, kPageBytes);
  api.cuMemAddressFree(words, kPageBytes);
  api.cuMemRelease(h);
}

}  // namespace gpubroker::bench
