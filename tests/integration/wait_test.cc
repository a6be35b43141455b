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

// A consumer waiting by id for a buffer's seal (one that it may already
// hold unsealed, as a consumer asking first does) hears at once that the
// seal will not come when the producer frees the buffer or dies unsealed,
// instead of at its deadline. Opens waiting for the name keep waiting, for
// the next buffer of that name.
TEST(ClientWaits, AWaitForASealThatCannotComeEndsAtOnce) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  for (const bool killed : {false, true}) {
    SCOPED_TRACE(killed ? "the producer is SIGKILLed" : "the producer frees it");
    Helper producer(daemon.socket_dir());
    const std::string name = killed ? "unsealed.killed" : "unsealed.freed";
    const std::string id = producer.Ok("alloc p 4096 publish name=" + name);
    OpenOptions early;
    early.allow_unsealed = true;
    Buffer held = consumer.open(name, early);  // the consumer holds it before the seal
    std::atomic<int> by_id{0};                 // 1: NotFound, 2: anything else
    std::atomic<bool> by_name_waiting{true};
    std::thread for_id([&] {
      OpenOptions o;
      o.wait = true;
      o.map = false;
      o.timeout = 20s;
      try {
        consumer.open(static_cast<BufferId>(std::stoull(id)), o);
        by_id = 2;
      } catch (const NotFoundError&) {
        by_id = 1;
      } catch (const Error&) {
        by_id = 2;
      }
    });
    std::thread for_name([&] {
      OpenOptions o;
      o.wait = true;
      o.timeout = 1500ms;
      try {
        consumer.open(name, o);
      } catch (const DeadlineExceededError&) {
      }
      by_name_waiting = false;
    });
    ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 2; }));
    const auto start = std::chrono::steady_clock::now();
    if (killed) {
      producer.Kill9();
    } else {
      producer.Ok("release p");  // the owner's release frees it
    }
    for_id.join();
    EXPECT_EQ(by_id, 1) << "told NOT_FOUND";
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "at once, not at its deadline";
    EXPECT_TRUE(by_name_waiting) << "a wait for the name goes on";
    for_name.join();
    held.release();
  }
}

// Buffer::wait_sealed: the host-side wait of a consumer that asked first,
// answered by the seal, at once when the seal cannot come.
TEST(ClientWaits, AConsumerThatAskedFirstWaitsForTheSealOnTheHost) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 4096 publish name=ask.first");
  OpenOptions early;
  early.wait = true;
  early.allow_unsealed = true;
  Buffer b = consumer.open("ask.first", early);
  EXPECT_EQ(b.info().state, BufferState::kAllocated);
  EXPECT_THROW(b.wait_sealed(50ms), DeadlineExceededError);
  std::atomic<bool> sealed{false};
  std::thread waiter([&] {
    b.wait_sealed(20s);
    sealed = b.info().state == BufferState::kSealed;
  });
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  EXPECT_FALSE(sealed);
  producer.Ok("seal p");
  waiter.join();
  EXPECT_TRUE(sealed);
  b.wait_sealed(1ms);  // sealed already: no call
  auto leases = [&] {
    for (const BufferInfo& i : consumer.list()) {
      if (i.name == "ask.first") return i.leases;
    }
    return 0u;
  };
  // The wait's own lease went: the producer's and this handle's are left.
  EXPECT_TRUE(Eventually([&] { return leases() == 2u; })) << leases();
  b.release();
  EXPECT_TRUE(Eventually([&] { return leases() == 1u; })) << leases();

  Helper doomed(daemon.socket_dir());
  doomed.Ok("alloc d 4096 publish name=ask.first.doomed");
  Buffer d = consumer.open("ask.first.doomed", early);
  std::atomic<int> outcome{0};  // 1: NotFound
  std::thread for_doomed([&] {
    try {
      d.wait_sealed(20s);
      outcome = 2;
    } catch (const NotFoundError&) {
      outcome = 1;
    } catch (const Error&) {
      outcome = 3;
    }
  });
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  const auto start = std::chrono::steady_clock::now();
  doomed.Kill9();
  for_doomed.join();
  EXPECT_EQ(outcome, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  d.release();

  Buffer own = consumer.allocate(4096);
  EXPECT_THROW(own.wait_sealed(), FailedPreconditionError);
}

// A consumer that waits awake (OpenOptions::awake) is answered as any
// waiting Open is; the daemon's session thread polls while it is parked,
// for no longer than --max-wait-awake-us, and sleeps again once the wait
// ends or the cap has passed; the time it polled is counted.
TEST(ClientWaits, AWaitThatStaysAwakeCostsTheDaemonOnlyWhileParkedAndWithinItsCap) {
  Daemon daemon({"--max-wait-awake-us", "300000"});
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  OpenOptions awake;
  awake.wait = true;
  awake.timeout = 20s;
  awake.awake = 2s;  // capped by the daemon at 300 ms; the client polls for the whole wait
  std::atomic<bool> opened{false};
  std::thread waiter([&] {
    Buffer b = consumer.open("awake.frame", awake);
    EXPECT_EQ(b.info().state, BufferState::kSealed);
    EXPECT_EQ(b.size(), 8192u);
    opened = true;
  });
  // The wait is parked (and seen by the gauge) a moment before the session
  // thread counts it as awake: wait for each, rather than read the count right after the gauge.
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 1; }));
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 1);
  std::this_thread::sleep_for(100ms);
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 8192 name=awake.frame");
  producer.Ok("seal p");
  waiter.join();
  EXPECT_TRUE(opened);
  // It polled from the park until the seal: at least the 100 ms slept above,
  // and no more than the cap.
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_seconds_total") >= 0.09; }));
  const double first = daemon.Metric("gpubroker_session_awake_seconds_total");
  EXPECT_LE(first, 0.35);

  // Nobody waits now: the daemon sleeps.
  std::this_thread::sleep_for(100ms);
  double before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(500ms);
  EXPECT_LT(CpuSeconds(daemon.pid()) - before, 0.2) << "the daemon kept polling after the wait";

  // A wait longer than the cap: the daemon polls for the cap, then sleeps
  // while the wait goes on until its timeout.
  OpenOptions longer = awake;
  longer.timeout = 1500ms;
  longer.awake = 10s;
  std::atomic<bool> timed_out{false};
  std::thread patient([&] {
    try {
      consumer.open("never.sealed", longer);
    } catch (const DeadlineExceededError&) {
      timed_out = true;
    }
  });
  std::this_thread::sleep_for(600ms);  // past the cap
  before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_for(600ms);
  EXPECT_LT(CpuSeconds(daemon.pid()) - before, 0.2) << "the daemon polled past its cap";
  patient.join();
  EXPECT_TRUE(timed_out);
  const double second = daemon.Metric("gpubroker_session_awake_seconds_total") - first;
  EXPECT_GE(second, 0.25);
  EXPECT_LE(second, 0.35);
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 2);
}

// A consumer that keeps only the daemon awake (OpenOptions::daemon_awake):
// the daemon's session thread polls while the Open is parked, as for
// `awake`, and the consumer's own thread sleeps; it is answered at the seal
// all the same. Negative, or without `wait`, it is refused.
TEST(ClientWaits, AWaitCanKeepOnlyTheDaemonAwake) {
  // A cap well past the wait (the metrics read below can take a while under
  // the sanitizers): the daemon polls from the park until the seal.
  Daemon daemon({"--max-wait-awake-us", "10000000"});
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  OpenOptions o;
  o.wait = true;
  o.timeout = 20s;
  o.daemon_awake = 20s;  // capped by the daemon at 10 s
  double waiter_cpu = -1;
  std::atomic<bool> opened{false};
  std::thread waiter([&] {
    const double cpu_start = ThreadCpuSeconds();
    Buffer b = consumer.open("daemon.awake.frame", o);
    waiter_cpu = ThreadCpuSeconds() - cpu_start;
    EXPECT_EQ(b.info().state, BufferState::kSealed);
    EXPECT_EQ(b.size(), 8192u);
    opened = true;
  });
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 1; }));
  // The daemon polls for the waiter meanwhile (counted below: its CPU time
  // says little on a loaded machine, where a polling thread that yields gets
  // a small share of it).
  std::this_thread::sleep_for(200ms);
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 8192 name=daemon.awake.frame");
  producer.Ok("seal p");
  waiter.join();
  EXPECT_TRUE(opened);
  // It waited over 200 ms, and spent on its CPU about what one call costs.
  EXPECT_GE(waiter_cpu, 0);
  EXPECT_LT(waiter_cpu, 0.05) << "the consumer's thread polled";
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_seconds_total") >= 0.19; }));
  // Nobody waits now: the daemon sleeps, its cap far off, and counts no more.
  std::this_thread::sleep_for(300ms);
  const double after = CpuSeconds(daemon.pid());
  const double counted = daemon.Metric("gpubroker_session_awake_seconds_total");
  std::this_thread::sleep_for(500ms);
  EXPECT_LT(CpuSeconds(daemon.pid()) - after, 0.2) << "the daemon kept polling after the wait";
  EXPECT_LT(daemon.Metric("gpubroker_session_awake_seconds_total") - counted, 0.01)
      << "the daemon kept polling after the wait";

  OpenOptions negative = o;
  negative.daemon_awake = -1us;
  EXPECT_THROW(consumer.open("daemon.awake.frame", negative), InvalidArgumentError);
  OpenOptions no_wait;
  no_wait.daemon_awake = 1ms;
  EXPECT_THROW(consumer.open("daemon.awake.frame", no_wait), InvalidArgumentError);
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 1);
}

// An operator who will not lend the daemon's CPU to waiting consumers sets
// the cap to 0: a wait that asks to stay awake is answered all the same, and
// the daemon's thread never polls for it.
TEST(ClientWaits, NoWaitKeepsTheDaemonAwakeWhenItsCapIsZero) {
  Daemon daemon({"--max-wait-awake-us", "0"});
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  std::thread waiter([&] {
    OpenOptions o;
    o.wait = true;
    o.timeout = 20s;
    o.awake = 1s;
    EXPECT_EQ(consumer.open("capped.frame", o).size(), 4096u);
  });
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 4096 name=capped.frame");
  producer.Ok("seal p");
  waiter.join();
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_seconds_total"), 0);
}

// A consumer that asked first waits for the seal awake too (wait_sealed
// with awake): answered at the seal, the daemon polling while it waits.
TEST(ClientWaits, AConsumerThatAskedFirstCanWaitForTheSealAwake) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  Helper producer(daemon.socket_dir());
  producer.Ok("alloc p 4096 publish name=ask.first.awake");
  OpenOptions early;
  early.wait = true;
  early.allow_unsealed = true;
  Buffer b = consumer.open("ask.first.awake", early);
  EXPECT_THROW(b.wait_sealed(20s, -1us), InvalidArgumentError);
  std::atomic<bool> sealed{false};
  std::thread waiter([&] {
    b.wait_sealed(20s, 5ms);
    sealed = b.info().state == BufferState::kSealed;
  });
  // The wait is parked (and seen by the gauge) a moment before the session
  // thread counts it as awake: wait for each, rather than read the count right after the gauge.
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") >= 1; }));
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 1; }));
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 1);
  producer.Ok("seal p");
  waiter.join();
  EXPECT_TRUE(sealed);
}

// `awake` shapes a wait: asked of an Open that does not wait, or negative,
// it is refused before anything is sent.
TEST(ClientWaits, AwakeWithoutAWaitIsRefused) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  AllocateOptions named;
  named.name = "awake.bad";
  Buffer b = client.allocate(4096, named);
  b.seal();
  OpenOptions no_wait;
  no_wait.awake = 1ms;
  EXPECT_THROW(client.open("awake.bad", no_wait), InvalidArgumentError);
  EXPECT_THROW(client.open_posted("awake.bad", no_wait), InvalidArgumentError);
  OpenOptions negative;
  negative.wait = true;
  negative.awake = -1us;
  EXPECT_THROW(client.open("awake.bad", negative), InvalidArgumentError);
  OpenOptions fine;
  fine.wait = true;
  fine.awake = 1ms;
  EXPECT_EQ(client.open("awake.bad", fine).size(), 4096u) << "a sealed buffer: answered at once";
}

}  // namespace
}  // namespace gpubroker::testing
