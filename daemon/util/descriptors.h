#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"

namespace gpubroker {

/// The process's limit on open descriptors (RLIMIT_NOFILE).
struct DescriptorLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
  uint64_t was = 0;  // the soft limit before RaiseDescriptorLimit
};

/// Raises the soft RLIMIT_NOFILE to the hard limit (a node service holds a
/// descriptor per client connection and per shared buffer; the usual soft
/// limit of 1024 is a limit for interactive shells, not for daemons).
DescriptorLimit RaiseDescriptorLimit();

/// Descriptors this process holds now (entries of /proc/self/fd); -1 when unknown.
int CountOpenDescriptors();

/// Closes every descriptor above stderr and below the soft RLIMIT_NOFILE
/// (what a tool that runs the process keeps above it is its own): the
/// daemon takes none from whoever started it, and one left open by a
/// careless parent (a shell's, a supervisor's, a test runner's) would hold
/// its file, pipe or socket for the daemon's lifetime and count against the
/// descriptor budget. Call before any other thread or descriptor exists.
/// Returns how many it closed; -1 when /proc/self/fd could not be read, and
/// then closes the whole range anyway.
int CloseInheritedDescriptors();

/// How a batch of accepts ended.
enum class AcceptEnd {
  kDrained,           // nothing more waiting, or the batch is done
  kOutOfDescriptors,  // the kernel refused a descriptor (EMFILE, ENFILE, ENOBUFS, ENOMEM)
};

/// Accepts at most `batch` connections from the non-blocking `listener`
/// (non-blocking, close-on-exec), handing each to `admit`: a bounded batch
/// per wakeup lets a flood of connections take turns with the rest of the
/// loop (a level-triggered listener comes back). Any other failure (a peer
/// that gave up before it was taken: ECONNABORTED, EPROTO, ...) goes to
/// `failed` with its errno, and accepting goes on.
AcceptEnd AcceptBatch(int listener, int batch, const std::function<void(UniqueFd)>& admit,
                      const std::function<void(int)>& failed);

/// One descriptor held back (on /dev/null) for the moment the process has
/// none left: closing it makes room to accept one waiting connection, tell
/// the peer why it is turned away and close it, instead of leaving it in the
/// listen queue while the listener reports readable forever. Thread-safe.
class ReserveDescriptor {
 public:
  ReserveDescriptor();

  /// Accepts one connection from `listener` in the reserve's place, hands it
  /// to `turn_away` (which may write to it) and closes it, then takes the
  /// reserve back. False when no connection could be accepted even so.
  bool Shed(int listener, const std::function<void(int fd)>& turn_away);

 private:
  absl::Mutex mu_;
  UniqueFd reserve_ ABSL_GUARDED_BY(mu_);
};

/// The descriptors that clients make the daemon hold: one per connection on
/// either socket, one per buffer with a descriptor of its own. Charged before
/// the descriptor is made, so that the daemon refuses (RESOURCE_EXHAUSTED)
/// well before the kernel does (EMFILE), and keeps room for what clients do
/// not control (gRPC's own descriptors, the driver's, logs, metrics).
/// Thread-safe, lock-free.
class DescriptorBudget {
 public:
  /// `limit`: descriptors that may be charged; 0: no limit.
  explicit DescriptorBudget(uint64_t limit) : limit_(limit) {}

  /// The budget for a process whose soft RLIMIT_NOFILE is `soft`: all of it
  /// but a headroom of an eighth (at least 128) for the daemon's own needs.
  static uint64_t LimitFor(uint64_t soft);

  bool TryCharge(uint64_t n = 1);
  void Release(uint64_t n = 1);
  uint64_t in_use() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

/// Connections per uid on one socket, capped. Thread-safe.
class PerUidConnections {
 public:
  /// `max_per_uid`: 0 for no cap.
  explicit PerUidConnections(uint32_t max_per_uid) : max_(max_per_uid) {}

  /// Counts one more connection of `uid`; false (and nothing counted) when
  /// the uid is at its cap.
  bool TryAdmit(uid_t uid);
  void Release(uid_t uid);
  uint32_t max_per_uid() const { return max_; }
  /// Connections counted now, all uids together.
  uint64_t total() const;

 private:
  const uint32_t max_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uid_t, uint32_t> counts_ ABSL_GUARDED_BY(mu_);
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpubroker
