// The busy poll's window follows the gaps between frames (busy_poll.h): a
// rhythm the window misses grows it to cover the gap, up to the cap; a gap
// past the cap halves it, down to the base, but not under what the gaps
// before it needed (a memory that fades); and a window with no room to grow
// stays as configured.
#include "daemon/session/busy_poll.h"

#include <chrono>

#include "gtest/gtest.h"

namespace gpubroker {
namespace {

using namespace std::chrono_literals;

TEST(BusyPollWindow, AGapTheWindowMissedGrowsItToCoverTheNextOneAlike) {
  BusyPollWindow w(100us, 1000us);
  EXPECT_EQ(w.window(), 100us);
  w.Woke(300us);  // a frame 300 µs after the last one found the thread asleep
  EXPECT_EQ(w.window(), 375us) << "the gap and a quarter to spare";
  w.Woke(375us);  // within the window: it would have been caught, nothing moves
  EXPECT_EQ(w.window(), 375us);
  w.Woke(400us);  // just missed: at least doubled
  EXPECT_EQ(w.window(), 750us);
}

TEST(BusyPollWindow, GrowsNoFurtherThanTheCap) {
  BusyPollWindow w(100us, 1000us);
  w.Woke(900us);
  EXPECT_EQ(w.window(), 1000us) << "900 µs and a quarter is past the cap";
  w.Woke(1000us);
  EXPECT_EQ(w.window(), 1000us);
}

TEST(BusyPollWindow, AQuietFadesTheWindowDownToTheBase) {
  BusyPollWindow w(100us, 1000us);
  w.Woke(800us);
  ASSERT_EQ(w.window(), 1000us);
  w.Woke(5ms);  // the first quiet: the 800 µs gap before it needed the window
  EXPECT_EQ(w.window(), 1000us);
  w.Woke(5ms);  // what that gap needed fades by an eighth a quiet
  EXPECT_EQ(w.window(), 875us);
  auto last = w.window();
  for (int i = 0; i < 30; ++i) {
    w.Woke(5ms);  // the node went quiet: polling longer would have bought nothing
    EXPECT_LE(w.window(), last);
    last = w.window();
  }
  EXPECT_EQ(w.window(), 100us) << "down to the base, and never under it";
}

TEST(BusyPollWindow, AQuietAfterABurstKeepsWhatTheBurstsGapsNeeded) {
  BusyPollWindow w(100us, 1000us);
  w.Woke(400us);
  ASSERT_EQ(w.window(), 500us);
  // A step of a pipeline: its calls came up to 450 µs apart and found the
  // thread polling, then the step's compute kept it quiet for 5 ms.
  w.Caught(200us);
  w.Caught(450us);
  w.Woke(5ms);
  EXPECT_EQ(w.window(), 500us) << "450 µs and a quarter: not halved";
  w.Woke(5ms);  // a lone frame: only a fading memory of the 450 µs gaps
  EXPECT_LT(w.window(), 500us);
  EXPECT_GT(w.window(), 250us) << "faded, not halved";
  const auto faded = w.window();
  w.Caught(900us);  // never grows on a quiet's wake: only a miss grows it
  w.Woke(5ms);
  EXPECT_EQ(w.window(), faded);
}

// Gaps on both sides of the cap, as between the iterations of work that
// takes about the cap between its calls: each gap past it would halve the
// window, and the next gap under it would then miss and wake the thread.
TEST(BusyPollWindow, GapsThatStraddleTheCapKeepTheCap) {
  BusyPollWindow w(100us, 1000us);
  w.Woke(900us);
  ASSERT_EQ(w.window(), 1000us);
  for (int i = 0; i < 10; ++i) {
    w.Caught(50us);
    w.Woke(1100us);  // just past the cap: slept, and woken
    EXPECT_EQ(w.window(), 1000us) << "the 900 µs gap before it still needs it, round " << i;
    w.Caught(50us);
    ASSERT_GE(w.window(), 900us);
    w.Caught(900us);  // found the thread polling
  }
}

// A rhythm whose long gap varies from one period to the next (600 µs, then
// 400, then 600 ...), each period followed by a quiet: the window keeps
// what the longer gaps needed, where forgetting them at each quiet left it
// fitted to the last period alone, and the next longer gap missed.
TEST(BusyPollWindow, ARhythmThatVariesKeepsWhatItsLongerGapsNeeded) {
  BusyPollWindow w(100us, 1000us);
  w.Woke(600us);
  w.Woke(5ms);
  for (int i = 0; i < 20; ++i) {
    const auto gap = i % 2 == 0 ? 400us : 600us;
    EXPECT_GE(w.window(), gap) << "period " << i << ": the gap would find the thread asleep";
    w.Caught(gap);
    w.Woke(5ms);
  }
}

TEST(BusyPollWindow, StaysAtTheBaseWhenTheCapLeavesNoRoom) {
  for (auto cap : {0us, 50us, 100us}) {
    BusyPollWindow w(100us, cap);
    EXPECT_FALSE(w.adapts());
    w.Woke(150us);
    w.Woke(10s);
    EXPECT_EQ(w.window(), 100us) << "cap " << cap.count();
  }
}

TEST(BusyPollWindow, NoBaseMeansNoPollWhateverTheCap) {
  BusyPollWindow w(0us, 1000us);
  EXPECT_FALSE(w.adapts());
  w.Woke(200us);
  EXPECT_EQ(w.window(), 0us) << "--busy-poll-us 0 sleeps at once, always";
}

}  // namespace
}  // namespace gpubroker
