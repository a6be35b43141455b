// The broker on real GPU memory, across real processes: the CUDA backends
// (cuda-arena or cuda-pool under the VMM threshold, cuda-vmm above it and for
// shares across tenants), ready fences, reclaim on SIGKILL, tenants, churn.
// The tests of the small-buffer path run once per path (--small-buffers).
// Every test skips, saying why, where no GPU is usable.
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "common/cuda/cuda_util.h"
#include "common/unix_socket.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gpu/gpu_test_util.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr const char* kReclaimedDied = "gpubroker_reclaimed_bytes_total{cause=\"died\"}";
constexpr uint64_t kGiB = uint64_t{1} << 30;

nlohmann::json Device0(Helper& h) { return Status(h)["devices"][0]; }

// The tests that run on both small-buffer paths: "arena" and "pool".
class GpuPath : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> Args(std::vector<std::string> more = {}) const {
    std::vector<std::string> args = {"--backend", "cuda", "--small-buffers", GetParam()};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  std::string Backing() const { return "cuda-" + GetParam(); }
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The CUDA paths say why they refuse, over both sockets: a full device is
// out of memory (small buffers on session.sock, a share through gRPC and
// VMM), a tenant's quota is a quota.
TEST_P(GpuPath, RefusalsSayWhyOverBothSockets) {
  SKIP_WITHOUT_GPU();
  {
    Daemon daemon(Args({"--pool-bytes", "256MiB"}));
    ASSERT_TRUE(daemon.ok()) << daemon.log();
    Helper h(daemon.socket_dir());
    h.Ok("alloc x " + std::to_string(200 * kMiB));
    const std::string small = h.Send("alloc y " + std::to_string(100 * kMiB));
    EXPECT_EQ(small.rfind("err RESOURCE_EXHAUSTED/out_of_memory", 0), 0u) << small;
    const std::string shared = h.Send("alloc z " + std::to_string(100 * kMiB) + " share=other");
    EXPECT_EQ(shared.rfind("err RESOURCE_EXHAUSTED/out_of_memory", 0), 0u) << shared;
    EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"out_of_memory\"}"), 2);
    h.Ok("release x");
    h.Ok("alloc y " + std::to_string(100 * kMiB));
  }
  Daemon daemon(Args({"--default-quota", "64MiB"}));
  ASSERT_TRUE(daemon.ok()) << daemon.log();
  Helper h(daemon.socket_dir());
  h.Ok("alloc x " + std::to_string(48 * kMiB));
  const std::string small = h.Send("alloc y " + std::to_string(32 * kMiB));
  EXPECT_EQ(small.rfind("err RESOURCE_EXHAUSTED/quota", 0), 0u) << small;
  const std::string shared = h.Send("alloc z " + std::to_string(32 * kMiB) + " share=other");
  EXPECT_EQ(shared.rfind("err RESOURCE_EXHAUSTED/quota", 0), 0u) << shared;
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"quota\"}"), 2);
}

TEST(Gpu, DaemonServesTheGpusByUuid) {
  SKIP_WITHOUT_GPU();
  Daemon daemon({"--backend", "cuda"});
  ASSERT_TRUE(daemon.ok());
  EXPECT_NE(daemon.start_line().find("backend cuda"), std::string::npos) << daemon.start_line();
  EXPECT_NE(daemon.start_line().find("GPU-"), std::string::npos);
  Helper h(daemon.socket_dir());
  const auto d = Device0(h);
  EXPECT_EQ(d["backend"], "cuda");
  EXPECT_EQ(d["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
  EXPECT_GT(d["capacity_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(d["capacity_bytes"].get<uint64_t>(), d["total_bytes"].get<uint64_t>());
  EXPECT_GT(d["free_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(d["compute_capability"].get<std::string>().empty());
  std::printf("[   info   ] %s\n", daemon.start_line().c_str());
}

TEST_P(GpuPath, BufferFilledInAIsVerifiedInBAndBsWriteBackIsSeenInA) {
  SKIP_WITHOUT_GPU();
  Daemon daemon(Args());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());
  std::vector<std::pair<uint64_t, std::string>> cases = {
      {4096, Backing()}, {64 * kMiB, Backing()}, {1 * kGiB, Backing()}};
  if (GetParam() == "arena") {  // VMM buffers do not depend on the path: once is enough
    cases.push_back({8 * kGiB, "cuda-vmm"});
    cases.push_back({40 * kGiB, "cuda-vmm"});
  }
  for (const auto& [size, backing] : cases) {
    const std::string name = "gpu.data." + std::to_string(size);
    const auto t0 = std::chrono::steady_clock::now();
    a.Ok("alloc x " + std::to_string(size) + " name=" + name, 120s);
    auto info = Fields(a.Ok("info x"));
    EXPECT_EQ(info["backing"], backing) << size;
    a.Ok("fill x 11", 300s);
    a.Ok("seal x");
    b.Ok("open y " + name, 120s);
    EXPECT_EQ(b.Send("check y 11", 300s), "ok") << size;
    b.Ok("poke y 0 201");
    b.Ok("poke y " + std::to_string(size - 1) + " 202");
    EXPECT_EQ(a.Send("peek x 0"), "ok 201") << "write-back not seen at " << size;
    EXPECT_EQ(a.Send("peek x " + std::to_string(size - 1)), "ok 202") << size;
    b.Ok("release y");
    a.Ok("release x");
    std::printf("[   info   ] %llu bytes (%s): round trip %.2f s\n",
                static_cast<unsigned long long>(size), backing.c_str(), Seconds(t0));
  }
  // On the arena path A made its buffers in ranges it leases; they go back now.
  a.Ok("trim");
  EXPECT_EQ(Device0(a)["used_bytes"], 0);
}

TEST_P(GpuPath, ConsumersStreamWaitsForTheProducersFence) {
  SKIP_WITHOUT_GPU();
  Daemon daemon(Args());
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());
  // The producer queues a 1.5 s wait and then the write, seals at once, and
  // does not synchronize.
  a.Ok("alloc x 268435456 name=fenced");
  a.Ok("slowfill x 5 1500");
  b.Ok("open y fenced");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b.Send("check y 5 stream", 60s), "ok") << "the fence did not order the reader";
  EXPECT_GT(Seconds(t0), 0.5) << "the reader did not wait for the producer's work";

  // The control: the same, read without waiting on the fence, sees the write
  // unfinished. (If this ever passed, the test above would prove nothing.)
  a.Ok("alloc z 268435456 name=unfenced");
  a.Ok("fill z 1");  // not the pattern the slow write will leave
  a.Ok("slowfill z 6 1500");
  b.Ok("open w unfenced");
  EXPECT_EQ(b.Send("check w 6", 60s).rfind("err DATA_LOSS", 0), 0u)
      << "without the fence the reader should have seen the write unfinished";
  EXPECT_EQ(b.Send("check w 6 stream", 60s), "ok");
  a.Ok("drain");
}

TEST_P(GpuPath, SigkillOfOwnerAndImporterReturnsExactlyTheirBytes) {
  SKIP_WITHOUT_GPU();
  Daemon daemon(Args({"--vmm-threshold", "256MiB"}));
  ASSERT_TRUE(daemon.ok());
  Helper observer(daemon.socket_dir());
  const uint64_t base = Device0(observer)["used_bytes"];
  Helper owner(daemon.socket_dir());
  Helper importer(daemon.socket_dir());
  Helper bystander(daemon.socket_dir());
  owner.Ok("alloc a 67108864 name=owner.pool");
  owner.Ok("alloc v 536870912 name=owner.vmm");
  owner.Ok("alloc s 33554432 name=owner.shared");
  owner.Ok("fill s 3");
  owner.Ok("seal s");
  bystander.Ok("alloc c 16777216 name=bystander");
  bystander.Ok("fill c 4");
  importer.Ok("open i owner.shared");
  importer.Ok("alloc m 8388608 name=importer.own");
  const auto before = Device0(observer);
  const uint64_t all = before["used_bytes"].get<uint64_t>() - base;
  EXPECT_GE(all, (64 + 512 + 32 + 16 + 8) * kMiB);
  const double reclaimed0 = daemon.Metric(kReclaimedDied);

  owner.Kill9();
  ASSERT_TRUE(Eventually([&] { return Status(observer)["sessions"] == 3; }));
  // The session leaves the books first, the reclaim counter with them; its
  // memory goes back to the pools just after, outside the registry's lock.
  ASSERT_TRUE(Eventually([&] { return daemon.Metric(kReclaimedDied) > reclaimed0; }));
  const double reclaimed1 = daemon.Metric(kReclaimedDied);
  auto used = [&] { return Device0(observer)["used_bytes"].get<uint64_t>() - base; };
  // Gone: the owner's pool and VMM buffers. Kept: the shared one (importer's lease).
  const auto owners = static_cast<uint64_t>(reclaimed1 - reclaimed0);
  EXPECT_TRUE(Eventually([&] { return all - used() == owners; }))
      << all - used() << " bytes gone, " << owners << " reclaimed";
  const uint64_t after_owner = used();
  EXPECT_GE(all - after_owner, (64 + 512) * kMiB);
  EXPECT_LT(all - after_owner, (64 + 512 + 32) * kMiB);
  EXPECT_EQ(importer.Send("check i 3"), "ok") << "the importer's view must survive the owner";
  const std::string uuid = Device0(observer)["uuid"];
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"" + uuid + "\"}"),
            static_cast<double>(after_owner + base));

  importer.Kill9();
  ASSERT_TRUE(Eventually([&] { return Status(observer)["sessions"] == 2; }));
  ASSERT_TRUE(Eventually([&] { return daemon.Metric(kReclaimedDied) > reclaimed1; }));
  const double reclaimed2 = daemon.Metric(kReclaimedDied);
  const auto importers = static_cast<uint64_t>(reclaimed2 - reclaimed1);
  EXPECT_TRUE(Eventually([&] { return after_owner - used() == importers; }))
      << after_owner - used() << " bytes gone, " << importers << " reclaimed";
  const uint64_t after_importer = used();
  EXPECT_GE(after_owner - after_importer, (32 + 8) * kMiB);
  EXPECT_EQ(bystander.Send("check c 4"), "ok");
  bystander.Ok("release c");
  bystander.Ok("trim");  // the ranges of its client-made buffers (arena path)
  EXPECT_EQ(Device0(observer)["used_bytes"].get<uint64_t>(), base);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"" + uuid + "\"}"),
            static_cast<double>(base));
}

TEST_P(GpuPath, TenantsGetNoPoolButTheirOwnAndSharesAreVmm) {
  SKIP_WITHOUT_GPU();
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon(Args(), kBlueAndGreenTenants);
  ASSERT_TRUE(daemon.ok());
  Helper owner(daemon.socket_dir());
  Helper blue(daemon.socket_dir(), 60001);
  Helper green(daemon.socket_dir(), 60002);
  owner.Ok("alloc p 1048576 name=private");
  owner.Ok("seal p");
  EXPECT_EQ(Fields(owner.Ok("info p"))["backing"], Backing());
  owner.Ok("alloc s 1048576 name=for.blue share=blue");
  EXPECT_EQ(Fields(owner.Ok("info s"))["backing"], "cuda-vmm");
  owner.Ok("fill s 21");
  owner.Ok("seal s");
  // Names are per tenant: another tenant's share is "owner/name".
  blue.Ok("open y uid-0/for.blue");
  EXPECT_EQ(blue.Send("check y 21"), "ok");
  EXPECT_EQ(blue.Send("open q uid-0/private").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_EQ(green.Send("open q uid-0/for.blue").rfind("err NOT_FOUND", 0), 0u);

  // A session of tenant blue asks for every pool id there is: it gets only its own.
  blue.Ok("alloc own 4096");
  auto fd = ConnectUnix(daemon.socket_dir() + "/session.sock");
  ASSERT_TRUE(fd.ok());
  // (This raw session runs as root, tenant uid-0: ask for pools of others.)
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(1);
  ASSERT_TRUE(SendAll(fd->get(), EncodeFrame(hello)).ok());
  std::vector<int> granted;  // FdKinds
  int refused = 0;
  FrameDecoder decoder;
  char buf[4096];
  auto read_frame = [&]() -> std::optional<v1::SessionFrame> {
    for (int i = 0; i < 100; ++i) {
      auto f = decoder.Next();
      if (!f.ok()) return std::nullopt;
      if (f->has_value()) return **f;
      if (!WaitReadable(fd->get(), 100ms).ok()) continue;
      std::vector<UniqueFd> fds;
      auto r = RecvSome(fd->get(), buf, sizeof(buf), &fds);
      if (!r.ok() || r->eof) return std::nullopt;
      decoder.Append(std::string_view(buf, r->bytes));
    }
    return std::nullopt;
  };
  ASSERT_TRUE(read_frame().has_value());  // Welcome
  for (uint64_t pool = 1; pool <= 8; ++pool) {
    v1::SessionFrame req;
    req.mutable_fd_request()->set_request_id(pool);
    req.mutable_fd_request()->set_region_id(pool);
    ASSERT_TRUE(SendAll(fd->get(), EncodeFrame(req)).ok());
    auto reply = read_frame();
    ASSERT_TRUE(reply.has_value());
    if (reply->has_fd_grant()) granted.push_back(reply->fd_grant().kind());
    if (reply->has_error()) ++refused;
  }
  // Pool path: ids 1..4 are uid-0's pool and fence page, then blue's: only
  // the first two come back. Arena path: the buffers are client-made, in
  // ranges of each tenant's slab, whose fences are words in the buffers:
  // id 1 is uid-0's slab, id 2 blue's; only the first comes back.
  std::sort(granted.begin(), granted.end());
  std::vector<int> expected = {v1::FD_KIND_CUDA_SLAB};
  if (GetParam() == "pool") expected = {v1::FD_KIND_CUDA_POOL, v1::FD_KIND_CUDA_FENCES};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(granted, expected) << "a tenant may get its own regions and nothing else";
  EXPECT_EQ(refused, 8 - static_cast<int>(expected.size()));
}

// What the driver itself does with VMM memory that a process released: how
// many bytes of a filled allocation a new allocation of the same size, in the
// same process, reads back. Printed (the broker does not rely on it: it
// zeroes such memory itself), so that each GPU run records the driver's
// behaviour. Empty when the probe could not run.
std::string DriverRecyclingRecord() {
  auto api_or = cuda::DriverApi::Get();
  if (!api_or.ok()) return "";
  const cuda::DriverApi& api = **api_or;
  cuda::ScopedDevice on(0);
  if (!on.status().ok()) return "";
  constexpr uint64_t kBytes = 256 * kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  // Maps a new allocation, runs `use` on it, unmaps and releases it.
  auto with_allocation = [&](auto use) -> bool {
    CUmemGenericAllocationHandle h = 0;
    if (api.cuMemCreate(&h, kBytes, &prop, 0) != CUDA_SUCCESS) return false;
    CUdeviceptr ptr = 0;
    bool ok = api.cuMemAddressReserve(&ptr, kBytes, 0, 0, 0) == CUDA_SUCCESS;
    if (ok) ok = api.cuMemMap(ptr, kBytes, 0, h, 0) == CUDA_SUCCESS;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (ok) ok = api.cuMemSetAccess(ptr, kBytes, &access, 1) == CUDA_SUCCESS;
    if (ok) use(reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(ptr)));
    if (ptr != 0) {
      api.cuMemUnmap(ptr, kBytes);
      api.cuMemAddressFree(ptr, kBytes);
    }
    api.cuMemRelease(h);
    return ok;
  };
  uint64_t stale = 0;
  bool ok = with_allocation([&](uint8_t* p) {
    cudaMemset(p, 0xa5, kBytes);
    cudaDeviceSynchronize();
  });
  ok = ok && with_allocation([&](uint8_t* p) {
         std::vector<uint8_t> got(kBytes);
         cudaMemcpy(got.data(), p, kBytes, cudaMemcpyDeviceToHost);
         stale = static_cast<uint64_t>(std::count(got.begin(), got.end(), uint8_t{0xa5}));
       });
  if (!ok) return "";
  return std::to_string(stale) + " of " + std::to_string(kBytes) +
         " bytes of a released 256 MiB VMM allocation came back uncleared in the same process";
}

// GPU memory reaches a tenant with no byte of another tenant's in it: blue
// fills buffers of every kind it can have alone (small ones on this path,
// VMM ones) and frees them; green then takes as much of the same small
// device, and every byte it gets reads 0. The daemon zeroes what changes
// tenant (CudaDeviceState::Lend, and every pool buffer), and says so in
// gpubroker_zeroed_bytes_total: at least green's bytes, whatever the
// driver handed back.
TEST_P(GpuPath, MemoryLentToAnotherTenantCarriesNoneOfItsBytes) {
  SKIP_WITHOUT_GPU();
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  if (const std::string record = DriverRecyclingRecord(); !record.empty()) {
    std::printf("[   info   ] driver: %s\n", record.c_str());
  }
  Daemon daemon(Args({"--pool-bytes", "2GiB", "--vmm-threshold", "256MiB"}), kBlueAndGreenTenants);
  ASSERT_TRUE(daemon.ok());
  Helper blue(daemon.socket_dir(), 60001);
  Helper green(daemon.socket_dir(), 60002);
  const std::string uuid = Device0(blue)["uuid"];
  const std::string zeroed = "gpubroker_zeroed_bytes_total{device=\"" + uuid + "\"}";
  constexpr int kLarge = 3;  // VMM buffers of their own
  constexpr uint64_t kLargeBytes = 512 * kMiB;
  constexpr int kSmall = 8;  // on the small-buffer path
  constexpr uint64_t kSmallBytes = 24 * kMiB;
  auto fill_and_free = [&](Helper& h, uint64_t seed) {
    for (int i = 0; i < kLarge; ++i) {
      const std::string key = "l" + std::to_string(i);
      h.Ok("alloc " + key + " " + std::to_string(kLargeBytes));
      EXPECT_EQ(Fields(h.Ok("info " + key))["backing"], "cuda-vmm");
      h.Ok("fill " + key + " " + std::to_string(seed));
    }
    for (int i = 0; i < kSmall; ++i) {
      const std::string key = "s" + std::to_string(i);
      h.Ok("alloc " + key + " " + std::to_string(kSmallBytes));
      EXPECT_EQ(Fields(h.Ok("info " + key))["backing"], Backing());
      h.Ok("fill " + key + " " + std::to_string(seed));
    }
    for (int i = 0; i < kLarge; ++i) h.Ok("release l" + std::to_string(i));
    for (int i = 0; i < kSmall; ++i) h.Ok("release s" + std::to_string(i));
  };
  fill_and_free(blue, 33);

  const double zeroed_before = daemon.Metric(zeroed);
  for (int round = 0; round < 2; ++round) {  // between the rounds, blue has memory again
    for (int i = 0; i < kLarge; ++i) {
      const std::string key = "l" + std::to_string(i);
      green.Ok("alloc " + key + " " + std::to_string(kLargeBytes));
      EXPECT_EQ(green.Send("zeros " + key), "ok") << "round " << round << ", VMM buffer " << i;
    }
    for (int i = 0; i < kSmall; ++i) {
      const std::string key = "s" + std::to_string(i);
      green.Ok("alloc " + key + " " + std::to_string(kSmallBytes));
      EXPECT_EQ(green.Send("zeros " + key), "ok") << "round " << round << ", small buffer " << i;
    }
    for (int i = 0; i < kLarge; ++i) green.Ok("release l" + std::to_string(i));
    for (int i = 0; i < kSmall; ++i) green.Ok("release s" + std::to_string(i));
    if (round == 0) fill_and_free(blue, 34);  // and blue's memory changes hands again
  }
  EXPECT_GE(daemon.Metric(zeroed) - zeroed_before,
            static_cast<double>(kLarge * kLargeBytes + kSmall * kSmallBytes))
      << "the daemon zeroed less than green was lent the first time";
}

// An arena slab goes back to the device once no buffer uses it and no
// client maps it; a client that mapped it keeps it (and its bytes counted as
// reserved) until its session ends, whichever way.
TEST_P(GpuPath, EmptySlabsGoBackOnceNoClientMapsThem) {
  SKIP_WITHOUT_GPU();
  if (GetParam() != "arena") GTEST_SKIP() << "slabs are the arena path's (pools keep their own)";
  Daemon daemon(Args());
  ASSERT_TRUE(daemon.ok());
  Helper observer(daemon.socket_dir());
  auto reserved = [&] { return Device0(observer)["reserved_bytes"].get<uint64_t>(); };
  const uint64_t before = reserved();
  auto owner = std::make_unique<Helper>(daemon.socket_dir());
  auto reader = std::make_unique<Helper>(daemon.socket_dir());
  owner->Ok("alloc x 4096 name=first");  // the tenant's first slab (64 MiB) and fence page
  owner->Ok("seal x");
  reader->Ok("open y first");  // the reader maps the slab too
  const uint64_t with_slab = reserved();
  owner->Ok("release x");
  reader->Ok("release y");
  EXPECT_EQ(reserved(), with_slab) << "both clients still map the empty slab";
  owner->Kill9();
  owner.reset();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(reserved(), with_slab) << "the reader still maps it";
  EXPECT_EQ(reader->Exit(), 0);
  reader.reset();
  // The slab and the fence page, both unused and unmapped, go.
  ASSERT_GE(with_slab, before + 64 * kMiB);
  ASSERT_TRUE(Eventually([&] { return reserved() == before; }))
      << "reserved " << reserved() << ", with the slab " << with_slab << ", before " << before;
  // The tenant's next buffer gets a new slab, zeroed like any memory new to it.
  Helper next(daemon.socket_dir());
  next.Ok("alloc z 4096");
  EXPECT_EQ(next.Send("zeros z"), "ok");
  EXPECT_EQ(reserved(), with_slab);
}

// A tenant's fence page (one VMM allocation per tenant and device) and, on
// the pool path, its CUDA pool go once no buffer of the tenant's uses them
// and no live session holds them, however its clients ended: a node that
// sees many tenants come and go keeps none of their device memory or
// descriptors. While a client lives, they stay: allocating and freeing
// without ever sealing makes no new page each time.
TEST_P(GpuPath, ATenantsFencePageAndPoolGoOnceUnusedAndUnheld) {
  SKIP_WITHOUT_GPU();
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon(Args());
  ASSERT_TRUE(daemon.ok());
  Helper observer(daemon.socket_dir());
  auto reserved = [&] { return Device0(observer)["reserved_bytes"].get<uint64_t>(); };
  auto at_rest = [&] {
    EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_sessions") == 1; }, 10s));
    return Settled([&] { return OpenDescriptors(daemon.pid()); });
  };
  const uint64_t reserved_before = reserved();
  const int fds_before = at_rest();
  constexpr int kTenants = 4;
  for (int i = 0; i < kTenants; ++i) {
    // Every buffer the daemon's, so each takes a fence slot; the producer's
    // seal and the consumer's stream wait map the page, the pool path's
    // buffers its pool. Half the tenants' clients die holding them.
    Helper producer(daemon.socket_dir(), 61300 + i, /*suballocate=*/false);
    Helper consumer(daemon.socket_dir(), 61300 + i, /*suballocate=*/false);
    ASSERT_TRUE(producer.ok() && consumer.ok());
    producer.Ok("alloc a 1048576 name=fenced");
    producer.Ok("fill a 5");
    producer.Ok("seal a");
    consumer.Ok("open b fenced");
    EXPECT_EQ(consumer.Send("check b 5 stream"), "ok");
    EXPECT_GT(reserved(), reserved_before);
    if (i % 2 == 0) {
      producer.Kill9();
      consumer.Kill9();
    } else {
      consumer.Ok("release b");
      producer.Ok("release a");
      EXPECT_EQ(consumer.Exit(), 0);
      EXPECT_EQ(producer.Exit(), 0);
    }
  }
  EXPECT_TRUE(Eventually([&] { return reserved() == reserved_before; }))
      << "reserved " << reserved() << ", before " << reserved_before;
  EXPECT_EQ(at_rest(), fds_before);
  EXPECT_TRUE(Eventually([&] {
    return daemon.LogCount("given back (no buffer, unmapped)") == kTenants;
  })) << daemon.log();
  if (GetParam() == "pool") {
    EXPECT_EQ(daemon.LogCount("destroyed (no buffer, unmapped)"), kTenants) << daemon.log();
  }

  // A live client keeps its tenant's page (and pool) between buffers, sealed
  // or not; the tenant's next client after it gets fresh ones, zeroed.
  {
    Helper churner(daemon.socket_dir(), 61400, /*suballocate=*/false);
    churner.Ok("alloc a 1048576");
    const uint64_t with_page = reserved();
    for (int i = 0; i < 20; ++i) {
      churner.Ok("release a");
      churner.Ok("alloc a 1048576");
    }
    EXPECT_EQ(reserved(), with_page);
    churner.Ok("seal a");
    churner.Ok("release a");
    EXPECT_EQ(reserved(), with_page) << "the client maps the page";
    EXPECT_EQ(daemon.LogCount("given back (no buffer, unmapped)"), kTenants);
    EXPECT_EQ(churner.Exit(), 0);
  }
  EXPECT_TRUE(Eventually([&] { return reserved() == reserved_before; }));
  Helper next(daemon.socket_dir(), 61400, /*suballocate=*/false);
  next.Ok("alloc z 1048576");
  EXPECT_EQ(next.Send("zeros z"), "ok");
  next.Ok("fill z 9");
  next.Ok("seal z");
  EXPECT_EQ(next.Send("check z 9 stream"), "ok");
}

TEST_P(GpuPath, EightProcessesFiveHundredCyclesLeaveThePoolAsItBegan) {
  SKIP_WITHOUT_GPU();
  constexpr int kProcesses = 8;
  constexpr int kCycles = 500;
  Daemon daemon(Args());
  ASSERT_TRUE(daemon.ok());
  std::vector<std::unique_ptr<Helper>> ring;
  for (int i = 0; i < kProcesses; ++i)
    ring.push_back(std::make_unique<Helper>(daemon.socket_dir()));
  const uint64_t before = Device0(*ring[0])["used_bytes"];
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kProcesses; ++i) {
    ring[i]->Post("churn " + std::to_string(i) + " " + std::to_string(kProcesses) + " " +
                  std::to_string(kCycles));
  }
  for (int i = 0; i < kProcesses; ++i) {
    EXPECT_EQ(ring[i]->Reply(600s), "ok cycles=" + std::to_string(kCycles)) << "process " << i;
  }
  std::printf("[   info   ] %d x %d cycles in %.1f s\n", kProcesses, kCycles, Seconds(t0));
  for (auto& h : ring) h->Ok("trim");  // the ranges of their client-made buffers go back
  const auto status = Status(*ring[0]);
  EXPECT_EQ(status["devices"][0]["used_bytes"], before);
  EXPECT_EQ(status["buffers"], 0);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"ok\"}"), kProcesses * kCycles);
}

INSTANTIATE_TEST_SUITE_P(SmallBuffers, GpuPath, ::testing::Values("arena", "pool"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace gpubroker::testing
