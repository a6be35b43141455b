#include "client/src/fork_guard.h"

#include <pthread.h>

#include <atomic>

namespace gpubroker::detail {
namespace {

std::atomic<uint64_t> generation{0};

void InChild() { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

uint64_t ForkGeneration() noexcept {
  // Installed once (a function's static: after the first call, one load of
  // its guard, where std::call_once cost a thread-local lookup per call, and
  // this runs several times in every call of the library).
  [[maybe_unused]] static const bool installed = [] {
    ::pthread_atfork(nullptr, nullptr, InChild);
    return true;
  }();
  return generation.load(std::memory_order_relaxed);
}

}  // namespace gpubroker::detail
