#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace gpubroker {

/// Best-fit allocator of byte ranges in [0, capacity), with neighbours
/// coalesced on free. Not thread-safe. Sizes and the alignment are the
/// caller's business: ranges are returned exactly as asked.
class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity);

  /// Offset of a free range of `size` bytes, or std::nullopt when no free
  /// range is large enough.
  std::optional<uint64_t> Allocate(uint64_t size);

  /// Returns a range that Allocate handed out.
  void Free(uint64_t offset, uint64_t size);

  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const { return free_bytes_; }
  /// The largest range that Allocate could hand out now.
  uint64_t largest_free_range() const;
  size_t free_ranges() const { return by_offset_.size(); }

 private:
  void Insert(uint64_t offset, uint64_t size);
  void Erase(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t free_bytes_;
  std::map<uint64_t, uint64_t> by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset)
};

}  // namespace gpubroker
