// The command-line tool as scripts and operators use it: help for every
// command, exit statuses that tell "no daemon" from "refused", errors as JSON,
// wait and top against a real daemon and real client processes.
#include <unistd.h>

#include <map>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kRefused = 1;
constexpr int kUsage = 2;
constexpr int kNoDaemon = 3;
constexpr int kTimedOut = 4;

std::string Cli() { return BinDir() + "/gpubroker"; }

CommandResult RunCli(const std::string& socket_dir, std::vector<std::string> args) {
  args.insert(args.begin(), {Cli(), "--socket-dir", socket_dir});
  return RunCommand(args);
}

// The one error object that --json prints on stderr.
nlohmann::json ErrorOf(const CommandResult& r) {
  auto j = nlohmann::json::parse(r.err, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "stderr is not JSON: " << r.err;
  if (j.is_discarded() || !j.contains("error")) return nlohmann::json::object();
  EXPECT_EQ(j["error"]["exit_status"], r.exit_code);
  return j["error"];
}

TEST(Cli, EveryCommandHasItsOwnHelp) {
  const std::map<std::string, std::vector<std::string>> commands = {
      {"status", {}},
      {"ls", {}},
      {"alloc", {"SIZE", "--name", "--keep", "--seal", "--device", "--ttl", "--share-with"}},
      {"free", {"NAME|ID"}},
      {"wait", {"NAME|ID", "--timeout"}},
      {"top", {"--interval", "--count", "--buffers"}}};
  for (const auto& [command, options] : commands) {
    const CommandResult r = RunCommand({Cli(), command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.output;
    EXPECT_NE(r.out.find("Usage: gpubroker " + command), std::string::npos) << r.out;
    for (const auto& option : options) {
      EXPECT_NE(r.out.find(option), std::string::npos) << command << " --help lacks " << option;
    }
    EXPECT_NE(r.out.find("Exit status"), std::string::npos) << r.out;
  }
  const CommandResult top = RunCommand({Cli(), "--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const auto& [command, options] : commands) {
    EXPECT_NE(top.out.find(command), std::string::npos) << command;
  }
}

TEST(Cli, NoDaemonRefusedAndBadUsageHaveExitStatusesOfTheirOwn) {
  TempDir empty;
  const CommandResult none = RunCli(empty.path(), {"status"});
  EXPECT_EQ(none.exit_code, kNoDaemon) << none.output;
  EXPECT_NE(none.err.find(empty.path()), std::string::npos) << "say where it looked";

  Daemon daemon({"--default-quota", "8MiB"});
  ASSERT_TRUE(daemon.ok());
  const CommandResult refused = RunCli(daemon.socket_dir(), {"alloc", "64MiB"});
  EXPECT_EQ(refused.exit_code, kRefused) << refused.output;
  EXPECT_NE(refused.err.find("quota"), std::string::npos) << refused.err;
  const CommandResult missing = RunCli(daemon.socket_dir(), {"free", "no.such.buffer"});
  EXPECT_EQ(missing.exit_code, kRefused) << missing.output;

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"bogus"},
                                              {"alloc"},
                                              {"alloc", "12 parsecs"},
                                              {"alloc", "1MiB", "--bogus"},
                                              {"top", "--interval", "soon"},
                                              {}}) {
    const CommandResult r = RunCli(daemon.socket_dir(), bad);
    EXPECT_EQ(r.exit_code, kUsage) << ::testing::PrintToString(bad) << r.output;
    EXPECT_NE(r.err.find("gpubroker: "), std::string::npos) << r.err;
  }
}

TEST(Cli, ErrorsAreJsonUnderJson) {
  TempDir empty;
  const CommandResult none = RunCli(empty.path(), {"--json", "ls"});
  EXPECT_EQ(none.exit_code, kNoDaemon);
  EXPECT_EQ(none.out, "") << "stdout holds results only";
  EXPECT_EQ(ErrorOf(none)["code"], "UNAVAILABLE");

  Daemon daemon({"--default-quota", "8MiB"});
  ASSERT_TRUE(daemon.ok());
  const CommandResult quota = RunCli(daemon.socket_dir(), {"alloc", "64MiB", "--json"});
  EXPECT_EQ(quota.exit_code, kRefused);
  const auto e = ErrorOf(quota);
  EXPECT_EQ(e["code"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(e["reason"], "quota");
  EXPECT_NE(e["message"].get<std::string>().find("8388608"), std::string::npos) << e.dump();

  const CommandResult usage = RunCli(daemon.socket_dir(), {"--json", "alloc"});
  EXPECT_EQ(usage.exit_code, kUsage);
  EXPECT_EQ(ErrorOf(usage)["code"], "USAGE");
  const CommandResult not_found = RunCli(daemon.socket_dir(), {"--json", "free", "gone"});
  EXPECT_EQ(ErrorOf(not_found)["code"], "NOT_FOUND");
  EXPECT_FALSE(ErrorOf(not_found).contains("reason"));
}

TEST(Cli, WaitReturnsWhenTheBufferIsSealedAndTimesOutOtherwise) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Process waiter = Process::Spawn({Cli(), "--socket-dir", daemon.socket_dir(), "--json", "wait",
                                   "late.frame", "--timeout", "20s"},
                                  daemon.socket_dir() + "/wait.err");
  waiter.CloseStdin();
  EXPECT_FALSE(waiter.ReadLine(300ms)) << "wait returned before the buffer existed";
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc x 65536 name=late.frame");
  EXPECT_FALSE(waiter.ReadLine(300ms)) << "wait returned before the seal";
  producer.Ok("fill x 3");
  producer.Ok("seal x");
  const auto line = waiter.ReadLine(10s);
  ASSERT_TRUE(line);
  const auto info = nlohmann::json::parse(*line);
  EXPECT_EQ(info["name"], "late.frame");
  EXPECT_EQ(info["state"], "sealed");
  EXPECT_EQ(waiter.Wait(10s), 0);
  // Its lease went with it: the producer's buffer is freed at once.
  const std::string buffers =
      "gpubroker_buffers{device=\"host\",tenant=\"uid-" + std::to_string(::geteuid()) + "\"}";
  EXPECT_EQ(daemon.Metric(buffers), 1);
  producer.Ok("release x");
  EXPECT_TRUE(Eventually([&] { return daemon.Metric(buffers) == 0; }));

  const auto start = std::chrono::steady_clock::now();
  const CommandResult late =
      RunCli(daemon.socket_dir(), {"wait", "never.there", "--timeout", "300ms"});
  EXPECT_EQ(late.exit_code, kTimedOut) << late.output;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_NE(late.err.find("never.there"), std::string::npos) << late.err;
  // An id names a buffer that was made already: one that does not exist is
  // not waited for.
  EXPECT_EQ(RunCli(daemon.socket_dir(), {"wait", "123456789", "--timeout", "5s"}).exit_code,
            kRefused);
}

TEST(Cli, AllocSealThenWaitFindsItAtOnce) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  ASSERT_EQ(RunCli(daemon.socket_dir(), {"alloc", "1MiB", "--name", "ready", "--keep", "--seal"})
                .exit_code,
            0);
  const CommandResult r = RunCli(daemon.socket_dir(), {"wait", "ready", "--timeout", "1s"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.out.find("sealed"), std::string::npos) << r.out;
}

TEST(Cli, TopShowsDevicesTenantsAndTheLargestBuffersFirst) {
  Daemon daemon({"--default-quota", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Helper h(daemon.socket_dir(), -1, /*suballocate=*/false);  // the daemon's buffers, by size
  h.Ok("alloc a 1048576 name=small.one");
  h.Ok("alloc b 8388608 name=big.one");
  h.Ok("alloc c 2097152 name=middle.one");
  const CommandResult r =
      RunCli(daemon.socket_dir(), {"top", "--count", "2", "--interval", "100ms", "--buffers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Two frames, not on a terminal: one after the other, no escape codes.
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  const size_t first = r.out.find("gpubrokerd ");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpubrokerd ", first + 1), std::string::npos) << "one frame only";
  EXPECT_NE(r.out.find("0 host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64 MiB"), std::string::npos) << "the quota\n" << r.out;
  EXPECT_NE(r.out.find("LARGEST BUFFERS (2 of 3 visible)"), std::string::npos) << r.out;
  const size_t big = r.out.find("big.one");
  const size_t middle = r.out.find("middle.one");
  ASSERT_NE(big, std::string::npos);
  ASSERT_NE(middle, std::string::npos);
  EXPECT_LT(big, middle) << "largest first";
  EXPECT_GT(r.out.find("small.one"), r.out.size()) << "only the largest two are shown";

  const CommandResult json =
      RunCli(daemon.socket_dir(), {"--json", "top", "--count", "2", "--interval", "50ms"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  std::stringstream lines(json.out);
  std::string line;
  int frames = 0;
  while (std::getline(lines, line)) {
    const auto frame = nlohmann::json::parse(line);
    EXPECT_EQ(frame["status"]["devices"][0]["used_bytes"], 11 << 20);
    EXPECT_EQ(frame["buffers"].size(), 3u);
    ++frames;
  }
  EXPECT_EQ(frames, 2);
}

TEST(Cli, TopWaitsForADaemonThatIsGoneAndSaysSo) {
  TempDir empty;
  const CommandResult r = RunCli(empty.path(), {"top", "--count", "2", "--interval", "50ms"});
  EXPECT_EQ(r.exit_code, kNoDaemon);
  EXPECT_NE(r.out.find("waiting for gpubrokerd"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gpubroker::testing
