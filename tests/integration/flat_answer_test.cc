// Answers to Open and Claim in the flat layout (common/wire/flat_answer.h):
// the daemon sends them only to a session whose Hello asked, and a client
// that reads them learns exactly what one reading protobuf learns, for
// every way an Open is answered (now, posted, parked until the seal, a
// ticket's claim).
#include "common/wire/flat_answer.h"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/version.h"
#include "common/wire/frame.h"
#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/buffer_info_expect.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

// Reads exactly `n` bytes from `fd`, waiting up to 5 s for them.
std::string ReadExactly(int fd, size_t n) {
  std::string out;
  while (out.size() < n) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) break;
    char buf[4096];
    const ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

// A raw session whose Hello says `flat_answers` and `flat_publish`; the
// Welcome is checked to echo them.
void SayHello(RawSession& raw, bool flat_answers, bool flat_publish) {
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_client_name("raw");
  hello.mutable_hello()->set_flat_answers(flat_answers);
  hello.mutable_hello()->set_flat_publish_answers(flat_publish);
  ASSERT_TRUE(raw.Send(hello).ok());
  auto welcome = raw.Read(5s);
  ASSERT_TRUE(welcome.ok() && welcome->has_value() && (*welcome)->has_welcome());
  EXPECT_EQ((*welcome)->welcome().flat_answers(), flat_answers);
  EXPECT_EQ((*welcome)->welcome().flat_publish_answers(), flat_answers && flat_publish);
}

// Sends `call` and reads the frame that answers it, byte by byte as it came:
// `*flat` says whether it was a flat frame.
void AnswerOf(RawSession& raw, const v1::SessionFrame& call, v1::SessionFrame* answer, bool* flat) {
  ASSERT_TRUE(raw.Send(call).ok());
  const std::string header = ReadExactly(raw.fd(), kFrameHeaderBytes);
  ASSERT_EQ(header.size(), kFrameHeaderBytes);
  uint32_t len = 0;
  std::memcpy(&len, header.data(), 4);
  *flat = (len & kFlatFrameBit) != 0;
  const std::string body = ReadExactly(raw.fd(), len & ~kFlatFrameBit);
  FrameDecoder decoder;
  decoder.AcceptFlatAnswers();
  decoder.Append(header + body);
  auto frame = decoder.Next();
  ASSERT_TRUE(frame.ok() && frame->has_value()) << frame.status();
  *answer = std::move(**frame);
}

TEST(FlatAnswers, TheDaemonSendsThemOnlyToASessionThatAsked) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "flat.raw";
  o.tensor = TensorDesc{DType::kFloat16, {8, 32}};
  Buffer b = producer.allocate(512, o);
  b.seal();
  for (bool ask : {false, true}) {
    SCOPED_TRACE(ask ? "asked for flat answers" : "did not ask");
    auto raw = RawSession::Connect(daemon.socket_dir());
    ASSERT_TRUE(raw.ok()) << raw.status();
    ASSERT_NO_FATAL_FAILURE(SayHello(*raw, ask, false));

    v1::SessionFrame call;
    call.mutable_call()->set_request_id(7);
    call.mutable_call()->mutable_open()->mutable_ref()->set_name("flat.raw");
    v1::SessionFrame answer;
    bool flat = false;
    ASSERT_NO_FATAL_FAILURE(AnswerOf(*raw, call, &answer, &flat));
    EXPECT_EQ(flat, ask);
    const v1::Reply& reply = answer.reply();
    EXPECT_EQ(reply.request_id(), 7u);
    EXPECT_EQ(reply.open().buffer().name(), "flat.raw");
    EXPECT_EQ(reply.open().buffer().id(), b.id());
    EXPECT_EQ(reply.open().buffer().tensor().shape_size(), 2);
    EXPECT_TRUE(reply.open().has_import());
  }
}

// Everything a Buffer says about itself, but its leases (each open adds one).
void ExpectSameBuffer(const Buffer& flat, const Buffer& plain) {
  testing_util::ExpectSameInfo(flat.info(), plain.info(), /*leases=*/false);
  ASSERT_EQ(flat.size(), plain.size());
  ASSERT_NE(flat.data(), nullptr);
  ASSERT_NE(plain.data(), nullptr);
  EXPECT_EQ(std::memcmp(flat.data(), plain.data(), flat.size()), 0);
}

TEST(FlatAnswers, AClientReadingThemLearnsWhatOneReadingProtobufLearns) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto flat = Client::connect(daemon.socket_dir());
  ::setenv("GPUBROKER_FLAT_ANSWERS", "0", 1);
  auto plain = Client::connect(daemon.socket_dir());
  ::unsetenv("GPUBROKER_FLAT_ANSWERS");

  // Made by the producer's client (a transposed view, a byte offset) and by
  // the daemon (keep and a TTL take the daemon's path).
  AllocateOptions made;
  made.name = "flat.made";
  made.tensor = TensorDesc{DType::kBFloat16, {16, 8}, {1, 16}, 64};
  Buffer m = producer.allocate(64 + 16 * 8 * 2, made);
  std::memset(m.data(), 0x3C, m.size());
  m.seal();
  AllocateOptions kept;
  kept.name = "flat.kept";
  kept.keep = true;
  kept.ttl = 600s;
  Buffer k = producer.allocate(8192, kept);
  std::memset(k.data(), 0x5A, k.size());
  k.seal();

  for (const char* name : {"flat.made", "flat.kept"}) {
    SCOPED_TRACE(name);
    Buffer a = flat.open(name);
    Buffer p = plain.open(name);
    ExpectSameBuffer(a, p);
    Buffer a_posted = flat.open_posted(name);
    Buffer p_posted = plain.open_posted(name);
    ExpectSameBuffer(a_posted, p_posted);
    Buffer by_id = flat.open(a.id());
    ExpectSameBuffer(by_id, p);
  }

  // Claims of tickets.
  Buffer a_claimed = flat.claim(m.ticket());
  Buffer p_claimed = plain.claim(m.ticket());
  ExpectSameBuffer(a_claimed, p_claimed);

  // Opens parked until the seal, answered by the seal's turn.
  Buffer a_waited, p_waited;
  std::thread flat_waiter([&] {
    OpenOptions w;
    w.wait = true;
    w.timeout = 10s;
    a_waited = flat.open("flat.later", w);
  });
  std::thread plain_waiter([&] {
    OpenOptions w;
    w.wait = true;
    w.timeout = 10s;
    p_waited = plain.open("flat.later", w);
  });
  std::this_thread::sleep_for(100ms);  // both parked (or not yet: the same answer either way)
  AllocateOptions later;
  later.name = "flat.later";
  later.tensor = TensorDesc{DType::kInt32, {4, 4}};
  Buffer l = producer.allocate(64, later);
  std::memset(l.data(), 0x11, l.size());
  l.seal();
  flat_waiter.join();
  plain_waiter.join();
  ASSERT_TRUE(a_waited.valid());
  ASSERT_TRUE(p_waited.valid());
  ExpectSameBuffer(a_waited, p_waited);
}

// A Publish's answer goes flat only to a session that said, besides
// flat_answers, flat_publish_answers: an older client's flat reader knows
// Open's and Claim's only. Either way it says the same.
TEST(FlatAnswers, APublishIsAnsweredFlatOnlyToASessionThatSaidSo) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  v1::Reply answers[2];
  for (bool ask : {false, true}) {
    SCOPED_TRACE(ask ? "said flat_publish_answers" : "flat_answers only");
    auto raw = RawSession::Connect(daemon.socket_dir());
    ASSERT_TRUE(raw.ok()) << raw.status();
    ASSERT_NO_FATAL_FAILURE(SayHello(*raw, true, ask));

    // A range of the tenant's arena, and a block of it named and sealed.
    v1::SessionFrame lease;
    lease.mutable_call()->set_request_id(1);
    lease.mutable_call()->mutable_lease_range()->set_min_bytes(1 << 20);
    lease.mutable_call()->mutable_lease_range()->set_want_bytes(1 << 20);
    ASSERT_TRUE(raw->Send(lease).ok());
    auto leased = raw->Read(5s);
    ASSERT_TRUE(leased.ok() && leased->has_value() && (*leased)->has_reply())
        << ((leased.ok() && leased->has_value()) ? (*leased)->DebugString() : "");
    const uint64_t range = (*leased)->reply().lease_range().range_id();

    v1::SessionFrame publish;
    publish.mutable_call()->set_request_id(2);
    v1::PublishRequest* p = publish.mutable_call()->mutable_publish();
    p->set_range_id(range);
    p->set_offset(0);
    p->set_reserved(4096);
    p->set_size(4000);
    p->set_name(ask ? "flat.published" : "plain.published");
    p->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
    p->mutable_tensor()->add_shape(1000);
    p->set_seal(true);
    v1::SessionFrame answer;
    bool flat = false;
    ASSERT_NO_FATAL_FAILURE(AnswerOf(*raw, publish, &answer, &flat));
    EXPECT_EQ(flat, ask);
    ASSERT_TRUE(answer.has_reply()) << answer.DebugString();
    answers[ask] = answer.reply();
    EXPECT_EQ(answers[ask].request_id(), 2u);
    EXPECT_EQ(answers[ask].publish().buffer().name(), p->name());
    EXPECT_EQ(answers[ask].publish().buffer().state(), v1::BUFFER_STATE_SEALED);
  }
  // The same facts but the buffer's own (id, name, owner, time made).
  for (v1::Reply& r : answers) {
    v1::BufferInfo* b = r.mutable_publish()->mutable_buffer();
    b->clear_id();
    b->clear_name();
    b->clear_owner_session();
    b->clear_created_unix_ms();
    r.clear_request_id();
  }
  EXPECT_EQ(answers[0].DebugString(), answers[1].DebugString());
}

}  // namespace
}  // namespace gpubroker::testing
