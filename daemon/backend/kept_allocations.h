#pragma once

// Allocations of the daemon's that outlive their buffers: kept for the
// tenant's next buffer of the same size, and mapped still, possibly, by the
// clients that used them (docs/fast-path.md, "Mappings that outlive
// buffers"). Shared by the backends: CUDA VMM allocations, host memfds.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gpubroker {

/// The daemon's id of one allocation: the same for every buffer it serves.
using AllocationId = uint64_t;

/// A new allocation id (never 0).
AllocationId NewAllocationId();

/// The refusal of a call that the session socket's thread must not wait for
/// (a new VMM allocation, memory that clients must unmap first): ABORTED,
/// and the client asks again through gRPC, whose threads may wait.
absl::Status AskThroughGrpc(std::string_view why);
/// Whether `status` is such a refusal.
bool IsAskThroughGrpc(const absl::Status& status);

/// Who keeps an allocation mapped after its buffer went (the clients'
/// mapping caches): the registry knows, and asks them to unmap.
class MappingHolders {
 public:
  virtual ~MappingHolders() = default;
  /// Whether some live session keeps `id` mapped.
  virtual bool Held(AllocationId id) const = 0;
  /// Asks each session that keeps `id` mapped to unmap it (an UnmapRequest);
  /// does not wait.
  virtual void AskToUnmap(AllocationId id) = 0;
};

/// Kept allocations by tenant and size. An allocation that must go (room is
/// needed, or it was never to be kept) goes at once when no client maps it;
/// otherwise its holders are asked to unmap and it *drains*: it serves no
/// buffer, its bytes still count, and it goes when the last holder has
/// unmapped (or ended). The memory is truly free only then: a client's
/// mapping keeps it alive. Thread-safe; the memory is released outside the
/// lock, before the bytes leave the counts.
class KeptAllocations {
 public:
  /// One allocation; destroying it releases the memory.
  class Memory {
   public:
    virtual ~Memory() = default;
    virtual uint64_t size() const = 0;
  };

  KeptAllocations() = default;
  ~KeptAllocations();
  KeptAllocations(const KeptAllocations&) = delete;
  KeptAllocations& operator=(const KeptAllocations&) = delete;

  /// Who maps what (the registry); null: nobody ever does.
  void set_holders(MappingHolders* holders);

  /// Keeps `memory` for `tenant`'s next buffer of its size.
  void Keep(const std::string& tenant, AllocationId id, std::unique_ptr<Memory> memory);
  /// Memory that is not to be kept (no room for it, or shared across
  /// tenants): released now when no client maps it, else drained.
  void Retire(AllocationId id, std::unique_ptr<Memory> memory);
  /// One of `tenant`'s of exactly `size` bytes that does not drain.
  std::optional<std::pair<AllocationId, std::unique_ptr<Memory>>> Take(const std::string& tenant,
                                                                       uint64_t size);
  /// Releases every kept allocation that no client maps, and sets the others
  /// draining. The bytes released now.
  uint64_t Drop();
  /// The last holder of `id` has unmapped: released now if it drains.
  void Unheld(AllocationId id);
  /// Waits until nothing drains, at most `timeout`; whether nothing does.
  bool WaitDrained(std::chrono::milliseconds timeout);
  /// Room for `more` bytes beside `lent` (what buffers hold) and what is
  /// kept, within `capacity`: kept memory goes first; memory that clients
  /// still map is waited for, up to `wait`, where the caller may wait. OK
  /// when there is room; ABORTED (AskThroughGrpc) when the caller may not
  /// wait and something drains; OUT_OF_MEMORY when clients did not unmap
  /// in time. `what` names the device in messages.
  absl::Status MakeRoom(uint64_t lent, uint64_t more, uint64_t capacity, bool may_wait,
                        std::chrono::milliseconds wait, std::string_view what);

  uint64_t bytes() const;           // kept and draining
  uint64_t draining_bytes() const;  // of those, waiting for clients to unmap
  uint64_t count() const;           // allocations kept and draining

 private:
  struct Entry {
    AllocationId id = 0;
    std::unique_ptr<Memory> memory;
  };
  using ByTenant = std::map<std::string, std::multimap<uint64_t, Entry>>;

  // Releases `gone` (outside the lock), then takes its bytes off the counts.
  void Release(std::vector<std::unique_ptr<Memory>> gone, uint64_t draining);

  mutable absl::Mutex mu_;
  MappingHolders* holders_ ABSL_GUARDED_BY(mu_) = nullptr;
  ByTenant kept_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<AllocationId, std::unique_ptr<Memory>> draining_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t draining_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpubroker
