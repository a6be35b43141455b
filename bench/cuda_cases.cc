// The CUDA run of gpubroker-bench: the broker on GPU memory against the bare
// CUDA mechanisms it is built from, and against torch.multiprocessing, all in
// one run. A is this process; B is a peer process (--serve-cuda-peer).
//
//   broker Allocate 64 MiB                     vs grpc echo + bare pool alloc+export
//   broker share S (Allocate+seal in A, Open+map in B, B writes, answers), S = 64 MiB,
//     1 GiB, 40 GiB                            vs bare pool / bare VMM hand-over, torch
//   B's Open+map alone                         (goal: p50 <= 100 us at 64 MiB)
//   seal + wait: A seals, B's Open(wait) returns and its stream has waited
#include "bench/options.h"

#ifdef GPUBROKER_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "bench/baselines.h"
#include "bench/daemon_process.h"
#include "bench/report.h"
#include "common/cuda/cuda_util.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"
#endif

namespace gpubroker::bench {

#ifndef GPUBROKER_HAVE_CUDA

int RunCuda(const Options&) {
  std::fprintf(stderr, "gpubroker-bench: this build has no CUDA support\n");
  return 1;
}
int ServeCudaPeer(const std::string&, int) { return 1; }

#else

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

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

void Throw(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

void Throw(const absl::Status& s) {
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
}

void Send(int fd, const Msg& m, int pass_fd = -1) {
  Throw(SendAll(fd, std::string_view(reinterpret_cast<const char*>(&m), sizeof(m)), pass_fd));
}

Msg Receive(int fd, UniqueFd* got_fd = nullptr) {
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

// A's side of one hand-over to B, answered with B's own timing (ns) in `a`.
Msg Ask(int fd, const Msg& m, int pass_fd = -1) {
  Send(fd, m, pass_fd);
  return Receive(fd);
}

void ReleasePeer(int fd) {
  Msg m;
  m.op = kRelease;
  Ask(fd, m);
}

struct Peer {
  Child child;
  int fd() const { return child.channel.get(); }
};

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

// torch.multiprocessing: the parent hands a fresh CUDA tensor to a child, which
// writes into it and replies (the script prints its latencies as JSON).
std::optional<Samples> TorchBaseline(const Options& o, uint64_t size, int iterations) {
  std::string script = o.torch_script;
  if (script.empty()) {
    const auto here = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    for (const auto& c :
         {here / "torch_mp_baseline.py", here.parent_path() / "torch_mp_baseline.py",
          here.parent_path().parent_path() / "bench" / "torch_mp_baseline.py"}) {
      if (std::filesystem::exists(c)) script = c.string();
    }
  }
  if (script.empty()) return std::nullopt;
  // A bound on it, under the watchdog's: a baseline that hangs must not take the run with it.
  const std::string cmd = StrCat("timeout 80 python3 ", script, " --size ", size, " --iterations ",
                                 iterations, " --warmup ", std::max(10, o.warmup / 10), " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  const auto brace = out.rfind("\n{");
  try {
    auto j = nlohmann::json::parse(brace == std::string::npos ? out : out.substr(brace + 1));
    Samples s{StrCat("torch.multiprocessing hand-over ", FormatBytes(size), " (",
                     j["torch"].get<std::string>(), ")"),
              "", 0, j["us"].get<std::vector<double> >()};
    return s;
  } catch (const std::exception&) {
    std::fprintf(stderr, "gpubroker-bench: torch baseline failed:\n%s\n", out.c_str());
    return std::nullopt;
  }
}

// A stuck CUDA call or peer must not become a silent hang: the run says which
// step made no progress for `limit` and ends, killing its children.
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

// What a finished section measured, on stderr, so that a run cut short keeps it.
void PrintSection(const std::deque<Samples>& results) {
  for (const auto& s : results) {
    if (s.us.empty()) continue;
    std::fprintf(stderr, "  %-62s p50 %10.1f us  p99 %10.1f us  n %zu\n", s.name.c_str(), s.p50(),
                 s.p99(), s.us.size());
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

int RunCuda(const Options& o) {
  Watchdog watchdog(std::chrono::seconds(90));
  watchdog.Step("cudaSetDevice and the daemon's start");
  Throw(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  Throw(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::unique_ptr<DaemonProcess> own;
  std::string dir = o.socket_dir;
  if (dir.empty()) {
    own = std::make_unique<DaemonProcess>(
        std::vector<std::string>{"--backend", "cuda", "--small-buffers", o.small_buffers});
    dir = own->dir();
  }
  auto client = Client::connect(dir, {"bench"});
  if (client.session().backend != "cuda") throw std::runtime_error("the daemon is not on CUDA");
  const std::string echo_path = dir + "/bench-echo.sock";
  Child echo_server = StartEchoServer(echo_path);
  EchoClient echo(echo_path);
  Peer peer = StartPeer(dir);
  watchdog.Guard(peer.child.pid);
  watchdog.Guard(echo_server.pid);
  if (own) watchdog.Guard(own->pid());

  // A bare exportable pool of our own, imported by B once.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 4 * kGiB;
  cudaMemPool_t pool = nullptr;
  Throw(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  // Warm, as the broker's pools are (--pool-retain): freed memory stays mapped.
  uint64_t retain = props.maxSize;
  Throw(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &retain),
        "cudaMemPoolSetAttribute");
  int pool_fd = -1;
  Throw(cudaMemPoolExportToShareableHandle(&pool_fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolExportToShareableHandle");
  {
    UniqueFd owned(pool_fd);
    Msg m;
    m.op = kImportPool;
    Ask(peer.fd(), m, owned.get());
  }
  const auto& api = Driver();

  // A deque: the cases below hold references to their Samples while more are added.
  std::deque<Samples> results;
  auto add = [&](std::string name) -> Samples& {
    results.push_back(Samples{std::move(name), "", 0, {}});
    return results.back();
  };

  // One broker share of `size`: Allocate + seal in A, Open + map in B, B writes.
  Samples unused;
  // `flush`: A queries its stream after the seal, which makes the driver
  // submit the fence write at once (a variant, to show what a late write costs).
  auto broker_share = [&](uint64_t size, Samples& total, Samples& open, Samples& allocate,
                          Samples& seal, Samples& write, bool flush = false) {
    const auto t0 = std::chrono::steady_clock::now();
    Buffer b = client.allocate(size);
    allocate.us.push_back(ElapsedUs(t0));
    const auto t1 = std::chrono::steady_clock::now();
    b.seal(stream);
    if (flush) (void)cudaStreamQuery(stream);
    seal.us.push_back(ElapsedUs(t1));
    Msg m;
    m.op = kBrokerOpen;
    m.a = b.id();
    const Msg r = Ask(peer.fd(), m);
    total.us.push_back(ElapsedUs(t0));
    open.us.push_back(static_cast<double>(r.a) / 1e3);
    write.us.push_back(static_cast<double>(r.b) / 1e3);
    ReleasePeer(peer.fd());
    b.release();
  };
  // The same by hand with a bare pool: alloc + export in A, import in B.
  auto bare_pool_share = [&](uint64_t size, Samples& total, Samples& a_side, Samples& import,
                             Samples& write) {
    const auto t0 = std::chrono::steady_clock::now();
    void* p = nullptr;
    Throw(cudaMallocFromPoolAsync(&p, size, pool, stream), "cudaMallocFromPoolAsync");
    Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Msg m;
    m.op = kBarePool;
    Throw(cudaMemPoolExportPointer(reinterpret_cast<cudaMemPoolPtrExportData*>(m.data), p),
          "cudaMemPoolExportPointer");
    a_side.us.push_back(ElapsedUs(t0));
    const Msg r = Ask(peer.fd(), m);
    total.us.push_back(ElapsedUs(t0));
    import.us.push_back(static_cast<double>(r.a) / 1e3);
    write.us.push_back(static_cast<double>(r.b) / 1e3);
    ReleasePeer(peer.fd());
    Throw(cudaFreeAsync(p, stream), "cudaFreeAsync");
    Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  // The same with bare VMM: export in A (allocation untimed), import + map in B.
  auto bare_vmm_share = [&](uint64_t size, Samples& total, Samples& map, Samples& create) {
    CUmemAllocationProp prop = VmmProp();
    size_t granularity = 0;
    Throw(api.Check(
        api.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity"));
    const uint64_t rounded = (size + granularity - 1) / granularity * granularity;
    CUmemGenericAllocationHandle h = 0;
    const auto tc = std::chrono::steady_clock::now();
    Throw(api.Check(api.cuMemCreate(&h, rounded, &prop, 0), "cuMemCreate"));
    create.us.push_back(ElapsedUs(tc));
    const auto t0 = std::chrono::steady_clock::now();
    int fd = -1;
    Throw(api.Check(
        api.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle"));
    UniqueFd owned(fd);
    Msg m;
    m.op = kBareVmm;
    m.a = rounded;
    const Msg r = Ask(peer.fd(), m, owned.get());
    total.us.push_back(ElapsedUs(t0));
    map.us.push_back(static_cast<double>(r.a) / 1e3);
    ReleasePeer(peer.fd());
    owned.reset();
    api.cuMemRelease(h);
  };

  // 64 MiB: everything, interleaved in a shuffled order.
  Samples& echo_s = add("grpc echo (bare unary call, Unix socket)");
  Samples& alloc_s = add("broker Allocate 64 MiB");
  Samples& share64 = add("broker share 64 MiB: Allocate+seal in A, Open+map+write in B");
  Samples& open64 = add("  of which B's Open+map (64 MiB, sealed)");
  Samples& alloc64 = add("  of which A's Allocate (and its own map)");
  Samples& seal64 = add("  of which A's seal");
  Samples& write64 = add("  of which B's write+sync (its stream waits on the fence)");
  Samples& flush64 = add("  variant: A queries its stream after the seal (total)");
  Samples& flush64_write = add("    of which B's write+sync");
  Samples& bare_pool_total = add("bare pool: alloc+export in A, import+write in B, 64 MiB");
  Samples& bare_pool_a = add("  of which A's alloc+export (bare)");
  Samples& bare_pool_import = add("  of which B's import (bare)");
  Samples& bare_pool_write = add("  of which B's write+sync (bare)");
  Samples& bare_vmm64 = add("bare VMM: export in A, import+map+write in B, 64 MiB");
  Samples& bare_vmm64_map = add("  of which B's import+map (bare, 64 MiB)");
  Samples& bare_vmm64_create = add("  and before it, cuMemCreate in A (untimed above)");
  Samples& ping = add("A <-> B round trip (bare Unix socket)");
  Samples& seal_wait = add("seal + wait: A seals, B's Open(wait)+stream wait return");
  std::mt19937 rng(7);
  std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7};
  const int n64 = o.iterations;
  for (int i = 0; i < o.warmup + n64; ++i) {
    const bool keep = i >= o.warmup;
    std::shuffle(order.begin(), order.end(), rng);
    Samples scratch[18];
    for (int c : order) {
      static const char* const kCase[] = {"echo",
                                          "Allocate 64 MiB",
                                          "broker share 64 MiB",
                                          "bare pool share",
                                          "bare VMM share",
                                          "seal + wait",
                                          "ping",
                                          "broker share 64 MiB, flushed"};
      watchdog.Step(StrCat("64 MiB iteration ", i, ": ", kCase[c]));
      switch (c) {
        case 0:
          (keep ? echo_s : scratch[0]).us.push_back(echo.Run());
          break;
        case 1: {
          const auto t0 = std::chrono::steady_clock::now();
          Buffer b = client.allocate(64 * kMiB);
          (keep ? alloc_s : scratch[1]).us.push_back(ElapsedUs(t0));
          b.release();
          break;
        }
        case 2:
          broker_share(64 * kMiB, keep ? share64 : scratch[2], keep ? open64 : scratch[3],
                       keep ? alloc64 : scratch[10], keep ? seal64 : scratch[11],
                       keep ? write64 : scratch[14]);
          break;
        case 3:
          bare_pool_share(64 * kMiB, keep ? bare_pool_total : scratch[4],
                          keep ? bare_pool_a : scratch[5], keep ? bare_pool_import : scratch[6],
                          keep ? bare_pool_write : scratch[15]);
          break;
        case 4:
          bare_vmm_share(64 * kMiB, keep ? bare_vmm64 : scratch[7],
                         keep ? bare_vmm64_map : scratch[8],
                         keep ? bare_vmm64_create : scratch[12]);
          break;
        case 5: {
          AllocateOptions ao;
          ao.name = StrCat("bench.seal.", i);
          Buffer b = client.allocate(64 * kMiB, ao);
          Msg m;
          m.op = kOpenWait;
          std::snprintf(m.data, sizeof(m.data), "%s", ao.name.c_str());
          Send(peer.fd(), m);
          Receive(peer.fd());  // B is about to wait
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          const uint64_t t0 = NowNs();
          b.seal(stream);
          const Msg r = Receive(peer.fd());
          (keep ? seal_wait : scratch[9]).us.push_back(static_cast<double>(r.a - t0) / 1e3);
          ReleasePeer(peer.fd());
          b.release();
          break;
        }
        case 7:
          broker_share(64 * kMiB, keep ? flush64 : scratch[16], unused, unused, unused,
                       keep ? flush64_write : scratch[17], true);
          break;
        case 6: {
          const auto t0 = std::chrono::steady_clock::now();
          Msg m;
          m.op = kPing;
          Ask(peer.fd(), m);
          (keep ? ping : scratch[13]).us.push_back(ElapsedUs(t0));
          break;
        }
      }
    }
  }

  std::fprintf(stderr, "gpubroker-bench: 64 MiB cases done\n");
  PrintSection(results);

  // 1 GiB and 40 GiB: the share and its bare counterpart, alternating.
  struct Big {
    uint64_t size;
    int iterations;
  };
  for (const Big big : {Big{1 * kGiB, std::max(10, o.iterations / 4)},
                        Big{40 * kGiB, std::max(5, o.iterations / 10)}}) {
    const std::string s = FormatBytes(big.size);
    Samples& share = add(StrCat("broker share ", s, ": Allocate+seal in A, Open+map+write in B"));
    Samples& open = add(StrCat("  of which B's Open+map (", s, ")"));
    Samples& allocate = add(StrCat("  of which A's Allocate (", s, ", and its own map)"));
    Samples& seal = add(StrCat("  of which A's seal (", s, ")"));
    Samples& vmm = add(StrCat("bare VMM: export in A, import+map+write in B, ", s));
    Samples& vmm_map = add(StrCat("  of which B's import+map (bare, ", s, ")"));
    Samples& vmm_create = add(StrCat("  and before it, cuMemCreate in A (", s, ", untimed above)"));
    for (int i = 0; i < 2 + big.iterations; ++i) {
      Samples w[7];
      const bool keep = i >= 2;
      watchdog.Step(StrCat(s, " iteration ", i, ": broker share"));
      broker_share(big.size, keep ? share : w[0], keep ? open : w[1], keep ? allocate : w[4],
                   keep ? seal : w[5], unused);
      watchdog.Step(StrCat(s, " iteration ", i, ": bare VMM share"));
      bare_vmm_share(big.size, keep ? vmm : w[2], keep ? vmm_map : w[3], keep ? vmm_create : w[6]);
    }
    std::fprintf(stderr, "gpubroker-bench: %s cases done\n", s.c_str());
  }
  PrintSection(results);

  std::fprintf(stderr, "gpubroker-bench: torch baseline next\n");
  watchdog.Step("torch.multiprocessing baseline");
  std::optional<Samples> torch = TorchBaseline(o, 64 * kMiB, std::max(50, o.iterations));
  if (torch) results.push_back(*torch);

  // Baselines.
  alloc_s.baseline = "grpc echo + bare alloc+export";
  alloc_s.baseline_us = echo_s.p50() + bare_pool_a.p50();
  share64.baseline = torch ? "torch.multiprocessing (want <= 0.33x)" : "bare pool hand-over";
  share64.baseline_us = torch ? torch->p50() : bare_pool_total.p50();
  open64.baseline = "goal: 100 us";
  open64.baseline_us = 100;
  seal_wait.baseline = "grpc echo";
  seal_wait.baseline_us = echo_s.p50();
  for (auto& r : results) {
    if (r.name.rfind("broker share 40 GiB", 0) == 0) {
      r.baseline = "goal: 3 ms";
      r.baseline_us = 3000;
    }
  }
  Msg quit;
  quit.op = kQuit;
  Send(peer.fd(), quit);

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  watchdog.Step("report");
  Report(StrCat("gpubroker-bench: backend cuda (small buffers: ", o.small_buffers, ") on ",
                prop.name, " (driver API ", driver / 1000, ".", (driver % 1000) / 10, "), ", n64,
                " iterations at 64 MiB (+", o.warmup, " warm-up)"),
         std::vector<Samples>(results.begin(), results.end()), o.json,
         {{"backend", "cuda"},
          {"small_buffers", o.small_buffers},
          {"device", prop.name},
          {"driver_api", driver},
          {"iterations", n64}},
         o.json_out);
  cudaMemPoolDestroy(pool);
  return 0;
}

#endif

}  // namespace gpubroker::bench
