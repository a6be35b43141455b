// gpubroker-bench: the broker against raw baselines measured in the same run.
//
//   gpubroker-bench [--backend host|cuda] [--small-buffers arena|pool]
//                   [--socket-dir DIR] [--iterations N] [--size BYTES] [--json]
//
// Without --socket-dir it starts its own gpubrokerd (found beside itself) on a
// temporary directory. Host cases:
//   allocate / release+free / allocate+free       vs bare gRPC echo
//   allocate in A, open+map in B (cross-process)  vs 2 x echo + memfd hand-over
// CUDA cases: see cuda_cases.cc.
#include <signal.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "bench/baselines.h"
#include "bench/batch_open.h"
#include "bench/daemon_calls.h"
#include "bench/daemon_process.h"
#include "bench/options.h"
#include "bench/report.h"
#include "bench/throughput.h"
#include "bench/timeline/marks.h"
#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"

namespace gpubroker::bench {
namespace {

// B's side of the cross-process cases: read an id, open it, write into it,
// answer; then release it and say so (outside A's timing, so that no clean-up
// of one iteration overlaps the next). A sealed buffer is opened as such; an
// id with the top bit set asks for an unsealed open; kByName, for an open by
// the name that follows (a length, then its bytes).
constexpr BufferId kUnsealed = BufferId{1} << 63;
constexpr BufferId kByName = BufferId{1} << 62;
// kByTicket: a ticket follows (its length, then its bytes), claimed posted.
constexpr BufferId kByTicket = BufferId{1} << 61;
// kWaitByName: a name follows; B says it is about to wait, waits for the
// buffer in Open(wait), and answers with when its Open returned
// (CLOCK_MONOTONIC, in ns) instead of the one-byte answer.
constexpr BufferId kWaitByName = BufferId{1} << 60;
// kPing: B answers at once, and nothing else.
constexpr BufferId kPing = BufferId{1} << 59;
// kWaitDaemonAwake: as kWaitByName, with the daemon polling while B's wait
// is parked (OpenOptions::daemon_awake, 5 ms), B asleep.
constexpr BufferId kWaitDaemonAwake = BufferId{1} << 58;

// Writes a tag that carries bytes (a name, a ticket) to B: the tag, the
// bytes' length, the bytes. False when B is gone.
bool SendTagged(int fd, BufferId tag, std::string_view bytes) {
  const auto n = static_cast<uint32_t>(bytes.size());
  std::string msg(reinterpret_cast<const char*>(&tag), sizeof(tag));
  msg.append(reinterpret_cast<const char*>(&n), sizeof(n)).append(bytes);
  return ::write(fd, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size());
}

int ServeOpen(const std::string& socket_dir, int fd) {
  auto client = Client::connect(socket_dir, {"bench-peer"});
  for (;;) {
    BufferId id = 0;
    if (::read(fd, &id, sizeof(id)) != sizeof(id)) return 0;
    if (id == kPing) {
      const char ack = 1;
      if (::write(fd, &ack, 1) != 1) return 1;
      continue;
    }
    OpenOptions oo;
    oo.allow_unsealed = (id & kUnsealed) != 0;
    const bool waits = id == kWaitByName || id == kWaitDaemonAwake;
    Buffer b;
    if (id == kByTicket) {
      uint32_t n = 0;
      char ticket[1024];
      if (::read(fd, &n, sizeof(n)) != sizeof(n) || n > sizeof(ticket) ||
          ::read(fd, ticket, n) != static_cast<ssize_t>(n)) {
        return 1;
      }
      b = client.claim_posted(std::string_view(ticket, n));  // answered at data()
      if (b.data() == nullptr) b.settle();                   // throws the refusal
    } else if (id == kByName || waits) {
      uint32_t n = 0;
      char name[256];
      if (::read(fd, &n, sizeof(n)) != sizeof(n) || n >= sizeof(name) ||
          ::read(fd, name, n) != static_cast<ssize_t>(n)) {
        return 1;
      }
      const char about_to_wait = 1;
      if (waits) {
        oo.wait = true;
        if (id == kWaitDaemonAwake) oo.daemon_awake = std::chrono::milliseconds(5);
        if (::write(fd, &about_to_wait, 1) != 1) return 1;
      }
      b = client.open(std::string_view(name, n), oo);
    } else {
      b = client.open(id & ~kUnsealed, oo);
    }
    static_cast<volatile char*>(b.data())[0] = 1;
    const char ack = 1;
    if (waits) {
      const uint64_t opened = NowNs();
      Mark(kMarkOpenReturned);
      if (::write(fd, &opened, sizeof(opened)) != sizeof(opened)) return 1;
    } else if (::write(fd, &ack, 1) != 1) {
      return 1;
    }
    b.release();
    if (::write(fd, &ack, 1) != 1) return 1;
  }
}

Child StartOpenPeer(const std::string& socket_dir) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  Child peer;
  peer.pid = SpawnSelf({"--serve-open", socket_dir, std::to_string(sv[1])}, sv[1]);
  ::close(sv[1]);
  peer.channel.reset(sv[0]);
  return peer;
}

// Allocate in A (here), then (with `seal`) seal; Open + map + write in B;
// timed until B answers. `posted`: the seal does not wait for the daemon's
// answer (seal_posted), and B opens by name; `ticket`: the same seal, then a
// ticket that B claims posted (docs/fast-path.md, "Tickets"). `work`: A works
// that long between its Allocate and its seal, as a producer does (the daemon
// has gone to sleep by the seal), and the time counts from the seal.
double RunShare(Client& client, Child& peer, uint64_t size, bool seal, bool posted = false,
                bool ticket = false, std::chrono::microseconds work = {}) {
  static uint64_t serial = 0;
  AllocateOptions ao;
  if (posted && !ticket) ao.name = StrCat("bench.posted.", ::getpid(), ".", serial++);
  auto t0 = std::chrono::steady_clock::now();
  Buffer b = client.allocate(size, ao);
  static_cast<volatile char*>(b.data())[0] = 2;
  if (work.count() > 0) {
    std::this_thread::sleep_for(work);
    t0 = std::chrono::steady_clock::now();
  }
  char ack = 0;
  bool sent = false;
  if (ticket) {
    b.seal_posted();
    sent = SendTagged(peer.channel.get(), kByTicket, b.ticket());
  } else if (posted) {
    b.seal_posted();
    sent = SendTagged(peer.channel.get(), kByName, ao.name);
  } else {
    if (seal) {
      Mark(work.count() > 0 ? kMarkHandOverSealAfterWork : kMarkHandOverSealStart);
      b.seal();
      Mark(kMarkHandOverSealEnd);
    }
    const BufferId id = seal ? b.id() : (b.publish() | kUnsealed);  // a refusal throws
    sent = ::write(peer.channel.get(), &id, sizeof(id)) == sizeof(id);
  }
  if (!sent || ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("share peer is gone");
  }
  const double us = ElapsedUs(t0);
  if (::read(peer.channel.get(), &ack, 1) != 1) throw std::runtime_error("share peer is gone");
  b.release();
  return us;
}

// seal + wait: B waits in Open(wait) for a name that A then seals, after 2 ms
// idle (so that B and the daemon sleep, as between the steps of a pipeline);
// timed from A's seal until B's Open returned with the buffer mapped.
// `daemon_awake`: the daemon polls while B's wait is parked.
double RunSealWait(Client& client, Child& peer, bool posted, bool daemon_awake = false) {
  static uint64_t serial = 0;
  AllocateOptions ao;
  ao.name = StrCat("bench.seal.", ::getpid(), ".", serial++);
  Buffer b = client.allocate(4096, ao);
  char ack = 0;
  if (!SendTagged(peer.channel.get(), daemon_awake ? kWaitDaemonAwake : kWaitByName, ao.name) ||
      ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("share peer is gone");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Mark(daemon_awake ? kMarkSealDaemonAwakeStart : posted ? kMarkSealPostedStart : kMarkSealStart);
  const uint64_t t0 = NowNs();
  if (posted) {
    b.seal_posted();
  } else {
    b.seal();
  }
  uint64_t opened = 0;
  if (::read(peer.channel.get(), &opened, sizeof(opened)) != sizeof(opened) ||
      ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("share peer is gone");
  }
  b.release();
  return static_cast<double>(opened - t0) / 1e3;
}

// A round trip on the benchmark's own socket after 2 ms idle: seal + wait's
// baseline, each of its hops waking a sleeping thread.
double RunIdlePing(Child& peer) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Mark(kMarkPingStart);
  const auto t0 = std::chrono::steady_clock::now();
  const BufferId ping = kPing;
  char ack = 0;
  if (::write(peer.channel.get(), &ping, sizeof(ping)) != sizeof(ping) ||
      ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("share peer is gone");
  }
  const double us = ElapsedUs(t0);
  Mark(kMarkPingEnd);
  return us;
}

int RunHost(const Options& o) {
  uint64_t largest = o.size;
  for (uint64_t s : o.sizes) largest = std::max(largest, s);
  std::unique_ptr<DaemonProcess> own;
  std::string dir = o.socket_dir;
  if (dir.empty()) {
    // memfds are sparse: the capacity costs nothing until pages are touched.
    own = std::make_unique<DaemonProcess>(std::vector<std::string>{
        "--backend", "host", "--host-pool-bytes",
        std::to_string(std::max<uint64_t>(uint64_t{1} << 30, 3 * largest + (64 << 20)))});
    dir = own->dir();
  }
  auto client = Client::connect(dir, {"bench"});
  DaemonCalls daemon_calls(client.status().metrics_address);
  const std::string echo_path = dir + "/bench-echo.sock";
  Child echo_server = StartEchoServer(echo_path);
  EchoClient echo_client(echo_path);
  Child handover_peer = StartHandoverPeer();
  Child open_peer = StartOpenPeer(dir);

  // The cases take turns, in a shuffled order each iteration, so that
  // whatever else the machine does (and whichever case runs first after a
  // context switch) falls on all of them alike.
  std::deque<Samples> results = {
      {"grpc echo (bare unary call, Unix socket)", "", 0, {}},
      {"memfd + SCM_RIGHTS hand-over (bare)", "", 0, {}},
      {"broker Allocate", "grpc echo", 0, {}},
      {"broker Release(free)", "grpc echo", 0, {}},
      {"broker Allocate+Free", "2 x grpc echo", 0, {}},
      {"broker share: Allocate in A, Open+map in B", "2 x grpc echo + hand-over", 0, {}},
  };
  std::mt19937 rng(12345);
  std::array<int, 4> order = {0, 1, 2, 3};
  for (int i = 0; i < o.warmup + o.iterations; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    double us[6] = {};
    for (int c : order) {
      switch (c) {
        case 0:
          us[0] = echo_client.Run();
          break;
        case 1:
          us[1] = RunHandover(handover_peer, o.size);
          break;
        case 2: {
          const auto t0 = std::chrono::steady_clock::now();
          Buffer b = client.allocate(o.size);
          us[2] = ElapsedUs(t0);
          const auto t1 = std::chrono::steady_clock::now();
          b.release();
          us[3] = ElapsedUs(t1);
          us[4] = us[2] + us[3];
          break;
        }
        case 3:
          us[5] = RunShare(client, open_peer, o.size, false);
          break;
      }
    }
    if (i < o.warmup) continue;
    for (size_t k = 0; k < 6; ++k) results[k].us.push_back(us[k]);
  }
  const double echo = results[0].p50();
  const double handover = results[1].p50();
  results[2].baseline_us = echo;
  results[3].baseline_us = echo;
  results[4].baseline_us = 2 * echo;
  results[5].baseline_us = 2 * echo + handover;
  std::fprintf(stderr, "gpubroker-bench: %s cases done\n", FormatBytes(o.size).c_str());

  // The hand-over at each size (Allocate + seal in A, Open + map + write in
  // B) against the bare memfd hand-over of the same size, interleaved.
  for (uint64_t size : o.sizes) {
    const std::string s = FormatBytes(size);
    Samples& share = results.emplace_back(Plotted(
        StrCat("hand-over ", s, ": Allocate+seal in A, Open+map+write in B"), "gpubroker", size));
    Samples& bare = results.emplace_back(
        Plotted(StrCat("  bare memfd + SCM_RIGHTS hand-over, ", s), "floor", size));
    Samples& posted = results.emplace_back(
        Samples{StrCat("  variant: A's seal posted (seal_posted; B opens by name), ", s),
                "bare hand-over",
                0,
                {}});
    Samples& by_ticket = results.emplace_back(
        Samples{StrCat("  variant: a ticket instead of a name (B claims it posted), ", s),
                "bare hand-over",
                0,
                {}});
    Samples& after_work = results.emplace_back(
        Samples{StrCat("  variant: A works 2 ms before its seal, the daemon asleep (seal in A, "
                       "Open+map+write in B), ",
                       s),
                "bare hand-over",
                0,
                {}});
    share.baseline = "bare hand-over";
    const int n = size >= (uint64_t{1} << 30) ? std::max(20, o.iterations / 4) : o.iterations;
    daemon_calls.Mark();
    for (int i = 0; i < o.warmup + n; ++i) {
      const bool keep = i >= o.warmup;
      for (int k = 0; k < 5; ++k) {
        switch ((k + i) % 5) {  // each case first in turn
          case 0: {
            const double us = RunShare(client, open_peer, size, true);
            if (keep) share.us.push_back(us);
            break;
          }
          case 1: {
            const double us = RunHandover(handover_peer, size);
            if (keep) bare.us.push_back(us);
            break;
          }
          case 2: {
            const double us = RunShare(client, open_peer, size, true, true);
            if (keep) posted.us.push_back(us);
            break;
          }
          case 3: {
            const double us = RunShare(client, open_peer, size, true, true, true);
            if (keep) by_ticket.us.push_back(us);
            break;
          }
          default: {
            const double us =
                RunShare(client, open_peer, size, true, false, false, std::chrono::milliseconds(2));
            if (keep) after_work.us.push_back(us);
          }
        }
      }
    }
    share.baseline_us = bare.p50();
    posted.baseline_us = bare.p50();
    by_ticket.baseline_us = bare.p50();
    after_work.baseline_us = bare.p50();
    const std::string asleep =
        daemon_calls.AddRows(results, StrCat("  the daemon's own time (", s, ") per "));
    std::fprintf(stderr,
                 "gpubroker-bench: hand-over at %s done; turns of session.sock that found "
                 "the daemon asleep: %s\n",
                 s.c_str(), asleep.c_str());
  }

  // seal + wait against two round trips, all after 2 ms idle (issue #11:
  // "seal + wait <= 2 Unix-socket round trips"), interleaved.
  {
    Samples& confirmed = results.emplace_back(
        Samples{"seal + wait: A seals, B's Open(wait) returns (4 KiB, after 2 ms idle)",
                "2 x round trip after 2 ms idle (want <= 1x)",
                0,
                {}});
    Samples& posted = results.emplace_back(Samples{
        "  variant: A's seal posted", "2 x round trip after 2 ms idle (want <= 1x)", 0, {}});
    Samples& daemon_awake = results.emplace_back(
        Samples{"  variant: the daemon awake for B, B asleep (daemon_awake = 5 ms)",
                "2 x round trip after 2 ms idle (want <= 1x)",
                0,
                {}});
    Samples& ping = results.emplace_back(
        Samples{"A <-> B round trip after 2 ms idle (bare Unix socket)", "", 0, {}});
    const int n = std::max(20, o.iterations / 10);
    for (int i = 0; i < o.warmup / 10 + n; ++i) {
      const bool keep = i >= o.warmup / 10;
      for (int k = 0; k < 5; ++k) {
        switch ((k + i) % 5) {  // each case first in turn
          case 0: {
            const double us = RunSealWait(client, open_peer, false);
            if (keep) confirmed.us.push_back(us);
            break;
          }
          case 1: {
            const double us = RunSealWait(client, open_peer, true);
            if (keep) posted.us.push_back(us);
            break;
          }
          case 2: {
            const double us = RunSealWait(client, open_peer, false, true);
            if (keep) daemon_awake.us.push_back(us);
            break;
          }
          default: {
            const double us = RunIdlePing(open_peer);
            if (keep) ping.us.push_back(us);
          }
        }
      }
    }
    confirmed.baseline_us = 2 * ping.p50();
    posted.baseline_us = 2 * ping.p50();
    daemon_awake.baseline_us = 2 * ping.p50();
    std::fprintf(stderr, "gpubroker-bench: seal + wait done\n");
  }

  // In-process allocation speed: a small buffer's allocate + release against
  // malloc + free of the same size, and against the daemon's per-buffer path
  // (a client that makes no buffer itself), interleaved.
  {
    ConnectOptions per_buffer;
    per_buffer.client_name = "bench-daemon-path";
    per_buffer.suballocate = false;
    auto daemon_client = Client::connect(dir, per_buffer);
    Samples& broker = results.emplace_back();
    broker.name = StrCat("in-process allocate+release, ", FormatBytes(o.small_size));
    broker.baseline = "malloc+free";
    Samples& libc = results.emplace_back();
    libc.name = StrCat("  malloc+free (glibc), ", FormatBytes(o.small_size));
    Samples& rpc = results.emplace_back();
    rpc.name = StrCat("  the daemon's per-buffer path (two calls), ", FormatBytes(o.small_size));
    const int n = o.iterations * 10;
    for (int i = 0; i < o.warmup * 10 + n; ++i) {
      const bool keep = i >= o.warmup * 10;
      const double a = AllocateReleasePair(client, o.small_size);
      const double b = MallocFreePair(o.small_size);
      const double c = (i % 10 == 0) ? AllocateReleasePair(daemon_client, o.small_size) : -1;
      if (keep) {
        broker.us.push_back(a);
        libc.us.push_back(b);
        if (c >= 0) rpc.us.push_back(c);
      }
    }
    broker.baseline_us = libc.p50();
  }

  // Many buffers opened by one consumer: every open posted, then used,
  // against one open after another.
  AddBatchOpenCases(dir, uint64_t{64} << 10, 16, o.warmup / 10 + 1, o.iterations / 10 + 1, results);
  std::fprintf(stderr, "gpubroker-bench: batch open cases done\n");

  // Many clients at once: allocate + release pairs per second, against the
  // same clients on the daemon's per-buffer path.
  for (int processes : o.processes) {
    const std::string what = StrCat(processes, " client process", processes == 1 ? "" : "es",
                                    ", allocate+release ", FormatBytes(o.small_size));
    Samples ours =
        RunThroughput(dir, processes, o.small_size, std::chrono::milliseconds(o.throughput_ms),
                      StrCat("throughput: ", what));
    Samples theirs =
        RunThroughput(dir, processes, o.small_size, std::chrono::milliseconds(o.throughput_ms),
                      StrCat("  daemon's per-buffer path: ", what), true);
    ours.baseline = "per-buffer path (want >= 20x)";
    ours.baseline_per_second = theirs.per_second;
    results.push_back(std::move(ours));
    results.push_back(std::move(theirs));
    std::fprintf(stderr, "gpubroker-bench: throughput with %d processes done\n", processes);
  }
  std::filesystem::remove(echo_path);

  Report(
      StrCat("gpubroker-bench: backend ", client.session().backend, ", ", FormatBytes(o.size),
             " buffers, ", o.iterations, " iterations (+", o.warmup, " warm-up)"),
      std::vector<Samples>(results.begin(), results.end()), o.json,
      {{"backend", client.session().backend}, {"size_bytes", o.size}, {"iterations", o.iterations}},
      o.json_out);
  return 0;
}

}  // namespace
}  // namespace gpubroker::bench

namespace {

uint64_t Bytes(const std::string& text) {
  auto size = gpubroker::ParseBytes(text);
  if (!size.ok())
    throw std::invalid_argument(std::string(gpubroker::View(size.status().message())));
  return *size;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpubroker::bench;
  signal(SIGPIPE, SIG_IGN);
  try {
    if (argc >= 3 && std::strcmp(argv[1], "--serve-echo") == 0) return ServeEcho(argv[2]);
    if (argc >= 3 && std::strcmp(argv[1], "--serve-handover") == 0)
      return ServeHandover(std::atoi(argv[2]));
    if (argc >= 4 && std::strcmp(argv[1], "--serve-open") == 0)
      return ServeOpen(argv[2], std::atoi(argv[3]));
    if (argc >= 4 && std::strcmp(argv[1], "--serve-cuda-peer") == 0)
      return ServeCudaPeer(argv[2], std::atoi(argv[3]));
    if (argc >= 3 && std::strcmp(argv[1], "--serve-fence-peer") == 0)
      return RunFencePeer(std::atoi(argv[2]));
    if (argc >= 7 && std::strcmp(argv[1], "--serve-throughput") == 0)
      return ServeThroughput(argv[2], std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]),
                             std::atoi(argv[5]), std::strcmp(argv[6], "daemon") == 0);
    Options o;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--backend") {
        o.backend = value();
      } else if (a == "--small-buffers") {
        o.small_buffers = value();
      } else if (a == "--torch-script") {
        o.torch_script = value();
      } else if (a == "--socket-dir") {
        o.socket_dir = value();
      } else if (a == "--quick") {
        // Every case and figure, with fewer samples: the whole CUDA run in a
        // few minutes (flags after it override it).
        o.iterations = 100;
        o.warmup = 10;
        o.fence_iterations = 100;
        o.throughput_ms = 300;
      } else if (a == "--iterations") {
        o.iterations = std::stoi(value());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(value());
      } else if (a == "--size") {
        o.size = Bytes(value());
      } else if (a == "--small-size") {
        o.small_size = Bytes(value());
      } else if (a == "--sizes") {
        o.sizes.clear();
        for (const auto& item : SplitList(value())) o.sizes.push_back(Bytes(item));
      } else if (a == "--processes") {
        o.processes.clear();
        for (const auto& item : SplitList(value())) o.processes.push_back(std::stoi(item));
      } else if (a == "--throughput-ms") {
        o.throughput_ms = std::stoi(value());
      } else if (a == "--cases") {
        o.cases = value();
        if (o.cases != "all" && o.cases != "handover" && o.cases != "shares")
          throw std::invalid_argument("--cases is all, handover or shares");
      } else if (a == "--fence-iterations") {
        o.fence_iterations = std::stoi(value());
      } else if (a == "--json-out") {
        o.json_out = value();
      } else if (a == "--json") {
        o.json = true;
      } else if (a == "--help" || a == "-h") {
        std::puts(
            "gpubroker-bench [--backend host|cuda] [--small-buffers arena|pool] [--socket-dir "
            "DIR]\n"
            "                [--iterations N] [--warmup N] [--size BYTES] [--json] [--json-out "
            "FILE]\n"
            "                [--torch-script FILE] [--sizes LIST] [--small-size BYTES]\n"
            "                [--processes LIST] [--throughput-ms MS] [--fence-iterations N]\n"
            "                [--cases all|handover|shares] [--quick]\n"
            "  --quick: every case with fewer samples (--iterations 100 --warmup 10\n"
            "           --fence-iterations 100 --throughput-ms 300)\n"
            "  --sizes: hand-over sizes (default 4KiB,64MiB,1GiB,40GiB)\n"
            "  --processes: client processes of the throughput cases (default 1,8,16)");
        return 0;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    if (o.backend == "cuda") return RunCuda(o);
    if (o.backend != "host") throw std::invalid_argument("--backend is host or cuda");
    return RunHost(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubroker-bench: %s\n", e.what());
    return 1;
  }
}
