// Item 1: TTL arithmetic. A TTL that would wrap the expiry time (to 0, the
// value meaning "no TTL", or below now) is refused with INVALID_ARGUMENT on
// both sockets and from the CLI; the reaper keeps its pace, calls keep being
// answered, and SIGTERM still stops the daemon.
#include <cstdint>
#include <limits>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/adversarial/adversary.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kTenYearsMs = uint64_t{10} * 365 * 24 * 3600 * 1000;

TEST(Ttl, TtlsThatWouldWrapTheExpiryAreRefusedAndTheDaemonKeepsServing) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper bystander(daemon.socket_dir());
  bystander.Ok("alloc k 4096 name=bystander keep");
  bystander.Ok("fill k 7");
  bystander.Ok("seal k");

  auto raw = RawSession::Connect(daemon.socket_dir());
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw->Hello().ok());
  auto stub = BrokerStub(daemon.socket_dir());

  const uint64_t now = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  const uint64_t wrap_to_zero = 0 - now;  // now + this == 2^64
  for (uint64_t ttl : {wrap_to_zero, wrap_to_zero + 1000, wrap_to_zero - 1000,
                       std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63,
                       (uint64_t{1} << 63) - 1, kTenYearsMs + 1}) {
    v1::AllocateRequest req;
    req.set_size(4096);
    req.set_ttl_ms(ttl);
    v1::AllocateResponse resp;
    const grpc::Status s = stub->Allocate(CallContext(raw->token_hex()).get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "gRPC, ttl_ms " << ttl;
    EXPECT_NE(s.error_message().find("ttl_ms"), std::string::npos) << s.error_message();

    v1::Call call;
    *call.mutable_allocate() = req;
    auto answer = raw->Call(call, 5s);
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument)
        << "session.sock, ttl_ms " << ttl << ": " << answer.status();
  }

  // The limit itself is a TTL like any other.
  v1::AllocateRequest longest;
  longest.set_size(4096);
  longest.set_ttl_ms(kTenYearsMs);
  v1::AllocateResponse kept;
  ASSERT_TRUE(stub->Allocate(CallContext(raw->token_hex()).get(), longest, &kept).ok());
  EXPECT_EQ(kept.buffer().expires_unix_ms(),
            kept.buffer().created_unix_ms() + static_cast<int64_t>(kTenYearsMs));

  // From the CLI: refused by the daemon, by name.
  std::string out;
  EXPECT_EQ(RunCli(daemon.socket_dir(),
                   {"alloc", "4KiB", "--ttl", std::to_string(wrap_to_zero) + "ms"}, &out),
            1)
      << out;
  EXPECT_NE(out.find("ttl_ms"), std::string::npos) << out;

  // The reaper still works at its pace, and every call is answered.
  bystander.Ok("alloc t 4096 name=short.lived ttl=300");
  EXPECT_TRUE(Eventually(
      [&] { return bystander.Send("open z short.lived unsealed").rfind("err NOT_FOUND", 0) == 0; },
      5s))
      << "the reaper did not end a 300 ms TTL";
  EXPECT_EQ(bystander.Send("check k 7", 5s), "ok");
  Helper fresh(daemon.socket_dir());
  fresh.Ok("open v bystander");
  EXPECT_EQ(fresh.Send("check v 7", 5s), "ok");
  EXPECT_EQ(daemon.Stop(), 0) << "SIGTERM must still stop the daemon; log:\n" << daemon.log();
}

}  // namespace
}  // namespace gpubroker::testing
