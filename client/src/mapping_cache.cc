#include "client/src/mapping_cache.h"

namespace gpubroker::detail {

MappingCache::~MappingCache() = default;

std::unique_ptr<CachedMapping> MappingCache::Take(uint64_t allocation_id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(allocation_id);
  if (it == by_id_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  std::unique_ptr<CachedMapping> m = std::move(it->second->mapping);
  mapped_bytes_ -= m->size();
  lru_.erase(it->second);
  by_id_.erase(it);
  return m;
}

bool MappingCache::Keep(uint64_t allocation_id, std::unique_ptr<CachedMapping> mapping,
                        std::vector<uint64_t>* evicted) {
  std::vector<std::unique_ptr<CachedMapping>> gone;  // unmapped after the lock
  bool kept = false;
  {
    std::lock_guard lock(mu_);
    if (enabled() && mapping->size() <= options_.max_bytes) {
      if (auto old = by_id_.find(allocation_id); old != by_id_.end()) {
        // Two mappings of one allocation: keep the newer.
        mapped_bytes_ -= old->second->mapping->size();
        gone.push_back(std::move(old->second->mapping));
        lru_.erase(old->second);
        by_id_.erase(old);
      }
      mapped_bytes_ += mapping->size();
      lru_.push_front(Entry{allocation_id, std::move(mapping)});
      by_id_[allocation_id] = lru_.begin();
      kept = true;
      while (mapped_bytes_ > options_.max_bytes || lru_.size() > options_.max_entries) {
        Entry& last = lru_.back();
        mapped_bytes_ -= last.mapping->size();
        if (evicted != nullptr) evicted->push_back(last.allocation_id);
        gone.push_back(std::move(last.mapping));
        by_id_.erase(last.allocation_id);
        lru_.pop_back();
        ++evictions_;
      }
    } else {
      gone.push_back(std::move(mapping));
    }
  }
  return kept;
}

bool MappingCache::Evict(uint64_t allocation_id) {
  std::unique_ptr<CachedMapping> gone;
  {
    std::lock_guard lock(mu_);
    auto it = by_id_.find(allocation_id);
    if (it == by_id_.end()) return false;
    gone = std::move(it->second->mapping);
    mapped_bytes_ -= gone->size();
    lru_.erase(it->second);
    by_id_.erase(it);
    ++evictions_;
  }
  return true;
}

std::vector<uint64_t> MappingCache::EvictAll() {
  std::list<Entry> gone;
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    gone.swap(lru_);
    by_id_.clear();
    mapped_bytes_ = 0;
    evictions_ += gone.size();
  }
  for (const Entry& e : gone) ids.push_back(e.allocation_id);
  return ids;  // `gone` unmaps here
}

MappingCache::Stats MappingCache::stats() const {
  std::lock_guard lock(mu_);
  return Stats{hits_, misses_, evictions_, lru_.size(), mapped_bytes_};
}

}  // namespace gpubroker::detail
