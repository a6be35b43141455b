// Bad input, from well-formed but wrong requests down to garbage on the
// session socket: each gets the right answer, and the daemon keeps serving a
// second client whose buffers stay intact.
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "common/token.h"
#include "common/unix_socket.h"
#include "common/wire/frame.h"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

class Robustness : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.ok());
    bystander_ = std::make_unique<Helper>(daemon_.socket_dir());
    bystander_->Ok("alloc keepme 1048576 name=bystander.data");
    bystander_->Ok("fill keepme 99");
    bystander_->Ok("seal keepme");
  }
  void TearDown() override {
    // The daemon still serves, and the bystander's bytes are as they were.
    EXPECT_EQ(bystander_->Send("check keepme 99"), "ok");
    Helper fresh(daemon_.socket_dir());
    fresh.Ok("open v bystander.data");
    EXPECT_EQ(fresh.Send("check v 99"), "ok");
    fresh.Ok("alloc n 4096");
  }
  std::string SessionPath() const { return daemon_.socket_dir() + "/session.sock"; }
  std::string GrpcTarget() const { return "unix:" + daemon_.socket_dir() + "/gpubroker.sock"; }

  UniqueFd Connect() {
    auto fd = ConnectUnix(SessionPath());
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? std::move(*fd) : UniqueFd();
  }
  static void Write(int fd, std::string_view bytes) { ASSERT_TRUE(SendAll(fd, bytes).ok()); }
  // True when the daemon closes the connection within the timeout.
  static bool ClosedByDaemon(int fd, std::chrono::milliseconds timeout = 3s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      if (!WaitReadable(fd, 100ms).ok()) continue;
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
    }
    return false;
  }
  // Reads one frame (test side, blocking with a timeout).
  static std::optional<v1::SessionFrame> ReadFrame(int fd, std::vector<UniqueFd>* fds = nullptr) {
    FrameDecoder decoder;
    char buf[4096];
    for (int i = 0; i < 50; ++i) {
      auto f = decoder.Next();
      if (!f.ok()) return std::nullopt;
      if (f->has_value()) return **f;
      if (!WaitReadable(fd, 100ms).ok()) continue;
      std::vector<UniqueFd> got;
      auto r = RecvSome(fd, buf, sizeof(buf), &got);
      if (!r.ok() || r->eof) return std::nullopt;
      for (auto& g : got) {
        if (fds) fds->push_back(std::move(g));
      }
      decoder.Append(std::string_view(buf, r->bytes));
    }
    return std::nullopt;
  }
  static std::string HelloFrame(uint32_t version = 1) {
    v1::SessionFrame f;
    f.mutable_hello()->set_protocol_version(version);
    f.mutable_hello()->set_client_name("raw");
    return EncodeFrame(f);
  }
  int OpenFds() const {
    int n = 0;
    DIR* d = ::opendir(("/proc/" + std::to_string(daemon_.pid()) + "/fd").c_str());
    if (d == nullptr) return -1;
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
    return n;
  }

  Daemon daemon_;
  std::unique_ptr<Helper> bystander_;
};

TEST_F(Robustness, BadRequestsGetTheRightStatus) {
  Helper c(daemon_.socket_dir());
  EXPECT_EQ(c.Send("alloc a 0").rfind("err INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(c.Send("alloc a 1099511627776").rfind("err INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(c.Send("alloc a 4096 device=GPU-00000000").rfind("err INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(c.Send("open a no.such.buffer").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_EQ(c.Send("open a 987654321 id").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_EQ(c.Send("free no.such.buffer").rfind("err NOT_FOUND", 0), 0u);
  const std::string slash = c.Send("alloc a 4096 name=has/slash");
  EXPECT_EQ(slash.rfind("err INVALID_ARGUMENT", 0), 0u) << slash;
  EXPECT_NE(slash.find("'/'"), std::string::npos) << slash;
  const std::string long_name = c.Send("alloc a 4096 name=" + std::string(300, 'n'));
  EXPECT_EQ(long_name.rfind("err INVALID_ARGUMENT", 0), 0u) << long_name;
  EXPECT_NE(long_name.find("300"), std::string::npos) << long_name;
  EXPECT_EQ(c.Send("open a " + std::string(300, 'n')).rfind("err INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(c.Send("alloc a 4096 name=bystander.data publish").rfind("err ALREADY_EXISTS", 0), 0u);
  // Size 0, a size over the device and an unknown device reach the daemon;
  // bad names are refused by the client before any call.
  EXPECT_GE(daemon_.Metric("gpubroker_allocations_total{result=\"invalid\"}"), 3);
}

TEST_F(Robustness, CallsWithoutAValidTokenAreUnauthenticated) {
  auto channel = grpc::CreateChannel(GrpcTarget(), grpc::InsecureChannelCredentials());
  auto stub = v1::Broker::NewStub(channel);
  for (const char* token : {"", "00000000000000000000000000000000", "not-hex", "abc"}) {
    grpc::ClientContext ctx;
    if (*token != '\0') ctx.AddMetadata("gpubroker-token", token);
    v1::AllocateRequest req;
    req.set_size(4096);
    v1::AllocateResponse resp;
    grpc::Status s = stub->Allocate(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "token '" << token << "'";
  }
  for (const char* token : {"", "00000000000000000000000000000000", "not-hex"}) {
    grpc::ClientContext ctx;
    if (*token != '\0') ctx.AddMetadata("gpubroker-token", token);
    v1::ListResponse resp;
    EXPECT_EQ(stub->List(&ctx, v1::ListRequest(), &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << "token '" << token << "'";
  }
  // A token that is given must be valid, for Status too.
  for (const char* token : {"00000000000000000000000000000000", "not-hex"}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("gpubroker-token", token);
    v1::StatusResponse resp;
    EXPECT_EQ(stub->Status(&ctx, v1::StatusRequest(), &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << "token '" << token << "'";
  }
  // Without one, Status is the node's totals: no tenant, no session of its own.
  grpc::ClientContext ctx;
  v1::StatusResponse resp;
  ASSERT_TRUE(stub->Status(&ctx, v1::StatusRequest(), &resp).ok());
  EXPECT_EQ(resp.backend(), "host");
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_GT(resp.devices(0).used_bytes(), 0u) << "the bystander's buffer";
  EXPECT_GE(resp.buffers(), 1u);
  EXPECT_GE(resp.sessions(), 1u);
  EXPECT_EQ(resp.tenants_size(), 0);
  EXPECT_FALSE(resp.has_self());
  // Health needs no token.
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext hctx;
  grpc::health::v1::HealthCheckResponse hresp;
  ASSERT_TRUE(health->Check(&hctx, grpc::health::v1::HealthCheckRequest(), &hresp).ok());
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// The same calls through gRPC, with the token of a raw session: the data path
// answers on both sockets, from the same code.
TEST_F(Robustness, DataPathCallsWorkOverGrpcToo) {
  UniqueFd fd = Connect();
  Write(fd.get(), HelloFrame());
  auto welcome = ReadFrame(fd.get());
  ASSERT_TRUE(welcome && welcome->has_welcome());
  Token token{};
  std::memcpy(token.data(), welcome->welcome().token().data(), token.size());
  auto stub =
      v1::Broker::NewStub(grpc::CreateChannel(GrpcTarget(), grpc::InsecureChannelCredentials()));
  auto ctx = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->AddMetadata(kTokenMetadataKey, TokenToHex(token));
    return c;
  };
  v1::AllocateRequest alloc;
  alloc.set_size(4096);
  alloc.set_name("grpc.buffer");
  v1::AllocateResponse allocated;
  ASSERT_TRUE(stub->Allocate(ctx().get(), alloc, &allocated).ok());
  const uint64_t id = allocated.buffer().id();
  v1::SealRequest seal;
  seal.set_id(id);
  v1::SealResponse sealed;
  ASSERT_TRUE(stub->Seal(ctx().get(), seal, &sealed).ok());
  EXPECT_EQ(sealed.buffer().state(), v1::BUFFER_STATE_SEALED);
  v1::OpenRequest open;
  open.mutable_ref()->set_name("grpc.buffer");
  open.set_wait(true);
  open.set_timeout_ms(1000);
  v1::OpenResponse opened;
  ASSERT_TRUE(stub->Open(ctx().get(), open, &opened).ok());
  EXPECT_EQ(opened.buffer().id(), id);
  v1::ReleaseRequest release;
  release.set_id(id);
  v1::ReleaseResponse released;
  ASSERT_TRUE(stub->Release(ctx().get(), release, &released).ok());
  release.set_free(true);
  ASSERT_TRUE(stub->Release(ctx().get(), release, &released).ok());
  EXPECT_EQ(stub->Release(ctx().get(), release, &released).error_code(),
            grpc::StatusCode::NOT_FOUND);
  Helper other(daemon_.socket_dir());
  EXPECT_EQ(other.Send("open r grpc.buffer").rfind("err NOT_FOUND", 0), 0u) << "freed";
}

TEST_F(Robustness, GarbageFramesDropOnlyTheirConnection) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    UniqueFd fd = Connect();
    std::string junk(4 + rng() % 200, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    junk[3] = static_cast<char>(rng() % 2 ? 0x7f : 0x00);  // sometimes an absurd length
    Write(fd.get(), junk);
    // Either the frame was malformed (dropped at once) or it is incomplete
    // (dropped by the hello timeout).
    EXPECT_TRUE(ClosedByDaemon(fd.get())) << "round " << round;
  }
}

TEST_F(Robustness, OversizeAndUnparseableFramesAreDropped) {
  UniqueFd big = Connect();
  Write(big.get(), std::string("\xff\xff\xff\x7f", 4));
  EXPECT_TRUE(ClosedByDaemon(big.get(), 1s));
  UniqueFd bad = Connect();
  Write(bad.get(), std::string("\x05\x00\x00\x00\xff\xff\xff\xff\xff", 9));
  EXPECT_TRUE(ClosedByDaemon(bad.get(), 1s));
  UniqueFd empty = Connect();
  Write(empty.get(), std::string("\x00\x00\x00\x00", 4));
  EXPECT_TRUE(ClosedByDaemon(empty.get(), 1s));
}

TEST_F(Robustness, TruncatedFramesAreSurvived) {
  const std::string hello = HelloFrame();
  {
    UniqueFd fd = Connect();
    Write(fd.get(), hello.substr(0, hello.size() - 3));  // then hang up mid-frame
  }
  UniqueFd stalled = Connect();
  Write(stalled.get(), hello.substr(0, 2));  // half a header, then silence
  EXPECT_TRUE(ClosedByDaemon(stalled.get(), 3s)) << "a stalled peer must be dropped";
}

TEST_F(Robustness, SilentClientsAreDroppedAndDoNotStallOthers) {
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 100; ++i) silent.push_back(Connect());
  // While they hang, a real client is served.
  Helper c(daemon_.socket_dir());
  c.Ok("alloc x 4096");
  for (auto& fd : silent) EXPECT_TRUE(ClosedByDaemon(fd.get(), 3s));
}

TEST_F(Robustness, ProtocolViolationsAreDropped) {
  UniqueFd early = Connect();
  v1::SessionFrame req;
  req.mutable_fd_request()->set_region_id(1);
  Write(early.get(), EncodeFrame(req));
  EXPECT_TRUE(ClosedByDaemon(early.get(), 1s)) << "FdRequest before Hello";

  UniqueFd twice = Connect();
  Write(twice.get(), HelloFrame());
  auto welcome = ReadFrame(twice.get());
  ASSERT_TRUE(welcome && welcome->has_welcome());
  Write(twice.get(), HelloFrame());
  EXPECT_TRUE(ClosedByDaemon(twice.get(), 1s)) << "second Hello";

  UniqueFd old = Connect();
  Write(old.get(), HelloFrame(99));
  auto refusal = ReadFrame(old.get());
  ASSERT_TRUE(refusal && refusal->has_error());
  EXPECT_NE(refusal->error().message().find("protocol version"), std::string::npos);
  EXPECT_TRUE(ClosedByDaemon(old.get(), 1s));
}

TEST_F(Robustness, FdRequestsAreCheckedAndRefusalsKeepTheSession) {
  UniqueFd fd = Connect();
  Write(fd.get(), HelloFrame());
  auto welcome = ReadFrame(fd.get());
  ASSERT_TRUE(welcome && welcome->has_welcome());
  for (uint64_t pool : {0ull, 12345ull}) {
    v1::SessionFrame req;
    req.mutable_fd_request()->set_request_id(pool + 1);
    req.mutable_fd_request()->set_region_id(pool);
    Write(fd.get(), EncodeFrame(req));
    auto reply = ReadFrame(fd.get());
    ASSERT_TRUE(reply && reply->has_error()) << "pool " << pool;
    EXPECT_EQ(reply->error().request_id(), pool + 1);
    EXPECT_EQ(reply->error().code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  }
  v1::SessionFrame req;
  req.mutable_fd_request()->set_request_id(7);
  req.mutable_fd_request()->set_buffer_id(1);  // the bystander's: no lease here
  Write(fd.get(), EncodeFrame(req));
  auto reply = ReadFrame(fd.get());
  ASSERT_TRUE(reply && reply->has_error());
  EXPECT_EQ(reply->error().code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_FALSE(ClosedByDaemon(fd.get(), 200ms)) << "a refused request must not end the session";
}

TEST_F(Robustness, DescriptorsSentByClientsAreNotKept) {
  const int before = OpenFds();
  ASSERT_GT(before, 0);
  for (int i = 0; i < 50; ++i) {
    UniqueFd fd = Connect();
    UniqueFd pipe_end(::dup(0));
    ASSERT_TRUE(SendAll(fd.get(), HelloFrame(), pipe_end.get()).ok());
    auto welcome = ReadFrame(fd.get());
    ASSERT_TRUE(welcome && welcome->has_welcome());
  }
  EXPECT_TRUE(Eventually([&] { return OpenFds() <= before + 2; }, 5s))
      << "daemon holds " << OpenFds() << " fds, had " << before;
}

TEST_F(Robustness, CallsOnTheSessionSocketAreCheckedLikeGrpcCalls) {
  UniqueFd early = Connect();
  v1::SessionFrame call;
  call.mutable_call()->set_request_id(1);
  call.mutable_call()->mutable_allocate()->set_size(4096);
  Write(early.get(), EncodeFrame(call));
  EXPECT_TRUE(ClosedByDaemon(early.get(), 1s)) << "Call before Hello";

  UniqueFd fd = Connect();
  Write(fd.get(), HelloFrame());
  auto welcome = ReadFrame(fd.get());
  ASSERT_TRUE(welcome && welcome->has_welcome());
  // The host backend routes as the GPU one does: buffers of memory of their
  // own (at or over --vmm-threshold) are served here only when kept.
  EXPECT_EQ(welcome->welcome().quick_allocation_limit(), uint64_t{2} << 30);
  uint64_t next_id = 10;
  // One call, one answer with the same request id: a Reply, or an ErrorFrame's code.
  auto exchange = [&](v1::Call c) -> std::pair<int, v1::Reply> {
    const uint64_t id = next_id++;
    c.set_request_id(id);
    v1::SessionFrame f;
    *f.mutable_call() = std::move(c);
    Write(fd.get(), EncodeFrame(f));
    auto answer = ReadFrame(fd.get());
    if (!answer) return {-1, {}};
    if (answer->has_error()) {
      EXPECT_EQ(answer->error().request_id(), id);
      return {answer->error().code(), {}};
    }
    EXPECT_TRUE(answer->has_reply());
    EXPECT_EQ(answer->reply().request_id(), id);
    return {0, answer->reply()};
  };
  constexpr int kInvalid = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
  constexpr int kNotFound = static_cast<int>(grpc::StatusCode::NOT_FOUND);

  EXPECT_EQ(exchange(v1::Call()).first, kInvalid) << "a Call without a request";
  v1::Call zero;
  zero.mutable_allocate()->set_size(0);
  EXPECT_EQ(exchange(zero).first, kInvalid);
  v1::Call waiting;
  waiting.mutable_open()->mutable_ref()->set_name("bystander.data");
  waiting.mutable_open()->set_wait(true);
  auto [wait_code, waited] = exchange(waiting);
  ASSERT_EQ(wait_code, 0) << "a waiting Open of a sealed buffer is answered at once";
  v1::Call give_back;
  give_back.mutable_release()->set_id(waited.open().buffer().id());
  EXPECT_EQ(exchange(give_back).first, 0);
  v1::Call missing;
  missing.mutable_open()->mutable_ref()->set_name("no.such.buffer");
  EXPECT_EQ(exchange(missing).first, kNotFound);

  // The bystander's sealed buffer opens here; releasing drops this lease only.
  v1::Call open;
  open.mutable_open()->mutable_ref()->set_name("bystander.data");
  auto [open_code, opened] = exchange(open);
  ASSERT_EQ(open_code, 0);
  const uint64_t id = opened.open().buffer().id();
  EXPECT_EQ(opened.open().buffer().size(), 1048576u);
  EXPECT_EQ(opened.open().import().mapped_size(), 1048576u);
  v1::Call release;
  release.mutable_release()->set_id(id);
  EXPECT_EQ(exchange(release).first, 0);
  EXPECT_EQ(exchange(release).first, kNotFound) << "the lease is gone";

  // A buffer of its own: allocate, seal, release and free, all on the socket.
  v1::Call alloc;
  alloc.mutable_allocate()->set_size(8192);
  alloc.mutable_allocate()->set_name("raw.buffer");
  auto [alloc_code, allocated] = exchange(alloc);
  ASSERT_EQ(alloc_code, 0);
  v1::Call seal;
  seal.mutable_seal()->set_id(allocated.allocate().buffer().id());
  auto [seal_code, sealed] = exchange(seal);
  EXPECT_EQ(seal_code, 0);
  EXPECT_EQ(sealed.seal().buffer().state(), v1::BUFFER_STATE_SEALED);
  release.mutable_release()->set_id(allocated.allocate().buffer().id());
  release.mutable_release()->set_free(true);
  EXPECT_EQ(exchange(release).first, 0);
  Helper other(daemon_.socket_dir());
  EXPECT_EQ(other.Send("open r raw.buffer").rfind("err NOT_FOUND", 0), 0u) << "freed";
  EXPECT_FALSE(ClosedByDaemon(fd.get(), 200ms)) << "refused calls must not end the session";
}

}  // namespace
}  // namespace gpubroker::testing
