// Over 500 lines on purpose: the client's size classes, free lists and range
// books share one set of invariants (every byte of a range is in exactly one
// place), kept together so that they can be read together.
#include "client/src/sub_allocator.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

#include "common/strings.h"

namespace gpubroker::detail {
namespace {

// Small size classes: multiples of 512 up to 4 KiB, then four per doubling
// up to 1 MiB (at most 25% rounding).
constexpr uint32_t kLinearClasses = 8;
constexpr uint32_t kClasses = kLinearClasses + 8 * 4;
constexpr uint64_t kLinearMax = 4096;
constexpr uint64_t kDedicatedRounding = uint64_t{2} << 20;

// A caller's mistake (a block freed twice, one that was never handed out, a
// lease shorter than asked): std::logic_error, which tests can see.
[[noreturn]] void Fail(const std::string& what) {
  throw std::logic_error("sub-allocator: " + what);
}
inline void Expect(bool cond, const char* what) {
  if (!cond) Fail(what);
}

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

uint32_t ClassOf(uint64_t size) {
  if (size <= kLinearMax) return static_cast<uint32_t>((size + 511) / 512 - 1);
  const uint32_t k =
      63 - static_cast<uint32_t>(std::countl_zero(size - 1));  // size in (2^k, 2^k+1]
  const uint64_t base = uint64_t{1} << k;
  const uint64_t step = base >> 2;
  const uint32_t within = static_cast<uint32_t>((size - base + step - 1) / step) - 1;
  return kLinearClasses + (k - 12) * 4 + within;
}

uint64_t ClassSize(uint32_t c) {
  if (c < kLinearClasses) return uint64_t{c + 1} * 512;
  const uint32_t k = 12 + (c - kLinearClasses) / 4;
  const uint32_t j = (c - kLinearClasses) % 4;
  return (uint64_t{1} << k) + uint64_t{j + 1} * ((uint64_t{1} << k) >> 2);
}

struct BlockHash {
  size_t operator()(const SubAllocator::Block& b) const {
    return std::hash<uint64_t>()(b.range_id * 0x9e3779b97f4a7c15ULL ^ b.offset);
  }
};

}  // namespace

struct SubAllocator::ThreadCache {
  std::mutex mu;
  std::array<std::vector<Block>, kClasses> bins;
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  // What this thread handed out minus what it took back (either may be
  // negative: a block may be freed by another thread than its allocator's).
  int64_t in_use_bytes = 0;
  int64_t in_use_blocks = 0;
  uint64_t allocations = 0;
  uint64_t hits = 0;
};

struct SubAllocator::Core {
  struct RangeRecord {
    uint64_t length = 0;
    bool small = false;
    std::map<uint64_t, uint64_t> free;  // offset -> size, coalesced
    uint64_t free_bytes = 0;
  };
  struct Pool {
    std::set<std::tuple<uint64_t, uint64_t, uint64_t>> by_size;  // (size, range, offset)
    uint64_t next_range = 0;
  };

  Options options;
  LeaseFn lease;
  ReturnFn give_back;
  uint64_t id = 0;

  mutable std::mutex mu;
  std::unordered_map<uint64_t, RangeRecord> ranges;
  Pool small;
  Pool large;
  uint64_t range_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t empty_bytes = 0;  // of ranges with no live or cached block
  uint64_t empty_ranges = 0;
  int64_t in_use_bytes = 0;
  int64_t in_use_blocks = 0;
  uint64_t leases = 0;
  uint64_t returns = 0;
  uint64_t allocations = 0;  // by the core (cache hits are counted by the caches)
  std::vector<std::shared_ptr<ThreadCache>> caches;
  std::unordered_set<Block, BlockHash> live;  // with options.verify

  Pool& PoolOf(bool is_small) { return is_small ? small : large; }

  void InsertFree(uint64_t range_id, RangeRecord& r, uint64_t offset, uint64_t size) {
    r.free.emplace(offset, size);
    PoolOf(r.small).by_size.emplace(size, range_id, offset);
  }
  void EraseFree(uint64_t range_id, RangeRecord& r, std::map<uint64_t, uint64_t>::iterator it) {
    PoolOf(r.small).by_size.erase({it->second, range_id, it->first});
    r.free.erase(it);
  }

  // Best fit among the free blocks of one pool; an empty block when none fits.
  Block TakeFree(bool is_small, uint64_t size) {
    Pool& pool = PoolOf(is_small);
    auto fit = pool.by_size.lower_bound({size, 0, 0});
    if (fit == pool.by_size.end()) return {};
    const auto [have, range_id, offset] = *fit;
    RangeRecord& r = ranges.at(range_id);
    if (r.free_bytes == r.length) {
      empty_bytes -= r.length;
      --empty_ranges;
    }
    EraseFree(range_id, r, r.free.find(offset));
    // Small blocks are exact (their classes are multiples of the alignment);
    // a large block keeps a remainder too small for another large one.
    uint64_t take = size;
    if (have > size && (is_small || have - size >= kSmallMax)) {
      InsertFree(range_id, r, offset + size, have - size);
    } else {
      take = have;
    }
    r.free_bytes -= take;
    free_bytes -= take;
    return Block{range_id, offset, take};
  }

  // Puts a block back, coalescing. A range that becomes empty beyond the
  // retention leaves the books, its id to `gone` (unless `keep_empty`).
  void PutFree(const Block& b, std::vector<uint64_t>& gone, bool keep_empty = false) {
    auto found = ranges.find(b.range_id);
    Expect(found != ranges.end(), "block of an unknown range");
    RangeRecord& r = found->second;
    Expect(b.offset + b.size <= r.length, "block outside its range");
    uint64_t start = b.offset;
    uint64_t length = b.size;
    auto next = r.free.lower_bound(b.offset);
    Expect(next == r.free.end() || b.offset + b.size <= next->first,
           "freed block overlaps a free one");
    if (next != r.free.begin()) {
      auto prev = std::prev(next);
      Expect(prev->first + prev->second <= b.offset, "freed block overlaps a free one");
      if (prev->first + prev->second == b.offset) {
        start = prev->first;
        length += prev->second;
        EraseFree(b.range_id, r, prev);
      }
    }
    if (next != r.free.end() && b.offset + b.size == next->first) {
      length += next->second;
      EraseFree(b.range_id, r, next);
    }
    InsertFree(b.range_id, r, start, length);
    r.free_bytes += b.size;
    free_bytes += b.size;
    if (r.free_bytes == r.length) {
      empty_bytes += r.length;
      ++empty_ranges;
      if (!keep_empty && empty_bytes > options.retain_bytes) Drop(b.range_id, gone);
    }
  }

  // Removes an empty range from the books; its id goes to `gone`.
  void Drop(uint64_t range_id, std::vector<uint64_t>& gone) {
    RangeRecord& r = ranges.at(range_id);
    EraseFree(range_id, r, r.free.begin());
    range_bytes -= r.length;
    free_bytes -= r.length;
    empty_bytes -= r.length;
    --empty_ranges;
    ++returns;
    ranges.erase(range_id);
    gone.push_back(range_id);
  }

  void DropAllEmpty(std::vector<uint64_t>& gone) {
    std::vector<uint64_t> empty;
    for (const auto& [range_id, r] : ranges) {
      if (r.free_bytes == r.length) empty.push_back(range_id);
    }
    for (uint64_t range_id : empty) Drop(range_id, gone);
  }

  // Moves a thread's cached blocks into the free lists (both locks held).
  void Flush(ThreadCache& tc, std::vector<uint64_t>& gone, bool keep_empty = false) {
    for (auto& bin : tc.bins) {
      for (const Block& b : bin) PutFree(b, gone, keep_empty);
      bin.clear();
    }
    tc.bytes = 0;
    tc.blocks = 0;
  }

  void GiveBack(const std::vector<uint64_t>& gone) {
    for (uint64_t range_id : gone) give_back(range_id);
  }
};

// This thread's caches, one per allocator it has used. When the thread ends,
// its cached blocks go back to their allocators (those still alive).
class SubAllocator::ThreadCaches {
 public:
  struct Entry {
    uint64_t core_id;
    std::weak_ptr<Core> core;
    std::shared_ptr<ThreadCache> cache;
  };

  ~ThreadCaches() {
    for (auto& e : entries_) Detach(e);
  }

  ThreadCache* Find(uint64_t core_id) {
    for (auto& e : entries_) {
      if (e.core_id == core_id) return e.cache.get();
    }
    return nullptr;
  }

  ThreadCache& Add(const std::shared_ptr<Core>& core) {
    std::erase_if(entries_, [](const Entry& e) { return e.core.expired(); });
    auto cache = std::make_shared<ThreadCache>();
    {
      std::lock_guard lock(core->mu);
      core->caches.push_back(cache);
    }
    entries_.push_back(Entry{core->id, core, cache});
    return *cache;
  }

 private:
  static void Detach(Entry& e) {
    auto core = e.core.lock();
    if (!core) return;
    // Empty ranges stay in the books (until a Trim): no call to the daemon
    // from a thread's exit, where the client may be going away too.
    std::vector<uint64_t> gone;
    std::lock_guard lock(core->mu);
    {
      std::lock_guard cache_lock(e.cache->mu);
      core->Flush(*e.cache, gone, /*keep_empty=*/true);
      core->in_use_bytes += e.cache->in_use_bytes;
      core->in_use_blocks += e.cache->in_use_blocks;
      core->allocations += e.cache->allocations;
      e.cache->in_use_bytes = 0;
      e.cache->in_use_blocks = 0;
      e.cache->allocations = 0;
    }
    std::erase(core->caches, e.cache);
  }

  std::vector<Entry> entries_;
};

namespace {
std::atomic<uint64_t> next_core_id{1};
}  // namespace

uint64_t SubAllocator::RoundedSize(uint64_t size) {
  if (size <= kSmallMax) return ClassSize(ClassOf(std::max<uint64_t>(size, 1)));
  return RoundUp(size, kAlignment);
}

SubAllocator::SubAllocator(Options options, LeaseFn lease, ReturnFn give_back)
    : core_(std::make_shared<Core>()) {
  core_->options = options;
  core_->lease = std::move(lease);
  core_->give_back = std::move(give_back);
  core_->id = next_core_id++;
  core_->small.next_range = options.small_range_min;
  core_->large.next_range = options.large_range;
}

SubAllocator::~SubAllocator() = default;

SubAllocator::ThreadCache& SubAllocator::CacheOfThisThread() {
  static thread_local ThreadCaches caches;
  if (ThreadCache* c = caches.Find(core_->id)) return *c;
  return caches.Add(core_);
}

SubAllocator::Block SubAllocator::Allocate(uint64_t size) {
  Expect(size > 0, "allocation of 0 bytes");
  Core& core = *core_;
  const uint64_t rounded = RoundedSize(size);
  const bool small = rounded <= kSmallMax;
  if (small && !core.options.verify) {
    ThreadCache& tc = CacheOfThisThread();
    std::lock_guard lock(tc.mu);
    auto& bin = tc.bins[ClassOf(rounded)];
    if (!bin.empty()) {
      const Block b = bin.back();
      bin.pop_back();
      tc.bytes -= b.size;
      tc.blocks--;
      tc.in_use_bytes += static_cast<int64_t>(b.size);
      tc.in_use_blocks++;
      tc.allocations++;
      tc.hits++;
      return b;
    }
  }
  for (int attempt = 0;; ++attempt) {
    uint64_t want = 0;
    {
      std::lock_guard lock(core.mu);
      if (Block b = core.TakeFree(small, rounded)) {
        core.in_use_bytes += static_cast<int64_t>(b.size);
        core.in_use_blocks++;
        core.allocations++;
        if (core.options.verify) core.live.insert(b);
        return b;
      }
      if (small) {
        want = std::max(rounded, core.small.next_range);
      } else if (rounded <= core.options.shared_large_max) {
        want = std::max(rounded, core.large.next_range);
      } else {
        want = RoundUp(rounded, kDedicatedRounding);
      }
    }
    Range got;
    try {
      got = core.lease(want, rounded, small);  // no lock held: this is a call to the daemon
    } catch (const std::exception& e) {
      // What this client holds empty may be what the lease lacked; when it
      // holds nothing empty, the refusal stands.
      if (attempt > 0 || (core.options.worth_a_trim && !core.options.worth_a_trim(e))) throw;
      if (Trim() == 0) throw;
      continue;
    }
    if (got.length < rounded || got.length % kAlignment != 0) {
      Fail(StrCat("leased range of ", got.length, " bytes for ", rounded));
    }
    std::lock_guard lock(core.mu);
    Expect(!core.ranges.contains(got.id), "range leased twice");
    Core::RangeRecord& r = core.ranges[got.id];
    r.length = got.length;
    r.small = small;
    r.free_bytes = got.length;
    core.InsertFree(got.id, r, 0, got.length);
    core.range_bytes += got.length;
    core.free_bytes += got.length;
    core.empty_bytes += got.length;
    core.empty_ranges++;
    core.leases++;
    if (small) {
      core.small.next_range = std::min(core.options.small_range_max, core.small.next_range * 2);
    }
    // Loop: the new range serves this request (unless another thread was quicker).
  }
}

void SubAllocator::Free(const Block& b) {
  Core& core = *core_;
  Expect(b.size > 0, "free of an empty block");
  const bool small = b.size <= kSmallMax;
  if (small && !core.options.verify) {
    ThreadCache& tc = CacheOfThisThread();
    std::lock_guard lock(tc.mu);
    auto& bin = tc.bins[ClassOf(b.size)];
    if (bin.size() < core.options.thread_cache_blocks &&
        tc.bytes + b.size <= core.options.thread_cache_bytes) {
      bin.push_back(b);
      tc.bytes += b.size;
      tc.blocks++;
      tc.in_use_bytes -= static_cast<int64_t>(b.size);
      tc.in_use_blocks--;
      return;
    }
  }
  std::vector<uint64_t> gone;
  {
    std::lock_guard lock(core.mu);
    if (core.options.verify) {
      if (core.live.erase(b) != 1) {
        Fail(StrCat("free of a block that is not live (range ", b.range_id, " offset ", b.offset,
                    " size ", b.size, ")"));
      }
    }
    core.PutFree(b, gone);
    core.in_use_bytes -= static_cast<int64_t>(b.size);
    core.in_use_blocks--;
    if (small && !core.options.verify) {
      // This thread's bin is full: half of it goes back with this block, so
      // that a thread that only frees does not come here every time.
      ThreadCache& tc = CacheOfThisThread();
      std::lock_guard cache_lock(tc.mu);
      auto& bin = tc.bins[ClassOf(b.size)];
      const size_t keep = bin.size() / 2;
      for (size_t i = keep; i < bin.size(); ++i) {
        core.PutFree(bin[i], gone);
        tc.bytes -= bin[i].size;
        tc.blocks--;
      }
      bin.resize(keep);
    }
  }
  core.GiveBack(gone);
}

size_t SubAllocator::Trim() {
  Core& core = *core_;
  std::vector<uint64_t> gone;
  {
    std::lock_guard lock(core.mu);
    for (auto& tc : core.caches) {
      std::lock_guard cache_lock(tc->mu);
      core.Flush(*tc, gone);
    }
    core.DropAllEmpty(gone);
  }
  core.GiveBack(gone);
  return gone.size();
}

SubAllocator::Stats SubAllocator::stats() const {
  const Core& core = *core_;
  Stats s;
  std::lock_guard lock(core.mu);
  s.ranges = core.ranges.size();
  s.range_bytes = core.range_bytes;
  s.free_bytes = core.free_bytes;
  s.empty_ranges = core.empty_ranges;
  s.leases = core.leases;
  s.returns = core.returns;
  int64_t in_use_bytes = core.in_use_bytes;
  int64_t in_use_blocks = core.in_use_blocks;
  s.allocations = core.allocations;
  for (const auto& tc : core.caches) {
    std::lock_guard cache_lock(tc->mu);
    s.cached_bytes += tc->bytes;
    s.cached_blocks += tc->blocks;
    in_use_bytes += tc->in_use_bytes;
    in_use_blocks += tc->in_use_blocks;
    s.allocations += tc->allocations;
    s.cache_hits += tc->hits;
  }
  s.in_use_bytes = static_cast<uint64_t>(in_use_bytes);
  s.in_use_blocks = static_cast<uint64_t>(in_use_blocks);
  return s;
}

std::string SubAllocator::check_books() const {
  const Core& core = *core_;
  std::lock_guard lock(core.mu);
  std::string bad;
  auto fail = [&](const std::string& what) {
    if (bad.size() < 2000) bad += what + "; ";
  };
  // Every byte a range holds is free, cached or in use, once.
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> taken;
  uint64_t range_bytes = 0, free_bytes = 0, empty_bytes = 0, empty_ranges = 0, by_size = 0;
  for (const auto& [range_id, r] : core.ranges) {
    range_bytes += r.length;
    uint64_t sum = 0;
    uint64_t end = 0;
    bool first = true;
    for (const auto& [offset, size] : r.free) {
      if (!first && offset <= end) fail(StrCat("range ", range_id, ": free blocks not coalesced"));
      if (offset + size > r.length) fail(StrCat("range ", range_id, ": free block outside"));
      if (!core.small.by_size.contains({size, range_id, offset}) &&
          !core.large.by_size.contains({size, range_id, offset})) {
        fail(StrCat("range ", range_id, ": free block missing from the size index"));
      }
      taken[range_id].push_back({offset, size});
      sum += size;
      end = offset + size;
      first = false;
    }
    if (sum != r.free_bytes)
      fail(StrCat("range ", range_id, ": free bytes ", r.free_bytes, " != ", sum));
    free_bytes += sum;
    if (r.free_bytes == r.length) {
      empty_bytes += r.length;
      empty_ranges++;
    }
  }
  by_size = core.small.by_size.size() + core.large.by_size.size();
  size_t free_blocks = 0;
  for (const auto& [range_id, r] : core.ranges) free_blocks += r.free.size();
  if (by_size != free_blocks) fail("the size index holds blocks that no range has");
  if (range_bytes != core.range_bytes) fail("range bytes do not add up");
  if (free_bytes != core.free_bytes) fail("free bytes do not add up");
  if (empty_bytes != core.empty_bytes || empty_ranges != core.empty_ranges) {
    fail("empty ranges do not add up");
  }
  uint64_t cached = 0;
  int64_t in_use = core.in_use_bytes;
  for (const auto& tc : core.caches) {
    std::lock_guard cache_lock(tc->mu);
    uint64_t sum = 0;
    uint64_t blocks = 0;
    for (uint32_t c = 0; c < kClasses; ++c) {
      for (const Block& b : tc->bins[c]) {
        if (b.size != ClassSize(c)) fail("a cached block in the wrong class");
        if (!core.ranges.contains(b.range_id)) fail("a cached block of an unknown range");
        taken[b.range_id].push_back({b.offset, b.size});
        sum += b.size;
        blocks++;
      }
    }
    if (sum != tc->bytes || blocks != tc->blocks) fail("a thread's cache does not add up");
    cached += sum;
    in_use += tc->in_use_bytes;
  }
  if (core.options.verify) {
    uint64_t live = 0;
    for (const Block& b : core.live) {
      taken[b.range_id].push_back({b.offset, b.size});
      live += b.size;
    }
    if (static_cast<int64_t>(live) != in_use) fail("live blocks do not add up to in-use bytes");
  }
  for (auto& [range_id, spans] : taken) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i - 1].first + spans[i - 1].second > spans[i].first) {
        fail(StrCat("range ", range_id, ": blocks overlap at ", spans[i].first));
      }
    }
  }
  if (static_cast<int64_t>(range_bytes) != in_use + static_cast<int64_t>(cached + free_bytes)) {
    fail(StrCat("range bytes ", range_bytes, " != in use ", in_use, " + cached ", cached,
                " + free ", free_bytes));
  }
  return bad;
}

}  // namespace gpubroker::detail
