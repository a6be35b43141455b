// gpubroker-soak: many clients for a long time against one daemon, to show
// what a long run leaves behind.
//
//   gpubroker-soak [--duration SECONDS] [--clients N] [--rate OPS_PER_S]
//                  [--kill-every-ms MS] [--backend host|cuda] [--size-max BYTES]
//                  [--json-out FILE] [--log DIR] [-- DAEMON_ARGS...]
//
// It starts its own gpubrokerd (beside itself) on a temporary directory. A
// quiet client allocates and releases one small buffer a hundred times a
// second, alone for a baseline phase, then while N noisy client processes
// allocate, fill, seal, open each other's buffers by name (with and without
// waiting), check their bytes, release, free, list, and are killed with
// SIGKILL one at a time and replaced. The daemon's RSS and descriptors are
// sampled throughout. At the end every client is killed and the books must
// come back to nothing: no buffer, no byte in use.
//
// It prints the figures (and writes them as JSON) and exits 1 when bytes
// leaked, a client read bytes that were not the producer's, a call failed
// in a way no client should see, or the daemon's descriptors grew.
//
// Over 500 lines on purpose: one program, its workers and its report together.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"
#include "tests/integration/helper_memory.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Options {
  int duration_s = 600;
  int clients = 16;
  int rate = 200;  // ops per second per noisy client
  int kill_every_ms = 1500;
  std::string backend = "host";
  uint64_t size_max = 256 * 1024;
  std::string json_out;
  std::string log_dir;
  std::vector<std::string> daemon_args;
  // worker mode
  int worker = -1;
  std::string socket_dir;
  uint64_t seed = 1;
};

bool Expected(gpubroker::ErrorCode code) {
  switch (code) {
    case gpubroker::ErrorCode::kNotFound:            // a peer's buffer is gone, or not there yet
    case gpubroker::ErrorCode::kAlreadyExists:       // our own slot is still in use
    case gpubroker::ErrorCode::kFailedPrecondition:  // not sealed yet
    case gpubroker::ErrorCode::kDeadlineExceeded:    // a wait ran out
    case gpubroker::ErrorCode::kResourceExhausted:   // quota, pool, or count limit
      return true;
    default:
      return false;
  }
}

// A read that broke the pattern, said so that its cause can be told apart:
// what was there instead (another buffer's pattern names that buffer's id
// modulo 256 in its first byte; zeros; neither), the handle's view of the
// buffer, and the same read again on a stream that waits for the buffer's
// ready fence (a late write reads right then; a wrong memory does not).
void ReportCorrupt(int worker, const std::string& name, gpubroker::Buffer& b, uint64_t checked,
                   int64_t bad) {
  namespace t = gpubroker::testing;
  const uint64_t n = std::min<uint64_t>(b.size(), 16);
  std::string bytes;
  bool zeros = true;
  std::vector<uint8_t> got(n);
  for (uint64_t i = 0; i < n; ++i) {
    got[i] = t::Peek(b, i);
    zeros = zeros && got[i] == 0;
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", got[i]);
    bytes += hex;
  }
  // PatternByte(0, seed) = 7 * seed + 1 (mod 256), and 183 = 7^-1 (mod 256).
  const uint64_t residue = ((got.empty() ? 0 : got[0]) - 1u) * 183u & 0xff;
  bool pattern = !got.empty();
  for (uint64_t i = 0; i < n; ++i) pattern = pattern && got[i] == t::PatternByte(i, residue);
  const std::string what = zeros     ? "zeros"
                           : pattern ? "the pattern of an id = " + std::to_string(residue) +
                                           " (mod 256), expected " + std::to_string(b.id() % 256)
                                     : "no pattern";
  const int64_t again = t::Check(b, b.id(), checked, /*stream_wait=*/true);
  const gpubroker::BufferInfo& info = b.info();
  std::fprintf(
      stderr,
      "CORRUPT worker %d: %s (id %lu) byte %ld; %lu of %lu bytes, %s%s, state %s, "
      "owner session %lu; bytes 0..%lu: %s (%s); read again after its fence: %s\n",
      worker, name.c_str(), static_cast<unsigned long>(b.id()), static_cast<long>(bad),
      static_cast<unsigned long>(info.size), static_cast<unsigned long>(info.reserved_size),
      info.backing.c_str(), info.client_made ? " (client-made)" : "",
      std::string(gpubroker::BufferStateName(info.state)).c_str(),
      static_cast<unsigned long>(info.owner_session), static_cast<unsigned long>(n), bytes.c_str(),
      what.c_str(), again < 0 ? "right" : ("wrong at byte " + std::to_string(again)).c_str());
}

// A noisy client: a random mix of every call, paced at `rate` ops per second.
int Worker(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::optional<gpubroker::Client> client;
  for (int attempt = 0; attempt < 50 && !client; ++attempt) {
    try {
      client = gpubroker::Client::connect(o.socket_dir, {"soak"});
    } catch (const gpubroker::Error& e) {
      if (!Expected(e.code()) && e.code() != gpubroker::ErrorCode::kUnavailable) {
        std::fprintf(stderr, "UNEXPECTED worker %d connect: %s\n", o.worker, e.what());
        return 1;
      }
      std::this_thread::sleep_for(100ms);
    }
  }
  if (!client) return 1;
  std::deque<gpubroker::Buffer> mine, theirs;
  const auto pace = std::chrono::microseconds(1'000'000 / std::max(1, o.rate));
  auto next = Clock::now();
  const uint64_t slots = 48;
  // Some clients leave on their own (Goodbye), the others are killed.
  const uint64_t lifetime = rng() % 8 == 0 ? 500 + rng() % 5000 : ~uint64_t{0};
  for (uint64_t op = 0; op < lifetime; ++op) {
    next += pace;
    std::this_thread::sleep_until(next);
    const int dice = static_cast<int>(rng() % 100);
    try {
      if (dice < 40) {
        gpubroker::AllocateOptions ao;
        if (rng() % 10 < 7)
          ao.name = "soak." + std::to_string(o.worker) + "." + std::to_string(rng() % slots);
        if (rng() % 10 == 0) {
          ao.keep = true;
          ao.ttl = std::chrono::milliseconds(200 + rng() % 2000);
        }
        const uint64_t size = 1 + rng() % o.size_max;
        gpubroker::Buffer b = client->allocate(size, ao);
        // The buffer's id seeds its bytes: a reader can check them knowing the id alone.
        // A buffer this client made gets its id when it is published: publish()
        // says when its name is taken (id() would answer 0, and the seal below
        // could still publish it, under an id its bytes do not carry, once the
        // name came free).
        const gpubroker::BufferId id = b.publish();
        gpubroker::testing::Fill(b, id, std::min<uint64_t>(size, 4096));
        b.seal();
        mine.push_back(std::move(b));
        if (mine.size() > 16) mine.pop_front();
      } else if (dice < 70) {
        const std::string name =
            "soak." + std::to_string(rng() % o.clients) + "." + std::to_string(rng() % slots);
        gpubroker::OpenOptions oo;
        if (rng() % 5 == 0) {
          oo.wait = true;
          oo.timeout = std::chrono::milliseconds(20 + rng() % 80);
        }
        gpubroker::Buffer b = client->open(name, oo);
        const uint64_t checked = std::min<uint64_t>(b.size(), 4096);
        const int64_t bad = gpubroker::testing::Check(b, b.id(), checked);
        if (bad >= 0) ReportCorrupt(o.worker, name, b, checked, bad);
        theirs.push_back(std::move(b));
        if (theirs.size() > 8) theirs.pop_front();
      } else if (dice < 85) {
        auto& from = rng() % 2 ? mine : theirs;
        if (!from.empty()) {
          from.front().release();
          from.pop_front();
        }
      } else if (dice < 92) {
        client->free("soak." + std::to_string(o.worker) + "." + std::to_string(rng() % slots));
      } else if (dice < 97) {
        (void)client->list();
      } else {
        (void)client->status();
      }
    } catch (const gpubroker::Error& e) {
      if (!Expected(e.code())) {
        std::fprintf(stderr, "UNEXPECTED worker %d op %d: %s %s\n", o.worker, dice,
                     gpubroker::ErrorCodeName(e.code()), e.what());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "UNEXPECTED worker %d: %s\n", o.worker, e.what());
    }
  }
  return 0;
}

// Supervisor ---------------------------------------------------------------

std::string Self() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (out_fd >= 0) ::dup2(out_fd, 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

struct Sample {
  double t_s = 0;
  uint64_t rss_kib = 0;
  int fds = 0;
  double cpu_s = 0;
};

Sample Probe(pid_t pid, Clock::time_point start) {
  Sample s;
  s.t_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> s.rss_kib;
      break;
    }
    status.ignore(4096, '\n');
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++s.fds;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(all.substr(all.rfind(')') + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i >= 14) ticks += std::strtod(f.c_str(), nullptr);
  }
  s.cpu_s = ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return s;
}

std::map<std::string, double> Scrape(const std::string& address) {
  std::map<std::string, double> out;
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return out;
  }
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::write(fd, req.data(), req.size()) < 0) {
    ::close(fd);
    return out;
  }
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
  ::close(fd);
  std::istringstream lines(body.substr(std::min(body.size(), body.find("\r\n\r\n") + 4)));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    if (sp != std::string::npos)
      out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Supervise(const Options& o) {
  char tmpl[] = "/tmp/gpubroker-soak-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  const std::string dir = tmpl;
  ::chmod(dir.c_str(), 0755);
  const std::string logs = o.log_dir.empty() ? dir : o.log_dir;
  std::filesystem::create_directories(logs);
  const int daemon_log =
      ::open((logs + "/gpubrokerd.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int client_log =
      ::open((logs + "/clients.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int start_pipe[2];
  if (::pipe2(start_pipe, O_CLOEXEC) != 0) return 2;
  std::vector<std::string> dargs = {
      (std::filesystem::path(Self()).parent_path() / "gpubrokerd").string(),
      "--socket-dir",
      dir,
      "--metrics-address",
      "127.0.0.1:0",
      "--backend",
      o.backend};
  dargs.insert(dargs.end(), o.daemon_args.begin(), o.daemon_args.end());
  const pid_t daemon = Spawn(dargs, start_pipe[1], daemon_log);
  ::close(start_pipe[1]);
  std::string start_line;
  char ch;
  while (::read(start_pipe[0], &ch, 1) == 1 && ch != '\n') start_line += ch;
  if (start_line.empty()) {
    std::fprintf(stderr, "gpubroker-soak: gpubrokerd did not start (see %s/gpubrokerd.log)\n",
                 logs.c_str());
    return 2;
  }
  const std::string metrics = start_line.substr(start_line.rfind("metrics ") + 8);
  std::printf("%s\n", start_line.c_str());

  const auto start = Clock::now();
  const auto baseline_for = std::chrono::seconds(std::clamp(o.duration_s / 10, 5, 60));
  const auto end = start + std::chrono::seconds(o.duration_s);

  // The quiet client: one small allocation every 10 ms, timed.
  std::mutex mu;
  std::vector<double> quiet_alone, quiet_noisy;
  std::atomic<bool> noisy{false}, stop{false};
  std::atomic<uint64_t> quiet_errors{0};
  std::thread quiet([&] {
    auto c = gpubroker::Client::connect(dir, {"soak-quiet"});
    auto next = Clock::now();
    while (!stop) {
      next += 10ms;
      std::this_thread::sleep_until(next);
      const bool during_noise = noisy;
      try {
        const auto t0 = Clock::now();
        gpubroker::Buffer b = c.allocate(4096);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        b.release();
        std::lock_guard lock(mu);
        (during_noise ? quiet_noisy : quiet_alone).push_back(us);
      } catch (const gpubroker::Error& e) {
        ++quiet_errors;
        std::fprintf(stderr, "UNEXPECTED quiet client: %s\n", e.what());
      }
    }
  });

  std::vector<Sample> samples;
  samples.push_back(Probe(daemon, start));
  std::this_thread::sleep_until(start + baseline_for);
  samples.push_back(Probe(daemon, start));

  std::mt19937_64 rng(12345);
  std::vector<pid_t> workers(o.clients, -1);
  uint64_t spawned = 0, killed = 0;
  auto spawn = [&](int i) {
    workers[i] = Spawn({Self(), "--worker", std::to_string(i), "--socket-dir", dir, "--clients",
                        std::to_string(o.clients), "--rate", std::to_string(o.rate), "--size-max",
                        std::to_string(o.size_max), "--seed", std::to_string(rng())},
                       -1, client_log);
    ++spawned;
  };
  for (int i = 0; i < o.clients; ++i) spawn(i);
  noisy = true;
  auto next_kill = Clock::now() + std::chrono::milliseconds(o.kill_every_ms);
  auto next_sample = Clock::now() + 5s;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(20ms);
    // Replace the clients that left on their own.
    for (int i = 0; i < o.clients; ++i) {
      if (workers[i] > 0 && ::waitpid(workers[i], nullptr, WNOHANG) == workers[i]) spawn(i);
    }
    if (Clock::now() >= next_kill) {
      const int i = static_cast<int>(rng() % o.clients);
      ::kill(workers[i], SIGKILL);
      ::waitpid(workers[i], nullptr, 0);
      ++killed;
      spawn(i);
      next_kill += std::chrono::milliseconds(o.kill_every_ms);
    }
    if (Clock::now() >= next_sample) {
      samples.push_back(Probe(daemon, start));
      next_sample += 5s;
    }
    if (::waitpid(daemon, nullptr, WNOHANG) == daemon) {
      std::fprintf(stderr, "gpubroker-soak: gpubrokerd died (see %s/gpubrokerd.log)\n",
                   logs.c_str());
      return 1;
    }
  }
  for (pid_t& w : workers) {
    ::kill(w, SIGKILL);
    ::waitpid(w, nullptr, 0);
  }
  stop = true;
  quiet.join();

  // Every client is gone: the books must come back to nothing (kept buffers
  // go with their TTLs, at most a few seconds).
  auto observer = gpubroker::Client::connect(dir, {"soak-observer"});
  gpubroker::BrokerStatus st;
  uint64_t used = 0;
  for (int i = 0; i < 100; ++i) {
    st = observer.status();
    used = 0;
    for (const auto& d : st.devices) used += d.used_bytes;
    if (used == 0 && st.buffers == 0) break;
    std::this_thread::sleep_for(100ms);
  }
  samples.push_back(Probe(daemon, start));
  const auto m = Scrape(metrics);
  ::kill(daemon, SIGTERM);
  int daemon_status = 0;
  ::waitpid(daemon, &daemon_status, 0);

  // Log lines the clients wrote about what no client should see.
  std::ifstream clients_in(logs + "/clients.log");
  uint64_t corrupt = 0, unexpected = 0;
  std::string line, first_problem;
  while (std::getline(clients_in, line)) {
    const bool c = line.rfind("CORRUPT", 0) == 0, u = line.rfind("UNEXPECTED", 0) == 0;
    corrupt += c;
    unexpected += u;
    if ((c || u) && first_problem.empty()) first_problem = line;
  }

  // Flat: the daemon after warm-up (first noisy sample) against its end.
  const Sample& warm = samples[std::min<size_t>(samples.size() - 1, 3)];
  const Sample& last = samples.back();
  uint64_t rss_max = 0;
  int fds_max = 0;
  for (const auto& s : samples) {
    rss_max = std::max(rss_max, s.rss_kib);
    fds_max = std::max(fds_max, s.fds);
  }
  // A family's series summed (every label value), or one series named in full.
  auto metric = [&](const std::string& k) {
    double total = 0;
    for (const auto& [series, value] : m) {
      if (series == k || (k.find('{') == std::string::npos && series.rfind(k + "{", 0) == 0)) {
        total += value;
      }
    }
    return total;
  };
  nlohmann::json out;
  out["duration_s"] = o.duration_s;
  out["backend"] = o.backend;
  out["clients"] = o.clients;
  out["rate_per_client"] = o.rate;
  out["clients_spawned"] = spawned;
  out["clients_killed"] = killed;
  out["allocations_ok"] = metric("gpubroker_allocations_total{result=\"ok\"}");
  out["opens_ok"] = metric("gpubroker_opens_total{result=\"ok\"}");
  out["sessions_died"] = metric("gpubroker_sessions_ended_total{end=\"died\"}");
  out["sessions_closed"] = metric("gpubroker_sessions_ended_total{end=\"closed\"}");
  out["reclaimed_bytes"] = metric("gpubroker_reclaimed_bytes_total");
  out["leaked_bytes"] = used;
  out["buffers_left"] = st.buffers;
  out["corrupt_reads"] = corrupt;
  out["unexpected_errors"] = unexpected + quiet_errors.load();
  out["daemon_exit_status"] = daemon_status;
  out["rss_kib"] = {{"start", samples.front().rss_kib},
                    {"warm", warm.rss_kib},
                    {"end", last.rss_kib},
                    {"max", rss_max}};
  out["fds"] = {{"start", samples.front().fds},
                {"one_client", samples[1].fds},
                {"warm", warm.fds},
                {"end", last.fds},
                {"max", fds_max}};
  out["daemon_cpu_s"] = last.cpu_s;
  out["quiet_allocate_us"] = {{"alone",
                               {{"n", quiet_alone.size()},
                                {"p50", Percentile(quiet_alone, 0.5)},
                                {"p99", Percentile(quiet_alone, 0.99)}}},
                              {"noisy",
                               {{"n", quiet_noisy.size()},
                                {"p50", Percentile(quiet_noisy, 0.5)},
                                {"p99", Percentile(quiet_noisy, 0.99)}}}};
  const double ratio = Percentile(quiet_alone, 0.99) > 0
                           ? Percentile(quiet_noisy, 0.99) / Percentile(quiet_alone, 0.99)
                           : 0;
  out["quiet_p99_ratio"] = ratio;
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& s : samples) timeline.push_back({s.t_s, s.rss_kib, s.fds, s.cpu_s});
  out["timeline_t_rss_fds_cpu"] = timeline;

  std::printf(
      "soak: %d s, %d clients at %d ops/s each (%lu started, %lu killed with SIGKILL)\n"
      "  calls: %.0f allocations, %.0f opens; sessions: %.0f died, %.0f closed; %.0f bytes "
      "reclaimed\n"
      "  at the end: %lu bytes in use, %u buffers; %lu corrupt reads, %lu unexpected errors\n"
      "  daemon RSS KiB: start %lu, after warm-up %lu, end %lu, max %lu\n"
      "  daemon descriptors: start %d, one client %d, after warm-up %d, end %d, max %d; CPU "
      "%.1f s\n"
      "  quiet client's Allocate: alone p50 %.1f us p99 %.1f us (n=%zu); with the noise p50 "
      "%.1f us p99 %.1f us (n=%zu); p99 ratio %.2f\n",
      o.duration_s, o.clients, o.rate, static_cast<unsigned long>(spawned),
      static_cast<unsigned long>(killed), metric("gpubroker_allocations_total{result=\"ok\"}"),
      metric("gpubroker_opens_total{result=\"ok\"}"),
      metric("gpubroker_sessions_ended_total{end=\"died\"}"),
      metric("gpubroker_sessions_ended_total{end=\"closed\"}"),
      metric("gpubroker_reclaimed_bytes_total"), static_cast<unsigned long>(used), st.buffers,
      static_cast<unsigned long>(corrupt), static_cast<unsigned long>(unexpected + quiet_errors),
      static_cast<unsigned long>(samples.front().rss_kib), static_cast<unsigned long>(warm.rss_kib),
      static_cast<unsigned long>(last.rss_kib), static_cast<unsigned long>(rss_max),
      samples.front().fds, samples[1].fds, warm.fds, last.fds, fds_max, last.cpu_s,
      Percentile(quiet_alone, 0.5), Percentile(quiet_alone, 0.99), quiet_alone.size(),
      Percentile(quiet_noisy, 0.5), Percentile(quiet_noisy, 0.99), quiet_noisy.size(), ratio);
  if (!first_problem.empty()) std::printf("  first problem: %s\n", first_problem.c_str());
  if (!o.json_out.empty()) std::ofstream(o.json_out) << out.dump(2) << "\n";

  // Descriptors come back: at the end (one client, the observer) against the
  // end of the baseline (one client, the quiet one), so that what one
  // connected client and its tenant hold (its sockets, the tenant's wake
  // board and arena) is on both sides; a descriptor kept per client that
  // came and went, or was killed, is not.
  const bool fds_flat = last.fds <= samples[1].fds + 4;
  const bool ok = used == 0 && st.buffers == 0 && corrupt == 0 && unexpected == 0 &&
                  quiet_errors == 0 && fds_flat && WIFEXITED(daemon_status) &&
                  WEXITSTATUS(daemon_status) == 0;
  std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
  if (o.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpubroker-soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--duration") {
      o.duration_s = std::stoi(value());
    } else if (a == "--clients") {
      o.clients = std::stoi(value());
    } else if (a == "--rate") {
      o.rate = std::stoi(value());
    } else if (a == "--kill-every-ms") {
      o.kill_every_ms = std::stoi(value());
    } else if (a == "--backend") {
      o.backend = value();
    } else if (a == "--size-max") {
      o.size_max = std::stoull(value());
    } else if (a == "--json-out") {
      o.json_out = value();
    } else if (a == "--log") {
      o.log_dir = value();
    } else if (a == "--worker") {
      o.worker = std::stoi(value());
    } else if (a == "--socket-dir") {
      o.socket_dir = value();
    } else if (a == "--seed") {
      o.seed = std::stoull(value());
    } else if (a == "--") {
      o.daemon_args.assign(argv + i + 1, argv + argc);
      break;
    } else {
      std::fprintf(stderr, "gpubroker-soak: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  return o.worker >= 0 ? Worker(o) : Supervise(o);
}
