// Crashing clients are a normal event: kill -9 of an owner or an importer
// gives back exactly their bytes, and nobody else's. A client's bytes are the
// ranges it leases (its buffers are carved from them, docs/fast-path.md):
// the daemon's books and the client's own must agree, and a dead client's
// ranges come back but for the published blocks that others still hold.
#include <atomic>
#include <thread>

#include "common/strings.h"
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
// A figure of the client's own books ("stats"): range_bytes, in_use_bytes, ...
int64_t ClientStat(Helper& h, const std::string& key) {
  const std::string s = " " + h.Ok("stats") + " ";
  const size_t at = s.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  return std::stoll(s.substr(at + key.size() + 2));
}
int64_t Sessions(Helper& h) {
  return nlohmann::json::parse(h.Ok("status"))["sessions"].get<int64_t>();
}

TEST(Reclaim, SigkillOfAnOwnerReclaimsExactlyItsBytes) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper victim(daemon.socket_dir());
  Helper bystander(daemon.socket_dir());
  victim.Ok("alloc a 1048576 name=victim.a publish");
  victim.Ok("alloc b 3145728 name=victim.b");
  victim.Ok("alloc c 40000");
  victim.Ok("fill a 1");
  bystander.Ok("alloc c 2097152 name=bystander.c");
  bystander.Ok("fill c 5");
  const int64_t victims = ClientStat(victim, "range_bytes");
  const int64_t bystanders = ClientStat(bystander, "range_bytes");
  EXPECT_GE(victims, 4 * kMiB + 40000);
  EXPECT_GE(bystanders, 2 * kMiB);
  EXPECT_EQ(ClientStat(victim, "in_use_bytes"), 1048576 + 3145728 + 40960);  // 40000 in its class
  // The daemon's books are the clients' ranges, to the byte.
  ASSERT_EQ(UsedBytes(bystander), victims + bystanders);
  const double reclaimed_before = daemon.Metric(kReclaimedDied);

  victim.Kill9();
  ASSERT_TRUE(Eventually([&] { return Sessions(bystander) == 1; })) << "session not ended";
  // The session leaves the books first, the reclaim counter with them; the
  // memory goes back to the pool just after, outside the registry's lock.
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric(kReclaimedDied) - reclaimed_before >= victims; }));
  EXPECT_TRUE(Eventually([&] { return UsedBytes(bystander) == bystanders; }))
      << UsedBytes(bystander) << " bytes used, the bystander's " << bystanders;
  EXPECT_EQ(daemon.Metric(kReclaimedDied) - reclaimed_before, victims);
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"host\"}"), bystanders);
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
  // The owner lets go of the shared buffer: its name goes, the importer's
  // lease keeps the block, which waits in the owner's quarantine.
  owner.Ok("release s");
  EXPECT_EQ(ClientStat(owner, "quarantined_bytes"), 1048576);
  const int64_t owners = ClientStat(owner, "range_bytes");
  const int64_t importers = ClientStat(importer, "range_bytes");
  ASSERT_EQ(UsedBytes(owner), owners + importers);
  const double reclaimed_before = daemon.Metric(kReclaimedDied);

  importer.Kill9();
  ASSERT_TRUE(Eventually([&] { return Sessions(owner) == 1; }));
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric(kReclaimedDied) - reclaimed_before >= importers; }));
  // The importer's ranges came back; the shared block went back to the
  // owner's range (still charged with it).
  EXPECT_TRUE(Eventually([&] { return UsedBytes(owner) == owners; }))
      << UsedBytes(owner) << " bytes used, the owner's " << owners;
  EXPECT_EQ(daemon.Metric(kReclaimedDied) - reclaimed_before, importers);
  EXPECT_EQ(daemon.Metric("gpubroker_allocated_bytes{device=\"host\",tenant=\"uid-" +
                          std::to_string(::geteuid()) + "\"}"),
            owners);
  owner.Ok("fill k 2");
  owner.Ok("release k");
  // Trim hears that the shared block came back, and then every range is empty.
  owner.Ok("trim");
  EXPECT_EQ(ClientStat(owner, "quarantined_bytes"), 0);
  EXPECT_EQ(ClientStat(owner, "range_bytes"), 0);
  EXPECT_EQ(UsedBytes(owner), 0);
}

TEST(Reclaim, ADeadOwnersPublishedBlockThatAnotherHoldsOutlivesItsRange) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper owner(daemon.socket_dir());
  Helper reader(daemon.socket_dir());
  owner.Ok("alloc s 65536 name=held");
  owner.Ok("alloc t 500000");
  owner.Ok("fill s 3");
  owner.Ok("seal s");
  reader.Ok("open r held");
  const int64_t owners = ClientStat(owner, "range_bytes");
  const double reclaimed_before = daemon.Metric(kReclaimedDied);

  owner.Kill9();
  ASSERT_TRUE(Eventually([&] { return Sessions(reader) == 1; }));
  // All of the owner's ranges came back but the block the reader holds,
  // which is now charged by itself; its bytes are intact.
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric(kReclaimedDied) - reclaimed_before >= owners - 65536; }));
  EXPECT_EQ(daemon.Metric(kReclaimedDied) - reclaimed_before, owners - 65536);
  EXPECT_TRUE(Eventually([&] { return UsedBytes(reader) == 65536; })) << UsedBytes(reader);
  EXPECT_EQ(reader.Send("check r 3"), "ok");
  EXPECT_EQ(daemon.Metric("gpubroker_buffers{device=\"host\",tenant=\"uid-" +
                          std::to_string(::geteuid()) + "\"}"),
            1);
  reader.Ok("release r");
  EXPECT_EQ(UsedBytes(reader), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_reserved_bytes{device=\"host\"}"), 0)
      << "every page of the dead owner's ranges went back to the kernel";
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
  // Its memory reaches the pool just after the books (outside the lock).
  EXPECT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_pool_used_bytes{device=\"host\"}") == 0; }));
}

// Every scrape sees a session's end and what it gave back together: the
// counts are kept with the books and read in the same snapshot as the
// sessions and the tenant's bytes.
TEST(Reclaim, ASessionsEndAndItsReclaimAreSeenTogetherByEveryScrape) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  constexpr int kClients = 40;
  constexpr int64_t kBytes = 64 * 1024;  // one buffer each, freed by their death
  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::string broken;
  std::thread scraper([&] {
    while (!done && broken.empty()) {
      auto m = daemon.Metrics();
      const double started = m["gpubroker_sessions_started_total"];
      const double died = m["gpubroker_sessions_ended_total{end=\"died\"}"];
      const double closed = m["gpubroker_sessions_ended_total{end=\"closed\"}"];
      const double open = m["gpubroker_sessions"];
      const double reclaimed = m[kReclaimedDied];
      const double used = m["gpubroker_tenant_used_bytes{tenant=\"uid-0\"}"];
      if (open != started - died - closed) {
        broken = StrCat("sessions ", open, " but started ", started, " - ended ", died + closed);
      } else if (reclaimed != died * kBytes) {
        broken = StrCat(died, " sessions died holding ", kBytes, " bytes each, but ", reclaimed,
                        " bytes were reclaimed");
      } else if (used + reclaimed > started * kBytes) {
        broken = StrCat(used, " bytes used and ", reclaimed, " reclaimed of ", started,
                        " sessions' ", kBytes);
      }
      scrapes++;
    }
  });
  for (int i = 0; i < kClients; ++i) {
    // The daemon's own buffers: their bytes are exactly what was asked for.
    Helper client(daemon.socket_dir(), /*uid=*/-1, /*suballocate=*/false);
    client.Ok("alloc x " + std::to_string(kBytes));
    client.Kill9();
  }
  ASSERT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}") == kClients; }));
  done = true;
  scraper.join();
  EXPECT_EQ(broken, "") << "after " << scrapes << " scrapes";
  EXPECT_GT(scrapes.load(), kClients);
  EXPECT_EQ(daemon.Metric(kReclaimedDied), kClients * kBytes);
}

// A tenant's host arena (one memfd) lasts while the tenant has buffers in it
// or live clients that mapped it, then goes: a node that sees many tenants
// come and go (a pod whose uids map to a range of the host's is a tenant of
// its own) keeps no descriptor for each tenant it ever served.
TEST(Reclaim, ATenantsArenaGoesOnceItIsEmptyAndNoClientMapsIt) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  // Counted with no session open and the count settled (a session's socket
  // and its tenant's wake board go as its end is handled).
  auto at_rest = [&] {
    EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_sessions") == 0; }, 10s));
    return Settled([&] { return OpenDescriptors(daemon.pid()); });
  };
  const int before = at_rest();
  constexpr int kTenants = 8;
  for (int i = 0; i < kTenants; ++i) {
    // Client-made blocks in a leased range and a buffer of the daemon's,
    // both in the tenant's arena; half the clients die holding them.
    Helper client(daemon.socket_dir(), 61100 + i);
    ASSERT_TRUE(client.ok());
    client.Ok("alloc a 4096");
    client.Ok("alloc b 65536 publish");
    if (i % 2 == 0) {
      client.Kill9();
    } else {
      client.Ok("release a");
      client.Ok("release b");
      EXPECT_EQ(client.Exit(), 0);
    }
  }
  EXPECT_EQ(at_rest(), before);
  EXPECT_TRUE(Eventually([&] { return daemon.LogCount("(empty, unmapped)") == kTenants; }))
      << daemon.log();

  // While a client maps it, its tenant's arena stays, empty or not: the
  // client's next buffer is in memory it has mapped already.
  Helper held(daemon.socket_dir(), 61200, /*suballocate=*/false);
  held.Ok("alloc a 4096");
  held.Ok("release a");
  held.Ok("alloc b 4096");
  EXPECT_EQ(held.Stat("maps_imported"), 1);
  EXPECT_EQ(held.Stat("maps_mapped"), 1);
  // A buffer that outlives its session keeps the arena too, until it is freed.
  held.Ok("alloc k 4096 name=kept keep");
  held.Ok("seal k");
  EXPECT_EQ(held.Exit(), 0);
  const int kept = at_rest();
  EXPECT_EQ(kept, before + 1);
  Helper freer(daemon.socket_dir(), 61200);
  freer.Ok("free kept");
  EXPECT_EQ(freer.Exit(), 0);
  EXPECT_EQ(at_rest(), before);
}

}  // namespace
}  // namespace gpubroker::testing
