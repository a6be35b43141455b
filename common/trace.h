#pragma once

// Trace marks: points in the daemon's and the client's work that a timeline
// of socket calls (bench/timeline/timeline_preload.c, loaded with
// LD_PRELOAD) records beside the calls, so that bench/timeline.py can say
// where the time between two socket calls went. Without that library a
// mark is a load and a branch.

#include <dlfcn.h>

namespace gpubroker {

enum class TraceMark : int {
  kDaemonFrameDecoded = 100,  ///< session.sock's thread has a whole frame
  kDaemonCallServed = 101,    ///< ... and served its call (the registry's work)
  kDaemonParkedAnswer = 102,  ///< ... and is about to write and send a parked Open's answer
  // Within a Publish (Registry::Publish), between kDaemonFrameDecoded and
  // kDaemonCallServed: where a cold one spends its time.
  kDaemonPublishBegun = 103,   ///< its checks done, about to take the registry's lock
  kDaemonPublishLocked = 104,  ///< ... the lock taken, the session and the range found
  kDaemonPublishStored = 105,  ///< ... carved, named, stored and leased; next, the waiters
  kClientAnswerTaken = 110,    ///< a client has its call's answer, parsed
  kClientMapped = 111,         ///< ... and the buffer mapped
};

/// Records `code` in the timeline, if the library is loaded (it is looked
/// up once). Codes under 100 are the benchmark's (bench/timeline/marks.h).
inline void TraceCode(int code) {
  using Fn = void (*)(int);
  static const Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "gpubroker_timeline_mark"));
  if (fn != nullptr) fn(code);
}

inline void Trace(TraceMark mark) { TraceCode(static_cast<int>(mark)); }

}  // namespace gpubroker
