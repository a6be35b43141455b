// The daemon's life: start line, options, one daemon per directory, stale
// sockets, SIGTERM, health, metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpubroker/client.hpp"
#include "grpc_health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

// session.sock's thread's turns, and its busy poll (docs/monitoring.md).
const char kTurnsAsleep[] = "gpubroker_session_turns_total{thread=\"asleep\"}";
const char kTurnsPolling[] = "gpubroker_session_turns_total{thread=\"polling\"}";
const char kBusyPollWindow[] = "gpubroker_session_busy_poll_window_seconds";

// One buffer through session.sock: made, sealed (a Publish, answered), released.
void AllocSealRelease(Helper& h, const std::string& name) {
  h.Ok("alloc a 8192 name=" + name);
  h.Ok("seal a");
  h.Ok("release a");
}

// Runs gpubrokerd to completion (for options that make it exit at once).
int RunDaemon(std::vector<std::string> args, std::string* output, const std::string& dir) {
  args.insert(args.begin(), BinDir() + "/gpubrokerd");
  const std::string err = dir + "/stderr.txt";
  std::filesystem::remove(err);
  Process p = Process::Spawn(args, err);
  p.CloseStdin();
  output->clear();
  while (auto line = p.ReadLine(10s)) *output += *line + "\n";
  const int code = p.Wait(20s);
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  *output += s.str();
  return code;
}

TEST(Lifecycle, StartLineSaysVersionBackendDevicesSocketsMetrics) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  const std::string& line = daemon.start_line();
  EXPECT_NE(line.find("gpubrokerd " + std::string(ClientVersion())), std::string::npos) << line;
  EXPECT_NE(line.find("backend host"), std::string::npos) << line;
  EXPECT_NE(line.find("host \"host memory (memfd)\" 256 MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("sockets " + daemon.socket_dir()), std::string::npos) << line;
  EXPECT_NE(line.find("metrics 127.0.0.1:"), std::string::npos) << line;
  struct stat st {};
  ASSERT_EQ(::stat((daemon.socket_dir() + "/session.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(::stat((daemon.socket_dir() + "/gpubroker.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(Lifecycle, SigtermReleasesEverythingRemovesSocketsAndExitsZero) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir());
  h.Ok("alloc a 1048576 keep name=held");
  h.Post("open w never.coming wait=30000");  // a waiter that shutdown must end
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(daemon.Stop(), 0);
  const std::string reply = h.Reply(5s);
  EXPECT_EQ(reply.rfind("err UNAVAILABLE", 0), 0u) << reply;
  EXPECT_EQ(h.Send("status").rfind("err UNAVAILABLE", 0), 0u);
  EXPECT_FALSE(Exists(daemon.socket_dir() + "/session.sock"));
  EXPECT_FALSE(Exists(daemon.socket_dir() + "/gpubroker.sock"));
  EXPECT_FALSE(Exists(daemon.socket_dir() + "/gpubrokerd.lock"));
  EXPECT_NE(daemon.log().find("released 1 MiB at shutdown"), std::string::npos) << daemon.log();
}

TEST(Lifecycle, StaleSocketsFromAKilledDaemonDoNotBlockANewOne) {
  TempDir dir;
  std::vector<std::string> args = {"--socket-dir", dir.path(), "--metrics-address", "",
                                   "--backend",    "host"};
  {
    args.insert(args.begin(), BinDir() + "/gpubrokerd");
    Process first = Process::Spawn(args, dir.path() + "/log");
    ASSERT_TRUE(first.ReadLine(10s));
    first.Signal(SIGKILL);
    ASSERT_TRUE(Exists(dir.path() + "/session.sock")) << "kill -9 should leave the files behind";
    Process second = Process::Spawn(args, dir.path() + "/log");
    auto line = second.ReadLine(10s);
    ASSERT_TRUE(line) << "the second daemon did not start";
    auto client = Client::connect(dir.path());
    EXPECT_EQ(client.status().sessions, 1u);
    ::kill(second.pid(), SIGTERM);
    EXPECT_EQ(second.Wait(10s), 0);
  }
}

TEST(Lifecycle, ALiveDaemonOnTheSameDirectoryIsNotDisplaced) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  std::string out;
  const int code = RunDaemon({"--socket-dir", daemon.socket_dir(), "--metrics-address", ""}, &out,
                             daemon.socket_dir());
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("another gpubrokerd (pid " + std::to_string(daemon.pid()) + ")"),
            std::string::npos)
      << out;
  // The first one still serves.
  Helper h(daemon.socket_dir());
  h.Ok("alloc a 4096");
}

TEST(Lifecycle, InvalidOptionsFailAtStartWithAClearMessage) {
  TempDir dir;
  std::string out;
  EXPECT_EQ(RunDaemon({"--backend", "quantum"}, &out, dir.path()), 2);
  EXPECT_NE(out.find("unknown backend 'quantum'"), std::string::npos) << out;
  EXPECT_EQ(RunDaemon({"--host-pool-bytes", "plenty"}, &out, dir.path()), 2);
  EXPECT_NE(out.find("--host-pool-bytes"), std::string::npos) << out;
  EXPECT_EQ(RunDaemon({"--frobnicate"}, &out, dir.path()), 2);
  EXPECT_EQ(RunDaemon({"--config", dir.path() + "/missing.yaml"}, &out, dir.path()), 2);
  std::ofstream(dir.path() + "/bad.yaml")
      << "tenants:\n  - name: a\n    uids: [1]\n  - name: b\n    uids: [1]\n";
  EXPECT_EQ(RunDaemon({"--config", dir.path() + "/bad.yaml", "--socket-dir", dir.path() + "/s"},
                      &out, dir.path()),
            1);
  EXPECT_NE(out.find("uid 1"), std::string::npos) << out;
  EXPECT_EQ(RunDaemon({"--socket-dir", dir.path() + "/s", "--metrics-address", "256.1.1.1:1"}, &out,
                      dir.path()),
            1);
  EXPECT_NE(out.find("cannot serve metrics"), std::string::npos) << out;
  {
    // A port another process holds (a second daemon on the default address):
    // the message says how to pick another.
    const int held = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(held, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(at);
    ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
    ASSERT_EQ(::listen(held, 1), 0);
    ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&at), &len), 0);
    const std::string address = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));
    EXPECT_EQ(RunDaemon({"--socket-dir", dir.path() + "/s", "--metrics-address", address}, &out,
                        dir.path()),
              1);
    EXPECT_NE(out.find("cannot serve metrics on " + address), std::string::npos) << out;
    EXPECT_NE(out.find("--metrics-address HOST:PORT picks another"), std::string::npos) << out;
    ::close(held);
  }
  EXPECT_EQ(RunDaemon({"--help"}, &out, dir.path()), 0);
  EXPECT_NE(out.find("--socket-dir"), std::string::npos);
}

// The daemon keeps nothing its parent left open: a descriptor inherited
// across exec (a shell's redirection here) is closed at start, and the log
// says so.
TEST(Lifecycle, DescriptorsInheritedFromTheParentAreClosed) {
  TempDir dir;
  const std::string path = dir.path() + "/left-open";
  std::ofstream(path) << "held";
  Daemon daemon({}, "", {}, {"/bin/sh", "-c", "exec 7<\"$0\" && exec \"$@\"", path});
  ASSERT_TRUE(daemon.ok());
  int looked = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(daemon.pid()) + "/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec) continue;  // closed meanwhile
    ++looked;
    EXPECT_NE(target.string(), path) << "descriptor " << entry.path().filename() << " still open";
  }
  EXPECT_GT(looked, 3) << "the daemon's own descriptors were read";
  EXPECT_NE(daemon.log().find("descriptors inherited from the process that started gpubrokerd"),
            std::string::npos)
      << daemon.log();
}

TEST(Lifecycle, HealthIsServingWhileUp) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto channel = grpc::CreateChannel("unix:" + daemon.socket_dir() + "/gpubroker.sock",
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "gpubroker.v1.Broker"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

TEST(Lifecycle, MetricsHaveEveryFamily) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir());
  h.Ok("alloc a 8192 name=m");
  h.Ok("seal a");
  h.Ok("open b m");
  // A call's duration is observed after its answer has gone out, so the
  // helper can hold the answer before the daemon has counted the call.
  ASSERT_TRUE(Eventually([&] {
    return daemon.Metric("gpubroker_session_call_duration_seconds_count{call=\"open\"}") == 1;
  }));
  const std::string body = HttpGet(daemon.metrics_address(), "/metrics");
  for (const char* family : {"gpubroker_build_info{version=",
                             "gpubroker_sessions ",
                             "gpubroker_buffers{device=\"host\",tenant=",
                             "gpubroker_allocated_bytes{device=\"host\",tenant=",
                             "gpubroker_pool_capacity_bytes{device=\"host\"} 268435456",
                             "gpubroker_pool_reserved_bytes{device=\"host\"}",
                             "gpubroker_allocations_total{result=\"ok\"} 1",
                             "gpubroker_allocations_total{result=\"quota\"} 0",
                             "gpubroker_allocations_total{result=\"out_of_memory\"} 0",
                             "gpubroker_allocations_total{result=\"invalid\"} 0",
                             "gpubroker_allocation_duration_seconds_bucket",
                             "gpubroker_opens_total{result=\"ok\"} 1",
                             "gpubroker_session_call_duration_seconds_count{call=\"publish\"} 1",
                             "gpubroker_session_call_duration_seconds_count{call=\"open\"} 1",
                             "gpubroker_session_call_duration_seconds_count{call=\"seal\"} 0",
                             "gpubroker_reclaimed_bytes_total{cause=\"died\"}",
                             "gpubroker_sessions_ended_total{end=\"closed\"}",
                             "gpubroker_sessions_ended_total{end=\"died\"}",
                             "gpubroker_session_aheads_total ",
                             "gpubroker_client_allocations_total{path=\"client\"} 1",
                             "gpubroker_client_allocations_total{path=\"session\"} 0",
                             "gpubroker_client_maps_total{path=\"mapped\"}",
                             "gpubroker_tenant_range_bytes{tenant=",
                             "gpubroker_client_in_use_bytes{tenant="}) {
    EXPECT_NE(body.find(family), std::string::npos) << family << "\n" << body;
  }
  EXPECT_EQ(body.find("pid="), std::string::npos);
  EXPECT_EQ(daemon.Metric("gpubroker_sessions"), 1);
}

// Waiting awake is bounded (common/spin.h): the daemon's loop polls for a
// moment after serving frames, then sleeps; an idle daemon uses no CPU.
TEST(Lifecycle, AnIdleDaemonSleepsAfterItsBusyPoll) {
  Daemon daemon({"--busy-poll-us", "5000"});
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir());
  for (int i = 0; i < 20; ++i) AllocSealRelease(h, "idle" + std::to_string(i));
  std::this_thread::sleep_for(100ms);
  const double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(1s);
  const double used = CpuSeconds(daemon.pid()) - before;
  ASSERT_GE(before, 0);
  EXPECT_LT(used, 0.25) << "the daemon kept polling with nobody calling";
}

// Each turn of session.sock's thread that serves frames says whether they
// found it asleep (a wake-up paid) or polling: what tells an operator whether
// a longer --busy-poll-us would take the wake-up off the calls.
TEST(Lifecycle, TurnsSayWhetherFramesFoundTheThreadAsleepOrPolling) {
  const std::string asleep = kTurnsAsleep;
  const std::string polling = kTurnsPolling;
  auto hand_over_ten = [](const Daemon& daemon) {
    Helper h(daemon.socket_dir());
    // Each seal is a Publish, answered: one turn at least.
    for (int i = 0; i < 10; ++i) AllocSealRelease(h, "turn" + std::to_string(i));
  };
  {
    Daemon daemon({"--busy-poll-us", "0"});  // never polls: every frame wakes it
    ASSERT_TRUE(daemon.ok());
    hand_over_ten(daemon);
    EXPECT_TRUE(Eventually([&] { return daemon.Metric(asleep) >= 10; }));
    EXPECT_EQ(daemon.Metric(polling), 0);
  }
  {
    // Polls half a second after each frame: after the session's first frame,
    // the calls of the loop find it polling.
    Daemon daemon({"--busy-poll-us", "500000"});
    ASSERT_TRUE(daemon.ok());
    hand_over_ten(daemon);
    EXPECT_TRUE(Eventually([&] { return daemon.Metric(polling) >= 10; }));
    EXPECT_GT(daemon.Metric(polling), daemon.Metric(asleep));
  }
}

// The busy poll follows a pipeline's rhythm (daemon/session/busy_poll.h):
// calls a few milliseconds apart, each of which would find a fixed 50 µs
// poll over and the thread asleep, grow the window until they find it
// polling; when they stop, the thread still goes to sleep; and lone calls
// after it (nothing that needs the window) let it fade back.
TEST(Lifecycle, TheBusyPollGrowsToAPipelinesRhythmAndSleepsWhenItStops) {
  const std::string asleep = kTurnsAsleep;
  const std::string polling = kTurnsPolling;
  const std::string window = kBusyPollWindow;
  const std::string polled = "gpubroker_session_busy_poll_seconds_total";
  auto step = [](Helper& h, int i) { AllocSealRelease(h, "step" + std::to_string(i)); };
  auto every_5ms = [&](Helper& h, int steps) {
    for (int i = 0; i < steps; ++i) {
      step(h, i);
      std::this_thread::sleep_for(5ms);
    }
  };
  double fixed_asleep = 0;
  {
    Daemon daemon({"--busy-poll-us", "50", "--busy-poll-max-us", "0"});
    ASSERT_TRUE(daemon.ok());
    Helper h(daemon.socket_dir());
    every_5ms(h, 30);
    ASSERT_TRUE(Eventually([&] { return daemon.Metric(asleep) >= 30; }));
    fixed_asleep = daemon.Metric(asleep);
    EXPECT_DOUBLE_EQ(daemon.Metric(window), 50e-6) << "a window with no room stays put";
  }
  Daemon daemon({"--busy-poll-us", "50", "--busy-poll-max-us", "50000"});
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir());
  every_5ms(h, 30);
  ASSERT_TRUE(Eventually([&] { return daemon.Metric(polling) >= 30; }));
  EXPECT_GE(daemon.Metric(window), 5e-3) << "the window covers the 5 ms steps";
  EXPECT_LT(daemon.Metric(asleep), fixed_asleep / 2)
      << "most steps found the thread polling where a fixed window found it asleep";
  EXPECT_GT(daemon.Metric(polling), daemon.Metric(asleep));
  EXPECT_GT(daemon.Metric(polled), 0) << "the poll's CPU is counted";

  // The steps stopped: the thread polls out its window (50 ms at most) and sleeps.
  std::this_thread::sleep_for(200ms);
  const double grown = daemon.Metric(window);
  const double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(1s);
  ASSERT_GE(before, 0);
  EXPECT_LT(CpuSeconds(daemon.pid()) - before, 0.25)
      << "the daemon kept polling with nobody calling";

  // Lone calls, each after a quiet past the cap (every frame of them: a
  // step's own gaps, slow on a loaded machine, would be gaps within the
  // cap): the window that the 5 ms steps needed buys nothing any more, and
  // fades (no lower than --busy-poll-us).
  for (int i = 0; i < 5; ++i) {
    for (const std::string& call : {"alloc a 8192 name=lone" + std::to_string(i),
                                    std::string("seal a"), std::string("release a")}) {
      std::this_thread::sleep_for(60ms);
      h.Ok(call);
    }
  }
  EXPECT_TRUE(Eventually([&] { return daemon.Metric(window) <= grown / 2 + 1e-9; }))
      << "window " << daemon.Metric(window) << " s, was " << grown << " s";
  EXPECT_GE(daemon.Metric(window), 50e-6);
}

// Gaps on both sides of the busy poll's cap, as between iterations of work
// that takes about the cap between its calls: one under it and one over it
// in turn. The one over it costs a wake-up whatever the window; the one under
// it finds the thread polling, because the quiet past the cap keeps the
// window that the gap under it needed (busy_poll.h), where halving it there
// made every gap under the cap miss too.
TEST(Lifecycle, GapsThatStraddleTheBusyPollsCapFindTheThreadPollingUnderIt) {
  const std::string asleep = kTurnsAsleep;
  const std::string window = kBusyPollWindow;
  Daemon daemon({"--busy-poll-us", "50", "--busy-poll-max-us", "20000"});
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir());
  auto step = [&h](int i) { AllocSealRelease(h, "straddle" + std::to_string(i)); };
  constexpr int kRounds = 12;
  step(0);
  std::this_thread::sleep_for(12ms);  // under the cap: grows the window to cover it
  step(1);
  const double before = daemon.Metric(asleep);
  for (int i = 0; i < kRounds; ++i) {
    std::this_thread::sleep_for(40ms);  // over the cap: the thread sleeps
    step(2 * i + 2);
    std::this_thread::sleep_for(12ms);  // under it
    step(2 * i + 3);
  }
  // One wake-up a round, after the gap over the cap; the halving rule made
  // it two (the gap under the cap missed each time).
  const double woken = daemon.Metric(asleep) - before;
  EXPECT_LE(woken, kRounds + 3) << "the gaps under the cap found the thread asleep";
  EXPECT_GE(woken, kRounds / 2) << "the gaps over the cap should have found it asleep";
  EXPECT_GE(daemon.Metric(window), 12e-3) << "the window still covers the gap under the cap";
}

// Neither side waiting awake changes what is answered, only how soon.
TEST(Lifecycle, CallsAreAnsweredWithoutWaitingAwake) {
  Daemon daemon({"--busy-poll-us", "0"});
  ASSERT_TRUE(daemon.ok());
  Helper a({"/usr/bin/env", "GPUBROKER_SPIN_US=0", BinDir() + "/gpubroker-test-helper",
            "--socket-dir", daemon.socket_dir()});
  Helper b({"/usr/bin/env", "GPUBROKER_SPIN_US=0", BinDir() + "/gpubroker-test-helper",
            "--socket-dir", daemon.socket_dir()});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 20; ++i) {
    const std::string name = "asleep" + std::to_string(i);
    a.Ok("alloc x 4096 name=" + name);
    a.Ok("seal x");
    b.Ok("open y " + name);
    b.Ok("release y");
    a.Ok("release x");
  }
  EXPECT_EQ(daemon.Metric("gpubroker_session_call_duration_seconds_count{call=\"publish\"}"), 20);
  EXPECT_EQ(daemon.Metric("gpubroker_session_call_duration_seconds_count{call=\"open\"}"), 20);
}

}  // namespace
}  // namespace gpubroker::testing
