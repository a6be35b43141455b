// Mappings that outlive buffers (docs/fast-path.md), on the host backend,
// which gives buffers at or over --vmm-threshold a memfd of their own as the
// GPU backend gives them a VMM allocation: the daemon keeps the memory for
// its tenant's next buffer of the size, clients keep it mapped, and the
// daemon asks them to unmap before it frees that memory for anyone else.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kMiB = 1 << 20;
const std::string kKept = "gpubroker_pool_kept_bytes{device=\"host\"}";
const std::string kUnmapping = "gpubroker_pool_unmapping_bytes{device=\"host\"}";
const std::string kUnmapRequests = "gpubroker_unmap_requests_total";

// Buffers from 1 MiB up have memory of their own; the pool holds 16 MiB.
std::vector<std::string> SmallPool() {
  return {"--vmm-threshold", "1MiB", "--host-pool-bytes", "16MiB"};
}

TEST(MappingCache, ARecycledBufferIsAnsweredOnTheSessionSocketAndMappedFromTheCache) {
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());

  // Cold: no kept memory, so session.sock sends the call to gRPC; both map anew.
  a.Ok("alloc x 4194304 name=kv");
  EXPECT_EQ(a.Ok("info x").find("backing=host-fd"), 0u);
  EXPECT_EQ(a.Stat("daemon_grpc"), 1);
  EXPECT_EQ(a.Stat("daemon_session"), 0);
  EXPECT_EQ(a.Stat("maps_imported"), 1);
  EXPECT_EQ(a.Stat("cache_misses"), 1);
  a.Ok("fill x 7");
  a.Ok("seal x");
  b.Ok("open y kv");
  b.Ok("check y 7");
  EXPECT_EQ(b.Stat("maps_imported"), 1);
  const std::string where_a = a.Ok("addr x");
  const std::string where_b = b.Ok("addr y");

  // Both let go; the memory stays kept, and mapped by both.
  b.Ok("release y");
  a.Ok("release x");
  EXPECT_EQ(a.Stat("cache_entries"), 1);
  EXPECT_EQ(a.Stat("cache_bytes"), 4 * kMiB);
  EXPECT_EQ(b.Stat("cache_entries"), 1);
  EXPECT_TRUE(Eventually([&] { return daemon.Metric(kKept) == 4 * kMiB; })) << daemon.log();

  // Warm: the next buffer of the size is served from that memory, on
  // session.sock, and neither side imports anything.
  a.Ok("alloc x 4194304 name=kv");
  EXPECT_EQ(a.Stat("daemon_session"), 1) << "a kept allocation is answered on session.sock";
  EXPECT_EQ(a.Stat("daemon_grpc"), 1);
  EXPECT_EQ(a.Stat("maps_cached"), 1);
  EXPECT_EQ(a.Stat("cache_hits"), 1);
  EXPECT_EQ(a.Stat("maps_imported"), 1);
  EXPECT_EQ(a.Ok("addr x"), where_a) << "the same mapping";
  EXPECT_EQ(a.Stat("cache_entries"), 0) << "in use again";
  a.Ok("fill x 9");
  a.Ok("seal x");
  b.Ok("open y kv");
  EXPECT_EQ(b.Stat("maps_cached"), 1);
  EXPECT_EQ(b.Stat("maps_imported"), 1);
  EXPECT_EQ(b.Ok("addr y"), where_b);
  b.Ok("check y 9");  // b reads what a wrote into the recycled memory
  EXPECT_EQ(daemon.Metric(kKept), 0);

  // Another size is another allocation: cold again.
  a.Ok("alloc z 2097152");
  EXPECT_EQ(a.Stat("daemon_grpc"), 2);
  EXPECT_EQ(a.Stat("cache_misses"), 2);

  // The paths reach the daemon's metrics with each client's next call.
  a.Ok("alloc r 4096 publish");
  b.Ok("alloc r 4096 publish");
  EXPECT_TRUE(Eventually([&] {
    return daemon.Metric("gpubroker_client_mapping_cache_lookups_total{result=\"hit\"}") == 2;
  }));
  EXPECT_EQ(daemon.Metric("gpubroker_client_mapping_cache_lookups_total{result=\"miss\"}"), 3);
  EXPECT_GE(daemon.Metric("gpubroker_client_allocations_total{path=\"session\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_client_maps_total{path=\"cached\"}"), 2);
}

TEST(MappingCache, TheDaemonAsksClientsToUnmapBeforeItLendsTheMemoryToAnotherTenant) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir(), 60011);
  a.Ok("alloc x 8388608");
  a.Ok("fill x 3");
  a.Ok("release x");
  ASSERT_EQ(a.Stat("cache_entries"), 1);
  ASSERT_TRUE(Eventually([&] { return daemon.Metric(kKept) == 8 * kMiB; }));

  // 12 MiB for another tenant fits only where a's kept 8 MiB are: the daemon
  // asks a to unmap (a answers between calls, on its own), then frees it.
  Helper b(daemon.socket_dir(), 60012);
  b.Ok("alloc y 12582912");
  EXPECT_EQ(daemon.Metric(kUnmapRequests), 1);
  EXPECT_EQ(daemon.Metric(kKept), 0);
  EXPECT_EQ(daemon.Metric(kUnmapping), 0);
  EXPECT_EQ(a.Stat("cache_entries"), 0);
  EXPECT_EQ(a.Stat("cache_evictions"), 1);
  b.Ok("fill y 4");
  b.Ok("check y 4");
}

TEST(MappingCache, AHolderWaitingInAnOpenStillUnmapsWhenAsked) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir(), 60031);
  a.Ok("alloc x 8388608");
  a.Ok("release x");
  ASSERT_EQ(a.Stat("cache_entries"), 1);

  // a's one thread of its own waits in an Open, its answer to come on the
  // session's socket: the request to unmap comes there too, and is served
  // while the call still waits.
  a.Post("open w later wait=30000");
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 1; }));
  Helper b(daemon.socket_dir(), 60032);
  b.Ok("alloc y 12582912");
  EXPECT_EQ(daemon.Metric(kUnmapRequests), 1);
  EXPECT_EQ(daemon.Metric(kKept), 0);
  EXPECT_EQ(daemon.Metric(kUnmapping), 0);

  // a's wait is answered as ever.
  Helper a2(daemon.socket_dir(), 60031);
  a2.Ok("alloc z 4096 name=later");
  a2.Ok("seal z");
  const std::string opened = a.Reply();
  EXPECT_EQ(opened.rfind("ok ", 0), 0u) << opened;
  EXPECT_EQ(a.Stat("cache_entries"), 0);
  EXPECT_EQ(a.Stat("cache_evictions"), 1);
}

TEST(MappingCache, MemoryThatAClientStillMapsIsNeverLentAndGoesOnceItUnmaps) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir(), 60021);
  a.Ok("alloc x 8388608");
  a.Ok("release x");
  ASSERT_EQ(a.Stat("cache_entries"), 1);

  // A holder that does not answer (stopped) keeps the memory from others: the
  // allocation that needs it waits, then is refused; nothing is lent twice.
  ASSERT_EQ(::kill(a.pid(), SIGSTOP), 0);
  Helper b(daemon.socket_dir(), 60022);
  const auto start = std::chrono::steady_clock::now();
  const std::string refused = b.Send("alloc y 12582912");
  EXPECT_EQ(refused.rfind("err RESOURCE_EXHAUSTED/out_of_memory", 0), 0u) << refused;
  EXPECT_NE(refused.find("still mapped by clients"), std::string::npos) << refused;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1s) << "it waited for the holder first";
  EXPECT_EQ(daemon.Metric(kUnmapping), 8 * kMiB);
  EXPECT_EQ(daemon.Metric(kKept), 8 * kMiB) << "draining memory still counts";

  // Woken, the holder unmaps on its own; the memory is freed, and the next try succeeds.
  ASSERT_EQ(::kill(a.pid(), SIGCONT), 0);
  EXPECT_TRUE(Eventually([&] { return daemon.Metric(kUnmapping) == 0; })) << daemon.log();
  EXPECT_EQ(daemon.Metric(kKept), 0);
  b.Ok("alloc y 12582912");
  EXPECT_EQ(a.Stat("cache_entries"), 0);
}

TEST(MappingCache, AHolderThatDiesOrEvictsNeedsNoAsking) {
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  {
    Helper dies(daemon.socket_dir());
    dies.Ok("alloc x 8388608");
    dies.Ok("release x");
    ASSERT_EQ(dies.Stat("cache_entries"), 1);
    dies.Kill9();
  }
  Helper evicts(daemon.socket_dir());
  evicts.Ok("alloc x 4194304");
  evicts.Ok("release x");
  ASSERT_EQ(evicts.Stat("cache_entries"), 1);
  evicts.Ok("evict");
  EXPECT_EQ(evicts.Stat("cache_entries"), 0);
  EXPECT_EQ(evicts.Stat("cache_evictions"), 1);
  EXPECT_EQ(evicts.Stat("cache_bytes"), 0);

  // 14 MiB needs both kept allocations gone; nobody maps them any more.
  Helper c(daemon.socket_dir());
  c.Ok("alloc y 14680064");
  EXPECT_EQ(daemon.Metric(kUnmapRequests), 0) << "nobody was left to ask";
  EXPECT_EQ(daemon.Metric(kKept), 0);
}

TEST(MappingCache, TheSessionSocketServesLargeAllocationsOnlyFromKeptMemory) {
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  RawSession raw(daemon.socket_dir());
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw.welcome().quick_allocation_limit(), static_cast<uint64_t>(kMiB));

  v1::Call large;
  large.mutable_allocate()->set_size(2 * kMiB);
  auto answer = raw.Exchange(large);
  ASSERT_TRUE(answer && answer->has_error());
  EXPECT_EQ(answer->error().code(), 10) << "ABORTED: no kept memory, ask through gRPC";
  EXPECT_NE(answer->error().message().find("ask through gRPC"), std::string::npos);

  v1::Call shared;
  shared.mutable_allocate()->set_size(4096);
  shared.mutable_allocate()->add_share_with("someone-else");
  answer = raw.Exchange(shared);
  ASSERT_TRUE(answer && answer->has_error());
  EXPECT_EQ(answer->error().code(), 9) << "FAILED_PRECONDITION: shares go through gRPC only";

  v1::Call small;
  small.mutable_allocate()->set_size(4096);
  answer = raw.Exchange(small);
  ASSERT_TRUE(answer && answer->has_reply());
  EXPECT_EQ(answer->reply().allocate().import().allocation_id(), 0u)
      << "memory of a region is never kept for one buffer";
  // The routing answer is not an outcome: only the refused share and the
  // small one are counted.
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"ok\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"invalid\"}"), 1);
}

// No silent slow paths: with GPUBROKER_LOG=debug a client says, for each
// allocation and each map, which path it took, and for each publish and
// open on session.sock how long its call took and how the answer was read.
TEST(MappingCache, TheDebugLogSaysWhichPathEachAllocationAndMapTook) {
  Daemon daemon(SmallPool());
  ASSERT_TRUE(daemon.ok());
  TempDir logs;
  const std::string log = logs.path() + "/client.log";
  Helper a(std::vector<std::string>{"/bin/sh", "-c",
                                    "GPUBROKER_LOG=debug exec \"$0\" --socket-dir \"$1\" 2>>\"$2\"",
                                    BinDir() + "/gpubroker-test-helper", daemon.socket_dir(), log});
  ASSERT_TRUE(a.ok());
  Helper b(daemon.socket_dir());
  a.Ok("alloc s 4096");             // made in a range of a's own
  a.Ok("alloc x 4194304 name=kv");  // the daemon's, through gRPC: no kept memory yet
  a.Ok("seal x");
  b.Ok("open y kv");
  b.Ok("release y");
  a.Ok("release x");
  a.Ok("alloc x 4194304");  // the daemon's, on session.sock, from kept memory
  a.Ok("release x");
  a.Ok("evict");
  a.Ok("alloc p 4096 name=published");
  a.Ok("seal p");  // published and sealed in one call
  a.Ok("open q published");
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  const std::string got = text.str();
  for (const char* line :
       {"allocate 4 KiB: client-made (range ",
        "allocate 4 MiB: the daemon's, on gRPC (no kept allocation) (host-fd)",
        "): imported (mapping-cache miss)",
        "allocate 4 MiB: the daemon's, on session.sock (a kept allocation)", "): mapping-cache hit",
        "kept the mapping of allocation ", "evicted 1 kept mappings", "seal: fence recorded in ",
        "publish+seal 4 KiB: buffer ", "; the call: frame written in ", " later, ",
        "open buffer "}) {
    EXPECT_NE(got.find(line), std::string::npos) << "no '" << line << "' in:\n" << got;
  }
}

}  // namespace
}  // namespace gpubroker::testing
