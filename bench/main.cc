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
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "bench/baselines.h"
#include "bench/daemon_process.h"
#include "bench/options.h"
#include "bench/report.h"
#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"

namespace gpubroker::bench {
namespace {

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

int RunHost(const Options& o) {
  std::unique_ptr<DaemonProcess> own;
  std::string dir = o.socket_dir;
  if (dir.empty()) {
    own = std::make_unique<DaemonProcess>(std::vector<std::string>{
        "--backend", "host", "--host-pool-bytes",
        std::to_string(std::max<uint64_t>(uint64_t{1} << 30, o.size * 16))});
    dir = own->dir();
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
  results[2].baseline_us = echo;
  results[3].baseline_us = echo;
  results[4].baseline_us = 2 * echo;
  results[5].baseline_us = 2 * echo + handover;
  Report(
      StrCat("gpubroker-bench: backend ", client.session().backend, ", ", FormatBytes(o.size),
             " buffers, ", o.iterations, " iterations (+", o.warmup, " warm-up)"),
      results, o.json,
      {{"backend", client.session().backend}, {"size_bytes", o.size}, {"iterations", o.iterations}},
      o.json_out);
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
    if (argc >= 4 && std::strcmp(argv[1], "--serve-cuda-peer") == 0)
      return ServeCudaPeer(argv[2], std::atoi(argv[3]));
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
      } else if (a == "--iterations") {
        o.iterations = std::stoi(value());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(value());
      } else if (a == "--size") {
        auto size = gpubroker::ParseBytes(value());
        if (!size.ok())
          throw std::invalid_argument(std::string(gpubroker::View(size.status().message())));
        o.size = *size;
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
            "                [--torch-script FILE]");
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
