#pragma once

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "client/src/sub_allocator.h"

namespace gpubroker::detail {

class ClientImpl;

// One device's client-made buffers: the allocator over this client's ranges
// there, where each range is mapped, and the published blocks released here
// that another process still holds.
class DeviceArena {
 public:
  struct RangeView {
    uint64_t base = 0;  // address of the range in this process
    uint64_t length = 0;
    bool host_mapped = false;  // ours to munmap
  };

  DeviceArena(ClientImpl& impl, std::string device, uint64_t retain_bytes);
  ~DeviceArena();

  SubAllocator& allocator() { return allocator_; }
  const SubAllocator& allocator() const { return allocator_; }

  uint64_t AddressOf(const SubAllocator::Block& b) {
    std::lock_guard lock(mu_);
    return ranges_.at(b.range_id).base + b.offset;
  }
  std::string device_uuid() {
    std::lock_guard lock(mu_);
    return device_uuid_;
  }

  void Quarantine(const SubAllocator::Block& b) {
    std::lock_guard lock(mu_);
    quarantine_[{b.range_id, b.offset}] = b;
    quarantined_bytes_ += b.size;
  }
  /// The quarantined block at (range, offset), now free to reuse; empty when none.
  SubAllocator::Block Release(uint64_t range, uint64_t offset) {
    std::lock_guard lock(mu_);
    auto it = quarantine_.find({range, offset});
    if (it == quarantine_.end()) return {};
    const SubAllocator::Block b = it->second;
    quarantine_.erase(it);
    quarantined_bytes_ -= b.size;
    return b;
  }
  uint64_t quarantined_bytes() const {
    std::lock_guard lock(mu_);
    return quarantined_bytes_;
  }

 private:
  static SubAllocator::Options Options(uint64_t retain_bytes) {
    SubAllocator::Options o;
    o.retain_bytes = retain_bytes;
    return o;
  }

  // Calls to the daemon, with no allocator lock held.
  SubAllocator::Range Lease(uint64_t want, uint64_t need);
  void Return(uint64_t range);

  ClientImpl& impl_;
  const std::string device_;  // as the caller named it
  SubAllocator allocator_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, RangeView> ranges_;
  std::map<std::pair<uint64_t, uint64_t>, SubAllocator::Block> quarantine_;
  uint64_t quarantined_bytes_ = 0;
  std::string device_uuid_;
};

}  // namespace gpubroker::detail
