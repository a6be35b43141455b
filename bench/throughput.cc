#include "bench/throughput.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "bench/baselines.h"
#include "gpubroker/client.hpp"

namespace gpubroker::bench {
namespace {

constexpr uint32_t kReservoir = 20000;

struct Result {
  uint64_t ops = 0;
  double seconds = 0;
  uint32_t samples = 0;
};

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) throw std::runtime_error("throughput: write to the parent failed");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) throw std::runtime_error("throughput: a worker is gone");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

double AllocateReleasePair(Client& client, uint64_t size) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    Buffer b = client.allocate(size);
    // Touched where the host can reach it, as malloc's baseline is; a GPU
    // buffer is not written (torch's caching allocator baseline writes none).
    if (b.device() == "host") static_cast<volatile char*>(b.data())[0] = 1;
    b.release();
  }
  return ElapsedUs(t0);
}

double MallocFreePair(uint64_t size) {
  const auto t0 = std::chrono::steady_clock::now();
  void* p = std::malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  static_cast<volatile char*>(p)[0] = 1;
  std::free(p);
  return ElapsedUs(t0);
}

int ServeThroughput(const std::string& socket_dir, uint64_t size, int duration_ms, int fd,
                    bool daemon_path) {
  ConnectOptions options;
  options.client_name = "bench-throughput";
  options.suballocate = !daemon_path;
  auto client = Client::connect(socket_dir, options);
  for (int i = 0; i < 1000; ++i) AllocateReleasePair(client, size);  // warm: ranges, caches
  const char ready = 'r';
  WriteAll(fd, &ready, 1);
  char go = 0;
  ReadAll(fd, &go, 1);
  std::vector<double> reservoir;
  reservoir.reserve(kReservoir);
  uint64_t rng = 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(::getpid());
  Result r;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::milliseconds(duration_ms);
  for (;;) {
    const double us = AllocateReleasePair(client, size);
    ++r.ops;
    if (reservoir.size() < kReservoir) {
      reservoir.push_back(us);
    } else {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      const uint64_t k = rng % r.ops;
      if (k < kReservoir) reservoir[k] = us;
    }
    // The clock is read by the pair anyway; check the end every 64 pairs.
    if ((r.ops & 63) == 0 && std::chrono::steady_clock::now() >= end) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.samples = static_cast<uint32_t>(reservoir.size());
  WriteAll(fd, &r, sizeof(r));
  WriteAll(fd, reservoir.data(), reservoir.size() * sizeof(double));
  return 0;
}

Samples RunThroughput(const std::string& socket_dir, int processes, uint64_t size,
                      std::chrono::milliseconds duration, std::string name, bool daemon_path) {
  std::vector<Child> workers;
  for (int i = 0; i < processes; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      throw std::runtime_error("socketpair failed");
    }
    Child c;
    c.pid = SpawnSelf(
        {"--serve-throughput", socket_dir, std::to_string(size), std::to_string(duration.count()),
         std::to_string(sv[1]), daemon_path ? "daemon" : "ranges"},
        sv[1]);
    ::close(sv[1]);
    c.channel.reset(sv[0]);
    workers.push_back(std::move(c));
  }
  for (auto& w : workers) {
    char ready = 0;
    ReadAll(w.channel.get(), &ready, 1);
  }
  for (auto& w : workers) WriteAll(w.channel.get(), "g", 1);
  Samples s;
  s.name = std::move(name);
  s.processes = processes;
  uint64_t ops = 0;
  double longest = 0;
  for (auto& w : workers) {
    Result r;
    ReadAll(w.channel.get(), &r, sizeof(r));
    std::vector<double> got(r.samples);
    ReadAll(w.channel.get(), got.data(), got.size() * sizeof(double));
    ops += r.ops;
    longest = std::max(longest, r.seconds);
    s.us.insert(s.us.end(), got.begin(), got.end());
  }
  s.per_second = longest > 0 ? static_cast<double>(ops) / longest : 0;
  return s;
}

}  // namespace gpubroker::bench
