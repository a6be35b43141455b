// The client's cache of mappings by allocation id: hits hand the mapping
// over, the bounds evict least recently kept first and say which, and every
// mapping is unmapped exactly once whichever way it leaves.
#include "client/src/mapping_cache.h"

#include <set>

#include "gtest/gtest.h"

namespace gpubroker::detail {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

struct Unmaps {
  std::multiset<int> ids;
};

class FakeMapping final : public CachedMapping {
 public:
  FakeMapping(Unmaps& u, int id, uint64_t size) : u_(u), id_(id), size_(size) {}
  ~FakeMapping() override { u_.ids.insert(id_); }
  void* data() const override { return nullptr; }
  uint64_t size() const override { return size_; }
  int id() const { return id_; }

 private:
  Unmaps& u_;
  int id_;
  uint64_t size_;
};

std::unique_ptr<CachedMapping> Map(Unmaps& u, int id, uint64_t size) {
  return std::make_unique<FakeMapping>(u, id, size);
}

TEST(MappingCache, AHitHandsTheMappingOverAndAMissSaysSo) {
  Unmaps u;
  MappingCache c({});
  EXPECT_EQ(c.Take(1), nullptr);
  EXPECT_TRUE(c.Keep(1, Map(u, 1, 40 * kGiB), nullptr));
  EXPECT_EQ(c.stats().mapped_bytes, 40 * kGiB);
  auto m = c.Take(1);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(static_cast<FakeMapping&>(*m).id(), 1);
  EXPECT_TRUE(u.ids.empty()) << "a hit must not unmap";
  EXPECT_EQ(c.Take(1), nullptr) << "taken means gone from the cache";
  const auto s = c.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.mapped_bytes, 0u);
}

TEST(MappingCache, BoundsEvictTheLeastRecentlyKeptAndNameThem) {
  Unmaps u;
  MappingCache::Options o;
  o.max_bytes = 100 * kGiB;
  o.max_entries = 3;
  MappingCache c(o);
  std::vector<uint64_t> evicted;
  c.Keep(1, Map(u, 1, 40 * kGiB), &evicted);
  c.Keep(2, Map(u, 2, 40 * kGiB), &evicted);
  EXPECT_TRUE(evicted.empty());
  c.Keep(3, Map(u, 3, 40 * kGiB), &evicted);  // 120 GiB > 100: 1 goes
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});
  EXPECT_EQ(u.ids, std::multiset<int>{1});
  c.Keep(4, Map(u, 4, 1), &evicted);
  c.Keep(5, Map(u, 5, 1), &evicted);  // four entries > 3: 2 goes
  EXPECT_EQ(evicted, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(c.stats().entries, 3u);
  EXPECT_EQ(c.stats().evictions, 2u);
  // Larger than the whole cache: not kept, unmapped at once.
  EXPECT_FALSE(c.Keep(6, Map(u, 6, 200 * kGiB), &evicted));
  EXPECT_EQ(u.ids.count(6), 1u);
}

TEST(MappingCache, EvictionsOnRequestAndOfEverythingUnmapEachOnce) {
  Unmaps u;
  MappingCache c({});
  for (int i = 1; i <= 4; ++i) c.Keep(static_cast<uint64_t>(i), Map(u, i, kGiB), nullptr);
  EXPECT_TRUE(c.Evict(2));
  EXPECT_FALSE(c.Evict(2));
  EXPECT_FALSE(c.Evict(99));
  auto ids = c.EvictAll();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 3, 4}));
  EXPECT_EQ(u.ids, (std::multiset<int>{1, 2, 3, 4}));
  EXPECT_EQ(c.stats().mapped_bytes, 0u);
  EXPECT_EQ(c.stats().evictions, 4u);
}

TEST(MappingCache, KeepingAnAllocationTwiceKeepsTheNewerMapping) {
  Unmaps u;
  MappingCache c({});
  c.Keep(1, Map(u, 10, kGiB), nullptr);
  c.Keep(1, Map(u, 11, kGiB), nullptr);
  EXPECT_EQ(u.ids, std::multiset<int>{10});
  EXPECT_EQ(c.stats().mapped_bytes, kGiB);
  auto m = c.Take(1);
  EXPECT_EQ(static_cast<FakeMapping&>(*m).id(), 11);
}

TEST(MappingCache, AZeroSizedCacheKeepsNothing) {
  Unmaps u;
  MappingCache::Options o;
  o.max_entries = 0;
  MappingCache c(o);
  EXPECT_FALSE(c.enabled());
  EXPECT_FALSE(c.Keep(1, Map(u, 1, 1), nullptr));
  EXPECT_EQ(u.ids, std::multiset<int>{1});
}

}  // namespace
}  // namespace gpubroker::detail
