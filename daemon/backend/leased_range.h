#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/backend/backend.h"

namespace gpubroker {

/// A range of a tenant's arena (host memfd arena, GPU arena slab) lent to one
/// session as a whole: the client carves its buffers out of it itself, and
/// publishes some of them (Carve), which makes them buffers of the daemon's
/// books that other sessions may open.
///
/// While the range lives its bytes are all its own, published ones included:
/// a carved buffer that goes gives its bytes back to the range. When the
/// range goes (returned, or its session ended), every byte that no live
/// carved buffer holds goes back to the arena at once; each carved buffer
/// still alive keeps its own bytes until it goes too. Thread-safe.
class LeasedRange {
 public:
  /// Gives bytes [offset, offset + size) of the range back to its arena.
  using FreeSpan = std::function<void(uint64_t offset, uint64_t size)>;

  /// `info`: how a client maps the whole range (its region, its offset there,
  /// mapped_size = its length). `granularity`: the arena frees whole units of
  /// this (host: pages); the range's length is a multiple of it. When the
  /// range goes, carved buffers that share a unit keep it together.
  LeasedRange(ImportInfo info, FreeSpan free_span, uint64_t granularity = kAlignment);
  ~LeasedRange();
  LeasedRange(const LeasedRange&) = delete;
  LeasedRange& operator=(const LeasedRange&) = delete;

  uint64_t length() const;
  const ImportInfo& import_info() const;

  /// A buffer of bytes [offset, offset + size) of the range. `fence_value`
  /// != 0: its ready fence is the word at `fence_offset` in the buffer
  /// itself (CUDA). INVALID_ARGUMENT when the span is empty, unaligned,
  /// outside the range or overlaps a live carved buffer, or the fence word
  /// is outside the span.
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Carve(uint64_t offset, uint64_t size,
                                                       uint64_t fence_offset = 0,
                                                       uint64_t fence_value = 0);

  /// Bytes of live carved buffers.
  uint64_t carved_bytes() const;

  /// Carved offsets are multiples of this.
  static constexpr uint64_t kAlignment = 512;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace gpubroker
