// Item 2: descriptor exhaustion. One uid's idle sessions and connections are
// capped, one tenant's buffers and descriptors are capped, the descriptor
// limit is raised to the hard limit, and a daemon that runs out of
// descriptors anyway turns connections away without spinning, then serves on
// both sockets again once the pressure is gone.
#include <sys/resource.h>

#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

#define SKIP_UNLESS_USERS() \
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root and setpriv to run clients as other users"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUBROKER_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GPUBROKER_SANITIZED 1
#endif

double Sum(const std::map<std::string, double>& metrics, const std::string& prefix) {
  double total = 0;
  for (const auto& [series, value] : metrics) {
    if (series.rfind(prefix, 0) == 0) total += value;
  }
  return total;
}

TEST(Descriptors, IdleSessionsOfOneUidAreCappedAndOtherUsersAreServed) {
  SKIP_UNLESS_USERS();
  Daemon daemon({"--max-sessions-per-uid", "32"});
  ASSERT_TRUE(daemon.ok());
  Adversary attacker(daemon.socket_dir(), 60101);
  ASSERT_TRUE(attacker.ok());
  const std::string reply = attacker.Send("sessions 100");
  EXPECT_EQ(Field(reply, "welcomed"), 32) << reply;
  EXPECT_EQ(Field(reply, "refused"), 68) << reply;
  EXPECT_EQ(Fields(reply)["|"].rfind("RESOURCE_EXHAUSTED/limit ", 0), 0u) << reply;
  EXPECT_NE(Fields(reply)["|"].find("max_sessions_per_uid"), std::string::npos) << reply;

  // Another user is served as if nothing happened.
  Helper other(daemon.socket_dir());
  other.Ok("alloc x 4096");
  other.Ok("list");
  EXPECT_EQ(
      daemon.Metric("gpubroker_connections_refused_total{reason=\"uid_limit\",socket=\"session\"}"),
      68);
  EXPECT_GE(daemon.Metric("gpubroker_connections{socket=\"session\"}"), 33);

  // Its own sessions, once closed, make room again.
  EXPECT_EQ(attacker.Send("drop"), "ok");
  EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_sessions") <= 1; }, 5s));
  EXPECT_EQ(Field(attacker.Send("sessions 32"), "welcomed"), 32);
}

TEST(Descriptors, GrpcConnectionsOfOneUidAreCapped) {
  SKIP_UNLESS_USERS();
  Daemon daemon({"--max-grpc-connections-per-uid", "16"});
  ASSERT_TRUE(daemon.ok());
  Adversary attacker(daemon.socket_dir(), 60102);
  ASSERT_TRUE(attacker.ok());
  const std::string reply = attacker.Send("grpc 40");
  EXPECT_EQ(Field(reply, "open"), 16) << reply;
  EXPECT_EQ(Field(reply, "closed"), 24) << reply;
  Helper other(daemon.socket_dir());
  other.Ok("list");  // gRPC
  other.Ok("status");
  EXPECT_EQ(
      daemon.Metric("gpubroker_connections_refused_total{reason=\"uid_limit\",socket=\"grpc\"}"),
      24);
  EXPECT_EQ(attacker.Send("drop"), "ok");
  EXPECT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_connections{socket=\"grpc\"}") <= 1; }, 5s));
  EXPECT_EQ(Field(attacker.Send("grpc 16"), "open"), 16);
}

TEST(Descriptors, OneByteSharedBuffersAreCappedPerTenant) {
  SKIP_UNLESS_USERS();
  Daemon daemon({"--max-descriptors-per-tenant", "50", "--max-buffers-per-tenant", "120"});
  ASSERT_TRUE(daemon.ok());
  Adversary attacker(daemon.socket_dir(), 60103);
  ASSERT_TRUE(attacker.ok());
  const int fds_before = OpenDescriptors(daemon.pid());
  // One memfd each on the host backend: the tenant may hold 50.
  const std::string shared = attacker.Send("alloc 80 1 share=uid-0");
  EXPECT_EQ(Field(shared, "ok"), 50) << shared;
  EXPECT_EQ(Field(shared, "refused"), 30) << shared;
  EXPECT_EQ(Fields(shared)["|"].rfind("RESOURCE_EXHAUSTED/limit ", 0), 0u) << shared;
  EXPECT_NE(Fields(shared)["|"].find("max_descriptors_per_tenant"), std::string::npos) << shared;
  EXPECT_LE(OpenDescriptors(daemon.pid()), fds_before + 50 + 8);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"limit\"}"), 30);

  // Buffers in its arena cost no descriptor, but are capped too.
  const std::string plain = attacker.Send("alloc 100 1");
  EXPECT_EQ(Field(plain, "ok"), 70) << plain;
  EXPECT_NE(Fields(plain)["|"].find("max_buffers_per_tenant"), std::string::npos) << plain;

  // Another tenant shares as before; and the attacker's room comes back as it frees.
  Helper other(daemon.socket_dir());
  other.Ok("alloc s 1 share=uid-60103");
  EXPECT_EQ(attacker.Send("release"), "ok");
  EXPECT_EQ(Field(attacker.Send("alloc 10 1 share=uid-0"), "ok"), 10);
}

TEST(Descriptors, TheSoftLimitIsRaisedToTheHardLimit) {
  Daemon daemon({}, "", {}, {"/usr/bin/prlimit", "--nofile=1024:4096", "--"});
  ASSERT_TRUE(daemon.ok());
  EXPECT_EQ(daemon.Metric("process_max_fds"), 4096);
  std::ifstream limits("/proc/" + std::to_string(daemon.pid()) + "/limits");
  std::string line;
  bool seen = false;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    seen = true;
    EXPECT_NE(line.find("4096                 4096"), std::string::npos) << line;
  }
  EXPECT_TRUE(seen);
  EXPECT_GT(daemon.Metric("process_open_fds"), 0);
}

// The descriptors that nothing charges (a tenant's arena, held by a buffer
// that outlives the tenant's sessions, is one) can still run the daemon out:
// then it must turn connections away through its reserve descriptor and
// pause accepting, not spin on a listener that stays readable, and both
// sockets must serve again once the pressure is gone.
TEST(Descriptors, ExhaustionIsShedWithoutSpinningAndBothSocketsServeAgain) {
  SKIP_UNLESS_USERS();
#ifdef GPUBROKER_SANITIZED
  GTEST_SKIP() << "the sanitizers' runtime needs descriptors of its own (it probes memory "
                  "through a pipe) and reports false errors in a process that has none left";
#endif
  constexpr int kLimit = 96;
  Daemon daemon({}, "", {},
                {"/usr/bin/prlimit",
                 "--nofile=" + std::to_string(kLimit) + ":" + std::to_string(kLimit), "--"});
  ASSERT_TRUE(daemon.ok());
  // What one client costs the daemon while it is served: its session, the
  // tenant's wake board and the board's copy on its way out with the
  // Welcome, and a gRPC connection with the duplicate that watches it.
  constexpr int kOneClient = 5;
  // Counted once the daemon is at rest: the last tenant's session, its board
  // and the connection that read the metrics gone, none counted as kept.
  auto free_at_rest = [&] {
    EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_sessions") == 0; }, 10s));
    return Settled([&] { return FreeDescriptors(daemon.pid(), kLimit); });
  };
  // One arena per tenant, kept by its buffer: tenants of many uids fill the
  // table until one client fits and no more.
  int uid = 61000;
  while (free_at_rest() > kOneClient && uid < 61000 + kLimit) {
    Adversary tenant(daemon.socket_dir(), uid++);
    ASSERT_TRUE(tenant.ok());
    EXPECT_EQ(tenant.Send("keep-in-arena", 10s), "ok");
  }
  ASSERT_EQ(free_at_rest(), kOneClient);

  Adversary attacker(daemon.socket_dir(), 60104);
  ASSERT_TRUE(attacker.ok());
  const std::string sessions = attacker.Send("sessions 40");
  EXPECT_LT(Field(sessions, "welcomed"), 40) << sessions;
  EXPECT_NE(sessions.find("RESOURCE_EXHAUSTED/limit gpubrokerd has run out of file descriptors"),
            std::string::npos)
      << sessions;
  const std::string grpc = attacker.Send("grpc 40");
  EXPECT_GT(Field(grpc, "closed") + Field(grpc, "failed"), 0) << grpc;

  // Under that pressure, with peers still queued, the daemon idles.
  const double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(1s);
  const double used = CpuSeconds(daemon.pid()) - before;
  EXPECT_LT(used, 0.2) << "the daemon spent " << used << " s of CPU in 1 s under pressure";

  // The pressure goes; both sockets serve again.
  attacker.Kill9();
  std::string last;
  EXPECT_TRUE(Eventually(
      [&] {
        Helper h(daemon.socket_dir());
        if (!h.ok()) return false;
        for (const char* command : {"list", "status"}) {
          last = h.Send(command);
          if (last.rfind("ok", 0) != 0) return false;
        }
        return true;
      },
      10s))
      << "gRPC and session.sock must serve again once the pressure is gone; the last answer: "
      << last << "; " << FreeDescriptors(daemon.pid(), kLimit) << " descriptors free";
  EXPECT_GE(Sum(daemon.Metrics(), "gpubroker_connections_refused_total{reason=\"descriptors\""), 1);
}

}  // namespace
}  // namespace gpubroker::testing
