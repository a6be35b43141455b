#pragma once

// Mappings of the daemon's allocations that this process keeps after the
// buffer that used them is gone, for the next buffer the daemon serves from
// the same allocation (a kept VMM allocation, or a host buffer's memfd).

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpubroker::detail {

/// One mapping of an allocation; its destruction unmaps.
class CachedMapping {
 public:
  virtual ~CachedMapping() = default;
  /// Where it is mapped in this process (a host or a device address).
  virtual void* data() const = 0;
  virtual uint64_t size() const = 0;
};

/// A bounded cache of mappings by allocation id (the daemon's id of the
/// memory, which stays the same across the buffers it serves), least recently
/// kept out first. Thread-safe; mappings are destroyed (unmapped) outside the
/// lock.
class MappingCache {
 public:
  struct Options {
    uint64_t max_bytes = uint64_t{256}
                         << 30;  // mapped bytes (address space: memory stays the daemon's)
    size_t max_entries = 64;
  };
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;  // unmapped to make room, on request, or by Evict
    uint64_t entries = 0;
    uint64_t mapped_bytes = 0;
  };

  explicit MappingCache(Options options) : options_(options) {}
  ~MappingCache();

  /// The kept mapping of `allocation_id`, now the caller's; null on a miss.
  std::unique_ptr<CachedMapping> Take(uint64_t allocation_id);
  /// Keeps a mapping. Returns the ids of the allocations unmapped to make
  /// room (the daemon is told). A mapping larger than the cache is not kept:
  /// false, and it is unmapped.
  bool Keep(uint64_t allocation_id, std::unique_ptr<CachedMapping> mapping,
            std::vector<uint64_t>* evicted);
  /// Unmaps one allocation (the daemon's request); false when it was not kept.
  bool Evict(uint64_t allocation_id);
  /// Unmaps everything; the ids unmapped.
  std::vector<uint64_t> EvictAll();

  Stats stats() const;
  bool enabled() const { return options_.max_entries > 0 && options_.max_bytes > 0; }

 private:
  struct Entry {
    uint64_t allocation_id;
    std::unique_ptr<CachedMapping> mapping;
  };

  const Options options_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently kept
  std::unordered_map<uint64_t, std::list<Entry>::iterator> by_id_;
  uint64_t mapped_bytes_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace gpubroker::detail
