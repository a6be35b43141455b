// Posted seals (Buffer::seal_posted): the producer does not wait for the
// daemon's answer, yet a consumer that hears of the name afterwards finds the
// buffer sealed, and a refusal still reaches the producer.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "gpubroker/client.hpp"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(PostedSeal, AConsumerToldAfterThePostOpensTheBufferSealed) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 200; ++i) {
    AllocateOptions o;
    o.name = "posted." + std::to_string(i);
    Buffer b = producer.allocate(4096, o);
    std::memset(b.data(), i & 0xFF, 4096);
    b.seal_posted();
    // The "signal" is this thread going on; the Open does not wait.
    Buffer r = consumer.open(o.name);
    ASSERT_EQ(r.info().state, BufferState::kSealed) << o.name;
    ASSERT_EQ(static_cast<unsigned char*>(r.data())[4095], i & 0xFF);
    r.release();
    EXPECT_NE(b.id(), 0u);  // the answer, taken in now
    b.release();
  }
  EXPECT_EQ(producer.stats().publishes, 200u);
}

// The daemon reads the consumer's Open before the producer's Publish: the
// consumer's socket became readable first (an earlier call of its own), and
// both wait while the daemon is stopped. Without the look-ahead the Open
// would be refused.
TEST(PostedSeal, AnOpenReadBeforeThePublishLooksAheadAndFindsIt) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "posted.late";
  Buffer b = producer.allocate(4096, o);

  ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
  std::atomic<bool> first_refused{false};
  std::thread first([&] {
    try {
      consumer.open("posted.absent");
    } catch (const NotFoundError&) {
      first_refused = true;
    }
  });
  std::this_thread::sleep_for(100ms);  // its frame is in the consumer's socket
  b.seal_posted();                     // then the producer's
  std::atomic<bool> opened{false};
  std::string refusal;
  std::thread second([&] {
    try {
      Buffer r = consumer.open("posted.late");
      opened = r.info().state == BufferState::kSealed;
    } catch (const Error& e) {
      refusal = e.what();
    }
  });
  std::this_thread::sleep_for(100ms);  // and then the consumer's Open
  ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
  first.join();
  second.join();
  EXPECT_TRUE(first_refused);
  EXPECT_TRUE(opened) << refusal;
  EXPECT_GE(daemon.Metric("gpubroker_session_open_lookaheads_total{result=\"refused\"}") +
                daemon.Metric("gpubroker_session_open_lookaheads_total{result=\"found\"}"),
            1);
  b.release();
}

// The same over gRPC: its Open runs on another thread, which waits for
// session.sock's thread to serve what it has received before it refuses.
TEST(PostedSeal, AGrpcOpenAfterThePostFindsItToo) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  RawSession consumer(daemon.socket_dir());
  ASSERT_TRUE(consumer.ok());
  auto stub = v1::Broker::NewStub(grpc::CreateChannel(
      "unix:" + daemon.socket_dir() + "/gpubroker.sock", grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 20; ++i) {
    AllocateOptions o;
    o.name = "posted.grpc." + std::to_string(i);
    Buffer b = producer.allocate(4096, o);
    // Both the Publish and the Open wait while the daemon is stopped, and
    // its threads race for them when it goes on.
    ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
    b.seal_posted();
    grpc::Status status;
    v1::OpenResponse opened;
    std::thread open([&] {
      grpc::ClientContext ctx;
      ctx.AddMetadata("gpubroker-token", consumer.token_hex());
      ctx.set_deadline(std::chrono::system_clock::now() + 20s);
      v1::OpenRequest req;
      req.mutable_ref()->set_name(o.name);
      status = stub->Open(&ctx, req, &opened);
    });
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
    open.join();
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
    EXPECT_EQ(opened.buffer().state(), v1::BUFFER_STATE_SEALED);
    v1::Call release;
    release.mutable_release()->set_id(opened.buffer().id());
    auto answer = consumer.Exchange(release);
    ASSERT_TRUE(answer && answer->has_reply()) << i;
    b.release();
  }
}

TEST(PostedSeal, ARefusedPostIsThrownByTheNextCallThatNeedsTheAnswer) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "posted.taken";
  Buffer first = client.allocate(4096, o);
  first.seal();
  Buffer second = client.allocate(4096, o);  // client-made: the name is checked at publish
  EXPECT_NO_THROW(second.seal_posted());
  EXPECT_THROW(second.release(), AlreadyExistsError);
  EXPECT_FALSE(second.valid());  // released all the same
  // The name still belongs to the first buffer, and the session serves on.
  auto other = Client::connect(daemon.socket_dir());
  Buffer r = other.open("posted.taken");
  EXPECT_EQ(r.id(), first.id());

  Buffer third = client.allocate(4096, o);
  third.seal_posted();
  EXPECT_THROW(third.publish(), AlreadyExistsError);
  EXPECT_EQ(third.id(), 0u);  // still private
}

TEST(PostedSeal, ManyPostsWithoutReadingNeitherBlockTheDaemonNorLoseAnAnswer) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  std::vector<Buffer> buffers;
  for (int i = 0; i < 300; ++i) {
    AllocateOptions o;
    o.name = "posted.many." + std::to_string(i);
    buffers.push_back(client.allocate(256, o));
    buffers.back().seal_posted();
  }
  auto other = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 300; ++i) {
    Buffer r = other.open("posted.many." + std::to_string(i));
    EXPECT_EQ(r.id(), buffers[i].id());
    EXPECT_EQ(buffers[i].info().state, BufferState::kSealed);
  }
  for (Buffer& b : buffers) b.release();
}

TEST(PostedSeal, AHandleDroppedWithItsAnswerUnreadGoesBackWhole) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  {
    AllocateOptions o;
    o.name = "posted.dropped";
    Buffer b = client.allocate(4096, o);
    b.seal_posted();
  }  // freed: its name goes
  auto other = Client::connect(daemon.socket_dir());
  EXPECT_THROW(other.open("posted.dropped"), NotFoundError);
}

}  // namespace
}  // namespace gpubroker::testing
