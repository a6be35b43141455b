// Kept allocations: memory that outlives its buffers, and is truly released
// only once no client maps it.
#include "daemon/backend/kept_allocations.h"

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

// Memory that counts how much of it is alive.
class CountedMemory final : public KeptAllocations::Memory {
 public:
  CountedMemory(uint64_t size, std::atomic<uint64_t>* alive) : size_(size), alive_(alive) {
    *alive_ += size;
  }
  ~CountedMemory() override { *alive_ -= size_; }
  uint64_t size() const override { return size_; }

 private:
  uint64_t size_;
  std::atomic<uint64_t>* alive_;
};

// The sessions that map each allocation, as the registry would know them.
class Holders final : public MappingHolders {
 public:
  void Map(AllocationId id) {
    absl::MutexLock lock(&mu_);
    held_.insert(id);
  }
  void Unmap(AllocationId id) {
    absl::MutexLock lock(&mu_);
    held_.erase(id);
  }
  bool Held(AllocationId id) const override {
    absl::MutexLock lock(&mu_);
    return held_.contains(id);
  }
  void AskToUnmap(AllocationId id) override {
    absl::MutexLock lock(&mu_);
    asked_.push_back(id);
  }
  std::vector<AllocationId> asked() const {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<AllocationId> held_ ABSL_GUARDED_BY(mu_);
  std::vector<AllocationId> asked_ ABSL_GUARDED_BY(mu_);
};

TEST(KeptAllocations, ServeTheirOwnTenantsNextBufferOfTheSameSizeOnly) {
  std::atomic<uint64_t> alive{0};
  KeptAllocations kept;
  kept.Keep("a", 7, std::make_unique<CountedMemory>(4096, &alive));
  kept.Keep("a", 8, std::make_unique<CountedMemory>(8192, &alive));
  EXPECT_EQ(kept.bytes(), 4096u + 8192u);
  EXPECT_EQ(kept.count(), 2u);

  EXPECT_FALSE(kept.Take("b", 4096)) << "another tenant never gets memory that 'a' used";
  EXPECT_FALSE(kept.Take("a", 4097)) << "only the exact size";
  auto got = kept.Take("a", 4096);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->first, 7u) << "the allocation keeps its id: clients find their mappings by it";
  EXPECT_EQ(kept.bytes(), 8192u);
  EXPECT_FALSE(kept.Take("a", 4096)) << "taken once";
  got.reset();
  EXPECT_EQ(alive.load(), 8192u);
}

TEST(KeptAllocations, DropReleasesWhatNobodyMapsAndDrainsTheRest) {
  std::atomic<uint64_t> alive{0};
  Holders holders;
  KeptAllocations kept;
  kept.set_holders(&holders);
  kept.Keep("a", 1, std::make_unique<CountedMemory>(100, &alive));
  kept.Keep("a", 2, std::make_unique<CountedMemory>(200, &alive));
  kept.Keep("b", 3, std::make_unique<CountedMemory>(300, &alive));
  holders.Map(2);

  EXPECT_EQ(kept.Drop(), 400u) << "1 and 3 go at once";
  EXPECT_EQ(alive.load(), 200u) << "2 is still mapped by a client: its memory lives on";
  EXPECT_EQ(kept.bytes(), 200u) << "and still counts";
  EXPECT_EQ(kept.draining_bytes(), 200u);
  EXPECT_EQ(holders.asked(), std::vector<AllocationId>{2}) << "its holders are asked to unmap";
  EXPECT_FALSE(kept.Take("a", 200)) << "a draining allocation serves no buffer";

  kept.Unheld(99);  // an id it does not drain: nothing
  EXPECT_EQ(kept.draining_bytes(), 200u);
  holders.Unmap(2);
  kept.Unheld(2);
  EXPECT_EQ(alive.load(), 0u);
  EXPECT_EQ(kept.bytes(), 0u);
  EXPECT_EQ(kept.draining_bytes(), 0u);
  EXPECT_EQ(kept.count(), 0u);
}

TEST(KeptAllocations, RetiredMemoryThatIsMappedDrainsFirst) {
  std::atomic<uint64_t> alive{0};
  Holders holders;
  KeptAllocations kept;
  kept.set_holders(&holders);
  kept.Retire(5, std::make_unique<CountedMemory>(64, &alive));
  EXPECT_EQ(alive.load(), 0u) << "nobody maps 5: released at once";
  EXPECT_EQ(kept.bytes(), 0u);

  holders.Map(6);
  kept.Retire(6, std::make_unique<CountedMemory>(64, &alive));
  EXPECT_EQ(alive.load(), 64u);
  EXPECT_EQ(kept.draining_bytes(), 64u);
  EXPECT_EQ(holders.asked(), std::vector<AllocationId>{6});
  kept.Retire(0, std::make_unique<CountedMemory>(32, &alive));
  EXPECT_EQ(alive.load(), 64u) << "id 0 (shared across tenants) is never mapped from a cache";
  holders.Unmap(6);
  kept.Unheld(6);
  EXPECT_EQ(alive.load(), 0u);
}

TEST(KeptAllocations, WaitDrainedReturnsOnceTheMemoryIsTrulyFree) {
  std::atomic<uint64_t> alive{0};
  Holders holders;
  KeptAllocations kept;
  kept.set_holders(&holders);
  holders.Map(1);
  kept.Keep("a", 1, std::make_unique<CountedMemory>(1000, &alive));
  kept.Drop();
  EXPECT_FALSE(kept.WaitDrained(std::chrono::milliseconds(20))) << "nobody unmapped";

  std::thread client([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    holders.Unmap(1);
    kept.Unheld(1);
  });
  EXPECT_TRUE(kept.WaitDrained(std::chrono::seconds(10)));
  EXPECT_EQ(alive.load(), 0u) << "the waiter wakes after the memory went, not before";
  client.join();
}

}  // namespace
}  // namespace gpubroker
