// The client library's waiting Open: it travels on session.sock, is parked
// in the daemon, and holds up none of the client's other calls, from other
// threads, on the same connection; each wait ends at its own timeout.
#include <atomic>
#include <thread>

#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(ClientWaits, AWaitingOpenGoesOnTheSessionSocketAndHoldsUpNoOtherCall) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  std::atomic<bool> opened{false};
  std::atomic<bool> timed_out{false};
  std::thread waiter([&] {
    OpenOptions o;
    o.wait = true;
    o.timeout = 20s;
    Buffer b = client.open("late.frame", o);
    EXPECT_EQ(b.info().state, BufferState::kSealed);
    EXPECT_EQ(b.size(), 8192u);
    opened = true;
  });
  std::thread impatient([&] {
    OpenOptions o;
    o.wait = true;
    o.timeout = 200ms;
    try {
      client.open("never.there", o);
    } catch (const DeadlineExceededError&) {
      timed_out = true;
    }
  });
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  // This thread's calls go on on the same session while the other waits.
  for (int i = 0; i < 50; ++i) {
    Buffer b = client.allocate(4096);
    b.seal();
  }
  impatient.join();
  EXPECT_TRUE(timed_out) << "a short wait ends at its own timeout";
  EXPECT_FALSE(opened) << "nothing has been sealed under that name yet";

  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 8192 name=late.frame");
  producer.Ok("seal p");
  waiter.join();
  EXPECT_TRUE(opened);
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_connections{socket=\"grpc\"}"), 0)
      << "the waits and the calls all went over session.sock";
}

}  // namespace
}  // namespace gpubroker::testing
