// gpubroker-bench: the broker against raw baselines measured in the same run.
//
//   gpubroker-bench [--socket-dir DIR] [--iterations N] [--size BYTES] [--json]
//
// Without --socket-dir it starts its own gpubrokerd (found beside itself) on a
// temporary directory. Cases:
//   allocate / release+free / allocate+free       vs bare gRPC echo
//   allocate in A, open+map in B (cross-process)  vs 2 x echo + memfd hand-over
#include <signal.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "bench/baselines.h"
#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"

namespace gpubroker::bench {
namespace {

struct Options {
  std::string socket_dir;
  int iterations = 2000;
  int warmup = 200;
  uint64_t size = 1 << 20;
  bool json = false;
};

// B's side of the cross-process case: read an id, open it, touch it, answer;
// then release it and say so (outside A's timing, so that no clean-up of one
// iteration overlaps the next).
int ServeOpen(const std::string& socket_dir, int fd) {
  auto client = Client::connect(socket_dir, {"bench-peer"});
  OpenOptions oo;
  oo.allow_unsealed = true;
  for (;;) {
    BufferId id = 0;
    if (::read(fd, &id, sizeof(id)) != sizeof(id)) return 0;
    Buffer b = client.open(id, oo);
    static_cast<volatile char*>(b.data())[0] = 1;
    const char ack = 1;
    if (::write(fd, &ack, 1) != 1) return 1;
    b.release();
    if (::write(fd, &ack, 1) != 1) return 1;
  }
}

struct DaemonProcess {
  pid_t pid = -1;
  std::string dir;
  ~DaemonProcess() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
      std::filesystem::remove_all(dir);
    }
  }
};

void StartDaemon(DaemonProcess& d, uint64_t pool_bytes) {
  char tmpl[] = "/tmp/gpubroker-bench-XXXXXX";
  d.dir = ::mkdtemp(tmpl);
  const std::string daemon =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpubrokerd").string();
  const std::string pool = std::to_string(pool_bytes);
  d.pid = ::fork();
  if (d.pid == 0) {
    ::dup2(2, 1);  // its start line must not mix with our (JSON) output
    ::execl(daemon.c_str(), daemon.c_str(), "--socket-dir", d.dir.c_str(), "--metrics-address", "",
            "--log-level", "warn", "--host-pool-bytes", pool.c_str(), nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !std::filesystem::exists(d.dir + "/gpubroker.sock"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
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

// Allocate in A (here), Open + map + touch in B; timed until B answers.
double RunShare(Client& client, Child& peer, uint64_t size) {
  const auto t0 = std::chrono::steady_clock::now();
  Buffer b = client.allocate(size);
  const BufferId id = b.id();
  char ack = 0;
  if (::write(peer.channel.get(), &id, sizeof(id)) != sizeof(id) ||
      ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("share peer is gone");
  }
  const double us = ElapsedUs(t0);
  if (::read(peer.channel.get(), &ack, 1) != 1) throw std::runtime_error("share peer is gone");
  b.release();
  return us;
}

int Run(const Options& o) {
  DaemonProcess own;
  std::string dir = o.socket_dir;
  if (dir.empty()) {
    StartDaemon(own, std::max<uint64_t>(uint64_t{1} << 30, o.size * 16));
    dir = own.dir;
  }
  auto client = Client::connect(dir, {"bench"});
  const std::string echo_path = dir + "/bench-echo.sock";
  Child echo_server = StartEchoServer(echo_path);
  EchoClient echo_client(echo_path);
  Child handover_peer = StartHandoverPeer();
  Child open_peer = StartOpenPeer(dir);

  // The cases take turns, in a shuffled order each iteration, so that
  // whatever else the machine does (and whichever case runs first after a
  // context switch) falls on all of them alike.
  std::vector<Samples> results = {
      {"grpc echo (bare unary call, Unix socket)", "", {}},
      {"memfd + SCM_RIGHTS hand-over (bare)", "", {}},
      {"broker Allocate", "grpc echo", {}},
      {"broker Release(free)", "grpc echo", {}},
      {"broker Allocate+Free", "2 x grpc echo", {}},
      {"broker share: Allocate in A, Open+map in B", "2 x grpc echo + hand-over", {}},
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
          us[5] = RunShare(client, open_peer, o.size);
          break;
      }
    }
    if (i < o.warmup) continue;
    for (size_t k = 0; k < results.size(); ++k) results[k].us.push_back(us[k]);
  }
  std::filesystem::remove(echo_path);

  const double echo = results[0].p50();
  const double handover = results[1].p50();
  auto baseline = [&](const std::string& name) {
    if (name == "grpc echo") return echo;
    if (name == "2 x grpc echo") return 2 * echo;
    if (name == "2 x grpc echo + hand-over") return 2 * echo + handover;
    return 0.0;
  };

  utsname u{};
  ::uname(&u);
  if (o.json) {
    nlohmann::json j;
    j["backend"] = client.session().backend;
    j["size_bytes"] = o.size;
    j["iterations"] = o.iterations;
    j["host"] = {{"kernel", u.release}, {"cpus", std::thread::hardware_concurrency()}};
    for (const auto& s : results) {
      nlohmann::json r = {
          {"name", s.name}, {"p50_us", s.p50()}, {"p99_us", s.p99()}, {"n", s.us.size()}};
      if (!s.baseline.empty()) {
        r["baseline"] = s.baseline;
        r["baseline_p50_us"] = baseline(s.baseline);
        r["ratio_p50"] = s.p50() / baseline(s.baseline);
      }
      j["results"].push_back(r);
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "gpubroker-bench: backend %s, %s buffers, %d iterations (+%d warm-up), %u cpus, kernel "
      "%s\n\n",
      client.session().backend.c_str(), FormatBytes(o.size).c_str(), o.iterations, o.warmup,
      std::thread::hardware_concurrency(), u.release);
  std::printf("%-46s %10s %10s   %-28s %8s\n", "case", "p50 us", "p99 us", "baseline (p50 us)",
              "ratio");
  for (const auto& s : results) {
    std::string base = "-";
    std::string ratio = "-";
    if (!s.baseline.empty()) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s (%.1f)", s.baseline.c_str(), baseline(s.baseline));
      base = buf;
      std::snprintf(buf, sizeof(buf), "%.2fx", s.p50() / baseline(s.baseline));
      ratio = buf;
    }
    std::printf("%-46s %10.1f %10.1f   %-28s %8s\n", s.name.c_str(), s.p50(), s.p99(), base.c_str(),
                ratio.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace gpubroker::bench

int main(int argc, char** argv) {
  using namespace gpubroker::bench;
  signal(SIGPIPE, SIG_IGN);
  try {
    if (argc >= 3 && std::strcmp(argv[1], "--serve-echo") == 0) return ServeEcho(argv[2]);
    if (argc >= 3 && std::strcmp(argv[1], "--serve-handover") == 0)
      return ServeHandover(std::atoi(argv[2]));
    if (argc >= 4 && std::strcmp(argv[1], "--serve-open") == 0)
      return ServeOpen(argv[2], std::atoi(argv[3]));
    Options o;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--socket-dir") {
        o.socket_dir = value();
      } else if (a == "--iterations") {
        o.iterations = std::stoi(value());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(value());
      } else if (a == "--size") {
        auto size = gpubroker::ParseBytes(value());
        if (!size.ok())
          throw std::invalid_argument(std::string(gpubroker::View(size.status().message())));
        o.size = *size;
      } else if (a == "--json") {
        o.json = true;
      } else if (a == "--help" || a == "-h") {
        std::puts(
            "gpubroker-bench [--socket-dir DIR] [--iterations N] [--warmup N] [--size BYTES] "
            "[--json]");
        return 0;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    return Run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpubroker-bench: %s\n", e.what());
    return 1;
  }
}
