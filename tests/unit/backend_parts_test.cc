// The pieces every backend is built of: the capacity guard and the region table.
#include <atomic>
#include <thread>
#include <vector>

#include "common/refusal.h"
#include "common/unix_socket.h"
#include "daemon/backend/capacity_guard.h"
#include "daemon/backend/region_table.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

TEST(CapacityGuard, ClaimsHoldBytesUntilTheyGoAndRefusalsSayHowFull) {
  auto guard = std::make_shared<CapacityGuard>(1000, "device X");
  auto a = guard->Take(600);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(guard->used(), 600u);
  auto b = guard->Take(500);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(RefusalOf(b.status()), Refusal::kOutOfMemory);
  EXPECT_EQ(b.status().message(),
            "device X full: requested 500 bytes, 600 of 1000 in use, 400 free");
  a->Resize(700);  // what the memory really took
  EXPECT_EQ(guard->used(), 700u);
  {
    CapacityGuard::Claim moved = *std::move(a);
    EXPECT_EQ(guard->used(), 700u);
  }
  EXPECT_EQ(guard->used(), 0u) << "a claim gives its bytes back when it goes";
  EXPECT_FALSE(guard->Take(1001).ok());
  EXPECT_TRUE(guard->Take(1000).ok());
  EXPECT_EQ(guard->used(), 0u);
}

TEST(CapacityGuard, ConcurrentClaimsNeverPassTheCapacity) {
  auto guard = std::make_shared<CapacityGuard>(64 * 100, "pool");
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto claim = guard->Take(64 * (1 + i % 7));
        if (!claim.ok()) continue;
        uint64_t seen = guard->used();
        uint64_t before = peak.load();
        while (seen > before && !peak.compare_exchange_weak(before, seen)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), guard->capacity());
  EXPECT_EQ(guard->used(), 0u);
}

class FakeRegion final : public ExportedRegion {
 public:
  explicit FakeRegion(uint64_t size) : size_(size) {}
  absl::StatusOr<FdGrant> Export() const override {
    auto fd = DupFd(0);
    if (!fd.ok()) return fd.status();
    return FdGrant{std::move(*fd), FdKind::kHostArena, size_, "host"};
  }
  void Unheld() const override { unheld++; }
  mutable std::atomic<int> unheld{0};

 private:
  uint64_t size_;
};

TEST(RegionTable, ExportsARegionToItsOwnTenantOnly) {
  RegionTable table;
  const RegionId a = table.Add("alice", std::make_shared<FakeRegion>(10));
  const RegionId b = table.Add("bob", std::make_shared<FakeRegion>(20));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  auto mine = table.Export(a, "alice");
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->size, 10u);
  EXPECT_TRUE(mine->fd.valid());
  const auto theirs = table.Export(b, "alice");
  const auto none = table.Export(b + 100, "alice");
  EXPECT_EQ(theirs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  // Another tenant's region reads exactly like a missing one.
  EXPECT_EQ(theirs.status().message(), "no region " + std::to_string(b) + " for this tenant");
  EXPECT_EQ(none.status().message(), "no region " + std::to_string(b + 100) + " for this tenant");
}

// A region counts the sessions that received it; the last one to go says so
// once, and a removed region is no longer exported.
TEST(RegionTable, CountsItsHoldersAndSaysWhenTheLastGoes) {
  RegionTable table;
  auto region = std::make_shared<FakeRegion>(10);
  const RegionId id = table.Add("alice", region);
  table.AddHolder(id);
  table.AddHolder(id);
  EXPECT_EQ(table.Holders(id), 2u);
  table.DropHolder(id);
  EXPECT_EQ(region->unheld.load(), 0);
  table.DropHolder(id);
  EXPECT_EQ(region->unheld.load(), 1);
  EXPECT_EQ(table.Holders(id), 0u);
  table.DropHolder(id);  // more drops than holders: ignored
  EXPECT_EQ(region->unheld.load(), 1);
  table.AddHolder(id + 7);  // unknown ids: ignored
  EXPECT_EQ(table.Holders(id + 7), 0u);
  table.Remove(id);
  EXPECT_EQ(table.Export(id, "alice").status().code(), absl::StatusCode::kNotFound);
  table.AddHolder(id);
  EXPECT_EQ(table.Holders(id), 0u);
}

}  // namespace
}  // namespace gpubroker
