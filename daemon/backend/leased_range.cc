#include "daemon/backend/leased_range.h"

#include <algorithm>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/strings.h"

namespace gpubroker {

// Shared by the range and the buffers carved from it, which may outlive it.
struct LeasedRange::State {
  // Whole units of the arena that carved buffers keep after the range's end.
  struct Cluster {
    uint64_t start = 0;
    uint64_t end = 0;
    uint32_t live = 0;
  };

  const ImportInfo info;
  const FreeSpan free_span;
  const uint64_t granularity;
  mutable absl::Mutex mu;
  bool range_alive ABSL_GUARDED_BY(mu) = true;
  std::map<uint64_t, uint64_t> carved ABSL_GUARDED_BY(mu);  // offset -> size, live only
  uint64_t carved_bytes ABSL_GUARDED_BY(mu) = 0;
  // After the range's end: the cluster of each live carved buffer, by offset.
  std::map<uint64_t, std::shared_ptr<Cluster>> cluster_of ABSL_GUARDED_BY(mu);

  State(ImportInfo i, FreeSpan f, uint64_t g)
      : info(std::move(i)), free_span(std::move(f)), granularity(g) {}
};

namespace {

class CarvedBuffer final : public BackendBuffer {
 public:
  CarvedBuffer(std::shared_ptr<LeasedRange::State> state, uint64_t offset, ImportInfo info)
      : state_(std::move(state)), offset_(offset), info_(std::move(info)) {}

  ~CarvedBuffer() override {
    // While the range lives the bytes are its own again; after it, the last
    // buffer of a cluster gives the cluster back.
    std::shared_ptr<LeasedRange::State::Cluster> last;
    {
      absl::MutexLock lock(&state_->mu);
      state_->carved.erase(offset_);
      state_->carved_bytes -= info_.mapped_size;
      if (!state_->range_alive) {
        auto it = state_->cluster_of.find(offset_);
        if (it != state_->cluster_of.end()) {
          if (--it->second->live == 0) last = it->second;
          state_->cluster_of.erase(it);
        }
      }
    }
    if (last) state_->free_span(last->start, last->end - last->start);
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }

 private:
  std::shared_ptr<LeasedRange::State> state_;
  uint64_t offset_;  // in the range
  ImportInfo info_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LeasedRange>> Backend::LeaseRange(const RangeRequest&) {
  return absl::UnimplementedError("this backend leases no ranges");
}

LeasedRange::LeasedRange(ImportInfo info, FreeSpan free_span, uint64_t granularity)
    : state_(std::make_shared<State>(std::move(info), std::move(free_span),
                                     std::max<uint64_t>(granularity, 1))) {}

LeasedRange::~LeasedRange() {
  // The units that no live carved buffer touches go back now; each cluster
  // of units that carved buffers touch goes with its last buffer.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  {
    absl::MutexLock lock(&state_->mu);
    state_->range_alive = false;
    const uint64_t g = state_->granularity;
    const uint64_t length = state_->info.mapped_size;
    std::shared_ptr<State::Cluster> current;
    uint64_t at = 0;
    for (const auto& [offset, size] : state_->carved) {
      const uint64_t start = offset / g * g;
      const uint64_t end = std::min(length, (offset + size + g - 1) / g * g);
      if (current && start < current->end) {
        current->end = std::max(current->end, end);
      } else {
        if (current) at = current->end;
        if (start > at) gaps.emplace_back(at, start - at);
        current = std::make_shared<State::Cluster>(State::Cluster{start, end, 0});
      }
      current->live++;
      state_->cluster_of[offset] = current;
    }
    if (current) at = current->end;
    if (at < length) gaps.emplace_back(at, length - at);
  }
  for (const auto& [offset, size] : gaps) state_->free_span(offset, size);
}

uint64_t LeasedRange::length() const { return state_->info.mapped_size; }
const ImportInfo& LeasedRange::import_info() const { return state_->info; }

uint64_t LeasedRange::carved_bytes() const {
  absl::MutexLock lock(&state_->mu);
  return state_->carved_bytes;
}

absl::StatusOr<std::unique_ptr<BackendBuffer>> LeasedRange::Carve(uint64_t offset, uint64_t size,
                                                                  uint64_t fence_offset,
                                                                  uint64_t fence_value) {
  const uint64_t length = state_->info.mapped_size;
  if (size == 0 || offset % kAlignment != 0 || offset > length || size > length - offset) {
    return absl::InvalidArgumentError(StrCat("bytes [", offset, ", +", size,
                                             ") are not a block of a range of ", length,
                                             " bytes (offsets are multiples of ", kAlignment, ")"));
  }
  if (fence_value != 0 &&
      (fence_offset % 8 != 0 || fence_offset > size || size - fence_offset < 8)) {
    return absl::InvalidArgumentError(StrCat(
        "fence word at ", fence_offset, " is not an aligned word of a ", size, "-byte buffer"));
  }
  ImportInfo info = state_->info;
  info.offset += offset;
  info.mapped_size = size;
  info.fence_region_id = 0;
  info.fence_offset = fence_value != 0 ? fence_offset : 0;
  info.fence_value = fence_value;
  {
    absl::MutexLock lock(&state_->mu);
    if (!state_->range_alive) return absl::FailedPreconditionError("the range is gone");
    auto next = state_->carved.lower_bound(offset);
    const bool overlaps_next = next != state_->carved.end() && next->first < offset + size;
    const bool overlaps_prev =
        next != state_->carved.begin() && std::prev(next)->first + std::prev(next)->second > offset;
    if (overlaps_next || overlaps_prev) {
      return absl::InvalidArgumentError(
          StrCat("bytes [", offset, ", +", size, ") overlap a published buffer of the range"));
    }
    state_->carved.emplace(offset, size);
    state_->carved_bytes += size;
  }
  return std::make_unique<CarvedBuffer>(state_, offset, std::move(info));
}

}  // namespace gpubroker
