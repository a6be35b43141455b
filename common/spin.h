#pragma once

// Waiting awake: a thread that expects an answer within microseconds polls
// for it for a bounded time before it blocks. A blocked thread's wake-up
// (the scheduler, a CPU leaving a sleep state, a virtual CPU that halted)
// costs more than the answer takes to come; the price of staying awake is
// the CPU time of the wait, bounded by the spin.

#include <chrono>

namespace gpubroker {

/// Tells the CPU that this is a spin-wait (frees the core's other thread).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// A spin of `given` unless the environment variable `env` says how many
/// microseconds (0: none); a value that is not a number is ignored.
std::chrono::microseconds SpinFromEnv(const char* env, std::chrono::microseconds given);

}  // namespace gpubroker
