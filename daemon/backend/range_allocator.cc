#include "daemon/backend/range_allocator.h"

#include <iterator>

#include "common/check.h"

namespace gpubroker {

RangeAllocator::RangeAllocator(uint64_t capacity) : capacity_(capacity), free_bytes_(0) {
  if (capacity > 0) Insert(0, capacity);
  free_bytes_ = capacity;
}

void RangeAllocator::Insert(uint64_t offset, uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
}

void RangeAllocator::Erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t size) {
  if (size == 0) return std::nullopt;
  auto fit = by_size_.lower_bound({size, 0});
  if (fit == by_size_.end()) return std::nullopt;
  const auto [range_size, offset] = *fit;
  Erase(by_offset_.find(offset));
  if (range_size > size) Insert(offset + size, range_size - size);
  free_bytes_ -= size;
  return offset;
}

void RangeAllocator::Free(uint64_t offset, uint64_t size) {
  GPUBROKER_CHECK(size > 0 && offset + size <= capacity_, "range outside the allocator");
  auto next = by_offset_.lower_bound(offset);
  GPUBROKER_CHECK(next == by_offset_.end() || offset + size <= next->first,
                  "freed range overlaps a free range");
  uint64_t start = offset;
  uint64_t length = size;
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    GPUBROKER_CHECK(prev->first + prev->second <= offset, "freed range overlaps a free range");
    if (prev->first + prev->second == offset) {
      start = prev->first;
      length += prev->second;
      Erase(prev);
    }
  }
  if (next != by_offset_.end() && offset + size == next->first) {
    length += next->second;
    Erase(next);
  }
  Insert(start, length);
  free_bytes_ += size;
}

uint64_t RangeAllocator::largest_free_range() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

}  // namespace gpubroker
