#pragma once

// How long session.sock's thread polls for the next frame after serving one,
// fitted to the traffic it sees. A frame that finds the thread asleep pays its
// wake-up (15-45 µs on the GPU machines measured, now and then hundreds on a
// virtual machine whose idle CPUs halt); one that finds it polling pays none,
// and the poll costs the daemon a CPU for its length. A fixed window is either
// too short for a pipeline whose calls come a few hundred microseconds apart
// (each call pays a wake-up) or too long for a node that calls now and then
// (each burst costs the whole window).
//
// So the window follows the gaps, the way the kernel's cpuidle haltpoll
// governor fits a virtual CPU's poll before it halts:
//  * a frame that woke the thread after a gap the window missed, but one no
//    longer than the cap, grows the window to cover that gap with a quarter
//    to spare, and at least doubles it (up to the cap): the next gap of that
//    rhythm finds the thread polling;
//  * a frame after a gap past the cap halves it (down to the base): the node
//    went quiet, and polling that long would have bought nothing. But not
//    under what the traffic before that quiet needed: its longest gap
//    within the cap, whether a frame found the thread polling after it or
//    woke it and grew the window, with a quarter to spare (that memory
//    fades by an eighth at each such quiet, so that a rhythm whose gaps
//    vary from one period to the next keeps what its longer ones needed,
//    and a node gone quiet still shrinks the window to the base). A pipeline's
//    steps (a burst of calls, then milliseconds of compute) thus keep the
//    window that catches each step's calls, where halving at every step
//    would make each step's first longer gap miss; and traffic whose gaps
//    straddle the cap (some just under, some just over) keeps the cap,
//    where halving at each gap over it would make the next one under it miss;
//  * a frame that found the thread polling changes nothing.
// A steady pipeline thus keeps the thread polling through its rhythm, and an
// idle node pays at most the window once after its last frame.

#include <algorithm>
#include <chrono>

namespace gpubroker {

class BusyPollWindow {
 public:
  using duration = std::chrono::nanoseconds;

  /// `base`: the window to start from and the least it shrinks to (0: never
  /// poll). `cap`: the most it grows to; at or under `base`, it stays `base`.
  BusyPollWindow(duration base, duration cap)
      : base_(base), cap_(std::max(base, cap)), window_(base) {}

  duration window() const { return window_; }
  bool adapts() const { return base_.count() > 0 && cap_ > base_; }

  /// A frame came `gap` after the thread last served one, and found it polling.
  void Caught(duration gap) { needed_ = std::max(needed_, gap); }

  /// The thread slept and a frame woke it `gap` after it last served one.
  void Woke(duration gap) {
    if (!adapts()) return;
    if (gap <= cap_) {
      needed_ = std::max(needed_, gap);
      if (gap > window_) window_ = std::min(cap_, std::max(window_ * 2, gap + gap / 4));
      return;
    }
    window_ = std::clamp(std::max(window_ / 2, needed_ + needed_ / 4), base_, window_);
    needed_ -= needed_ / 8;
  }

 private:
  duration base_;
  duration cap_;
  duration window_;
  // The longest gap within the cap, fading by an eighth at each gap past it:
  // a rhythm that varies from one period to the next keeps the window that
  // its longer gaps needed, and a node gone quiet forgets it in a few dozen.
  duration needed_{0};
};

}  // namespace gpubroker
