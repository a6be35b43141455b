// gpubrokerd as a service: what it tells systemd (NOTIFY_SOCKET), SIGHUP
// reloads of tenants and quotas with sessions kept, refused bad files,
// --check-config, and priorities on a journal stream.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::string TeamConfig(const std::string& quota, uid_t uid = ::getuid()) {
  return "tenants:\n  - name: team\n    uids: [" + std::to_string(uid) + "]\n    quota: " + quota +
         "\n";
}

TEST(Service, TellsTheServiceManagerReadyWatchdogReloadingAndStopping) {
  NotifySocket notify;
  Daemon daemon({}, TeamConfig("64MiB"),
                {"NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=200000"});
  ASSERT_TRUE(daemon.ok());

  const std::string ready = notify.WaitFor("READY=1");
  ASSERT_NE(ready, "") << notify.Seen();
  EXPECT_NE(ready.find("STATUS="), std::string::npos) << ready;
  // READY means both sockets serve.
  struct stat st {};
  EXPECT_EQ(::stat((daemon.socket_dir() + "/session.sock").c_str(), &st), 0);
  EXPECT_EQ(::stat((daemon.socket_dir() + "/gpubroker.sock").c_str(), &st), 0);
  Helper client(daemon.socket_dir());
  ASSERT_TRUE(client.ok());

  // WATCHDOG_USEC=200ms: pings come at about half that, again and again.
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(notify.WaitFor("WATCHDOG=1", 2s), "") << "ping " << i << ": " << notify.Seen();
  }
  // The status line follows the books.
  client.Ok("alloc a 1048576 publish");  // a buffer of the books (a client-made one, published)
  EXPECT_NE(notify.WaitFor("1 buffers", 10s), "") << notify.Seen();

  daemon.Signal(SIGHUP);
  const std::string reloading = notify.WaitFor("RELOADING=1");
  ASSERT_NE(reloading, "") << notify.Seen();
  EXPECT_NE(reloading.find("MONOTONIC_USEC="), std::string::npos) << reloading;
  EXPECT_NE(notify.WaitFor("READY=1"), "") << notify.Seen();

  client.Exit();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.log();
  EXPECT_NE(notify.WaitFor("STOPPING=1", 2s), "") << notify.Seen();
}

TEST(Service, SighupReloadsQuotasAndTenantsWithoutDroppingSessions) {
  Daemon daemon({}, TeamConfig("1MiB"));
  ASSERT_TRUE(daemon.ok());
  Helper before(daemon.socket_dir());
  ASSERT_TRUE(before.ok());
  EXPECT_NE(before.Ok("session").find(" team"), std::string::npos);
  before.Ok("alloc small 524288 name=reload.small");
  before.Ok("fill small 7");
  before.Ok("seal small");
  EXPECT_EQ(before.Send("alloc big 1048576").rfind("err RESOURCE_EXHAUSTED", 0), 0u);

  // A larger quota, and this uid moves to another tenant for new sessions.
  WriteFile(daemon.config_path(),
            "tenants:\n  - name: team\n    quota: 8MiB\n"
            "  - name: moved\n    uids: [" +
                std::to_string(::getuid()) + "]\n    quota: 2MiB\n");
  daemon.Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return daemon.log().find("reloaded") != std::string::npos; }))
      << daemon.log();
  EXPECT_NE(daemon.log().find("tenant 'team' quota 1 MiB -> 8 MiB"), std::string::npos)
      << daemon.log();

  // The session stayed, as tenant "team", with its buffer, under the new quota.
  EXPECT_NE(before.Ok("session").find(" team"), std::string::npos);
  before.Ok("check small 7");
  before.Ok("alloc big 4194304");
  // A new session of the same uid is the new tenant, with its quota.
  Helper after(daemon.socket_dir());
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after.Ok("session").find(" moved"), std::string::npos);
  EXPECT_EQ(after.Send("alloc x 4194304").rfind("err RESOURCE_EXHAUSTED", 0), 0u);
  const std::string status = after.Ok("status");
  EXPECT_NE(status.find("\"moved\""), std::string::npos) << status;

  // No session was dropped: the daemon counts both (nlohmann's compact dump).
  EXPECT_NE(status.find("\"sessions\":2,"), std::string::npos) << status;
  EXPECT_EQ(daemon.log().find("ERROR"), std::string::npos) << daemon.log();
}

TEST(Service, SighupRefusesABadFileAndKeepsTheRunningConfiguration) {
  Daemon daemon({}, TeamConfig("1MiB"));
  ASSERT_TRUE(daemon.ok());
  Helper client(daemon.socket_dir());
  ASSERT_TRUE(client.ok());

  // Each: a file the parser refuses, and ones that only the daemon's own
  // checks refuse (a uid in two tenants, a reserved tenant name).
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tenants: [unclosed\n", "not valid YAML"},
      {"tenants:\n  - name: a\n    uids: [5]\n  - name: b\n    uids: [5]\n",
       "uid 5 is in tenants 'a' and 'b'"},
      // A name that would absorb a user: refused on reload as at start.
      {"tenants:\n  - name: uid-77\n    uids: [78]\n", "'uid-77'"},
  };
  int refusals = 0;
  for (const auto& [text, why] : bad) {
    WriteFile(daemon.config_path(), text);
    daemon.Signal(SIGHUP);
    ++refusals;
    ASSERT_TRUE(Eventually([&] { return daemon.LogCount("reload refused") == refusals; }))
        << daemon.log();
    EXPECT_NE(daemon.log().find(why), std::string::npos) << daemon.log();
    // Still the old quota, still serving the same session.
    EXPECT_EQ(client.Send("alloc big 2097152").rfind("err RESOURCE_EXHAUSTED", 0), 0u);
    EXPECT_NE(client.Ok("session").find(" team"), std::string::npos);
  }
  // A good file after the bad ones is taken.
  WriteFile(daemon.config_path(), TeamConfig("4MiB"));
  daemon.Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return daemon.log().find("reloaded") != std::string::npos; }));
  client.Ok("alloc big 2097152");
}

TEST(Service, ReloadSaysWhichChangesWaitForARestart) {
  Daemon daemon({}, TeamConfig("1MiB"));
  ASSERT_TRUE(daemon.ok());
  WriteFile(daemon.config_path(), TeamConfig("1MiB") + "vmm_threshold: 1GiB\nlog_level: debug\n");
  daemon.Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return daemon.log().find("reloaded") != std::string::npos; }))
      << daemon.log();
  const std::string log = daemon.log();
  EXPECT_NE(log.find("log level info -> debug"), std::string::npos) << log;
  EXPECT_NE(log.find("--vmm-threshold changed; that takes effect at the next restart"),
            std::string::npos)
      << log;
}

// Runs gpubrokerd --check-config; returns the exit code and what it printed.
int CheckConfig(const std::string& yaml, std::string* output) {
  TempDir dir;
  const std::string config = dir.path() + "/gpubroker.yaml";
  const std::string out = dir.path() + "/out";
  WriteFile(config, yaml);
  Process p = Process::Spawn({BinDir() + "/gpubrokerd", "--check-config", config}, out);
  std::string line;
  while (auto l = p.ReadLine(10s)) line += *l + "\n";
  const int code = p.Wait(10s);
  std::ifstream err(out);
  std::stringstream s;
  s << line << err.rdbuf();
  *output = s.str();
  return code;
}

TEST(Service, CheckConfigReportsWhatTheDaemonWouldRefuse) {
  std::string out;
  EXPECT_EQ(CheckConfig(TeamConfig("1MiB") + "default_quota: 2GiB\n", &out), 0) << out;
  EXPECT_NE(out.find("ok: 1 tenants, default quota 2 GiB"), std::string::npos) << out;

  EXPECT_NE(CheckConfig("tenants:\n  - name: a\n  - name: a\n", &out), 0) << out;
  EXPECT_NE(out.find("tenant 'a' is declared twice"), std::string::npos) << out;
  EXPECT_NE(CheckConfig("socket_group: no-such-group-here\n", &out), 0) << out;
  EXPECT_NE(out.find("unknown group 'no-such-group-here'"), std::string::npos) << out;
  EXPECT_NE(CheckConfig("bogus_key: 1\n", &out), 0) << out;
  EXPECT_NE(out.find("unknown key 'bogus_key'"), std::string::npos) << out;
}

TEST(Service, LinesOnAJournalStreamCarrySyslogPriorities) {
  TempDir dir;
  const std::string log_path = dir.path() + "/journal-stream";
  WriteFile(log_path, "");
  struct stat st {};
  ASSERT_EQ(::stat(log_path.c_str(), &st), 0);
  const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string config = dir.path() + "/gpubroker.yaml";
  WriteFile(config, TeamConfig("1MiB"));
  Process p = Process::Spawn({BinDir() + "/gpubrokerd", "--socket-dir", dir.path() + "/sock",
                              "--backend", "host", "--metrics-address", "", "--config", config},
                             log_path, {"JOURNAL_STREAM=" + stream});
  ASSERT_TRUE(p.ReadLine(20s).has_value());
  WriteFile(config, "tenants: [unclosed\n");
  ::kill(p.pid(), SIGHUP);
  auto journal = [&] {
    std::ifstream in(log_path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  ASSERT_TRUE(Eventually([&] { return journal().find("reload refused") != std::string::npos; }))
      << journal();
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.Wait(20s), 0);
  const std::string text = journal();
  EXPECT_NE(text.find("<6>received SIGHUP"), std::string::npos) << text;
  EXPECT_NE(text.find("<3>reload refused"), std::string::npos) << text;
  // Every line has its priority, and no timestamp of ours (journald adds its own).
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    ASSERT_GE(line.size(), 3u) << text;
    EXPECT_EQ(line[0], '<') << line;
    EXPECT_EQ(line[2], '>') << line;
    EXPECT_FALSE(line.size() > 8 && std::isdigit(line[3]) && line[7] == '-') << line;
  }
  EXPECT_EQ(text.find(" info "), std::string::npos) << text;
}

// Kubernetes' grpc probes reach a TCP port: --health-address serves
// grpc.health.v1 there, and nothing else of the broker.
TEST(Service, HealthAddressAnswersHealthChecksOnlyOverTcp) {
  Daemon daemon({"--health-address", "127.0.0.1:0"});
  ASSERT_TRUE(daemon.ok());
  const std::string line = daemon.start_line();
  const auto at = line.find("health 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at + 7, line.find(',', at) - at - 7);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "gpubroker.v1.Broker"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status s = health->Check(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  // The broker itself is not on the network.
  auto broker = v1::Broker::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::StatusRequest req;
  v1::StatusResponse resp;
  EXPECT_EQ(broker->Status(&ctx, req, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(daemon.log().find("duplicate registration"), std::string::npos) << daemon.log();
}

}  // namespace
}  // namespace gpubroker::testing
