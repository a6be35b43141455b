#pragma once

// Waiting awake: a thread that expects an answer within microseconds polls
// for it for a bounded time before it blocks. A blocked thread's wake-up
// (the scheduler, a CPU leaving a sleep state, a virtual CPU that halted)
// costs more than the answer takes to come; the price of staying awake is
// the CPU time of the wait, bounded by the spin.

#include <sched.h>

#include <chrono>

namespace gpubroker {

/// One turn of a spin-wait: gives the CPU to any other thread that is
/// ready to run on it (on a machine with more runnable threads than CPUs,
/// the one that would answer, say), and otherwise returns at once, keeping
/// the CPU awake.
inline void SpinPause() { sched_yield(); }

/// A spin of `given` unless the environment variable `env` says how many
/// microseconds (0: none); a value that is not a number is ignored.
std::chrono::microseconds SpinFromEnv(const char* env, std::chrono::microseconds given);

}  // namespace gpubroker
