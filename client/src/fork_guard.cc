#include "client/src/fork_guard.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace gpubroker::detail {
namespace {

std::atomic<uint64_t> generation{0};

void InChild() { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

uint64_t ForkGeneration() noexcept {
  static std::once_flag installed;
  std::call_once(installed, [] { ::pthread_atfork(nullptr, nullptr, InChild); });
  return generation.load(std::memory_order_relaxed);
}

}  // namespace gpubroker::detail
