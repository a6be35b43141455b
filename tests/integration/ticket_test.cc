// Tickets (Buffer::ticket, Client::claim): a lease kept by the daemon for
// whoever claims the ticket, once, within its TTL, whatever becomes of the
// producer's handle, session or process meanwhile.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/integration/helper_memory.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// Host memory (the integration tests' backend), with the helper's pattern.
uint8_t Pattern(uint64_t i, uint64_t seed) { return PatternByte(i, seed); }

void FillHost(Buffer& b, uint64_t seed, uint64_t length) {
  auto* p = static_cast<uint8_t*>(b.data());
  for (uint64_t i = 0; i < length; ++i) p[i] = Pattern(i, seed);
}

// The first byte that breaks the pattern, or -1.
int64_t CheckHost(Buffer& b, uint64_t seed, uint64_t length) {
  const auto* p = static_cast<const uint8_t*>(b.data());
  if (p == nullptr) return 0;
  for (uint64_t i = 0; i < length; ++i) {
    if (p[i] != Pattern(i, seed)) return static_cast<int64_t>(i);
  }
  return -1;
}

// Buffers on the daemon's books (freed ones that a lease keeps included).
uint32_t BuffersOnBooks(Client& client) { return client.status().buffers; }

double Tickets(const Daemon& daemon, const char* event) {
  return daemon.Metric(std::string("gpubroker_tickets_total{event=\"") + event + "\"}");
}

TEST(Tickets, AClaimSharesTheMemoryAfterTheProducerLetGo) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 50; ++i) {
    AllocateOptions o;
    o.tensor = TensorDesc{DType::kFloat32, {16, 64}};
    Buffer b = producer.allocate(4096, o);
    FillHost(b, i, 4096);
    b.seal_posted();
    const std::string ticket = b.ticket();
    b.release();  // the ticket's lease keeps the memory
    Buffer r = consumer.claim(ticket);
    EXPECT_EQ(r.info().state, BufferState::kSealed);
    EXPECT_EQ(r.size(), 4096u);
    ASSERT_TRUE(r.tensor().has_value());
    EXPECT_EQ(r.tensor()->shape, (std::vector<int64_t>{16, 64}));
    EXPECT_EQ(CheckHost(r, i, 4096), -1) << "iteration " << i;
    EXPECT_FALSE(r.is_owner());
  }
  EXPECT_TRUE(Eventually([&] { return BuffersOnBooks(consumer) == 0; }));
  EXPECT_EQ(Tickets(daemon, "held"), 50);
  EXPECT_EQ(Tickets(daemon, "claimed"), 50);
}

TEST(Tickets, APostedClaimTakesItsAnswerBeforeItsMemory) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "ticket.posted";
  Buffer b = producer.allocate(65536, o);
  FillHost(b, 3, 65536);
  b.seal();
  Buffer r = consumer.claim_posted(b.ticket());
  EXPECT_EQ(r.size(), 65536u);  // from the ticket, before the answer
  EXPECT_EQ(r.name(), "ticket.posted");
  ASSERT_NE(r.data(), nullptr);  // the answer, taken in here
  EXPECT_EQ(CheckHost(r, 3, 65536), -1);
  EXPECT_EQ(r.id(), b.id());
  static_cast<uint8_t*>(r.data())[7] = 0xAB;
  EXPECT_EQ(static_cast<uint8_t*>(b.data())[7], 0xAB);
  r.release();
  b.release();
  EXPECT_TRUE(Eventually([&] { return BuffersOnBooks(consumer) == 0; }));
}

TEST(Tickets, ATicketIsClaimedOnceAndARefusedPostedClaimHoldsNothing) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  Buffer b = producer.allocate(4096);
  b.seal();
  const std::string ticket = b.ticket();
  Buffer first = consumer.claim(ticket);
  EXPECT_THROW(consumer.claim(ticket), NotFoundError);
  Buffer second = consumer.claim_posted(ticket);
  EXPECT_EQ(second.data(), nullptr);  // refused: no memory is handed out
  EXPECT_THROW(second.settle(), NotFoundError);
  second.release();  // holds no lease: nothing to give back, nothing thrown
  EXPECT_THROW(consumer.claim("not a ticket"), InvalidArgumentError);
  first.release();
  b.release();
  EXPECT_TRUE(Eventually([&] { return BuffersOnBooks(consumer) == 0; }));
}

TEST(Tickets, AClaimOfAnUnsealedBufferIsRefusedAndTheTicketStays) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  Buffer b = producer.allocate(4096);
  const std::string ticket = b.ticket();  // publishes it, unsealed
  EXPECT_THROW(consumer.claim(ticket), FailedPreconditionError);
  b.seal();
  Buffer r = consumer.claim(ticket);
  EXPECT_EQ(r.id(), b.id());
}

TEST(Tickets, AnUnclaimedTicketExpiresAndItsBufferGoes) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  Buffer b = producer.allocate(1 << 20);
  b.seal();
  const std::string ticket = b.ticket(300ms);
  b.release();
  EXPECT_EQ(BuffersOnBooks(consumer), 1u);  // kept for the ticket
  EXPECT_TRUE(Eventually([&] { return Tickets(daemon, "expired") == 1; }, 10s));
  EXPECT_EQ(BuffersOnBooks(consumer), 0u);
  EXPECT_THROW(consumer.claim(ticket), NotFoundError);
}

// The producer makes a ticket, hands it out and is SIGKILLed before anyone
// claims it: the consumer still gets the buffer and its bytes (what
// torch.multiprocessing loses with its producer), and nothing stays once
// the consumer lets go.
TEST(Tickets, AKilledProducersTicketIsStillClaimed) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  Helper producer(daemon.socket_dir());
  ASSERT_TRUE(producer.ok());
  producer.Ok("alloc k 262144");
  producer.Ok("fill k 21");
  producer.Ok("seal k posted");
  const std::string ticket = Unhex(producer.Ok("ticket k"));
  producer.Kill9();
  EXPECT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}") == 1; }));
  Buffer r = consumer.claim_posted(ticket);
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(CheckHost(r, 21, 262144), -1);
  r.release();
  EXPECT_TRUE(Eventually([&] { return BuffersOnBooks(consumer) == 0; }));
}

// The producer posts its seal and its ticket's hold and is killed before the
// daemon has read either (it is stopped meanwhile): the answer to the seal
// then has nobody to go to, and the hold behind it must still take effect.
TEST(Tickets, AProducerKilledBeforeTheDaemonReadItsFramesStillLeavesItsTicket) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  Helper producer(daemon.socket_dir());
  ASSERT_TRUE(producer.ok());
  producer.Ok("alloc k 65536");
  producer.Ok("fill k 33");
  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  producer.Ok("seal k posted");
  const std::string ticket = Unhex(producer.Ok("ticket k"));
  producer.Kill9();
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  EXPECT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_sessions_ended_total{end=\"died\"}") == 1; }));
  EXPECT_EQ(Tickets(daemon, "held"), 1);
  Buffer r = consumer.claim(ticket);
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(CheckHost(r, 33, 65536), -1);
  r.release();
  EXPECT_TRUE(Eventually([&] { return BuffersOnBooks(consumer) == 0; }));
}

// The daemon reads the claim before the producer's hold (and its posted
// seal): both wait while it is stopped. The claim looks ahead and is served
// after them, as an Open of a posted seal's name is.
TEST(Tickets, AClaimReadBeforeTheHoldLooksAheadAndGetsIt) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 10; ++i) {
    Buffer b = producer.allocate(4096);
    FillHost(b, i, 4096);
    ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
    b.seal_posted();
    const std::string ticket = b.ticket();
    std::string refusal;
    std::atomic<bool> claimed{false};
    std::thread claim([&] {
      try {
        Buffer r = consumer.claim(ticket);
        claimed = CheckHost(r, i, 4096) == -1;
      } catch (const Error& e) {
        refusal = e.what();
      }
    });
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
    claim.join();
    EXPECT_TRUE(claimed) << refusal;
    b.release();
  }
}

TEST(Tickets, AnotherTenantCannotClaimAndTheTicketStaysForItsOwn) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon({}, kBlueAndGreenTenants);
  ASSERT_TRUE(daemon.ok());
  Helper blue(daemon.socket_dir(), 60001);
  Helper blue2(daemon.socket_dir(), 60001);
  Helper green(daemon.socket_dir(), 60002);
  blue.Ok("alloc k 4096");
  blue.Ok("fill k 5");
  blue.Ok("seal k");
  const std::string hex = blue.Ok("ticket k");
  EXPECT_EQ(green.Send("claim g " + hex).rfind("err NOT_FOUND", 0), 0u);
  EXPECT_EQ(green.Send("claim g " + hex + " posted"), "ok 0 4096");
  EXPECT_EQ(green.Send("check g 5").rfind("err NOT_FOUND", 0), 0u)
      << "a refused posted claim hands out no memory";
  blue2.Ok("claim b " + hex);
  EXPECT_EQ(blue2.Send("check b 5"), "ok");
}

}  // namespace
}  // namespace gpubroker::testing
