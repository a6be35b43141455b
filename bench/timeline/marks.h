#pragma once

// Marks in the socket-call timeline that libgpubroker-timeline.so records
// when it is loaded (bench/timeline/timeline_preload.c); bench/timeline.py
// knows the same codes. Without the library a mark costs one branch.
#include "common/trace.h"

namespace gpubroker::bench {

enum TimelineMark : int {
  // seal + wait (A seals a named buffer B waits for in Open(wait)):
  kMarkSealStart = 10,             // A, before its seal
  kMarkSealPostedStart = 12,       // A, before its posted seal
  kMarkSealAwakeStart = 13,        // A, before its seal of a name B waits for awake
  kMarkSealDaemonAwakeStart = 14,  // ... of a name the daemon polls for, B asleep
  // the hand-over's confirmed seal (64 MiB on the CUDA backend, every size
  // on the host; B opens after it):
  kMarkHandOverSealStart = 15,      // A, before its seal
  kMarkHandOverSealEnd = 16,        // A, its seal returned
  kMarkHandOverSealAfterWork = 17,  // A, before its seal, 2 ms after its Allocate
  kMarkOpenReturned = 20,           // B, its Open(wait) returned (answered, mapped)
  kMarkWaitReturned = 21,           // B, its stream wait call returned (CUDA)
  kMarkSynced = 22,                 // B, its stream synchronized (CUDA)
  // a round trip on the benchmark's own socket after 2 ms idle:
  kMarkPingStart = 30,  // A, before it sends
  kMarkPingEnd = 31,    // A, the answer in
};

inline void Mark(TimelineMark code) { TraceCode(code); }

}  // namespace gpubroker::bench
