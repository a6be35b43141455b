// Calls in the flat layout (common/wire/flat_call.h): the daemon serves a
// flat call exactly as it serves the same call in protobuf, refuses one it
// cannot read by dropping that connection only, and a client that sends
// them gets what one sending protobuf gets, for every call of a hand-over's
// path (Publish, posted or not; Open by name, by id, posted, parked; a
// ticket's claim; Release).
#include "common/wire/flat_call.h"

#include <google/protobuf/util/message_differencer.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/unix_socket.h"
#include "common/wire/frame.h"
#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/buffer_info_expect.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
using google::protobuf::util::MessageDifferencer;

// The answer to `call` on `s`, its request id and the lease count (each
// open adds one) cleared.
v1::SessionFrame Answer(RawSession& s, const v1::Call& call) {
  auto f = s.Exchange(call);
  EXPECT_TRUE(f.has_value());
  if (!f) return {};
  if (f->has_reply()) {
    f->mutable_reply()->set_request_id(0);
    if (f->reply().has_open()) f->mutable_reply()->mutable_open()->mutable_buffer()->set_leases(0);
  }
  if (f->has_error()) f->mutable_error()->set_request_id(0);
  return *f;
}

TEST(FlatCalls, TheDaemonServesAFlatCallAsTheSameCallInProtobuf) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "flatcall.raw";
  o.tensor = TensorDesc{DType::kFloat32, {4, 16}};
  Buffer b = producer.allocate(256, o);
  b.seal();

  RawSession flat(daemon.socket_dir());
  RawSession plain(daemon.socket_dir());
  ASSERT_TRUE(flat.ok() && plain.ok());
  EXPECT_TRUE(flat.welcome().flat_calls());
  flat.SendCallsFlat(true);

  std::vector<v1::Call> calls;
  v1::Call c;
  c.mutable_open()->mutable_ref()->set_name("flatcall.raw");
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_id(b.id());
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_name("flatcall.absent");  // NOT_FOUND
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_name("flat call");  // not a name: INVALID_ARGUMENT
  calls.push_back(c);
  c.mutable_open()->clear_ref();  // names nothing
  calls.push_back(c);
  c.Clear();
  c.mutable_release()->set_id(b.id());  // each session drops the lease it took above
  calls.push_back(c);
  c.mutable_release()->set_id(b.id());  // and now holds none
  calls.push_back(c);
  c.Clear();
  c.mutable_claim()->set_secret(std::string(16, 's'));  // no such ticket
  calls.push_back(c);
  c.Clear();
  c.mutable_publish()->set_range_id(999);  // not this session's range
  c.mutable_publish()->set_name("flatcall.p");
  calls.push_back(c);
  for (const v1::Call& call : calls) {
    SCOPED_TRACE(call.ShortDebugString());
    const v1::SessionFrame a = Answer(flat, call);
    const v1::SessionFrame p = Answer(plain, call);
    EXPECT_TRUE(a.has_reply() || a.has_error());
    std::string diff;
    MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(a, p)) << diff;
  }
}

TEST(FlatCalls, AFlatCallTheDaemonCannotReadDropsThatConnectionOnly) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto bystander = Client::connect(daemon.socket_dir());
  AllocateOptions o;
  o.name = "flatcall.bystander";
  Buffer b = bystander.allocate(4096, o);

  v1::SessionFrame open;
  open.mutable_call()->set_request_id(3);
  open.mutable_call()->mutable_open()->mutable_ref()->set_name("flatcall.bystander");
  const std::string good = EncodeFrameFor(open, FlatFrames::kCalls);
  std::string bad_kind = good;
  bad_kind[kFrameHeaderBytes + 1] = 9;  // no such call
  std::string bad_utf8 = good;
  bad_utf8[good.size() - 1] = static_cast<char>(0xff);  // the name's last byte
  std::string truncated = good;
  truncated[0] = static_cast<char>(truncated[0] - 1);  // the length one short of the body
  truncated.pop_back();
  for (const std::string* bytes : {&bad_kind, &bad_utf8, &truncated}) {
    RawSession s(daemon.socket_dir());
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(SendAll(s.fd(), *bytes).ok());
    EXPECT_TRUE(s.ClosedByDaemon(5s));
  }
  // Everyone else is served as before.
  b.seal();
  Buffer again = bystander.open("flatcall.bystander");
  EXPECT_EQ(again.id(), b.id());
  RawSession s(daemon.socket_dir());
  ASSERT_TRUE(SendAll(s.fd(), good).ok());
  auto f = s.Read(5s);
  ASSERT_TRUE(f.ok() && f->has_value()) << f.status();
  EXPECT_EQ((*f)->reply().open().buffer().id(), b.id());
}

// What a consumer learns of a buffer: everything but its id, name and
// leases (each open adds one), which differ between the two producers'.
void ExpectSameFacts(const Buffer& a, const Buffer& p) {
  const BufferInfo& x = a.info();
  const BufferInfo& y = p.info();
  EXPECT_EQ(x.size, y.size);
  EXPECT_EQ(x.state, y.state);
  EXPECT_EQ(x.client_made, y.client_made);
  EXPECT_EQ(x.keep, y.keep);
  testing_util::ExpectSameTensor(x.tensor, y.tensor);
  ASSERT_EQ(a.size(), p.size());
  EXPECT_EQ(std::memcmp(a.data(), p.data(), a.size()), 0);
}

TEST(FlatCalls, AClientSendingThemGetsWhatOneSendingProtobufGets) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  // The two sides of each hand-over, one pair speaking flat, one protobuf.
  auto flat_producer = Client::connect(daemon.socket_dir());
  auto flat_consumer = Client::connect(daemon.socket_dir());
  ::setenv("GPUBROKER_FLAT_CALLS", "0", 1);
  auto plain_producer = Client::connect(daemon.socket_dir());
  auto plain_consumer = Client::connect(daemon.socket_dir());
  ::unsetenv("GPUBROKER_FLAT_CALLS");

  struct Side {
    Client* producer;
    Client* consumer;
    std::string prefix;
  };
  const Side sides[] = {{&flat_producer, &flat_consumer, "flat."},
                        {&plain_producer, &plain_consumer, "plain."}};
  Buffer got[2][5];
  for (int i = 0; i < 2; ++i) {
    const Side& s = sides[i];
    // A client-made buffer published by a Publish (a transposed view, a
    // byte offset), sealed confirmed and posted.
    AllocateOptions made;
    made.name = s.prefix + "made";
    made.tensor = TensorDesc{DType::kFloat16, {16, 8}, {1, 16}, 64};
    Buffer m = s.producer->allocate(64 + 16 * 8 * 2, made);
    std::memset(m.data(), 0x3C, m.size());
    m.seal();
    AllocateOptions posted = made;
    posted.name = s.prefix + "posted";
    Buffer q = s.producer->allocate(64 + 16 * 8 * 2, posted);
    std::memset(q.data(), 0x4D, q.size());
    q.seal_posted();
    got[i][0] = s.consumer->open(s.prefix + "made");
    got[i][1] = s.consumer->open_posted(s.prefix + "posted");
    got[i][2] = s.consumer->open(got[i][0].id());
    got[i][3] = s.consumer->claim(m.ticket());
    // An Open parked until the seal.
    std::thread waiter([&] {
      OpenOptions w;
      w.wait = true;
      w.timeout = 10s;
      got[i][4] = s.consumer->open(s.prefix + "later", w);
    });
    std::this_thread::sleep_for(50ms);
    AllocateOptions later;
    later.name = s.prefix + "later";
    later.tensor = TensorDesc{DType::kInt32, {4, 4}};
    Buffer l = s.producer->allocate(64, later);
    std::memset(l.data(), 0x11, l.size());
    l.seal_posted();
    waiter.join();
    // The producers' handles go (Release{free}); the consumers' keep them.
  }
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(got[0][k].valid() && got[1][k].valid());
    ExpectSameFacts(got[0][k], got[1][k]);
  }
  EXPECT_EQ(got[0][0].name(), "flat.made");
  EXPECT_EQ(got[0][1].name(), "flat.posted");

  // The consumers' releases (flat and protobuf) drop the last leases: the
  // daemon's books empty alike.
  for (auto& side : got) {
    for (Buffer& b : side) b = Buffer();
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!flat_consumer.list().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(flat_consumer.list().empty());
}

}  // namespace
}  // namespace gpubroker::testing
