// Mappings that outlive buffers (docs/fast-path.md): this client keeps the
// mapping of a buffer's memory of its own (a VMM allocation, a host memfd)
// when the buffer goes, finds it again for the next buffer the daemon serves
// from that memory, and unmaps it when the daemon asks, even between calls.
#include <unistd.h>

#include <cstdlib>

#include "client/src/client_impl.h"
#include "common/strings.h"
#include "common/units.h"

namespace gpubroker::detail {
namespace {

// How long the reader waits on the socket before it looks at its stop flag
// again (a stop also wakes it at once).
constexpr auto kReaderPoll = std::chrono::milliseconds(500);

}  // namespace

MappingCache::Options ClientImpl::CacheOptions(const ConnectOptions& options) {
  MappingCache::Options o;
  o.max_bytes = options.mapping_cache_bytes;
  if (const char* env = std::getenv("GPUBROKER_MAPPING_CACHE_BYTES")) {
    if (auto bytes = ParseBytes(env); bytes.ok()) o.max_bytes = *bytes;
  }
  return o;
}

bool ClientImpl::KeepMapping(Mapping& mapping) {
  const uint64_t id = mapping.allocation_id();
  if (id == 0 || !cache_.enabled() || forked()) return false;
  std::unique_ptr<CachedMapping> memory = mapping.TakeMemory();
  if (!memory) return false;
  const uint64_t size = memory->size();
  std::vector<uint64_t> evicted;
  const bool kept = cache_.Keep(id, std::move(memory), &evicted);
  if (!evicted.empty()) SendUnmapped(evicted);
  if (kept) {
    StartReader();
    if (DebugOn())
      Debug(StrCat("kept the mapping of allocation ", id, " (", FormatBytes(size), ")"));
  }
  return kept;
}

void ClientImpl::EvictMappings() {
  CheckProcess();
  const std::vector<uint64_t> ids = cache_.EvictAll();
  if (ids.empty()) return;
  if (DebugOn()) Debug(StrCat("evicted ", ids.size(), " kept mappings"));
  SendUnmapped(ids);
}

void ClientImpl::SendUnmapped(const std::vector<uint64_t>& ids) {
  v1::SessionFrame frame;
  for (uint64_t id : ids) frame.mutable_unmapped()->add_allocation_ids(id);
  try {
    session_channel_->Send(frame);
  } catch (const Error& e) {
    // A session that is over holds nothing mapped in the daemon's books.
    Debug(StrCat("could not tell the daemon what was unmapped: ", e.what()));
  }
}

void ClientImpl::ServeUnmapRequests() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(unmap_mu_);
    ids.swap(unmap_asked_);
  }
  if (ids.empty()) return;
  // Unmapped first, then said: the daemon frees the memory once it hears.
  // An id the cache does not hold (let go already) is answered all the same.
  for (uint64_t id : ids) cache_.Evict(id);
  if (DebugOn()) Debug(StrCat("unmapped ", ids.size(), " allocations the daemon asked for"));
  SendUnmapped(ids);
}

void ClientImpl::StartReader() {
  std::lock_guard lock(reader_mu_);
  if (reader_.joinable() || reader_stop_) return;
  if (!reader_wake_) return;  // requests are then answered with the next call
  reader_ = std::thread([this] { ReadUnasked(); });
}

void ClientImpl::StopReader() {
  std::lock_guard lock(reader_mu_);
  if (!reader_.joinable()) return;
  reader_stop_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(reader_wake_.get(), &one, sizeof(one));
  reader_.join();
}

void ClientImpl::ReadUnasked() {
  while (!reader_stop_) {
    const bool open = session_channel_->Poll(reader_wake_.get(), kReaderPoll);
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = ::read(reader_wake_.get(), &count, sizeof(count));
    ServeUnmapRequests();
    if (!open) return;
  }
}

void ClientImpl::OnUnmapRequest(const v1::UnmapRequest& request) {
  {
    std::lock_guard lock(unmap_mu_);
    for (uint64_t id : request.allocation_ids()) unmap_asked_.push_back(id);
  }
  // Served by the call that read it when it returns, or by the reader.
  if (reader_wake_) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(reader_wake_.get(), &one, sizeof(one));
  }
}

}  // namespace gpubroker::detail
