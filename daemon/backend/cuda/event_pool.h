#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpubroker {

/// Interprocess events of one device, reused from buffer to buffer: each
/// buffer's ready fence. Creating an event and its IPC handle costs far more
/// than taking one from the pool, and a client caches the events it opened.
class EventPool {
 public:
  struct Event {
    cudaEvent_t event = nullptr;
    std::string handle;  // cudaIpcEventHandle_t, 64 bytes
  };

  explicit EventPool(int device) : device_(device) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  absl::StatusOr<Event> Acquire();
  void Release(Event event);
  size_t created() const;

 private:
  const int device_;
  mutable absl::Mutex mu_;
  std::vector<Event> free_ ABSL_GUARDED_BY(mu_);
  size_t created_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpubroker
