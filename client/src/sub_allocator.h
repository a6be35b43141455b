#pragma once

// The client's own allocator: buffers carved out of ranges of its tenant's
// memory that the client holds on lease from the daemon, with no call to the
// daemon per buffer (a CUDA caching allocator's way, over leased ranges).

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpubroker::detail {

/// Sub-allocates byte ranges that the caller leases from elsewhere.
///
/// Two pools, as in CUDA caching allocators: small blocks (up to kSmallMax,
/// rounded to size classes) come from small ranges and go through a cache per
/// thread, so that a free followed by an allocation of the same class takes
/// no shared lock; larger blocks come best-fit from large ranges, split and
/// coalesced. A range with no live block is kept while the empty ranges stay
/// within `retain_bytes`, and returned beyond that.
///
/// Thread-safe. The lease and return callbacks run with no lock held and may
/// throw (a lease refused by the daemon): Allocate then first gives back what
/// it holds empty, tries once more, and rethrows.
///
/// The books (stats()) are exact at every quiescent point:
///   range_bytes == in_use_bytes + cached_bytes + free_bytes,
/// and check_books() walks every structure to prove it.
class SubAllocator {
 public:
  /// Blocks are aligned to this and sized in multiples of it.
  static constexpr uint64_t kAlignment = 512;
  /// Blocks up to this size are small.
  static constexpr uint64_t kSmallMax = uint64_t{1} << 20;

  struct Range {
    uint64_t id = 0;      // the lease's id, chosen by whoever leased it
    uint64_t length = 0;  // bytes, a multiple of kAlignment
  };
  /// Leases a range of `want` bytes, or fewer but at least `need` (`small`:
  /// for the small pool).
  using LeaseFn = std::function<Range(uint64_t want, uint64_t need, bool small)>;
  /// Gives a range back (it has no live block). Must not throw.
  using ReturnFn = std::function<void(uint64_t range_id)>;

  struct Options {
    /// Empty ranges kept for later allocations, in bytes; beyond it they go back.
    uint64_t retain_bytes = uint64_t{2} << 30;
    /// What one thread may hold in its cache of small blocks.
    uint64_t thread_cache_bytes = uint64_t{1} << 20;
    /// Blocks per size class in a thread's cache.
    uint32_t thread_cache_blocks = 32;
    /// First small range; each new one doubles, up to small_range_max.
    uint64_t small_range_min = uint64_t{2} << 20;
    uint64_t small_range_max = uint64_t{32} << 20;
    /// Large blocks up to this size share ranges of large_range; larger ones
    /// get a range of their own size (rounded to 2 MiB).
    uint64_t shared_large_max = uint64_t{8} << 20;
    uint64_t large_range = uint64_t{32} << 20;
    /// Whether a refused lease may succeed once this client's empty ranges
    /// are given back (say, a quota refusal); empty: always worth a try.
    std::function<bool(const std::exception&)> worth_a_trim;
    /// Keep a set of live blocks and refuse (std::logic_error) a free of a
    /// block that is not live: for tests, at the price of a lock per call.
    bool verify = false;
  };

  struct Block {
    uint64_t range_id = 0;
    uint64_t offset = 0;  // in the range
    uint64_t size = 0;    // what the block holds (>= the request, rounded)
    explicit operator bool() const { return size != 0; }
    bool operator==(const Block&) const = default;
  };

  struct Stats {
    uint64_t ranges = 0;
    uint64_t range_bytes = 0;
    uint64_t in_use_blocks = 0;
    uint64_t in_use_bytes = 0;
    uint64_t cached_blocks = 0;  // in threads' caches
    uint64_t cached_bytes = 0;
    uint64_t free_bytes = 0;  // in the free lists of the ranges
    uint64_t empty_ranges = 0;
    uint64_t leases = 0;   // ranges leased so far
    uint64_t returns = 0;  // ranges given back so far
    uint64_t allocations = 0;
    uint64_t cache_hits = 0;  // allocations served by a thread's cache
  };

  SubAllocator(Options options, LeaseFn lease, ReturnFn give_back);
  /// Forgets every range without returning any (the session's end returns them).
  ~SubAllocator();
  SubAllocator(const SubAllocator&) = delete;
  SubAllocator& operator=(const SubAllocator&) = delete;

  /// A block of at least `size` bytes (size > 0). Throws what the lease throws.
  Block Allocate(uint64_t size);
  /// Gives back a block that Allocate returned.
  void Free(const Block& block);
  /// Flushes every thread's cache and gives back every empty range; how many.
  size_t Trim();

  Stats stats() const;
  /// "" when the books add up; else what does not.
  std::string check_books() const;

  /// The size a request is served with: its class for small ones, else
  /// rounded to kAlignment.
  static uint64_t RoundedSize(uint64_t size);

 private:
  struct Core;
  struct ThreadCache;
  class ThreadCaches;

  ThreadCache& CacheOfThisThread();
  std::shared_ptr<Core> core_;
};

}  // namespace gpubroker::detail
