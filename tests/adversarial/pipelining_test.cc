// Item 6: pipelining. A client that sends thousands of calls before reading
// any answer gets every answer, in order, and keeps its session: the daemon
// stops reading from it while its answers wait (EPOLLOUT), and never drops it
// for it. Descriptors granted in that state still travel with their frames.
#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(Pipelining, ThousandsOfCallsSentBeforeReadingAreAllAnswered) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper owner(daemon.socket_dir(), -1, /*suballocate=*/false);  // the daemon's buffer
  owner.Ok("alloc x 4096 name=piped");
  owner.Ok("fill x 5");
  Adversary client(daemon.socket_dir(), -1);
  ASSERT_TRUE(client.ok());
  // About 200 bytes an answer: several times what a socket buffer holds.
  const std::string reply = client.Send("pipeline piped 3000");
  EXPECT_EQ(Field(reply, "replies"), 3000) << reply;
  EXPECT_EQ(Field(reply, "errors"), 0) << reply;
  EXPECT_EQ(Field(reply, "inorder"), 1) << reply;
  EXPECT_EQ(Field(reply, "alive"), 1) << reply;

  const std::string fds = client.Send("fdflood 1000");
  EXPECT_EQ(Field(fds, "grants"), 1000) << fds;
  EXPECT_EQ(Field(fds, "fds"), 1000) << fds;

  // Nothing was lost on the way: the owner's buffer is intact and open to others.
  EXPECT_EQ(owner.Send("check x 5"), "ok");
  Helper reader(daemon.socket_dir());
  reader.Ok("open y piped unsealed");
  EXPECT_EQ(reader.Send("check y 5"), "ok");
  EXPECT_EQ(daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}"), 0)
      << "no session may have been dropped";
}

}  // namespace
}  // namespace gpubroker::testing
