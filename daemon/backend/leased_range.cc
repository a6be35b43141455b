#include "daemon/backend/leased_range.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/strings.h"

namespace gpubroker {

// Shared by the range and the buffers carved from it, which may outlive it.
struct LeasedRange::State {
  const ImportInfo info;
  const FreeSpan free_span;
  mutable absl::Mutex mu;
  bool range_alive ABSL_GUARDED_BY(mu) = true;
  std::map<uint64_t, uint64_t> carved ABSL_GUARDED_BY(mu);  // offset -> size, live only
  uint64_t carved_bytes ABSL_GUARDED_BY(mu) = 0;

  State(ImportInfo i, FreeSpan f) : info(std::move(i)), free_span(std::move(f)) {}
};

namespace {

class CarvedBuffer final : public BackendBuffer {
 public:
  CarvedBuffer(std::shared_ptr<LeasedRange::State> state, uint64_t offset, ImportInfo info)
      : state_(std::move(state)), offset_(offset), info_(std::move(info)) {}

  ~CarvedBuffer() override {
    bool give_back = false;
    {
      absl::MutexLock lock(&state_->mu);
      state_->carved.erase(offset_);
      state_->carved_bytes -= info_.mapped_size;
      give_back = !state_->range_alive;
    }
    // While the range lives the bytes are its own again; after it, ours to return.
    if (give_back) state_->free_span(offset_, info_.mapped_size);
  }

  uint64_t reserved_size() const override { return info_.mapped_size; }
  const ImportInfo& import_info() const override { return info_; }
  absl::StatusOr<FdGrant> ExportFd() override {
    return absl::FailedPreconditionError("buffer lives in its tenant's arena; import the pool");
  }

 private:
  std::shared_ptr<LeasedRange::State> state_;
  uint64_t offset_;  // in the range
  ImportInfo info_;
};

}  // namespace

LeasedRange::LeasedRange(ImportInfo info, FreeSpan free_span)
    : state_(std::make_shared<State>(std::move(info), std::move(free_span))) {}

LeasedRange::~LeasedRange() {
  // The gaps between live carved buffers go back now; the carved ones later.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  {
    absl::MutexLock lock(&state_->mu);
    state_->range_alive = false;
    uint64_t at = 0;
    for (const auto& [offset, size] : state_->carved) {
      if (offset > at) gaps.emplace_back(at, offset - at);
      at = offset + size;
    }
    if (at < state_->info.mapped_size) gaps.emplace_back(at, state_->info.mapped_size - at);
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
  info.fence_pool_id = 0;
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
