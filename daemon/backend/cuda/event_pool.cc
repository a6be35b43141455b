#include "daemon/backend/cuda/event_pool.h"

#include "common/cuda/cuda_util.h"

namespace gpubroker {

EventPool::~EventPool() {
  cuda::ScopedDevice on(device_);
  absl::MutexLock lock(&mu_);
  for (Event& e : free_) cudaEventDestroy(e.event);
}

absl::StatusOr<EventPool::Event> EventPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      Event e = std::move(free_.back());
      free_.pop_back();
      return e;
    }
  }
  cuda::ScopedDevice on(device_);
  if (!on.status().ok()) return on.status();
  Event e;
  GPUBROKER_CUDA_TRY(
      cudaEventCreateWithFlags(&e.event, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcEventHandle_t handle;
  const cudaError_t err = cudaIpcGetEventHandle(&handle, e.event);
  if (err != cudaSuccess) {
    cudaEventDestroy(e.event);
    return cuda::RuntimeError(err, "cudaIpcGetEventHandle");
  }
  e.handle.assign(handle.reserved, sizeof(handle.reserved));
  absl::MutexLock lock(&mu_);
  ++created_;
  return e;
}

void EventPool::Release(Event event) {
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(event));
}

size_t EventPool::created() const {
  absl::MutexLock lock(&mu_);
  return created_;
}

}  // namespace gpubroker
