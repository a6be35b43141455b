// Item 4: waiting Opens. Waiters are parked in the daemon with no thread
// behind them: a thousand gRPC Opens without a deadline neither exhaust the
// server's threads nor slow anyone else, and one seal answers them all. On
// session.sock a waiting Open is answered when the buffer is sealed while the
// connection goes on serving the session's other calls. Waits are capped per
// session and per tenant (RESOURCE_EXHAUSTED, reason LIMIT), and a wait that
// names no deadline ends at the daemon's.
#include <future>
#include <limits>
#include <thread>

#include "common/refusal.h"
#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

#define SKIP_UNLESS_USERS() \
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root and setpriv to run clients as other users"

v1::Call WaitingOpen(const std::string& name, uint64_t timeout_ms = 0) {
  v1::Call call;
  call.mutable_open()->mutable_ref()->set_name(name);
  call.mutable_open()->set_wait(true);
  call.mutable_open()->set_timeout_ms(timeout_ms);
  return call;
}

// Sends a call with a fresh request id; returns the id.
uint64_t Send(RawSession& s, v1::Call call) {
  const uint64_t id = s.NextRequestId();
  call.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_call() = std::move(call);
  EXPECT_TRUE(s.Send(frame).ok());
  return id;
}

TEST(Waiters, AThousandWaitingOpensHoldNoThreadStallNobodyAndOneSealAnswersThem) {
  SKIP_UNLESS_USERS();
  constexpr int kWaiters = 1100;  // more than the threads the old synchronous server had
  Daemon daemon({"--max-waiters-per-session", "2000"});
  ASSERT_TRUE(daemon.ok());
  const double threads_before = daemon.Metric("process_threads");
  Adversary hog(daemon.socket_dir(), 60201);
  ASSERT_TRUE(hog.ok());
  const std::string sent = hog.Send("grpc-waits " + std::to_string(kWaiters) + " frames.later");
  EXPECT_EQ(Field(sent, "answered"), 0) << "none may be refused: " << sent;
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == kWaiters; }))
      << daemon.Metric("gpubroker_waiting_opens") << " parked; " << hog.Send("grpc-waits-done");
  EXPECT_LT(daemon.Metric("process_threads"), threads_before + 64)
      << "a parked Open must hold no thread";

  // Everyone else is served as usual, on both sockets.
  Helper bystander(daemon.socket_dir());
  bystander.Ok("alloc b 4096");
  bystander.Ok("release b");
  bystander.Ok("status");
  bystander.Ok("list");

  // One seal, by the hog's own tenant, answers every waiter with a grant.
  Helper producer(daemon.socket_dir(), 60201);
  producer.Ok("alloc p 4096 name=frames.later");
  producer.Ok("seal p");
  ASSERT_TRUE(Eventually([&] { return Field(hog.Send("grpc-waits-done"), "OK") == kWaiters; }))
      << hog.Send("grpc-waits-done");
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"ok\"}"), kWaiters);

  // Waiters whose process dies are unparked with its session.
  Adversary doomed(daemon.socket_dir(), 60202);
  ASSERT_TRUE(doomed.ok());
  doomed.Send("grpc-waits 50 never.there");
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 50; }));
  doomed.Kill9();
  EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 0; }));
}

TEST(Waiters, OnTheSessionSocketAWaitIsAnsweredAtTheSealWhileOtherCallsGoOn) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  RawSession consumer(daemon.socket_dir());
  ASSERT_TRUE(consumer.ok());
  EXPECT_GT(consumer.welcome().max_waiting_opens(), 0u) << "the daemon says it parks waits";
  const uint64_t wait_id = Send(consumer, WaitingOpen("late.frame", 20000));

  // The session's other calls are answered while the Open waits.
  v1::Call alloc;
  alloc.mutable_allocate()->set_size(4096);
  const uint64_t alloc_id = Send(consumer, alloc);
  auto answer = consumer.Read(5s);
  ASSERT_TRUE(answer.ok() && answer->has_value()) << "no answer to the Allocate";
  ASSERT_TRUE((*answer)->has_reply()) << (*answer)->DebugString();
  EXPECT_EQ((*answer)->reply().request_id(), alloc_id) << "the Allocate overtakes the wait";
  v1::Call release;
  release.mutable_release()->set_id((*answer)->reply().allocate().buffer().id());
  ASSERT_TRUE(consumer.Call(release).ok());
  // Nothing for the wait yet.
  answer = consumer.Read(300ms);
  ASSERT_TRUE(answer.ok());
  EXPECT_FALSE(answer->has_value()) << (*answer)->DebugString();

  // The producer, another process of the same tenant, seals: the daemon answers the wait.
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 4096 name=late.frame");
  producer.Ok("fill p 9");
  producer.Ok("seal p");
  answer = consumer.Read(5s);
  ASSERT_TRUE(answer.ok() && answer->has_value()) << "the wait was not answered at the seal";
  ASSERT_TRUE((*answer)->has_reply()) << (*answer)->DebugString();
  EXPECT_EQ((*answer)->reply().request_id(), wait_id);
  EXPECT_EQ((*answer)->reply().open().buffer().state(), v1::BUFFER_STATE_SEALED);
  EXPECT_EQ((*answer)->reply().open().buffer().size(), 4096u);
}

// A session that parks waits asking to be kept awake for ever (awake_us at
// its largest) gets the daemon's cap, not its ask: the session thread polls
// for at most --max-wait-awake-us after the last of them parked, however
// many there are, keeps serving everyone else meanwhile, and sleeps after.
TEST(Waiters, WaitsAskingToBeKeptAwakeForEverGetTheCapAndNobodyStalls) {
  Daemon daemon({"--max-wait-awake-us", "200000"});
  ASSERT_TRUE(daemon.ok());
  RawSession hog(daemon.socket_dir());
  ASSERT_TRUE(hog.ok());
  for (int i = 0; i < 100; ++i) {
    v1::Call call = WaitingOpen("never.sealed." + std::to_string(i), 3000);
    call.mutable_open()->set_awake_us(std::numeric_limits<uint64_t>::max());
    Send(hog, call);
  }
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 100; }));
  // Counted awake just after it is parked: the last one may trail the gauge.
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 100; }));
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 100);

  // Served as usual meanwhile.
  Helper bystander(daemon.socket_dir());
  bystander.Ok("alloc b 4096");
  bystander.Ok("release b");

  // Past the cap the thread sleeps, though all 100 still wait.
  std::this_thread::sleep_for(500ms);
  const double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(1s);
  EXPECT_LT(CpuSeconds(daemon.pid()) - before, 0.25) << "the daemon polled past its cap";
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 100);
  const double polled = daemon.Metric("gpubroker_session_awake_seconds_total");
  EXPECT_GT(polled, 0.1);
  EXPECT_LT(polled, 0.5) << "100 waits cost one thread's polling, up to the cap, not 100 caps";
}

TEST(Waiters, WaitsAreCappedPerSessionAndPerTenantWithTheLimitReason) {
  Daemon daemon({"--max-waiters-per-session", "3", "--max-waiters-per-tenant", "5"});
  ASSERT_TRUE(daemon.ok());
  RawSession first(daemon.socket_dir());
  RawSession second(daemon.socket_dir());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first.welcome().max_waiting_opens(), 3u);
  for (int i = 0; i < 3; ++i) Send(first, WaitingOpen("never." + std::to_string(i), 30000));
  auto over = first.Call(WaitingOpen("never.3", 30000));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_EQ(RefusalOf(over.status()), Refusal::kLimit);
  EXPECT_NE(over.status().message().find("max_waiters_per_session"), std::string::npos);
  for (int i = 0; i < 2; ++i) Send(second, WaitingOpen("never.b" + std::to_string(i), 30000));
  over = second.Call(WaitingOpen("never.b2", 30000));
  EXPECT_EQ(RefusalOf(over.status()), Refusal::kLimit) << over.status();
  EXPECT_NE(over.status().message().find("max_waiters_per_tenant"), std::string::npos);
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 5);
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"limit\"}"), 2);
  // Both sessions still serve their other calls.
  v1::Call alloc;
  alloc.mutable_allocate()->set_size(1);
  EXPECT_TRUE(first.Call(alloc).ok());
  EXPECT_TRUE(second.Call(alloc).ok());
}

TEST(Waiters, AWaitThatNamesNoDeadlineEndsAtTheDaemons) {
  Daemon daemon({"--wait-timeout", "300ms"});
  ASSERT_TRUE(daemon.ok());
  RawSession session(daemon.socket_dir());
  ASSERT_TRUE(session.ok());
  auto start = std::chrono::steady_clock::now();
  auto ended = session.Call(WaitingOpen("never.there"), 10s);
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kDeadlineExceeded) << ended.status();
  EXPECT_NE(ended.status().message().find("did not appear before the deadline"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);

  // On gRPC too, with neither a call deadline nor timeout_ms (the test
  // bounds its own wait, and cancels a call that outlives it).
  auto stub = BrokerStub(daemon.socket_dir());
  grpc::ClientContext ctx;
  ctx.AddMetadata("gpubroker-token", session.token_hex());
  v1::OpenRequest req;
  req.mutable_ref()->set_name("never.there");
  req.set_wait(true);
  v1::OpenResponse resp;
  std::promise<grpc::Status> done;
  start = std::chrono::steady_clock::now();
  stub->async()->Open(&ctx, &req, &resp, [&](grpc::Status s) { done.set_value(s); });
  auto answered = done.get_future();
  if (answered.wait_for(10s) != std::future_status::ready) {
    ctx.TryCancel();
    answered.wait();
    FAIL() << "a wait without a deadline did not end at the daemon's";
  }
  const grpc::Status s = answered.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_NE(s.error_message().find("did not appear before the deadline"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"timeout\"}"), 2);
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 0);
}

}  // namespace
}  // namespace gpubroker::testing
