// The CUDA run of gpubroker-bench: the broker on GPU memory against the bare
// CUDA mechanisms it is built from, against torch.multiprocessing and torch's
// caching allocator, all in one run. A is this process; B is a peer process
// (--serve-cuda-peer, cuda_peer.cc).
//
//   64 MiB, interleaved:  Allocate vs grpc echo + bare pool alloc+export; the
//     hand-over and its parts; bare pool and bare VMM hand-overs; the A <-> B
//     round trip; seal + wait
//   each size (4 KiB, 64 MiB, 1 GiB, 40 GiB): the hand-over and its parts vs
//     bare VMM, the floor (fence write, one round trip, a wait and a write in
//     memory both have mapped), the copy path, torch.multiprocessing (Python)
//     and the broker from Python over the C ABI
//   allocation: in-process allocate+release of a small buffer (and with
//     release_on a stream, idle or busy), and 1/8/16 processes at once, vs
//     torch's caching allocator
//   the fence wait and its variants (cuda_fence.cc)
//
// Over 500 lines on purpose: one run's cases in the order they run, each
// beside the baseline it is measured against in the same run.
#include "bench/options.h"

#ifdef GPUBROKER_HAVE_CUDA
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "bench/baselines.h"
#include "bench/batch_open.h"
#include "bench/cuda_common.h"
#include "bench/cuda_fence.h"
#include "bench/cuda_peer.h"
#include "bench/daemon_calls.h"
#include "bench/daemon_process.h"
#include "bench/report.h"
#include "bench/throughput.h"
#include "bench/timeline/marks.h"
#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"
#endif

namespace gpubroker::bench {

#ifndef GPUBROKER_HAVE_CUDA

int RunCuda(const Options&) {
  std::fprintf(stderr, "gpubroker-bench: this build has no CUDA support\n");
  return 1;
}

#else

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// The daemon's default --vmm-threshold: sizes at or over it are VMM allocations of their own.
constexpr uint64_t kVmmThreshold = 2 * kGiB;

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

std::filesystem::path Here() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

// A script of bench/ beside the binary (bundle), one up, or in the source tree.
std::string FindScript(const std::string& name) {
  const auto here = Here();
  for (const auto& c : {here / name, here.parent_path() / name,
                        here.parent_path().parent_path() / "bench" / name}) {
    if (std::filesystem::exists(c)) return c.string();
  }
  return "";
}

// Runs a Python baseline (bounded: one that hangs must not take the run with
// it) and parses the JSON document it prints last.
std::optional<nlohmann::json> RunPython(const std::string& script, const std::string& args,
                                        int timeout_s) {
  if (script.empty()) return std::nullopt;
  const std::string cmd = StrCat("timeout ", timeout_s, " python3 ", script, " ", args, " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  const auto brace = out.rfind("\n{");
  try {
    return nlohmann::json::parse(brace == std::string::npos ? out : out.substr(brace + 1));
  } catch (const std::exception&) {
    std::fprintf(stderr, "gpubroker-bench: %s failed:\n%s\n", script.c_str(), out.c_str());
    return std::nullopt;
  }
}

// The C ABI for the Python baselines: the library beside this binary.
std::string LibraryArgs(const std::string& dir) {
  for (const char* name : {"libgpubroker.so", "libgpubroker.so.0"}) {
    const auto lib = Here().parent_path() / "lib" / name;
    if (std::filesystem::exists(lib)) {
      return StrCat(" --gpubroker-lib ", lib.string(), " --socket-dir ", dir);
    }
  }
  return "";
}

std::vector<double> Doubles(const nlohmann::json& j) {
  return j.is_array() ? j.get<std::vector<double> >() : std::vector<double>{};
}

// What a finished section measured, on stderr, so that a run cut short keeps it.
void PrintSection(const std::deque<Samples>& results, size_t from) {
  for (size_t i = from; i < results.size(); ++i) {
    const Samples& s = results[i];
    if (s.us.empty()) continue;
    std::fprintf(stderr, "  %-70s p50 %10.1f us  p99 %10.1f us  n %zu\n", s.name.c_str(), s.p50(),
                 s.p99(), s.us.size());
  }
}

// A hand-over's rows: the total and its parts.
struct HandOverRows {
  Samples* total = nullptr;
  Samples* open = nullptr;
  Samples* allocate = nullptr;
  Samples* seal = nullptr;
  Samples* write = nullptr;
};

}  // namespace

int RunCuda(const Options& o) {
  Watchdog watchdog(std::chrono::seconds(120));
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
  DaemonCalls daemon_calls(client.status().metrics_address);
  const std::string echo_path = dir + "/bench-echo.sock";
  Child echo_server = StartEchoServer(echo_path);
  EchoClient echo(echo_path);
  Peer peer = StartPeer(dir);
  watchdog.Guard(peer.child.pid);
  watchdog.Guard(echo_server.pid);
  if (own) watchdog.Guard(own->pid());
  const bool all = o.cases == "all";
  const bool alone = o.cases == "shares";  // the broker's hand-overs, nothing between them

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
  CUmemAllocationProp vmm_prop = VmmProp();
  size_t granularity = 0;
  Throw(api.Check(
      api.cuMemGetAllocationGranularity(&granularity, &vmm_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      "cuMemGetAllocationGranularity"));

  // The floor's memory: one VMM allocation that A and B both map once, with
  // a fence word at its start and B's 4 bytes after it.
  const uint64_t floor_size = std::max<uint64_t>(granularity, 2 * kMiB);
  CUmemGenericAllocationHandle floor_handle = 0;
  Throw(api.Check(api.cuMemCreate(&floor_handle, floor_size, &vmm_prop, 0), "cuMemCreate"));
  CUdeviceptr floor = 0;
  {
    int fd = -1;
    Throw(api.Check(api.cuMemExportToShareableHandle(&fd, floor_handle,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                    "cuMemExportToShareableHandle"));
    UniqueFd owned(fd);
    Throw(api.Check(api.cuMemAddressReserve(&floor, floor_size, 0, 0, 0), "cuMemAddressReserve"));
    Throw(api.Check(api.cuMemMap(floor, floor_size, 0, floor_handle, 0), "cuMemMap"));
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    Throw(api.Check(api.cuMemSetAccess(floor, floor_size, &access, 1), "cuMemSetAccess"));
    Throw(cudaMemset(reinterpret_cast<void*>(floor), 0, floor_size), "cudaMemset");
    Msg m;
    m.op = kFloorSetup;
    m.a = floor_size;
    Ask(peer.fd(), m, owned.get());
  }
  uint64_t floor_value = 0x100;

  // A deque: the cases below hold references to their Samples while more are added.
  std::deque<Samples> results;
  auto add = [&](std::string name) -> Samples& {
    results.push_back(Samples{std::move(name), "", 0, {}});
    return results.back();
  };
  Samples unused;
  auto row = [&](Samples* s) -> Samples& { return s != nullptr ? *s : unused; };

  // One broker hand-over of `size`: Allocate + seal in A, Open + map in B, B
  // writes. `flush`: A queries its stream after the seal, which makes the
  // driver submit the fence write at once (a variant, to show what a late
  // write costs).
  // `posted`: A's seal does not wait for the daemon's answer (seal_posted),
  // and B opens by name, as it must then (the id comes with the answer).
  // `ticket`: the same seal, then a ticket instead of a name, which B claims
  // posted (docs/fast-path.md, "Tickets"); the ticket is made in A's seal row.
  uint64_t posted_serial = 0;
  // `work`: A works that long between its Allocate and its seal, as a
  // producer does (the daemon has gone to sleep by the seal); the total is
  // then timed from the seal.
  auto broker_share = [&](uint64_t size, const HandOverRows& r, bool keep, bool flush = false,
                          bool posted = false, bool ticket = false,
                          std::chrono::microseconds work = {}) {
    AllocateOptions ao;
    if (posted && !ticket) ao.name = StrCat("bench.posted.", ::getpid(), ".", posted_serial++);
    auto t0 = std::chrono::steady_clock::now();
    Buffer b = client.allocate(size, ao);
    const double allocate_us = ElapsedUs(t0);
    if (work.count() > 0) {
      std::this_thread::sleep_for(work);
      t0 = std::chrono::steady_clock::now();
    }
    const auto t1 = std::chrono::steady_clock::now();
    // bench/timeline.py cuts these seals.
    const bool marked = !posted && !flush && size == 64 * kMiB;
    if (posted) {
      b.seal_posted(stream);
    } else {
      if (marked) Mark(work.count() > 0 ? kMarkHandOverSealAfterWork : kMarkHandOverSealStart);
      b.seal(stream);
      if (marked) Mark(kMarkHandOverSealEnd);
    }
    if (flush) (void)cudaStreamQuery(stream);
    const std::string t = ticket ? b.ticket() : std::string();
    const double seal_us = ElapsedUs(t1);
    Msg m;
    if (ticket) {
      if (t.size() > sizeof(m.data)) throw std::runtime_error("a ticket larger than a message");
      m.op = kBrokerClaim;
      std::memcpy(m.data, t.data(), t.size());
      m.b = t.size();
    } else if (posted) {
      m.op = kBrokerOpenName;
      std::snprintf(m.data, sizeof(m.data), "%s", ao.name.c_str());
    } else {
      m.op = kBrokerOpen;
      m.a = b.id();
    }
    const Msg reply = Ask(peer.fd(), m);
    const double total_us = ElapsedUs(t0);
    if (keep) {
      row(r.total).us.push_back(total_us);
      row(r.allocate).us.push_back(allocate_us);
      row(r.seal).us.push_back(seal_us);
      row(r.open).us.push_back(static_cast<double>(reply.a) / 1e3);
      row(r.write).us.push_back(static_cast<double>(reply.b) / 1e3);
    }
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
    const uint64_t rounded = (size + granularity - 1) / granularity * granularity;
    CUmemGenericAllocationHandle h = 0;
    const auto tc = std::chrono::steady_clock::now();
    Throw(api.Check(api.cuMemCreate(&h, rounded, &vmm_prop, 0), "cuMemCreate"));
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
  // The floor of any hand-over: A sets a fence word on its stream, one round
  // trip tells B, B's stream waits on the word and writes 4 bytes, in memory
  // that both processes mapped beforehand.
  auto floor_share = [&]() {
    const auto t0 = std::chrono::steady_clock::now();
    ++floor_value;
    Throw(api.Check(
        api.cuStreamWriteValue64(stream, floor, floor_value, CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue64"));
    Msg m;
    m.op = kFloor;
    m.a = floor_value;
    m.b = 0;
    Ask(peer.fd(), m);
    return ElapsedUs(t0);
  };

  // 64 MiB: everything, interleaved in a shuffled order.
  Samples& echo_s = add("grpc echo (bare unary call, Unix socket)");
  Samples& alloc_s = add("broker Allocate 64 MiB");
  HandOverRows share64;
  share64.total = &add("broker share 64 MiB: Allocate+seal in A, Open+map+write in B");
  share64.open = &add("  of which B's Open+map (64 MiB, sealed)");
  share64.allocate = &add("  of which A's Allocate (and its own map)");
  share64.seal = &add("  of which A's seal");
  share64.write = &add("  of which B's write+sync (its stream waits on the fence)");
  HandOverRows posted64;
  posted64.total = &add("  variant: A's seal posted (seal_posted; B opens by name) (total)");
  posted64.seal = &add("    of which A's seal_posted");
  posted64.open = &add("    of which B's Open+map");
  HandOverRows ticket64;
  ticket64.total =
      &add("  variant: a ticket instead of a name (seal_posted + ticket; B claims posted) (total)");
  ticket64.seal = &add("    of which A's seal_posted + ticket");
  ticket64.open = &add("    of which B's claim + map + stream wait (the claim's answer)");
  HandOverRows work64;
  work64.total = &add(
      "  variant: A works 2 ms before its seal, the daemon asleep (seal in A, Open+map+write in "
      "B)");
  work64.seal = &add("    of which A's seal");
  work64.open = &add("    of which B's Open+map");
  HandOverRows flush64;
  flush64.total = &add("  variant: A queries its stream after the seal (total)");
  flush64.write = &add("    of which B's write+sync");
  Samples& bare_pool_total = add("bare pool: alloc+export in A, import+write in B, 64 MiB");
  Samples& bare_pool_a = add("  of which A's alloc+export (bare)");
  Samples& bare_pool_import = add("  of which B's import (bare)");
  Samples& bare_pool_write = add("  of which B's write+sync (bare)");
  Samples& bare_vmm64 = add("bare VMM: export in A, import+map+write in B, 64 MiB");
  Samples& bare_vmm64_map = add("  of which B's import+map (bare, 64 MiB)");
  Samples& bare_vmm64_create = add("  and before it, cuMemCreate in A (untimed above)");
  Samples& ping = add("A <-> B round trip (bare Unix socket)");
  struct SealWaitRows {
    Samples* total;
    Samples* call;
    Samples* open;
    Samples* wait;
    Samples* sync;
  };
  SealWaitRows seal_wait{&add("seal + wait: A seals, B's Open(wait)+stream wait return"),
                         &add("  of which A's seal call"),
                         &add("  of which until B's Open(wait) returned (answer, map)"),
                         &add("  of which B's stream wait call after it (wait_ready)"),
                         &add("  of which B's stream synchronize after its wait")};
  // The same with A's seal posted: A does not wait for the daemon's answer,
  // and B's parked Open is answered when the daemon reads A's frame, so the
  // whole is one hop A -> daemon and one daemon -> B (issue #11's
  // "seal + wait <= 2 round trips").
  SealWaitRows seal_wait_posted{&add("  variant: A's seal posted (total)"),
                                &add("    of which A's seal_posted call"),
                                &add("    of which until B's Open(wait) returned (answer, map)"),
                                &add("    of which B's stream wait call after it (wait_ready)"),
                                &add("    of which B's stream synchronize after its wait")};
  // The same with B's Open(wait) waiting awake (OpenOptions::awake, 5 ms):
  // B polls its socket, and the daemon's session thread polls while B's
  // Open is parked, instead of both sleeping until A's seal wakes them.
  SealWaitRows seal_wait_awake{
      &add("  variant: B waits awake (Open(wait) with awake = 5 ms; A's seal confirmed)"),
      &add("    of which A's seal call"),
      &add("    of which until B's Open(wait) returned (answer, map)"),
      &add("    of which B's stream wait call after it (wait_ready)"),
      &add("    of which B's stream synchronize after its wait")};
  // The same with the daemon's session thread polling while B's Open is
  // parked (OpenOptions::daemon_awake, 5 ms), B asleep (on the wake board):
  // one CPU, the daemon's, where `awake` takes two.
  SealWaitRows seal_wait_daemon_awake{
      &add("  variant: the daemon awake for B, B asleep (daemon_awake = 5 ms; seal confirmed)"),
      &add("    of which A's seal call"),
      &add("    of which until B's Open(wait) returned (answer, map)"),
      &add("    of which B's stream wait call after it (wait_ready)"),
      &add("    of which B's stream synchronize after its wait")};
  // B waits in Open for a name; A seals it after 2 ms, so that B is parked.
  // A share whose consumer asked first, as a consumer that knows the name
  // does: B waits in Open(wait, allow_unsealed) before A allocates, so the
  // daemon answers it at A's Allocate and B imports and maps while A does;
  // B's stream then waits on the fence for A's seal (docs/architecture.md,
  // "Ready fences"), B writes and synchronizes.
  uint64_t early_serial = 0;
  auto early_share = [&](uint64_t size, const HandOverRows& r, bool keep) {
    AllocateOptions ao;
    ao.name = StrCat("bench.early.", ::getpid(), ".", early_serial++);
    Msg m;
    m.op = kOpenWait;
    m.variant = kOpenEarly;
    std::snprintf(m.data, sizeof(m.data), "%s", ao.name.c_str());
    Send(peer.fd(), m);
    Receive(peer.fd());                                         // B is about to wait
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // and waits in the daemon
    const uint64_t t0 = NowNs();
    Buffer b = client.allocate(size, ao);
    const uint64_t allocated = NowNs();
    b.seal(stream);
    const uint64_t sealed = NowNs();
    const Msg reply = Receive(peer.fd());
    if (keep) {
      row(r.total).us.push_back(static_cast<double>(reply.a - t0) / 1e3);
      row(r.allocate).us.push_back(static_cast<double>(allocated - t0) / 1e3);
      row(r.seal).us.push_back(static_cast<double>(sealed - allocated) / 1e3);
      row(r.open).us.push_back(static_cast<double>(reply.c - t0) / 1e3);
      row(r.write).us.push_back(static_cast<double>(reply.a - reply.c) / 1e3);
    }
    ReleasePeer(peer.fd());
    b.release();
  };

  // `variant`: B's Open(wait) as it is (0), awake (kOpenAwake), or with the
  // daemon awake for it (kOpenDaemonAwake).
  auto seal_and_wait = [&](int i, const SealWaitRows& rows, bool keep, bool posted,
                           uint32_t variant = 0) {
    const bool awake = variant == kOpenAwake;
    const bool daemon_awake = variant == kOpenDaemonAwake;
    AllocateOptions ao;
    ao.name = StrCat("bench.seal.", posted ? "posted." : "", awake ? "awake." : "",
                     daemon_awake ? "daemon-awake." : "", i);
    Buffer b = client.allocate(64 * kMiB, ao);
    Msg m;
    m.op = kOpenWait;
    m.variant = variant;
    std::snprintf(m.data, sizeof(m.data), "%s", ao.name.c_str());
    Send(peer.fd(), m);
    Receive(peer.fd());  // B is about to wait
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Mark(awake          ? kMarkSealAwakeStart
         : daemon_awake ? kMarkSealDaemonAwakeStart
         : posted       ? kMarkSealPostedStart
                        : kMarkSealStart);
    const uint64_t t0 = NowNs();
    if (posted) {
      b.seal_posted(stream);
    } else {
      b.seal(stream);
    }
    const uint64_t sealed = NowNs();
    const Msg r = Receive(peer.fd());
    if (keep) {
      rows.total->us.push_back(static_cast<double>(r.a - t0) / 1e3);
      rows.call->us.push_back(static_cast<double>(sealed - t0) / 1e3);
      rows.open->us.push_back(static_cast<double>(r.c - t0) / 1e3);
      rows.wait->us.push_back(static_cast<double>(r.b - r.c) / 1e3);
      rows.sync->us.push_back(static_cast<double>(r.a - r.b) / 1e3);
    }
    ReleasePeer(peer.fd());
    b.release();
  };
  // The round trip under seal + wait's conditions: both ends idle for 2 ms
  // first, so each hop wakes a sleeping thread, as the seal's two hops do
  // (A to the daemon, the daemon to B).
  Samples& cold_ping = add("A <-> B round trip after 2 ms idle (bare Unix socket)");
  std::mt19937 rng(7);
  std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  const int n64 = o.iterations;
  for (int i = 0; i < (alone ? 0 : o.warmup + n64); ++i) {
    const bool keep = i >= o.warmup;
    std::shuffle(order.begin(), order.end(), rng);
    Samples scratch[12];
    for (int c : order) {
      static const char* const kCase[] = {"echo",
                                          "Allocate 64 MiB",
                                          "broker share 64 MiB",
                                          "bare pool share",
                                          "bare VMM share",
                                          "seal + wait",
                                          "ping",
                                          "broker share 64 MiB, flushed",
                                          "ping after 2 ms idle",
                                          "seal + wait, posted seal",
                                          "broker share 64 MiB, posted seal",
                                          "broker share 64 MiB, ticket",
                                          "seal + wait, B awake",
                                          "seal + wait, the daemon awake for B",
                                          "broker share 64 MiB after 2 ms of A's work"};
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
          broker_share(64 * kMiB, share64, keep);
          break;
        case 3:
          bare_pool_share(64 * kMiB, keep ? bare_pool_total : scratch[2],
                          keep ? bare_pool_a : scratch[3], keep ? bare_pool_import : scratch[4],
                          keep ? bare_pool_write : scratch[5]);
          break;
        case 4:
          bare_vmm_share(64 * kMiB, keep ? bare_vmm64 : scratch[6],
                         keep ? bare_vmm64_map : scratch[6], keep ? bare_vmm64_create : scratch[6]);
          break;
        case 5:
          seal_and_wait(i, seal_wait, keep, false);
          break;
        case 6: {
          const auto t0 = std::chrono::steady_clock::now();
          Msg m;
          m.op = kPing;
          Ask(peer.fd(), m);
          (keep ? ping : scratch[7]).us.push_back(ElapsedUs(t0));
          break;
        }
        case 7:
          broker_share(64 * kMiB, flush64, keep, true);
          break;
        case 9:
          seal_and_wait(i, seal_wait_posted, keep, true);
          break;
        case 10:
          broker_share(64 * kMiB, posted64, keep, false, true);
          break;
        case 11:
          broker_share(64 * kMiB, ticket64, keep, false, true, true);
          break;
        case 12:
          seal_and_wait(i, seal_wait_awake, keep, false, kOpenAwake);
          break;
        case 13:
          seal_and_wait(i, seal_wait_daemon_awake, keep, false, kOpenDaemonAwake);
          break;
        case 14:
          broker_share(64 * kMiB, work64, keep, false, false, false, std::chrono::milliseconds(2));
          break;
        case 8: {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          Mark(kMarkPingStart);
          const auto t0 = std::chrono::steady_clock::now();
          Msg m;
          m.op = kPing;
          Ask(peer.fd(), m);
          (keep ? cold_ping : scratch[8]).us.push_back(ElapsedUs(t0));
          Mark(kMarkPingEnd);
          break;
        }
      }
    }
  }
  std::fprintf(stderr, "gpubroker-bench: 64 MiB cases done\n");
  PrintSection(results, 0);

  // Each size: the hand-over and its parts, bare VMM and the floor, taking turns.
  struct SizeRows {
    uint64_t size;
    HandOverRows share;
    Samples* floor;
    Samples* vmm;
    Samples* cold = nullptr;        // the share with nothing mapped, at VMM sizes
    Samples* cold_early = nullptr;  // the same with the consumer asking first
  };
  std::vector<SizeRows> by_size;
  for (uint64_t size : o.sizes) {
    const size_t section = results.size();
    const std::string s = FormatBytes(size);
    SizeRows r{size, {}, nullptr, nullptr};
    r.share.total = &results.emplace_back(Plotted(
        StrCat("hand-over ", s, ": Allocate+seal in A, Open+map+write in B"), "gpubroker", size));
    r.share.open = &add(StrCat("  of which B's Open+map (", s, ")"));
    r.share.allocate = &add(StrCat("  of which A's Allocate (", s, ", and its own map)"));
    r.share.seal = &add(StrCat("  of which A's seal (", s, ")"));
    r.share.write = &add(StrCat("  of which B's write+sync (", s, ")"));
    r.floor = &results.emplace_back(Plotted(
        StrCat("  floor: fence write, round trip, wait+write in B (mapped), ", s), "floor", size));
    r.vmm = &results.emplace_back(
        Plotted(StrCat("  bare VMM: export in A, import+map+write in B, ", s), "bare VMM", size));
    // A share of memory that neither side has mapped (each evicts its
    // mapping cache first): B imports and maps, A maps its own. The daemon
    // serves a kept allocation; making one (cuMemCreate, 0.1 s at 40 GiB) is
    // left out here as in the bare case.
    HandOverRows cold;
    HandOverRows cold_b;
    HandOverRows cold_early;
    if (size >= kVmmThreshold && !alone) {
      cold.total = &results.emplace_back(Plotted(
          StrCat("hand-over ", s, ", cold: neither side has it mapped"), "gpubroker cold", size));
      cold.open = &add(StrCat("  of which B's Open+import+map (", s, ", cold)"));
      cold.allocate = &add(StrCat("  of which A's Allocate and its own map (", s, ", cold)"));
      cold.seal = &add(StrCat("  of which A's seal (", s, ", cold)"));
      cold.write = &add(StrCat("  of which B's write+sync (", s, ", cold)"));
      // The consumer's first sight of memory the producer keeps mapped (a
      // new reader of a recycled buffer): B alone imports.
      cold_b.total = &add(StrCat("hand-over ", s, ", cold for B only: B imports and maps"));
      cold_b.open = &add(StrCat("  of which B's Open+import+map (", s, ", cold for B)"));
      cold_b.allocate = &add(StrCat("  of which A's Allocate (", s, ", cold for B)"));
      cold_b.seal = &add(StrCat("  of which A's seal (", s, ", cold for B)"));
      cold_b.write = &add(StrCat("  of which B's write+sync (", s, ", cold for B)"));
      cold_early.total =
          &add(StrCat("hand-over ", s, ", cold, B asked first (Open wait + allow_unsealed)"));
      cold_early.open =
          &add(StrCat("  of which until B's answer was in and mapped (", s, ", B first)"));
      cold_early.allocate =
          &add(StrCat("  of which A's Allocate and its own map (", s, ", B first)"));
      cold_early.seal = &add(StrCat("  of which A's seal (", s, ", B first)"));
      cold_early.write = &add(
          StrCat("  of which B's fence wait, write and sync after its map (", s, ", B first)"));
    }
    Samples& vmm_map = add(StrCat("    of which B's import+map (bare, ", s, ")"));
    Samples& vmm_create = add(StrCat("    and before it, cuMemCreate in A (", s, ", untimed)"));
    const int n = size >= 16 * kGiB ? std::max(5, o.iterations / 10)
                  : size >= kGiB    ? std::max(10, o.iterations / 4)
                                    : o.iterations;
    daemon_calls.Mark();
    const ClientStats paths_before = client.stats();
    for (int i = 0; i < 2 + n; ++i) {
      const bool keep = i >= 2;
      Samples w;
      watchdog.Step(StrCat(s, " iteration ", i, ": broker share"));
      broker_share(size, r.share, keep);
      if (cold.total != nullptr) {
        watchdog.Step(StrCat(s, " iteration ", i, ": cold broker share"));
        client.evict_mappings();
        Msg evict;
        evict.op = kEvict;
        (void)Ask(peer.fd(), evict);
        broker_share(size, cold, keep);
        watchdog.Step(StrCat(s, " iteration ", i, ": broker share, cold for B"));
        (void)Ask(peer.fd(), evict);
        broker_share(size, cold_b, keep);
        watchdog.Step(StrCat(s, " iteration ", i, ": cold broker share, B asked first"));
        client.evict_mappings();
        (void)Ask(peer.fd(), evict);
        early_share(size, cold_early, keep);
      }
      if (alone) continue;
      watchdog.Step(StrCat(s, " iteration ", i, ": floor"));
      const double f = floor_share();
      if (keep) r.floor->us.push_back(f);
      watchdog.Step(StrCat(s, " iteration ", i, ": bare VMM share"));
      bare_vmm_share(size, keep ? *r.vmm : w, keep ? vmm_map : w, keep ? vmm_create : w);
    }
    // And how many of the turns that served these calls paid the daemon's wake-up.
    const std::string asleep =
        daemon_calls.AddRows(results, StrCat("  the daemon's own time (", s, ") per "));
    std::fprintf(stderr,
                 "gpubroker-bench: %s: turns of session.sock that found the daemon asleep: %s\n",
                 s.c_str(), asleep.c_str());
    {
      // Which path A's calls took (no slow path is silent).
      const ClientStats p = client.stats();
      std::fprintf(stderr,
                   "gpubroker-bench: %s: A's allocations: client-made %llu, the daemon's on "
                   "session.sock %llu, through gRPC %llu; A's maps: mapped %llu, cached %llu, "
                   "imported %llu\n",
                   s.c_str(),
                   static_cast<unsigned long long>(p.client_made - paths_before.client_made),
                   static_cast<unsigned long long>(p.daemon_session - paths_before.daemon_session),
                   static_cast<unsigned long long>(p.daemon_grpc - paths_before.daemon_grpc),
                   static_cast<unsigned long long>(p.maps_mapped - paths_before.maps_mapped),
                   static_cast<unsigned long long>(p.maps_cached - paths_before.maps_cached),
                   static_cast<unsigned long long>(p.maps_imported - paths_before.maps_imported));
    }
    r.cold = cold.total;
    r.cold_early = cold_early.total;
    by_size.push_back(r);
    std::fprintf(stderr, "gpubroker-bench: %s cases done\n", s.c_str());
    PrintSection(results, section);
  }

  // The copy path at each size: what sharing costs without a broker or IPC
  // at all, D2H and back H2D through pinned host memory (in one process, so
  // a lower bound; chunks of at most 1 GiB of staging).
  std::map<uint64_t, Samples*> copy_rows;
  if (all) {
    const size_t section = results.size();
    uint64_t largest = 0;
    for (uint64_t s : o.sizes) largest = std::max(largest, s);
    const uint64_t staging_size = std::min<uint64_t>(largest, kGiB);
    void* staging = nullptr;
    Throw(cudaMallocHost(&staging, staging_size), "cudaMallocHost");
    for (uint64_t size : o.sizes) {
      void* device = nullptr;
      if (cudaMalloc(&device, size) != cudaSuccess) {
        cudaGetLastError();
        std::fprintf(stderr, "gpubroker-bench: copy path at %s: no room, skipped\n",
                     FormatBytes(size).c_str());
        continue;
      }
      Samples& c = results.emplace_back(Plotted(
          StrCat("copy path: D2H + H2D through pinned memory, ", FormatBytes(size)), "copy", size));
      copy_rows[size] = &c;
      const int n = size >= 16 * kGiB ? 3 : size >= kGiB ? 10 : std::max(20, o.iterations / 4);
      for (int i = 0; i < 1 + n; ++i) {
        watchdog.Step(StrCat("copy path ", FormatBytes(size), " iteration ", i));
        const auto t0 = std::chrono::steady_clock::now();
        for (uint64_t off = 0; off < size; off += staging_size) {
          const uint64_t len = std::min(staging_size, size - off);
          char* d = static_cast<char*>(device) + off;
          Throw(cudaMemcpyAsync(staging, d, len, cudaMemcpyDeviceToHost, stream), "D2H");
          Throw(cudaMemcpyAsync(d, staging, len, cudaMemcpyHostToDevice, stream), "H2D");
        }
        Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        if (i >= 1) c.us.push_back(ElapsedUs(t0));
      }
      cudaFree(device);
    }
    cudaFreeHost(staging);
    std::fprintf(stderr, "gpubroker-bench: copy path done\n");
    PrintSection(results, section);
  }

  // Allocation: a small buffer allocated and released in this process, and
  // by 1, 8, 16 processes at once.
  Samples* in_process = nullptr;
  std::vector<Samples*> throughput;
  if (all) {
    const size_t section = results.size();
    in_process = &add(StrCat("in-process allocate+release, ", FormatBytes(o.small_size)));
    for (int i = 0; i < o.warmup * 10 + o.iterations * 10; ++i) {
      watchdog.Step(StrCat("in-process allocate+release ", i));
      const double us = AllocateReleasePair(client, o.small_size);
      if (i >= o.warmup * 10) in_process->us.push_back(us);
    }
    // The same pair with release_on(stream): an event recorded, no wait for
    // the device (release() synchronizes it, as cudaFree does); the block
    // comes back at a later allocate, once the event has fired.
    Samples& pair_on =
        add(StrCat("  in-process allocate+release_on(stream), ", FormatBytes(o.small_size)));
    for (int i = 0; i < o.warmup * 10 + o.iterations * 10; ++i) {
      watchdog.Step(StrCat("in-process allocate+release_on ", i));
      const auto t0 = std::chrono::steady_clock::now();
      client.allocate(o.small_size).release_on(stream);
      const double us = ElapsedUs(t0);
      if (i >= o.warmup * 10) pair_on.us.push_back(us);
    }
    pair_on.baseline = "allocate+release";
    pair_on.baseline_us = in_process->p50();
    // The CUDA calls those pairs and a seal are made of, each alone on an
    // idle device, so that what the GPU adds to them can be told apart.
    {
      cudaEvent_t event = nullptr;
      Throw(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
      void* word = nullptr;
      Throw(cudaMalloc(&word, 8), "cudaMalloc");
      Throw(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      Samples& set = add("  CUDA call: cudaSetDevice (already current)");
      Samples& sync = add("  CUDA call: cudaDeviceSynchronize (idle device)");
      Samples& record = add("  CUDA call: cudaEventRecord (idle stream)");
      Samples& query = add("  CUDA call: cudaEventQuery (event done)");
      Samples& write = add("  CUDA call: cuStreamWriteValue64 (a seal's fence write)");
      for (int i = 0; i < o.warmup * 10 + o.iterations * 10; ++i) {
        watchdog.Step(StrCat("CUDA call costs ", i));
        const bool keep = i >= o.warmup * 10;
        auto t0 = std::chrono::steady_clock::now();
        Throw(cudaSetDevice(0), "cudaSetDevice");
        if (keep) set.us.push_back(ElapsedUs(t0));
        t0 = std::chrono::steady_clock::now();
        Throw(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        if (keep) sync.us.push_back(ElapsedUs(t0));
        t0 = std::chrono::steady_clock::now();
        Throw(cudaEventRecord(event, stream), "cudaEventRecord");
        if (keep) record.us.push_back(ElapsedUs(t0));
        Throw(cudaEventSynchronize(event), "cudaEventSynchronize");
        t0 = std::chrono::steady_clock::now();
        Throw(cudaEventQuery(event), "cudaEventQuery");
        if (keep) query.us.push_back(ElapsedUs(t0));
        t0 = std::chrono::steady_clock::now();
        Throw(api.Check(api.cuStreamWriteValue64(reinterpret_cast<CUstream>(stream),
                                                 reinterpret_cast<CUdeviceptr>(word), i,
                                                 CU_STREAM_WRITE_VALUE_DEFAULT),
                        "cuStreamWriteValue64"));
        if (keep) write.us.push_back(ElapsedUs(t0));
        Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      Throw(cudaFree(word), "cudaFree");
      Throw(cudaEventDestroy(event), "cudaEventDestroy");
    }
    // What the releasing thread pays while the stream still has work (a
    // 64 MiB memset queued after the buffer's own): release() waits for it,
    // release_on(stream) does not.
    {
      void* scratch = nullptr;
      Throw(cudaMalloc(&scratch, 64 * kMiB), "cudaMalloc");
      Samples& sync_release =
          add(StrCat("release of a buffer whose stream is busy (64 MiB memset "
                     "queued), ",
                     FormatBytes(o.small_size)));
      Samples& stream_release = add("  release_on(stream) of the same");
      for (int i = 0; i < o.warmup + o.iterations; ++i) {
        watchdog.Step(StrCat("release on a busy stream ", i));
        for (Samples* s : {&sync_release, &stream_release}) {
          Buffer b = client.allocate(o.small_size);
          Throw(cudaMemsetAsync(b.data(), 1, o.small_size, stream), "cudaMemsetAsync");
          Throw(cudaMemsetAsync(scratch, 2, 64 * kMiB, stream), "cudaMemsetAsync");
          const auto t0 = std::chrono::steady_clock::now();
          if (s == &sync_release) {
            b.release();
          } else {
            b.release_on(stream);
          }
          const double us = ElapsedUs(t0);
          Throw(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
          if (i >= o.warmup) s->us.push_back(us);
        }
      }
      stream_release.baseline = "release()";
      stream_release.baseline_us = sync_release.p50();
      Throw(cudaFree(scratch), "cudaFree");
    }
    for (int processes : o.processes) {
      watchdog.Step(StrCat("throughput with ", processes, " processes"));
      const std::string what = StrCat(processes, " client process", processes == 1 ? "" : "es",
                                      ", allocate+release ", FormatBytes(o.small_size));
      throughput.push_back(&results.emplace_back(
          RunThroughput(dir, processes, o.small_size, std::chrono::milliseconds(o.throughput_ms),
                        StrCat("throughput: ", what))));
      watchdog.Step(StrCat("throughput with ", processes, " processes, per-buffer path"));
      results.push_back(RunThroughput(dir, processes, o.small_size,
                                      std::chrono::milliseconds(o.throughput_ms),
                                      StrCat("  daemon's per-buffer path: ", what), true));
    }
    std::fprintf(stderr, "gpubroker-bench: allocation cases done\n");
    PrintSection(results, section);
  }

  // The fence wait, isolated, and its variants.
  if (all) {
    const size_t section = results.size();
    RunFenceCases(o.fence_iterations, std::max(10, o.fence_iterations / 10), results, watchdog);
    std::fprintf(stderr, "gpubroker-bench: fence cases done\n");
    PrintSection(results, section);
  }

  // Many buffers opened by one consumer: every open posted, then used,
  // against one open after another (with the hand-over cases too: it is short).
  if (!alone) {
    const size_t section = results.size();
    watchdog.Step("batch opens");
    AddBatchOpenCases(dir, uint64_t{1} << 20, 16, o.warmup, o.iterations, results);
    std::fprintf(stderr, "gpubroker-bench: batch open cases done\n");
    PrintSection(results, section);
  }
  Msg quit;
  quit.op = kQuit;
  Send(peer.fd(), quit);
  api.cuMemUnmap(floor, floor_size);
  api.cuMemAddressFree(floor, floor_size);
  api.cuMemRelease(floor_handle);

  // Python: torch.multiprocessing and the broker over the C ABI, at each
  // size, in one script, taking turns; then torch's caching allocator.
  std::map<uint64_t, Samples*> torch_rows;
  std::map<uint64_t, Samples*> python_rows;
  std::string torch_version;
  if (all || alone) {
    const size_t section = results.size();
    watchdog.Step("torch.multiprocessing baseline");
    std::fprintf(stderr, "gpubroker-bench: torch baselines next\n");
    std::string sizes;
    for (uint64_t s : o.sizes) sizes += StrCat(sizes.empty() ? "" : ",", s);
    const std::string script =
        o.torch_script.empty() ? FindScript("torch_mp_baseline.py") : o.torch_script;
    auto mp = RunPython(script,
                        StrCat("--sizes ", sizes, " --iterations ", std::max(50, o.iterations),
                               " --warmup ", std::max(10, o.warmup / 2), LibraryArgs(dir)),
                        400);
    if (mp) {
      torch_version = (*mp)["torch"].get<std::string>();
      for (uint64_t size : o.sizes) {
        const auto& at = (*mp)["sizes"][std::to_string(size)];
        if (at.is_null()) continue;
        const std::string s = FormatBytes(size);
        torch_rows[size] = &results.emplace_back(
            Plotted(StrCat("torch.multiprocessing hand-over ", s, " (", torch_version, ")"),
                    "torch.mp", size));
        torch_rows[size]->us = Doubles(at["torch_us"]);
        if (!Doubles(at["gpubroker_us"]).empty()) {
          // The id travels on torch.multiprocessing's Queue, as the tensor
          // does: the Queue's own cost (pickling, its feeder thread) is in
          // both rows. The package's hand-over by issue #12's steps, which
          // #11's "from Python" goal reads, is bench/python/handover.py's.
          python_rows[size] = &results.emplace_back(
              Plotted(StrCat("hand-over ", s, " from Python over the C ABI, on torch.mp's Queue"),
                      "gpubroker from Python, on torch.mp's Queue", size));
          python_rows[size]->us = Doubles(at["gpubroker_us"]);
          python_rows[size]->baseline = "torch.mp, the same Queue";
          python_rows[size]->baseline_us = torch_rows[size]->p50();
        }
      }
    }
    // torch's caching allocator, the baseline of the allocation cases (not
    // run alone).
    decltype(mp) alloc;
    if (all) {
      watchdog.Step("torch caching allocator baseline");
      std::string procs;
      for (int p : o.processes) procs += StrCat(procs.empty() ? "" : ",", p);
      alloc = RunPython(
          FindScript("torch_alloc_baseline.py"),
          StrCat("--size ", o.small_size, " --iterations ", o.iterations * 10, " --processes ",
                 procs, " --milliseconds ", o.throughput_ms, LibraryArgs(dir)),
          300);
    }
    if (alloc) {
      Samples& t =
          add(StrCat("  torch caching allocator (Python): empty+del, ", FormatBytes(o.small_size)));
      t.us = Doubles((*alloc)["torch_us"]);
      if (in_process != nullptr) {
        in_process->baseline = "torch caching allocator";
        in_process->baseline_us = t.p50();
      }
      if (!Doubles((*alloc)["gpubroker_us"]).empty()) {
        Samples& g = add(StrCat("in-process allocate+release from Python over the C ABI, ",
                                FormatBytes(o.small_size)));
        g.us = Doubles((*alloc)["gpubroker_us"]);
        g.baseline = "torch caching allocator";
        g.baseline_us = t.p50();
      }
      size_t k = 0;
      for (const auto& tp : (*alloc)["throughput"]) {
        Samples& s = add(StrCat("  torch caching allocator: ", tp["processes"].get<int>(),
                                " processes, empty+del"));
        s.us = Doubles(tp["us"]);
        s.per_second = tp["per_second"].get<double>();
        s.processes = tp["processes"].get<int>();
        if (k < throughput.size()) {
          throughput[k]->baseline = "torch caching allocator";
          throughput[k]->baseline_per_second = s.per_second;
        }
        ++k;
      }
    }
    PrintSection(results, section);
  }

  // Baselines.
  alloc_s.baseline = "grpc echo + bare alloc+export";
  alloc_s.baseline_us = echo_s.p50() + bare_pool_a.p50();
  if (torch_rows.count(64 * kMiB) != 0) {
    share64.total->baseline = "torch.mp (want <= 0.2x)";
    share64.total->baseline_us = torch_rows[64 * kMiB]->p50();
  } else {
    share64.total->baseline = "bare pool hand-over";
    share64.total->baseline_us = bare_pool_total.p50();
  }
  share64.open->baseline = "goal: 100 us";
  share64.open->baseline_us = 100;
  seal_wait.total->baseline = "2 x round trip after 2 ms idle (want <= 1x)";
  seal_wait.total->baseline_us = 2 * cold_ping.p50();
  seal_wait_posted.total->baseline = "2 x round trip after 2 ms idle (want <= 1x)";
  seal_wait_posted.total->baseline_us = 2 * cold_ping.p50();
  // Against the same sleeping round trips: what waiting awake buys is the
  // two wake-ups, paid for with a CPU in B and one in the daemon meanwhile.
  seal_wait_awake.total->baseline = "2 x round trip after 2 ms idle (want <= 1x)";
  seal_wait_awake.total->baseline_us = 2 * cold_ping.p50();
  // ... and the daemon alone awake: one CPU, B asleep.
  seal_wait_daemon_awake.total->baseline = "2 x round trip after 2 ms idle (want <= 1x)";
  seal_wait_daemon_awake.total->baseline_us = 2 * cold_ping.p50();
  for (const SizeRows& r : by_size) {
    if (torch_rows.count(r.size) != 0) {
      r.share.total->baseline = "torch.mp (want <= 0.2x)";
      r.share.total->baseline_us = torch_rows[r.size]->p50();
    } else {
      r.share.total->baseline = "bare VMM hand-over";
      r.share.total->baseline_us = r.vmm->p50();
    }
    r.floor->baseline = "";
    r.share.open->baseline = "the floor";
    r.share.open->baseline_us = r.floor->p50();
    if (r.size == 40 * kGiB) {
      r.share.allocate->baseline = "goal: the whole share, recycled, 150 us";
      r.share.allocate->baseline_us = 150;
      if (r.cold != nullptr) {
        r.cold->baseline = "goal: cold, 3 ms";
        r.cold->baseline_us = 3000;
        r.cold_early->baseline = "goal: cold, 3 ms";
        r.cold_early->baseline_us = 3000;
      }
    }
  }

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
          {"torch", torch_version},
          {"iterations", n64}},
         o.json_out);
  std::filesystem::remove(echo_path);
  cudaMemPoolDestroy(pool);
  return 0;
}

#endif

}  // namespace gpubroker::bench
