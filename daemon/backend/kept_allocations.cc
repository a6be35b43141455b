#include "daemon/backend/kept_allocations.h"

#include <atomic>

#include "absl/time/time.h"
#include "common/refusal.h"
#include "common/strings.h"
#include "common/units.h"

namespace gpubroker {

AllocationId NewAllocationId() {
  static std::atomic<AllocationId> next{1};
  return next++;
}

absl::Status AskThroughGrpc(std::string_view why) {
  return absl::AbortedError(StrCat(why, ": ask through gRPC"));
}

bool IsAskThroughGrpc(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted;
}

KeptAllocations::~KeptAllocations() {
  // At the backend's end every session has ended: nothing is mapped.
  absl::MutexLock lock(&mu_);
  kept_.clear();
  draining_.clear();
}

void KeptAllocations::set_holders(MappingHolders* holders) {
  absl::MutexLock lock(&mu_);
  holders_ = holders;
}

void KeptAllocations::Keep(const std::string& tenant, AllocationId id,
                           std::unique_ptr<Memory> memory) {
  const uint64_t size = memory->size();
  absl::MutexLock lock(&mu_);
  kept_[tenant].emplace(size, Entry{id, std::move(memory)});
  bytes_ += size;
  count_++;
}

void KeptAllocations::Retire(AllocationId id, std::unique_ptr<Memory> memory) {
  MappingHolders* holders = nullptr;
  {
    absl::MutexLock lock(&mu_);
    holders = holders_;
    if (id == 0 || holders == nullptr || !holders->Held(id)) holders = nullptr;
    if (holders != nullptr) {
      const uint64_t size = memory->size();
      bytes_ += size;
      draining_bytes_ += size;
      count_++;
      draining_[id] = std::move(memory);
    }
  }
  if (holders != nullptr) holders->AskToUnmap(id);
  // Otherwise `memory` is released here, outside the lock.
}

std::optional<std::pair<AllocationId, std::unique_ptr<KeptAllocations::Memory>>>
KeptAllocations::Take(const std::string& tenant, uint64_t size) {
  absl::MutexLock lock(&mu_);
  auto t = kept_.find(tenant);
  if (t == kept_.end()) return std::nullopt;
  auto c = t->second.find(size);
  if (c == t->second.end()) return std::nullopt;
  Entry e = std::move(c->second);
  t->second.erase(c);
  if (t->second.empty()) kept_.erase(t);
  bytes_ -= size;
  count_--;
  return std::make_pair(e.id, std::move(e.memory));
}

uint64_t KeptAllocations::Drop() {
  std::vector<std::unique_ptr<Memory>> gone;
  std::vector<AllocationId> ask;
  MappingHolders* holders = nullptr;
  uint64_t released = 0;
  {
    absl::MutexLock lock(&mu_);
    holders = holders_;
    for (auto& [tenant, sizes] : kept_) {
      for (auto& [size, e] : sizes) {
        if (holders != nullptr && holders->Held(e.id)) {
          draining_bytes_ += size;
          ask.push_back(e.id);
          draining_[e.id] = std::move(e.memory);
        } else {
          released += size;
          gone.push_back(std::move(e.memory));
        }
      }
    }
    kept_.clear();
  }
  for (AllocationId id : ask) holders->AskToUnmap(id);
  Release(std::move(gone), 0);
  return released;
}

void KeptAllocations::Unheld(AllocationId id) {
  std::vector<std::unique_ptr<Memory>> gone;
  uint64_t size = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = draining_.find(id);
    if (it == draining_.end()) return;
    size = it->second->size();
    gone.push_back(std::move(it->second));
    draining_.erase(it);
  }
  Release(std::move(gone), size);
}

void KeptAllocations::Release(std::vector<std::unique_ptr<Memory>> gone, uint64_t draining) {
  uint64_t bytes = 0;
  for (const auto& m : gone) bytes += m->size();
  const uint64_t n = gone.size();
  gone.clear();  // the memory is truly free from here on
  absl::MutexLock lock(&mu_);
  bytes_ -= bytes;
  draining_bytes_ -= draining;
  count_ -= n;
}

bool KeptAllocations::WaitDrained(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](uint64_t* draining) { return *draining == 0; }, &draining_bytes_),
      absl::FromChrono(timeout));
}

absl::Status KeptAllocations::MakeRoom(uint64_t lent, uint64_t more, uint64_t capacity,
                                       bool may_wait, std::chrono::milliseconds wait,
                                       std::string_view what) {
  auto fits = [&] { return lent + more + bytes() <= capacity; };
  if (fits()) return absl::OkStatus();
  Drop();
  if (fits()) return absl::OkStatus();
  const uint64_t draining = draining_bytes();
  if (draining == 0) return absl::OkStatus();  // the capacity itself refuses, if it must
  if (!may_wait) {
    return AskThroughGrpc(
        StrCat(FormatBytes(draining), " on ", what, " wait for clients to unmap them"));
  }
  WaitDrained(wait);
  if (fits() || draining_bytes() == 0) return absl::OkStatus();
  return OutOfMemoryRefusal(StrCat("out of memory on ", what, ": ", FormatBytes(draining_bytes()),
                                   " of freed buffers are still mapped by clients that were asked "
                                   "to unmap them"));
}

uint64_t KeptAllocations::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

uint64_t KeptAllocations::draining_bytes() const {
  absl::MutexLock lock(&mu_);
  return draining_bytes_;
}

uint64_t KeptAllocations::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

}  // namespace gpubroker
