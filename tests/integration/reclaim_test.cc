// Crashing clients are a normal event: kill -9 of an owner or an importer
// gives back exactly their bytes, and nobody else's.
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kMiB = 1 << 20;
constexpr const char* kReclaimedDied = "gpubroker_reclaimed_bytes_total{cause=\"died\"}";

int64_t UsedBytes(Helper& h) {
  return nlohmann::json::parse(h.Ok("status"))["devices"][0]["used_bytes"].get<int64_t>();
}
int64_t Sessions(Helper& h) {
  return nlohmann::json::parse(h.Ok("status"))["sessions"].get<int64_t>();
}

TEST(Reclaim, SigkillOfAnOwnerReclaimsExactlyItsBytes) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper victim(daemon.socket_dir());
  Helper bystander(daemon.socket_dir());
  victim.Ok("alloc a 1048576 name=victim.a");
  victim.Ok("alloc b 3145728 name=victim.b");
  victim.Ok("fill a 1");
  bystander.Ok("alloc c 2097152 name=bystander.c");
  bystander.Ok("fill c 5");
  ASSERT_EQ(UsedBytes(bystander), 6 * kMiB);
  const double reclaimed_before = daemon.Metric(kReclaimedDied);

  victim.Kill9();
  ASSERT_TRUE(Eventually([&] { return Sessions(bystander) == 1; })) << "session not ended";
  // The session leaves the books first; its memory and the reclaim counter follow.
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric(kReclaimedDied) - reclaimed_before >= 4 * kMiB; }));
  EXPECT_EQ(UsedBytes(bystander), 2 * kMiB);
  EXPECT_EQ(daemon.Metric(kReclaimedDied) - reclaimed_before, 4 * kMiB);
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"host\"}"), 2 * kMiB);
  EXPECT_EQ(bystander.Send("check c 5"), "ok") << "the bystander's buffer was touched";
  EXPECT_EQ(bystander.Send("open x victim.a unsealed").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_NE(daemon.log().find("died"), std::string::npos);
}

TEST(Reclaim, SigkillOfAnImporterReclaimsExactlyItsBytes) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper owner(daemon.socket_dir());
  Helper importer(daemon.socket_dir());
  owner.Ok("alloc s 1048576 name=shared");
  owner.Ok("fill s 8");
  owner.Ok("seal s");
  owner.Ok("alloc k 1048576 name=owner.kept");
  importer.Ok("open v shared");
  importer.Ok("alloc m 2097152 name=importer.own");
  // The owner frees the shared buffer: its name goes, the importer's lease keeps the memory.
  owner.Ok("release s");
  ASSERT_EQ(UsedBytes(owner), 4 * kMiB);
  const double reclaimed_before = daemon.Metric(kReclaimedDied);

  importer.Kill9();
  ASSERT_TRUE(Eventually([&] { return Sessions(owner) == 1; }));
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric(kReclaimedDied) - reclaimed_before >= 3 * kMiB; }));
  EXPECT_EQ(UsedBytes(owner), 1 * kMiB);
  EXPECT_EQ(daemon.Metric(kReclaimedDied) - reclaimed_before, 3 * kMiB);
  EXPECT_EQ(daemon.Metric("gpubroker_allocated_bytes{device=\"host\",tenant=\"uid-" +
                          std::to_string(::geteuid()) + "\"}"),
            1 * kMiB);
  owner.Ok("fill k 2");
  owner.Ok("release k");
  EXPECT_EQ(UsedBytes(owner), 0);
}

TEST(Reclaim, CleanExitCountsAsClosedNotDied) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  {
    Helper h(daemon.socket_dir());
    h.Ok("alloc a 4096");
  }
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_sessions_ended_total{end=\"closed\"}") == 1; }));
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"host\"}"), 0);
}

}  // namespace
}  // namespace gpubroker::testing
