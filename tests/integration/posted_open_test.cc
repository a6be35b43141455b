// Posted opens (Client::open_posted): the consumer does not wait for the
// daemon's answer; the handle takes it in at its first use, and a refusal
// is thrown there. Several opens posted in a row share one round trip.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

// Leases the daemon holds on the named buffer (owner's included).
uint32_t Leases(Client& client, const std::string& name) {
  for (const BufferInfo& b : client.list()) {
    if (b.name == name) return b.leases;
  }
  return 0;
}

TEST(PostedOpen, TheHandleLearnsItsBufferFromTheAnswerAtFirstUse) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "posted.open";
  o.tensor = TensorDesc{DType::kFloat32, {16, 64}};
  Buffer b = producer.allocate(4096, o);
  std::memset(b.data(), 0x5A, 4096);
  b.seal_posted();
  Buffer r = consumer.open_posted("posted.open");
  EXPECT_TRUE(r.valid());
  EXPECT_EQ(r.size(), 4096u);  // the answer, taken in here
  ASSERT_TRUE(r.tensor().has_value());
  EXPECT_EQ(r.tensor()->shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(r.info().state, BufferState::kSealed);
  EXPECT_EQ(r.id(), b.id());
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(static_cast<uint8_t*>(r.data())[4095], 0x5A);
  static_cast<uint8_t*>(r.data())[7] = 0xAB;  // the same memory, both ways
  EXPECT_EQ(static_cast<uint8_t*>(b.data())[7], 0xAB);
  EXPECT_EQ(Leases(consumer, "posted.open"), 2u);
  r.release();
  EXPECT_EQ(Leases(consumer, "posted.open"), 1u);
  Buffer by_id = consumer.open_posted(b.id());
  EXPECT_EQ(by_id.name(), "posted.open");
  EXPECT_EQ(static_cast<uint8_t*>(by_id.data())[7], 0xAB);
  by_id.release();
  b.release();
  EXPECT_TRUE(Eventually([&] { return consumer.status().buffers == 0; }));
}

// A consumer that needs many buffers posts every open, then uses them: every
// one is its own lease, whatever the order of use, beyond the 32 answers a
// client leaves unread at most.
TEST(PostedOpen, ManyOpensPostedInARowAreEachTheirOwnLease) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  constexpr int kBuffers = 80;
  std::vector<Buffer> made;
  for (int i = 0; i < kBuffers; ++i) {
    AllocateOptions o;
    o.name = "posted.many." + std::to_string(i);
    made.push_back(producer.allocate(4096, o));
    std::memset(made.back().data(), i, 4096);
    made.back().seal_posted();
  }
  std::vector<Buffer> opened;
  for (int i = 0; i < kBuffers; ++i) {
    opened.push_back(consumer.open_posted("posted.many." + std::to_string(i)));
  }
  for (int i = kBuffers; i-- > 0;) {  // backwards: the last answers first
    ASSERT_NE(opened[i].data(), nullptr) << i;
    EXPECT_EQ(static_cast<uint8_t*>(opened[i].data())[100], i) << i;
    EXPECT_EQ(opened[i].name(), "posted.many." + std::to_string(i));
  }
  EXPECT_EQ(Leases(consumer, "posted.many.40"), 2u);
  opened.clear();
  EXPECT_EQ(Leases(consumer, "posted.many.40"), 1u);
  made.clear();
  EXPECT_TRUE(Eventually([&] { return consumer.status().buffers == 0; }));
}

TEST(PostedOpen, ARefusalIsThrownAtFirstUseAndTheHandleHoldsNothing) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  Buffer absent = consumer.open_posted("posted.absent");  // no error yet
  EXPECT_EQ(absent.data(), nullptr);
  EXPECT_EQ(absent.size(), 0u);
  EXPECT_THROW(absent.settle(), NotFoundError);
  EXPECT_THROW(absent.wait_ready(nullptr), FailedPreconditionError);  // holds no buffer
  absent.release();  // nothing to give back, nothing thrown

  AllocateOptions o;
  o.name = "posted.unsealed";
  Buffer b = producer.allocate(4096, o);
  b.publish();
  Buffer unsealed = consumer.open_posted("posted.unsealed");
  EXPECT_THROW(unsealed.settle(), FailedPreconditionError);
  OpenOptions anyway;
  anyway.allow_unsealed = true;
  Buffer early = consumer.open_posted("posted.unsealed", anyway);
  ASSERT_NE(early.data(), nullptr);
  EXPECT_EQ(early.info().state, BufferState::kAllocated);
  early.release();
  b.release();

  // A refusal that nobody asks about is not lost to the session: the next
  // open still works.
  { Buffer dropped = consumer.open_posted("posted.absent.too"); }
  AllocateOptions later;
  later.name = "posted.later";
  Buffer c = producer.allocate(4096, later);
  c.seal();
  EXPECT_NE(consumer.open("posted.later").data(), nullptr);
  c.release();
  EXPECT_TRUE(Eventually([&] { return consumer.status().buffers == 0; }));
}

TEST(PostedOpen, AHandleDroppedBeforeItsAnswerGivesItsLeaseBack) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "posted.dropped";
  Buffer b = producer.allocate(4096, o);
  b.seal();
  for (int i = 0; i < 50; ++i) {
    Buffer r = consumer.open_posted("posted.dropped");
  }
  EXPECT_EQ(Leases(consumer, "posted.dropped"), 1u);
  // Freed by its owner, the buffer goes once no lease is left: none is.
  b.release();
  EXPECT_TRUE(Eventually([&] { return consumer.status().buffers == 0; }));
}

TEST(PostedOpen, WhatAPostedOpenCannotDoIsRefusedAtOnce) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto consumer = Client::connect(daemon.socket_dir());
  OpenOptions wait;
  wait.wait = true;
  EXPECT_THROW(consumer.open_posted("x", wait), InvalidArgumentError);
  OpenOptions unmapped;
  unmapped.map = false;
  EXPECT_THROW(consumer.open_posted("x", unmapped), InvalidArgumentError);
  int stream_stand_in = 0;
  OpenOptions on_stream;
  on_stream.stream = &stream_stand_in;
  EXPECT_THROW(consumer.open_posted("x", on_stream), InvalidArgumentError);
  EXPECT_THROW(consumer.open_posted(BufferId{0}), InvalidArgumentError);
}

// A consumer killed with posted opens it has not used: the daemon gives
// every lease it granted back with the session.
TEST(PostedOpen, AKilledConsumersGrantedLeasesGoBack) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "posted.killed";
  Buffer b = producer.allocate(4096, o);
  b.seal();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto consumer = Client::connect(daemon.socket_dir());
    std::vector<Buffer> opened;
    for (int i = 0; i < 10; ++i) opened.push_back(consumer.open_posted("posted.killed"));
    // The last answer in means all are: the handles before it have not
    // taken theirs.
    const char ok = opened.back().data() != nullptr ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(ok, 'y');
  EXPECT_EQ(Leases(producer, "posted.killed"), 11u);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(Eventually([&] { return Leases(producer, "posted.killed") == 1u; }));
  b.release();
}

}  // namespace
}  // namespace gpubroker::testing
