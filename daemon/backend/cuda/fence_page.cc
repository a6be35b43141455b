#include "daemon/backend/cuda/fence_page.h"

#include <cstring>

#include "common/refusal.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/unix_socket.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

uint64_t NewFenceValue() {
  const Token t = RandomToken();
  uint64_t v = 0;
  std::memcpy(&v, t.data(), sizeof(v));
  return v | 1;
}

FencePage::FencePage(std::shared_ptr<CudaDeviceState> device, ExportedVmm memory,
                     std::string tenant, std::weak_ptr<FencePages> pages)
    : device_(std::move(device)),
      memory_(std::move(memory)),
      tenant_(std::move(tenant)),
      pages_(std::move(pages)) {
  device_->vmm_held += memory_.size();
}

FencePage::~FencePage() { device_->vmm_held -= memory_.size(); }

absl::StatusOr<FdGrant> FencePage::Export() const {
  GPUBROKER_ASSIGN_OR_RETURN(UniqueFd fd, DupFd(memory_.fd()));
  return FdGrant{std::move(fd), FdKind::kCudaFences, memory_.size(), device_->info.uuid};
}

void FencePage::Unheld() const { RetireIfIdle(); }

std::optional<uint32_t> FencePage::Take(bool* retired) {
  absl::MutexLock lock(&mu_);
  if (retired_) {
    *retired = true;
    return std::nullopt;
  }
  if (!free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (uint64_t{next_slot_} * kFenceBytes >= memory_.size()) return std::nullopt;
  return next_slot_++;
}

void FencePage::Give(uint32_t slot) {
  bool idle = false;
  {
    absl::MutexLock lock(&mu_);
    free_slots_.push_back(slot);
    idle = free_slots_.size() == next_slot_;
  }
  if (idle) RetireIfIdle();
}

bool FencePage::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_;
}

bool FencePage::Retire(uint32_t holders) const {
  absl::MutexLock lock(&mu_);
  if (retired_ || holders > 0 || free_slots_.size() != next_slot_) return false;
  retired_ = true;
  return true;
}

void FencePage::RetireIfIdle() const {
  if (auto pages = pages_.lock()) pages->RetireIfIdle(*this);
}

FenceSlot::FenceSlot(FenceSlot&& o) noexcept : page_(std::move(o.page_)), slot_(o.slot_) {}

FenceSlot::~FenceSlot() {
  if (page_) page_->Give(slot_);
}

void FenceSlot::Describe(ImportInfo& info) const {
  info.fence_region_id = page_->id();
  info.fence_offset = uint64_t{slot_} * kFenceBytes;
  info.fence_value = NewFenceValue();
}

FencePages::FencePages(std::shared_ptr<CudaDeviceState> device, RegionTable& regions)
    : device_(std::move(device)), regions_(regions) {}

absl::StatusOr<std::shared_ptr<FencePage>> FencePages::PageFor(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = pages_.find(tenant);
  if (it != pages_.end() && !it->second->retired()) return it->second;
  // Zeroed by Lend: a word of a fresh page reads 0, which no fence value is.
  GPUBROKER_ASSIGN_OR_RETURN(CudaDeviceState::Lent lent,
                             device_->Lend(tenant, device_->granularity(), "fence page", {}));
  auto page =
      std::make_shared<FencePage>(device_, std::move(lent.memory), tenant, weak_from_this());
  page->set_id(regions_.Add(tenant, page));
  pages_[tenant] = page;
  bytes_ += page->size();
  return page;
}

absl::StatusOr<FenceSlot> FencePages::Take(const std::string& tenant) {
  while (true) {
    GPUBROKER_ASSIGN_OR_RETURN(std::shared_ptr<FencePage> page, PageFor(tenant));
    bool retired = false;
    if (const std::optional<uint32_t> slot = page->Take(&retired)) {
      return FenceSlot(std::move(page), *slot);
    }
    // Gone since PageFor found it: its tenant's next page is made.
    if (retired) continue;
    return LimitRefusal(StrCat("tenant '", tenant, "' has too many live buffers on ",
                               device_->info.uuid, " (no fence slot left)"));
  }
}

void FencePages::RetireIfIdle(const FencePage& page) {
  if (!page.Retire(regions_.Holders(page.id()))) return;
  {
    absl::MutexLock lock(&mu_);
    auto it = pages_.find(page.tenant());
    if (it != pages_.end() && it->second.get() == &page) pages_.erase(it);
  }
  bytes_ -= page.size();
  spdlog::info("cuda: fence page {} of tenant '{}' on {} given back (no buffer, unmapped)",
               page.id(), page.tenant(), device_->info.uuid);
  regions_.Remove(page.id());  // the caller holds the page until it returns
}

void FencePages::AddUsage(DeviceUsage& usage) const { usage.reserved_bytes += bytes_.load(); }

}  // namespace gpubroker
