// Item 5: the session thread runs only what it advertises. The routing rule
// of Welcome (quick_allocation_limit, no shares across tenants) is enforced
// by the daemon on session.sock, whatever the client library would do; and
// share_with is capped and deduplicated before the registry's lock.
#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(Routing, SessionSocketRefusesAllocationsItDoesNotAdvertise) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  RawSession raw(daemon.socket_dir());
  ASSERT_TRUE(raw.ok());
  // On the host backend every tenant-private allocation is quick (limit 0)...
  v1::Call plain;
  plain.mutable_allocate()->set_size(4096);
  EXPECT_TRUE(raw.Call(plain).ok());
  // ... but a share across tenants makes memory of its own: that is gRPC's.
  v1::Call shared;
  shared.mutable_allocate()->set_size(4096);
  shared.mutable_allocate()->add_share_with("uid-60001");
  auto refused = raw.Call(shared);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("goes through gRPC"), std::string::npos)
      << refused.status();
  EXPECT_FALSE(raw.ClosedByDaemon(200ms)) << "a refused call must not end the session";

  auto stub = BrokerStub(daemon.socket_dir());
  v1::AllocateResponse resp;
  EXPECT_TRUE(stub->Allocate(CallContext(raw.token_hex()).get(), shared.allocate(), &resp).ok());
  EXPECT_EQ(resp.buffer().shared_with_size(), 1);
}

TEST(Routing, ShareWithIsCappedAndDeduplicatedBeforeTheLock) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  RawSession raw(daemon.socket_dir());
  ASSERT_TRUE(raw.ok());
  auto stub = BrokerStub(daemon.socket_dir());

  // 120 000 names (about 1.3 MB): refused at once, not deduplicated for seconds under the lock.
  v1::AllocateRequest flood;
  flood.set_size(4096);
  for (int i = 0; i < 120000; ++i) flood.add_share_with("t" + std::to_string(i));
  v1::AllocateResponse resp;
  const grpc::Status s = stub->Allocate(CallContext(raw.token_hex(), 5s).get(), flood, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("at most 64"), std::string::npos) << s.error_message();

  // Within the cap, repeats (and the caller's own tenant) collapse.
  v1::AllocateRequest repeats;
  repeats.set_size(4096);
  const std::string self = "uid-" + std::to_string(::geteuid());
  for (int i = 0; i < 30; ++i) {
    repeats.add_share_with("blue");
    repeats.add_share_with("green");
  }
  repeats.add_share_with(self);
  ASSERT_TRUE(stub->Allocate(CallContext(raw.token_hex()).get(), repeats, &resp).ok());
  ASSERT_EQ(resp.buffer().shared_with_size(), 2);
  EXPECT_EQ(resp.buffer().shared_with(0), "blue");
  EXPECT_EQ(resp.buffer().shared_with(1), "green");

  // Everyone else was served meanwhile and still is.
  Helper other(daemon.socket_dir());
  other.Ok("alloc x 4096");
}

}  // namespace
}  // namespace gpubroker::testing
