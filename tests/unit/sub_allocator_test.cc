// The client's sub-allocator over leased ranges: blocks never overlap, the
// books add up at every quiescent point (check_books walks every structure),
// ranges are leased and returned as the retention says, a refused lease
// leaves nothing behind, and thread caches lose nothing across threads.
#include "client/src/sub_allocator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "gtest/gtest.h"

namespace gpubroker::detail {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The daemon's side, in miniature: ranges with ids, a byte budget (a quota).
class FakeLessor {
 public:
  explicit FakeLessor(uint64_t budget = UINT64_MAX) : budget_(budget) {}

  SubAllocator::Range Lease(uint64_t min_length, bool small) {
    std::lock_guard lock(mu_);
    if (held_bytes_ + min_length > budget_) throw std::runtime_error("over quota");
    const uint64_t id = next_id_++;
    held_[id] = min_length;
    held_bytes_ += min_length;
    leases_.push_back({min_length, small});
    return {id, min_length};
  }
  void Return(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = held_.find(id);
    ASSERT_NE(it, held_.end()) << "returned a range it does not hold: " << id;
    held_bytes_ -= it->second;
    held_.erase(it);
    returns_++;
  }
  uint64_t held_bytes() {
    std::lock_guard lock(mu_);
    return held_bytes_;
  }
  size_t held_ranges() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  std::vector<std::pair<uint64_t, bool>> leases() {
    std::lock_guard lock(mu_);
    return leases_;
  }
  void set_budget(uint64_t b) {
    std::lock_guard lock(mu_);
    budget_ = b;
  }

  SubAllocator Make(SubAllocator::Options o = {}) {
    return SubAllocator(
        o, [this](uint64_t want, uint64_t, bool small) { return Lease(want, small); },
        [this](uint64_t id) { Return(id); });
  }

 private:
  std::mutex mu_;
  uint64_t budget_;
  uint64_t next_id_ = 1;
  uint64_t held_bytes_ = 0;
  uint64_t returns_ = 0;
  std::map<uint64_t, uint64_t> held_;
  std::vector<std::pair<uint64_t, bool>> leases_;
};

SubAllocator::Options Verified() {
  SubAllocator::Options o;
  o.verify = true;
  return o;
}

TEST(SubAllocatorSizes, ClassesAreAlignedMonotonicAndWasteAtMostAQuarter) {
  uint64_t last = 0;
  for (uint64_t size = 1; size <= 4 * kMiB; size += (size < 8192 ? 1 : 977)) {
    const uint64_t r = SubAllocator::RoundedSize(size);
    ASSERT_GE(r, size);
    ASSERT_EQ(r % SubAllocator::kAlignment, 0u) << size;
    ASSERT_GE(r, last) << size;
    if (size > 4096) {
      ASSERT_LE(r - size, size / 4 + SubAllocator::kAlignment) << size;
    }
    last = r;
  }
  EXPECT_EQ(SubAllocator::RoundedSize(1), 512u);
  EXPECT_EQ(SubAllocator::RoundedSize(4096), 4096u);
  EXPECT_EQ(SubAllocator::RoundedSize(4097), 5120u);
  EXPECT_EQ(SubAllocator::RoundedSize(kMiB), kMiB);
  EXPECT_EQ(SubAllocator::RoundedSize(kMiB + 1), kMiB + 512);
}

TEST(SubAllocator, BlocksNeverOverlapAndTheBooksAddUpThroughout) {
  FakeLessor lessor;
  SubAllocator a = lessor.Make(Verified());
  std::mt19937_64 rng(1);
  std::vector<SubAllocator::Block> live;
  for (int i = 0; i < 4000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      a.Free(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      const uint64_t size = rng() % 8 == 0 ? 1 + rng() % (40 * kMiB) : 1 + rng() % (64 << 10);
      const auto b = a.Allocate(size);
      ASSERT_GE(b.size, size);
      live.push_back(b);
    }
    if (i % 250 == 0) {
      ASSERT_EQ(a.check_books(), "") << "after " << i << " steps";
    }
  }
  const auto s = a.stats();
  uint64_t bytes = 0;
  for (const auto& b : live) bytes += b.size;
  EXPECT_EQ(s.in_use_blocks, live.size());
  EXPECT_EQ(s.in_use_bytes, bytes);
  EXPECT_EQ(s.range_bytes, s.in_use_bytes + s.cached_bytes + s.free_bytes);
  EXPECT_EQ(s.range_bytes, lessor.held_bytes());
  for (const auto& b : live) a.Free(b);
  ASSERT_EQ(a.check_books(), "");
  EXPECT_EQ(a.stats().in_use_bytes, 0u);
  EXPECT_EQ(a.stats().free_bytes, a.stats().range_bytes);  // every range whole again
  EXPECT_EQ(a.stats().empty_ranges, a.stats().ranges);
}

TEST(SubAllocator, SmallRangesGrowLargeOnesFitAndEmptyOnesGoBeyondTheRetention) {
  FakeLessor lessor;
  SubAllocator::Options o = Verified();
  o.retain_bytes = 0;
  SubAllocator a = lessor.Make(o);
  // Small blocks: the first range is small_range_min; the next twice that.
  std::vector<SubAllocator::Block> small;
  for (int i = 0; i < 6; ++i) small.push_back(a.Allocate(kMiB));
  // A large block of its own size, rounded to 2 MiB.
  const auto big = a.Allocate(65 * kMiB);
  auto leases = lessor.leases();
  ASSERT_GE(leases.size(), 3u);
  EXPECT_EQ(leases[0], std::make_pair(2 * kMiB, true));
  EXPECT_EQ(leases[1], std::make_pair(4 * kMiB, true));
  EXPECT_EQ(leases.back(), std::make_pair(66 * kMiB, false));
  // With no retention, a range goes back as soon as it is empty.
  a.Free(big);
  EXPECT_EQ(lessor.held_bytes(), a.stats().range_bytes);
  EXPECT_EQ(a.stats().returns, 1u);
  for (const auto& b : small) a.Free(b);
  EXPECT_EQ(lessor.held_ranges(), 0u);
  EXPECT_EQ(a.stats().ranges, 0u);
  EXPECT_EQ(a.check_books(), "");
}

TEST(SubAllocator, RetainedRangesServeTheNextAllocationsWithoutALease) {
  FakeLessor lessor;
  SubAllocator a = lessor.Make(Verified());
  for (int i = 0; i < 100; ++i) {
    const auto b = a.Allocate(64 * kMiB);
    a.Free(b);
  }
  EXPECT_EQ(a.stats().leases, 1u);  // the caching allocator's point
  EXPECT_EQ(a.stats().allocations, 100u);
  a.Trim();
  EXPECT_EQ(lessor.held_ranges(), 0u);
  EXPECT_EQ(a.check_books(), "");
}

TEST(SubAllocator, ARefusedLeaseGivesBackWhatIsEmptyRetriesAndLeavesTheBooksAsTheyWere) {
  FakeLessor lessor(64 * kMiB);
  SubAllocator a = lessor.Make(Verified());
  auto b = a.Allocate(40 * kMiB);  // a 40 MiB range
  a.Free(b);                       // kept (retention): 40 MiB of 64 held, empty
  // 50 MiB needs a new range; only 24 MiB are left: the empty one goes back first.
  const auto c = a.Allocate(50 * kMiB);
  EXPECT_EQ(lessor.held_bytes(), 50 * kMiB);
  EXPECT_EQ(a.stats().returns, 1u);
  // 40 MiB more cannot be had at all: refused, and nothing changed.
  const auto before = a.stats();
  EXPECT_THROW(a.Allocate(40 * kMiB), std::runtime_error);
  const auto after = a.stats();
  EXPECT_EQ(after.range_bytes, before.range_bytes);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(lessor.held_bytes(), 50 * kMiB);
  EXPECT_EQ(a.check_books(), "");
  a.Free(c);
}

TEST(SubAllocator, TheLeaseRunsWithNoLockHeld) {
  SubAllocator* self = nullptr;
  uint64_t next = 1;
  SubAllocator a(
      {},
      [&](uint64_t n, uint64_t, bool) {
        (void)self->stats();  // would deadlock if the allocator held its lock here
        return SubAllocator::Range{next++, n};
      },
      [](uint64_t) {});
  self = &a;
  const auto b = a.Allocate(4096);
  a.Free(b);
  EXPECT_EQ(a.check_books(), "");
}

TEST(SubAllocator, AFreeOfABlockThatIsNotLiveIsRefused) {
  FakeLessor lessor;
  SubAllocator a = lessor.Make(Verified());
  const auto b = a.Allocate(4096);
  a.Free(b);
  EXPECT_THROW(a.Free(b), std::logic_error);
  EXPECT_THROW(a.Free({b.range_id, b.offset + 512, 512}), std::logic_error);
  EXPECT_EQ(a.check_books(), "");
}

TEST(SubAllocator, ThreadCachesServeRepeatsAndLoseNothingAcrossThreads) {
  FakeLessor lessor;
  SubAllocator a = lessor.Make();
  // Repeats in one thread come from its cache.
  for (int i = 0; i < 1000; ++i) a.Free(a.Allocate(4096));
  EXPECT_GE(a.stats().cache_hits, 999u);
  EXPECT_EQ(a.check_books(), "");

  // Eight threads allocate; each frees a share of what the others allocated.
  constexpr int kThreads = 8;
  std::mutex mu;
  std::vector<SubAllocator::Block> shared;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 7);
      std::vector<SubAllocator::Block> mine;
      for (int i = 0; i < 20000; ++i) {
        const uint64_t size = rng() % 16 == 0 ? 1 + rng() % (4 * kMiB) : 1 + rng() % 65536;
        mine.push_back(a.Allocate(size));
        if (mine.size() > 64 || rng() % 2 == 0) {
          const size_t k = rng() % mine.size();
          if (rng() % 4 == 0) {
            std::lock_guard lock(mu);
            shared.push_back(mine[k]);
          } else {
            a.Free(mine[k]);
          }
          mine.erase(mine.begin() + static_cast<long>(k));
        }
        if (rng() % 8 == 0) {
          SubAllocator::Block other{};
          {
            std::lock_guard lock(mu);
            if (!shared.empty()) {
              other = shared.back();
              shared.pop_back();
            }
          }
          if (other) a.Free(other);
        }
      }
      for (const auto& b : mine) a.Free(b);
      running--;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& b : shared) a.Free(b);
  ASSERT_EQ(a.check_books(), "");
  const auto s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.in_use_blocks, 0u);
  // The workers' caches went back when they ended; this thread's remains.
  EXPECT_LE(s.cached_bytes, SubAllocator::Options{}.thread_cache_bytes);
  EXPECT_EQ(s.range_bytes, lessor.held_bytes());
  a.Trim();
  EXPECT_EQ(lessor.held_ranges(), 0u);
  EXPECT_EQ(a.check_books(), "");
}

TEST(SubAllocator, TrimFlushesEveryThreadsCache) {
  FakeLessor lessor;
  SubAllocator::Options o;
  o.retain_bytes = 0;
  SubAllocator a = lessor.Make(o);
  std::atomic<bool> freed{false}, done{false};
  std::thread holder([&] {
    a.Free(a.Allocate(8192));  // cached in this thread, which stays alive
    freed = true;
    while (!done) std::this_thread::yield();
  });
  while (!freed) std::this_thread::yield();
  EXPECT_EQ(a.stats().cached_blocks, 1u);
  EXPECT_EQ(lessor.held_ranges(), 1u);
  a.Trim();
  EXPECT_EQ(a.stats().cached_blocks, 0u);
  EXPECT_EQ(lessor.held_ranges(), 0u);
  EXPECT_EQ(a.check_books(), "");
  done = true;
  holder.join();
}

}  // namespace
}  // namespace gpubroker::detail
