// /metrics as Prometheus, its tools and its client libraries read it, from a
// real daemon under a real load.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
constexpr double kMiB = 1 << 20;

// Allocations that succeed and that are refused, opens, a client that dies
// holding memory and one that leaves cleanly: every family gets samples.
void Load(const Daemon& daemon) {
  Helper a(daemon.socket_dir());
  a.Ok("alloc x 1048576 name=load.x");
  a.Ok("seal x");
  EXPECT_EQ(a.Send("alloc big 134217728").rfind("err RESOURCE_EXHAUSTED", 0), 0u);
  {
    Helper b(daemon.socket_dir());
    b.Ok("open y load.x");
    b.Ok("alloc z 65536");
    b.Kill9();
  }
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}") == 1; }));
}

std::string Scrape(const Daemon& daemon) {
  const std::string body = HttpGet(daemon.metrics_address(), "/metrics");
  EXPECT_FALSE(body.empty());
  return body;
}

std::string Program(const std::string& name, const std::string& package) {
  const std::string path = FindProgram(name);
  EXPECT_FALSE(path.empty()) << name << " is not installed (Debian package " << package
                             << "; scripts/install-deps.sh installs it)";
  return path;
}

TEST(Metrics, PromtoolFindsNothingToLintOnTheLiveEndpoint) {
  Daemon daemon({"--default-quota", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Load(daemon);
  const std::string promtool = Program("promtool", "prometheus");
  if (promtool.empty()) return;
  const CommandResult r = RunCommand({promtool, "check", "metrics"}, Scrape(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << "promtool's lint findings";
}

TEST(Metrics, PrometheusClientLibraryAcceptsEveryName) {
  Daemon daemon({"--default-quota", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Load(daemon);
  const std::string checker = SourceDir() + "/tests/prometheus/check_exposition.py";
  const CommandResult r = RunCommand({"/usr/bin/python3", checker}, Scrape(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("families accepted"), std::string::npos) << r.output;

  // The pair of names that the daemon used to export, refused by the same check.
  const CommandResult old = RunCommand({"/usr/bin/python3", checker},
                                       "# TYPE gpubroker_sessions gauge\n"
                                       "gpubroker_sessions 1\n"
                                       "# TYPE gpubroker_sessions_total counter\n"
                                       "gpubroker_sessions_total{end=\"closed\"} 1\n");
  EXPECT_EQ(old.exit_code, 1) << old.output;
  EXPECT_NE(old.output.find("gpubroker_sessions"), std::string::npos) << old.output;
}

TEST(Metrics, TheDashboardAndTheAlertsNameOnlyWhatTheDaemonExports) {
  Daemon daemon({"--default-quota", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Load(daemon);
  const std::string promtool = Program("promtool", "prometheus");
  if (promtool.empty()) return;
  const CommandResult r =
      RunCommand({"/usr/bin/python3", SourceDir() + "/tests/prometheus/check_dashboard.py",
                  "--dashboard", SourceDir() + "/deploy/grafana/gpubroker.json", "--rules",
                  SourceDir() + "/deploy/prometheus/gpubroker-rules.yml", "--promtool", promtool},
                 Scrape(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Metrics, TheMonitoringDocDescribesEveryFamilyAndEveryAlert) {
  Daemon daemon({"--default-quota", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Load(daemon);
  Helper holder(daemon.socket_dir());  // a buffer on the books: every family has samples
  holder.Ok("alloc k 4096 name=doc.kept");
  const std::string exposition = Scrape(daemon);
  const std::string checker = SourceDir() + "/tests/prometheus/check_docs.py";
  const std::string rules = SourceDir() + "/deploy/prometheus/gpubroker-rules.yml";
  const std::string doc = SourceDir() + "/docs/monitoring.md";
  const CommandResult r = RunCommand({"/usr/bin/python3", checker, "--doc", doc, "--rules", rules,
                                      "--readme", SourceDir() + "/README.md"},
                                     exposition);
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // The check finds a family without a row, a wrong label and a stray alert.
  std::ifstream in(doc);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto cut = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  };
  cut("| `gpubroker_opens_total` |", "| `gpubroker_opens` |");
  cut("| `gpubroker_buffers` | gauge | `device`, `tenant` |", "| `gpubroker_buffers` | gauge | |");
  cut("### GpubrokerRestarting\n", "### GpubrokerRestartLoop\n");
  const std::string doctored = ::testing::TempDir() + "monitoring-doctored.md";
  std::ofstream(doctored) << text;
  const CommandResult bad =
      RunCommand({"/usr/bin/python3", checker, "--doc", doctored, "--rules", rules}, exposition);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  for (const char* finding : {"gpubroker_opens_total (counter) is exported but has no row",
                              "describes gpubroker_opens, which the daemon does not export",
                              "gpubroker_buffers has labels ['device', 'tenant'], the doc says []",
                              "alert GpubrokerRestarting has no '### GpubrokerRestarting' section",
                              "'### GpubrokerRestartLoop' under '## Alerts' is no rule"}) {
    EXPECT_NE(bad.output.find(finding), std::string::npos) << finding << "\n" << bad.output;
  }
  std::remove(doctored.c_str());
}

TEST(Metrics, AnUnlimitedQuotaHasNoSeriesAndUsageCountsWhatTheQuotaCounts) {
  const std::string config =
      "tenants:\n"
      "  - name: capped\n"
      "    uids: [" +
      std::to_string(::geteuid()) +
      "]\n"
      "    quota: 8MiB\n"
      "  - name: open\n"
      "    uids: [65533]\n";
  Daemon daemon({}, config);
  ASSERT_TRUE(daemon.ok());
  // The daemon's buffers, each charged as it is made (a client's own
  // buffers are charged by the range they lie in).
  Helper h(daemon.socket_dir(), -1, /*suballocate=*/false);
  h.Ok("alloc a 2097152");
  h.Ok("alloc b 1000");  // rounded up: the quota counts reserved bytes
  const auto m = daemon.Metrics();
  EXPECT_EQ(m.at("gpubroker_tenant_quota_bytes{tenant=\"capped\"}"), 8 * kMiB);
  EXPECT_EQ(m.count("gpubroker_tenant_quota_bytes{tenant=\"open\"}"), 0u)
      << "an unlimited quota must not be a number (0 makes usage/quota +Inf)";
  EXPECT_EQ(m.at("gpubroker_tenant_used_bytes{tenant=\"open\"}"), 0);
  EXPECT_EQ(m.at("gpubroker_tenant_sessions{tenant=\"capped\"}"), 1);
  EXPECT_EQ(m.at("gpubroker_tenant_sessions{tenant=\"open\"}"), 0);
  // What the quota is checked against: the buffers' reserved sizes.
  const double used = m.at("gpubroker_tenant_used_bytes{tenant=\"capped\"}");
  EXPECT_EQ(used, m.at("gpubroker_allocated_bytes{device=\"host\",tenant=\"capped\"}"));
  EXPECT_GT(used, 2 * kMiB + 1000);
  // 8 MiB less what is used is what the next allocation may take.
  const auto left = static_cast<uint64_t>(8 * kMiB - used);
  EXPECT_EQ(h.Send("alloc c " + std::to_string(left + 1)).rfind("err RESOURCE_EXHAUSTED", 0), 0u);
  h.Ok("alloc c " + std::to_string(left));
  EXPECT_EQ(daemon.Metric("gpubroker_tenant_used_bytes{tenant=\"capped\"}"), 8 * kMiB);
}

TEST(Metrics, ReclaimedBytesSayWhetherTheOwnerDiedClosedOrTheTtlPassed) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  {
    Helper dies(daemon.socket_dir(), -1, /*suballocate=*/false);
    dies.Ok("alloc a 3145728 name=d keep");
    dies.Ok("alloc b 1048576");
    dies.Kill9();
  }
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"died\"}") > 0; }));
  EXPECT_EQ(daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"died\"}"), 1 * kMiB)
      << "the kept buffer outlives its owner and is not reclaimed";
  {
    Helper keeper(daemon.socket_dir(), -1, /*suballocate=*/false);
    keeper.Ok("alloc t 2097152 name=t keep ttl=300");
    EXPECT_EQ(keeper.Exit(), 0);
  }
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"ttl\"}") > 0; }));
  EXPECT_EQ(daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"ttl\"}"), 2 * kMiB);
  EXPECT_EQ(daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"died\"}"), 1 * kMiB);
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"closed\"}"), 1);
}

// Reads a "Key:   value kB" line of /proc/PID/status.
double StatusField(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1));
  }
  return -1;
}

size_t OpenFds(pid_t pid) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++n;
  }
  return n;
}

TEST(Metrics, ProcessMetricsDescribeTheDaemonProcess) {
  const double before = static_cast<double>(std::time(nullptr));
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  const double after = static_cast<double>(std::time(nullptr));
  const pid_t pid = daemon.pid();

  // Memory read from /proc on both sides of the scrape: the daemon may start
  // a thread meanwhile (a gRPC worker, with its stack and its malloc arena).
  const double rss_before = StatusField(pid, "VmRSS") * 1024;
  const double vsize_before = StatusField(pid, "VmSize") * 1024;
  auto m = daemon.Metrics();
  const double rss_after = StatusField(pid, "VmRSS") * 1024;
  const double vsize_after = StatusField(pid, "VmSize") * 1024;
  EXPECT_GE(m.at("process_start_time_seconds"), before - 1);
  EXPECT_LE(m.at("process_start_time_seconds"), after + 1);
  rlimit nofile{};
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, nullptr, &nofile), 0);
  EXPECT_EQ(m.at("process_max_fds"), static_cast<double>(nofile.rlim_cur));
  EXPECT_GE(m.at("process_resident_memory_bytes"), std::min(rss_before, rss_after) * 0.75);
  EXPECT_LE(m.at("process_resident_memory_bytes"), std::max(rss_before, rss_after) * 1.25);
  EXPECT_GE(m.at("process_virtual_memory_bytes"), std::min(vsize_before, vsize_after) * 0.9);
  EXPECT_LE(m.at("process_virtual_memory_bytes"), std::max(vsize_before, vsize_after) * 1.1);
  EXPECT_GE(m.at("process_threads"), 3);
  rlimit as{};
  ASSERT_EQ(::prlimit(pid, RLIMIT_AS, nullptr, &as), 0);
  if (as.rlim_cur == RLIM_INFINITY) {
    EXPECT_EQ(m.count("process_virtual_memory_max_bytes"), 0u) << "unlimited is not a number";
  } else {
    EXPECT_EQ(m.at("process_virtual_memory_max_bytes"), static_cast<double>(as.rlim_cur));
  }

  // Each session is a connection the daemon holds open.
  const double fds0 = m.at("process_open_fds");
  EXPECT_NEAR(fds0, static_cast<double>(OpenFds(pid)), 2);
  std::vector<std::unique_ptr<Helper>> clients;
  for (int i = 0; i < 8; ++i) {
    // Every allocation a call, so that the work is the daemon's.
    clients.push_back(std::make_unique<Helper>(daemon.socket_dir(), -1, /*suballocate=*/false));
    clients.back()->Ok("alloc a 4096");
  }
  m = daemon.Metrics();
  EXPECT_GE(m.at("process_open_fds") - fds0, 8);
  EXPECT_NEAR(m.at("process_open_fds"), static_cast<double>(OpenFds(pid)), 2);

  // CPU time only grows, and work makes it grow.
  const double cpu0 = m.at("process_cpu_seconds_total");
  for (int i = 0; i < 2000; ++i) clients[i % 8]->Ok("alloc t" + std::to_string(i) + " 4096");
  EXPECT_GT(daemon.Metric("process_cpu_seconds_total"), cpu0);
}

}  // namespace
}  // namespace gpubroker::testing
