// One suite, run against every backend this machine has. The host backend is
// always there; the CUDA backends join where a GPU is usable.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/refusal.h"
#include "daemon/backend/host_backend.h"
#include "daemon/backend/leased_range.h"
#include "gtest/gtest.h"
#include "tests/unit/backends_under_test.h"

namespace gpubroker {
namespace {

class BackendTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = GetParam().make(&why);
    if (!backend_) GTEST_SKIP() << GetParam().name << ": " << why;
  }
  AllocationRequest Request(uint64_t size, const std::string& tenant = "t", bool isolated = false) {
    return AllocationRequest{0, tenant, size, isolated};
  }
  std::unique_ptr<Backend> backend_;
};

// The backend of that name (a BackendsUnderTest() entry); null with `why`
// set where this machine has none.
std::unique_ptr<Backend> MakeBackend(const std::string& name, std::string* why) {
  *why = "this build has no CUDA backend";
  for (const auto& b : BackendsUnderTest()) {
    if (b.name == name) return b.make(why);
  }
  return nullptr;
}

TEST_P(BackendTest, ReportsAtLeastOneDeviceWithCapacity) {
  ASSERT_FALSE(backend_->devices().empty());
  for (const auto& d : backend_->devices()) {
    EXPECT_FALSE(d.uuid.empty());
    EXPECT_GT(d.capacity_bytes, 0u);
    EXPECT_GE(d.total_bytes, d.capacity_bytes);
  }
}

TEST_P(BackendTest, RoundsToGranularityAndAccountsForIt) {
  const DeviceUsage before = backend_->Usage(0);
  auto buffer = backend_->Allocate(Request(1));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const uint64_t reserved = (*buffer)->reserved_size();
  EXPECT_GE(reserved, 1u);
  if (GetParam().exact_rounding) {
    EXPECT_EQ(reserved, backend_->RoundedSize(0, 1, false));
  }
  EXPECT_EQ(backend_->Usage(0).used_bytes, before.used_bytes + reserved);
  buffer->reset();
  EXPECT_EQ(backend_->Usage(0).used_bytes, before.used_bytes);
}

TEST_P(BackendTest, RefusesWhenFullAndSaysHowFull) {
  // Nearly all of it (a CUDA buffer carries an 8-byte fence word after its bytes).
  const uint64_t capacity = backend_->devices()[0].capacity_bytes;
  auto big = backend_->Allocate(Request(capacity - 4096));
  ASSERT_TRUE(big.ok()) << big.status();
  auto more = backend_->Allocate(Request(8192, "other"));
  ASSERT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RefusalOf(more.status()), Refusal::kOutOfMemory) << more.status();
  EXPECT_NE(std::string(more.status().message()).find("requested"), std::string::npos);
  big->reset();
  EXPECT_TRUE(backend_->Allocate(Request(8192, "other")).ok());
}

TEST_P(BackendTest, PoolFdGoesOnlyToItsTenant) {
  auto buffer = backend_->Allocate(Request(4096, "alice"));
  ASSERT_TRUE(buffer.ok());
  const ImportInfo& info = (*buffer)->import_info();
  if (info.region_id == 0) GTEST_SKIP() << "this backend gives every buffer an fd of its own";
  auto mine = backend_->ExportRegion(info.region_id, "alice");
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_TRUE(mine->fd.valid());
  EXPECT_EQ(backend_->ExportRegion(info.region_id, "mallory").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(backend_->ExportRegion(info.region_id + 1000, "alice").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(BackendTest, TenantsGetSeparatePools) {
  auto a = backend_->Allocate(Request(4096, "alice"));
  auto b = backend_->Allocate(Request(4096, "bob"));
  ASSERT_TRUE(a.ok() && b.ok());
  if ((*a)->import_info().region_id == 0) GTEST_SKIP() << "no pools: every buffer has its own fd";
  EXPECT_NE((*a)->import_info().region_id, (*b)->import_info().region_id);
}

TEST_P(BackendTest, IsolatedBufferHasAnFdOfItsOwn) {
  auto shared = backend_->Allocate(Request(10000, "alice", /*isolated=*/true));
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ((*shared)->import_info().region_id, 0u);
  auto grant = (*shared)->own_region()->Export();
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->size, (*shared)->reserved_size());
  auto pooled = backend_->Allocate(Request(10000, "alice"));
  ASSERT_TRUE(pooled.ok());
  if ((*pooled)->import_info().region_id != 0) {
    EXPECT_EQ((*pooled)->own_region(), nullptr) << "a buffer in a region has no fd of its own";
  }
}

// Range leases (docs/fast-path.md), where the backend leases them: a range
// takes its bytes from the capacity, a published block of it outlives it,
// and every byte comes back once.
TEST_P(BackendTest, LeasedRangeGivesEveryByteBackAndItsPublishedBlocksOutliveIt) {
  const uint64_t limit = backend_->RangeLimit(0);
  if (limit == 0) GTEST_SKIP() << GetParam().name << " leases no ranges";
  const uint64_t g = backend_->RangeGranularity(0);
  const uint64_t length = std::min<uint64_t>(limit, uint64_t{8} << 20) / g * g;
  const DeviceUsage before = backend_->Usage(0);
  auto range = backend_->LeaseRange(RangeRequest{0, "t", length});
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ((*range)->length(), length);
  EXPECT_EQ(backend_->Usage(0).used_bytes, before.used_bytes + length);
  // The whole range can be fetched and mapped as its region says.
  const ImportInfo& whole = (*range)->import_info();
  EXPECT_NE(whole.region_id, 0u);
  EXPECT_TRUE(backend_->ExportRegion(whole.region_id, "t").ok());
  EXPECT_FALSE(backend_->ExportRegion(whole.region_id, "other").ok()) << "another tenant's region";

  auto block = (*range)->Carve(g, 4 * g, 4 * g - 8, 0x1234);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ((*block)->import_info().offset, whole.offset + g);
  range->reset();  // the range goes; the published block stays
  EXPECT_EQ(backend_->Usage(0).used_bytes, before.used_bytes + 4 * g);
  block->reset();
  EXPECT_EQ(backend_->Usage(0).used_bytes, before.used_bytes);
  // The arena has all of it again: a range of the same length fits at once.
  auto again = backend_->LeaseRange(RangeRequest{0, "t", length});
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST_P(BackendTest, ARangeBeyondTheCapacityIsOutOfMemory) {
  const uint64_t limit = backend_->RangeLimit(0);
  if (limit == 0) GTEST_SKIP() << GetParam().name << " leases no ranges";
  const uint64_t capacity = backend_->devices()[0].capacity_bytes;
  const uint64_t g = backend_->RangeGranularity(0);
  std::vector<std::unique_ptr<LeasedRange>> held;
  absl::Status refused;
  for (uint64_t taken = 0; taken <= capacity; taken += limit / g * g) {
    auto r = backend_->LeaseRange(RangeRequest{0, "t", limit / g * g});
    if (!r.ok()) {
      refused = r.status();
      break;
    }
    held.push_back(std::move(*r));
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(RefusalOf(refused), Refusal::kOutOfMemory);
  held.clear();
  EXPECT_EQ(backend_->Usage(0).used_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendTest, ::testing::ValuesIn(BackendsUnderTest()),
                         [](const auto& p) { return p.param.name; });

// Host-specific: the memory behind the descriptors.

void* Map(int fd, uint64_t offset, uint64_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  EXPECT_NE(p, MAP_FAILED);
  return p;
}

TEST(HostBackend, ArenaFdIsSealedAgainstResizing) {
  HostBackend backend(1 << 20);
  auto buffer = backend.Allocate({0, "t", 4096, false});
  ASSERT_TRUE(buffer.ok());
  auto pool = backend.ExportRegion((*buffer)->import_info().region_id, "t");
  ASSERT_TRUE(pool.ok());
  EXPECT_NE(ftruncate(pool->fd.get(), 0), 0) << "a client could shrink the arena";
  EXPECT_NE(ftruncate(pool->fd.get(), 1 << 30), 0) << "a client could grow the arena";
}

TEST(HostBackend, TwoMappingsSeeTheSameBytes) {
  HostBackend backend(1 << 20);
  auto buffer = backend.Allocate({0, "t", 8192, false});
  ASSERT_TRUE(buffer.ok());
  const ImportInfo info = (*buffer)->import_info();
  auto fd1 = backend.ExportRegion(info.region_id, "t");
  auto fd2 = backend.ExportRegion(info.region_id, "t");
  auto* a = static_cast<unsigned char*>(Map(fd1->fd.get(), info.offset, info.mapped_size));
  auto* b = static_cast<unsigned char*>(Map(fd2->fd.get(), info.offset, info.mapped_size));
  a[0] = 0x5a;
  a[8191] = 0xa5;
  EXPECT_EQ(b[0], 0x5a);
  EXPECT_EQ(b[8191], 0xa5);
  munmap(a, info.mapped_size);
  munmap(b, info.mapped_size);
}

TEST(HostBackend, FreedRangesAreZeroedAndTheirPagesReleased) {
  HostBackend backend(1 << 20);
  auto buffer = backend.Allocate({0, "t", 64 * 1024, false});
  ASSERT_TRUE(buffer.ok());
  const ImportInfo info = (*buffer)->import_info();
  auto pool = backend.ExportRegion(info.region_id, "t");
  backend.RegionHeld(info.region_id);  // as a session that received it: the arena stays
  auto* p = static_cast<unsigned char*>(Map(pool->fd.get(), info.offset, info.mapped_size));
  std::memset(p, 0xee, info.mapped_size);
  EXPECT_GE(backend.Usage(0).reserved_bytes, info.mapped_size);
  munmap(p, info.mapped_size);
  buffer->reset();
  EXPECT_EQ(backend.Usage(0).reserved_bytes, 0u);
  auto again = backend.Allocate({0, "t", 64 * 1024, false});
  ASSERT_TRUE(again.ok());
  ASSERT_EQ((*again)->import_info().offset, info.offset);
  p = static_cast<unsigned char*>(Map(pool->fd.get(), info.offset, info.mapped_size));
  for (uint64_t i = 0; i < info.mapped_size; ++i) ASSERT_EQ(p[i], 0) << "at " << i;
  munmap(p, info.mapped_size);
}

TEST(HostBackend, ATenantsArenaGoesOnceEmptyAndNoSessionHoldsIt) {
  HostBackend backend(1 << 20);
  auto a = backend.Allocate({0, "t", 4096, false});
  ASSERT_TRUE(a.ok()) << a.status();
  const RegionId arena = (*a)->import_info().region_id;
  backend.RegionHeld(arena);  // a session received its descriptor
  a->reset();
  EXPECT_TRUE(backend.ExportRegion(arena, "t").ok()) << "a session may still map it";
  auto b = backend.Allocate({0, "t", 4096, false});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->import_info().region_id, arena);
  b->reset();
  EXPECT_TRUE(backend.ExportRegion(arena, "t").ok());
  backend.RegionUnheld(arena);
  EXPECT_EQ(backend.ExportRegion(arena, "t").status().code(), absl::StatusCode::kNotFound);
  // The tenant's next buffer is in a new arena; one nobody received goes as
  // soon as its last buffer does, and a leased range keeps it as a buffer does.
  auto c = backend.Allocate({0, "t", 4096, false});
  ASSERT_TRUE(c.ok()) << c.status();
  const RegionId second = (*c)->import_info().region_id;
  EXPECT_NE(second, arena) << "region ids are never reused";
  auto range = backend.LeaseRange(RangeRequest{0, "t", 64 * 1024});
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ((*range)->import_info().region_id, second);
  c->reset();
  EXPECT_TRUE(backend.ExportRegion(second, "t").ok()) << "the range is still in it";
  range->reset();
  EXPECT_EQ(backend.ExportRegion(second, "t").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend.Usage(0).used_bytes, 0u);
  // Another tenant's arena is its own: it neither keeps nor loses this one.
  auto other = backend.Allocate({0, "u", 4096, false});
  ASSERT_TRUE(other.ok()) << other.status();
  auto d = backend.Allocate({0, "t", 4096, false});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE((*d)->import_info().region_id, (*other)->import_info().region_id);
}

// Buffers of one tenant made and freed from several threads at once, the
// arena going and coming between them: each is served from an arena that its
// tenant's clients can fetch for as long as the buffer lives.
TEST(HostBackend, ArenasThatGoAndComeServeEveryBufferFromALiveOne) {
  HostBackend backend(64 << 20);
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        auto b = backend.Allocate({0, "t", 4096, false});
        if (!b.ok() || !backend.ExportRegion((*b)->import_info().region_id, "t").ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(backend.Usage(0).used_bytes, 0u);
}

TEST(HostBackend, IsolatedFdExposesNothingBeyondItsBuffer) {
  HostBackend backend(1 << 20);
  auto secret = backend.Allocate({0, "alice", 4096, false});
  auto shared = backend.Allocate({0, "alice", 4096, true});
  ASSERT_TRUE(secret.ok() && shared.ok());
  auto grant = (*shared)->own_region()->Export();
  ASSERT_TRUE(grant.ok());
  struct stat st {};
  ASSERT_EQ(fstat(grant->fd.get(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), (*shared)->reserved_size());
  EXPECT_NE(ftruncate(grant->fd.get(), 1 << 20), 0);
}

// cuda-arena: buffers are ranges of a few slabs, which grow geometrically.
TEST(BackendTest_cuda_arena, RangesShareASlabAndFreedRangesComeBack) {
  std::string why;
  std::unique_ptr<Backend> backend = MakeBackend("cuda_arena", &why);
  if (!backend) GTEST_SKIP() << why;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  std::vector<std::unique_ptr<BackendBuffer>> held;
  for (int i = 0; i < 3; ++i) {
    auto b = backend->Allocate({0, "t", 1 * kMiB, false});
    ASSERT_TRUE(b.ok()) << b.status();
    held.push_back(std::move(*b));
  }
  const ImportInfo first = held[0]->import_info();
  EXPECT_EQ(first.kind, ImportKind::kCudaArena);
  for (const auto& b : held) {
    EXPECT_EQ(b->import_info().region_id, first.region_id) << "one slab holds them all";
    EXPECT_EQ(b->import_info().mapped_size, 1 * kMiB);
  }
  EXPECT_NE(held[1]->import_info().offset, held[0]->import_info().offset);
  EXPECT_NE(held[2]->import_info().offset, held[1]->import_info().offset);
  const DeviceUsage u = backend->Usage(0);
  EXPECT_EQ(u.used_bytes, 3 * kMiB);
  EXPECT_GE(u.reserved_bytes, 64 * kMiB) << "the first slab is 64 MiB";
  const uint64_t middle = held[1]->import_info().offset;
  held[1].reset();
  EXPECT_EQ(backend->Usage(0).used_bytes, 2 * kMiB);
  auto again = backend->Allocate({0, "t", 1 * kMiB, false});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->import_info().offset, middle) << "best fit takes the hole back";
  // More than the first slab holds: a second, larger slab.
  auto big = backend->Allocate({0, "t", 100 * kMiB, false});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_NE((*big)->import_info().region_id, first.region_id);
  auto slab = backend->ExportRegion((*big)->import_info().region_id, "t");
  ASSERT_TRUE(slab.ok()) << slab.status();
  EXPECT_EQ(slab->kind, FdKind::kCudaSlab);
  EXPECT_GE(slab->size, 100 * kMiB);
  EXPECT_EQ(backend->ExportRegion((*big)->import_info().region_id, "u").status().code(),
            absl::StatusCode::kNotFound);
  held.clear();
  again->reset();
  big->reset();
  EXPECT_EQ(backend->Usage(0).used_bytes, 0u);
}

// cuda-arena: a slab goes back to the device once no buffer uses it and no
// session holds its descriptor, and is then no longer exported.
TEST(BackendTest_cuda_arena, EmptySlabsGoBackOnceNoSessionHoldsThem) {
  std::string why;
  std::unique_ptr<Backend> backend = MakeBackend("cuda_arena", &why);
  if (!backend) GTEST_SKIP() << why;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t before = backend->Usage(0).reserved_bytes;
  auto a = backend->Allocate({0, "t", 1 * kMiB, false});
  ASSERT_TRUE(a.ok()) << a.status();
  const RegionId slab = (*a)->import_info().region_id;
  const RegionId fences = (*a)->import_info().fence_region_id;
  const uint64_t with_slab = backend->Usage(0).reserved_bytes;
  EXPECT_GE(with_slab, before + 64 * kMiB);
  // A session was told of the buffer: it holds the slab and the fence page.
  backend->RegionHeld(slab);
  backend->RegionHeld(fences);
  a->reset();
  EXPECT_EQ(backend->Usage(0).reserved_bytes, with_slab) << "a session may still map them";
  EXPECT_TRUE(backend->ExportRegion(slab, "t").ok());
  backend->RegionUnheld(slab);
  EXPECT_EQ(backend->Usage(0).reserved_bytes, with_slab - 64 * kMiB) << "the page is held";
  EXPECT_EQ(backend->ExportRegion(slab, "t").status().code(), absl::StatusCode::kNotFound);
  backend->RegionUnheld(fences);
  EXPECT_EQ(backend->Usage(0).reserved_bytes, before);
  EXPECT_EQ(backend->ExportRegion(fences, "t").status().code(), absl::StatusCode::kNotFound);
  // A slab nobody received goes as soon as its last buffer does.
  auto b = backend->Allocate({0, "t", 1 * kMiB, false});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*b)->import_info().region_id, slab) << "region ids are never reused";
  EXPECT_EQ(backend->Usage(0).reserved_bytes, with_slab);
  b->reset();
  EXPECT_EQ(backend->Usage(0).reserved_bytes, before);
}

// cuda-arena and cuda-pool: a tenant's fence page, and on the pool path its
// CUDA pool, stay while a buffer uses them or a session holds them, then go;
// the tenant's next buffer gets new ones. Another tenant's neither keep nor
// lose them.
TEST(BackendTest_cuda, FencePagesAndPoolsGoOnceUnusedAndUnheld) {
  for (const char* name : {"cuda_arena", "cuda_pool"}) {
    SCOPED_TRACE(name);
    std::string why;
    std::unique_ptr<Backend> backend = MakeBackend(name, &why);
    if (!backend) GTEST_SKIP() << why;
    const bool pool = std::string(name) == "cuda_pool";
    const uint64_t before = backend->Usage(0).reserved_bytes;
    auto other = backend->Allocate({0, "u", 4096, false});
    ASSERT_TRUE(other.ok()) << other.status();
    const uint64_t with_other = backend->Usage(0).reserved_bytes;
    auto a = backend->Allocate({0, "t", 4096, false});
    ASSERT_TRUE(a.ok()) << a.status();
    const RegionId fences = (*a)->import_info().fence_region_id;
    const RegionId region = (*a)->import_info().region_id;
    ASSERT_NE(fences, 0u);
    backend->RegionHeld(fences);
    backend->RegionHeld(region);
    a->reset();
    EXPECT_TRUE(backend->ExportRegion(fences, "t").ok()) << "a session holds it";
    auto b = backend->Allocate({0, "t", 4096, false});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->import_info().fence_region_id, fences) << "the held page serves again";
    EXPECT_EQ((*b)->import_info().region_id, region);
    b->reset();
    backend->RegionUnheld(fences);
    backend->RegionUnheld(region);
    EXPECT_EQ(backend->ExportRegion(fences, "t").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(backend->ExportRegion(region, "t").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(backend->Usage(0).reserved_bytes, with_other);
    // Unheld, they go with the tenant's last buffer.
    auto c = backend->Allocate({0, "t", 4096, false});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE((*c)->import_info().fence_region_id, fences) << "region ids are never reused";
    if (pool) {
      EXPECT_NE((*c)->import_info().region_id, region);
    }
    c->reset();
    EXPECT_EQ(backend->Usage(0).reserved_bytes, with_other);
    EXPECT_TRUE(backend->ExportRegion((*other)->import_info().fence_region_id, "u").ok());
    other->reset();
    EXPECT_EQ(backend->Usage(0).reserved_bytes, before);
  }
}

// Buffers of one tenant made and freed from several threads at once, its
// fence page and pool going and coming between them: each is served from
// ones its tenant's clients can fetch for as long as the buffer lives.
TEST(BackendTest_cuda, FencePagesAndPoolsThatGoAndComeServeEveryBuffer) {
  for (const char* name : {"cuda_arena", "cuda_pool"}) {
    SCOPED_TRACE(name);
    std::string why;
    std::unique_ptr<Backend> backend = MakeBackend(name, &why);
    if (!backend) GTEST_SKIP() << why;
    constexpr int kThreads = 4;
    constexpr int kRounds = 100;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kRounds; ++i) {
          auto b = backend->Allocate({0, "t", 4096, false});
          if (!b.ok() || !backend->ExportRegion((*b)->import_info().fence_region_id, "t").ok() ||
              !backend->ExportRegion((*b)->import_info().region_id, "t").ok()) {
            failures++;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(backend->Usage(0).used_bytes, 0u);
  }
}

// cuda-arena: every live arena or pool buffer has a slot in its tenant's fence
// page; when they are all taken, the refusal is a count limit, not memory.
TEST(BackendTest_cuda_arena, FenceSlotsRunOutAsALimitAndComeBack) {
  std::string why;
  std::unique_ptr<Backend> backend = MakeBackend("cuda_arena", &why);
  if (!backend) GTEST_SKIP() << why;
  std::vector<std::unique_ptr<BackendBuffer>> held;
  absl::Status refused;
  for (;;) {
    auto b = backend->Allocate({0, "t", 512, false});
    if (!b.ok()) {
      refused = b.status();
      break;
    }
    held.push_back(std::move(*b));
    ASSERT_LT(held.size(), size_t{1} << 22) << "no limit reached";
  }
  EXPECT_EQ(RefusalOf(refused), Refusal::kLimit) << refused;
  ASSERT_FALSE(held.empty());
  auto page = backend->ExportRegion(held[0]->import_info().fence_region_id, "t");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->kind, FdKind::kCudaFences);
  EXPECT_EQ(held.size() * 8, page->size) << "one 8-byte word per live buffer";
  EXPECT_TRUE(backend->Allocate({0, "u", 512, false}).ok()) << "another tenant has its own page";
  const uint64_t offset = held.back()->import_info().fence_offset;
  held.pop_back();
  auto again = backend->Allocate({0, "t", 512, false});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->import_info().fence_offset, offset) << "the freed slot came back";
}

// cuda-vmm: a freed tenant-private allocation waits for its tenant's next
// buffer of the same size; one shared across tenants is never reused.
TEST(BackendTest_cuda_vmm, FreedAllocationsAreReusedByTheirTenantOnly) {
  std::string why;
  std::unique_ptr<Backend> backend = MakeBackend("cuda_vmm", &why);
  if (!backend) GTEST_SKIP() << why;
  constexpr uint64_t kSize = uint64_t{6} << 20;
  auto reserved = [&] { return backend->Usage(0).reserved_bytes; };
  const uint64_t r0 = reserved();
  auto a = backend->Allocate({0, "t", kSize, false});
  ASSERT_TRUE(a.ok()) << a.status();
  const uint64_t size = (*a)->reserved_size();
  EXPECT_EQ(reserved(), r0 + size);
  a->reset();
  EXPECT_EQ(backend->Usage(0).used_bytes, 0u);
  EXPECT_EQ(reserved(), r0 + size) << "kept for the tenant";
  auto again = backend->Allocate({0, "t", kSize, false});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(reserved(), r0 + size) << "the kept allocation came back";
  auto fd = (*again)->own_region()->Export();
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto other = backend->Allocate({0, "u", kSize, false});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(reserved(), r0 + 2 * size) << "never another tenant's";
  auto shared = backend->Allocate({0, "t", kSize, true});
  ASSERT_TRUE(shared.ok());
  const uint64_t with_shared = reserved();
  shared->reset();
  EXPECT_EQ(reserved(), with_shared - size) << "a cross-tenant share is not kept";
}

}  // namespace
}  // namespace gpubroker
