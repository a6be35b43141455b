// Typed refusals, from where the daemon makes them to each way a client hears
// them: session.sock, gRPC (as any gRPC client reads the status details), the
// C++ exceptions, the C ABI, and the metrics.
#include <thread>

#include "gpubroker/client.hpp"
#include "gpubroker/gpubroker.h"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// The client routes a buffer shared across tenants through gRPC, every other
// host allocation through session.sock: the two ways in.
const AllocateOptions kOverGrpc{.share_with = {"another.tenant"}};
const AllocateOptions kOverSession{};

template <typename E>
void ExpectRefusal(Client& client, uint64_t size, const AllocateOptions& how, RefusalReason reason,
                   const std::string& words) {
  try {
    client.allocate(size, how);
    ADD_FAILURE() << "allocate(" << size << ") succeeded";
  } catch (const E& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(e.reason(), reason);
    EXPECT_NE(e.message().find(words), std::string::npos) << e.message();
  } catch (const Error& e) {
    ADD_FAILURE() << "wrong exception type for " << e.what();
  }
}

TEST(Refusals, QuotaArrivesAsQuotaExceededOverBothSockets) {
  Daemon daemon({"--default-quota", "1MiB"});
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  auto held = client.allocate(768 * kKiB);
  ExpectRefusal<QuotaExceededError>(client, 512 * kKiB, kOverSession, RefusalReason::kQuota,
                                    "over quota");
  ExpectRefusal<QuotaExceededError>(client, 512 * kKiB, kOverGrpc, RefusalReason::kQuota,
                                    "over quota");
  // Code that catches the base class still catches it.
  EXPECT_THROW(client.allocate(512 * kKiB), ResourceExhaustedError);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"quota\"}"), 3);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"out_of_memory\"}"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"ok\"}"), 1);
}

TEST(Refusals, FullPoolArrivesAsOutOfMemoryOverBothSockets) {
  Daemon daemon({"--host-pool-bytes", "2MiB"});
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  auto held = client.allocate(1536 * kKiB);
  ExpectRefusal<OutOfMemoryError>(client, kMiB, kOverSession, RefusalReason::kOutOfMemory,
                                  "host pool full");
  ExpectRefusal<OutOfMemoryError>(client, kMiB, kOverGrpc, RefusalReason::kOutOfMemory,
                                  "host pool full");
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"out_of_memory\"}"), 2);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"quota\"}"), 0);
  // A size over the whole device is bad input, not a full device.
  EXPECT_THROW(client.allocate(4 * kMiB), InvalidArgumentError);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"invalid\"}"), 1);
  // Room again once the holder lets go.
  held.release();
  EXPECT_NO_THROW(client.allocate(kMiB));
}

// Raw frames and a raw gRPC stub: what a client in another language sees.
TEST(Refusals, TheWireCarriesTheReasonAsAnyGrpcClientReadsIt) {
  Daemon daemon({"--default-quota", "64KiB"});
  ASSERT_TRUE(daemon.ok());
  RawSession session(daemon.socket_dir());
  ASSERT_TRUE(session.ok());

  v1::Call over;
  over.mutable_allocate()->set_size(kMiB);
  auto answer = session.Exchange(over);
  ASSERT_TRUE(answer && answer->has_error());
  EXPECT_EQ(answer->error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(answer->error().reason(), v1::REFUSAL_REASON_QUOTA);
  v1::Call missing;
  missing.mutable_open()->mutable_ref()->set_name("no.such.buffer");
  answer = session.Exchange(missing);
  ASSERT_TRUE(answer && answer->has_error());
  EXPECT_EQ(answer->error().reason(), v1::REFUSAL_REASON_UNSPECIFIED) << "NOT_FOUND has no reason";

  auto stub = v1::Broker::NewStub(grpc::CreateChannel(
      "unix:" + daemon.socket_dir() + "/gpubroker.sock", grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("gpubroker-token", session.token_hex());
  v1::AllocateResponse resp;
  const grpc::Status status = stub->Allocate(&ctx, over.allocate(), &resp);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // grpc-status-details-bin holds a google.rpc.Status (RpcStatus is its twin)
  // whose details hold one gpubroker.v1.ErrorInfo.
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(details.message(), status.error_message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/gpubroker.v1.ErrorInfo");
  v1::ErrorInfo info;
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.reason(), v1::REFUSAL_REASON_QUOTA);

  grpc::ClientContext ctx2;
  ctx2.AddMetadata("gpubroker-token", session.token_hex());
  v1::OpenResponse opened;
  const grpc::Status not_found = stub->Open(&ctx2, missing.open(), &opened);
  EXPECT_EQ(not_found.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(not_found.error_details().empty()) << "no details where there is no reason";
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"quota\"}"), 2);
}

TEST(Refusals, TheCAbiReportsTheReasonOfTheLastFailureOnItsThread) {
  Daemon quota({"--default-quota", "1MiB"});
  Daemon small({"--host-pool-bytes", "2MiB"});
  ASSERT_TRUE(quota.ok() && small.ok());
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_NONE) << "no failure yet";

  gpubroker_client_t* q = nullptr;
  ASSERT_EQ(gpubroker_connect(quota.socket_dir().c_str(), &q), GPUBROKER_OK);
  gpubroker_buffer_t* held = nullptr;
  ASSERT_EQ(gpubroker_allocate(q, 768 * kKiB, nullptr, &held), GPUBROKER_OK);
  gpubroker_buffer_t* refused = nullptr;
  EXPECT_EQ(gpubroker_allocate(q, 512 * kKiB, nullptr, &refused), GPUBROKER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_QUOTA);
  EXPECT_NE(std::string(gpubroker_last_error()).find("over quota"), std::string::npos);

  // Another thread's failures are its own.
  std::thread([&] {
    gpubroker_buffer_t* none = nullptr;
    EXPECT_EQ(gpubroker_open(q, "no.such.buffer", nullptr, &none), GPUBROKER_NOT_FOUND);
    EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_NONE);
  }).join();
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_QUOTA);

  // Over gRPC too (a shared buffer goes that way).
  gpubroker_alloc_options_t shared;
  gpubroker_alloc_options_init(&shared);
  const char* tenants[] = {"another.tenant"};
  shared.share_with = tenants;
  shared.n_share_with = 1;
  gpubroker_buffer_t* none = nullptr;
  EXPECT_EQ(gpubroker_open(q, "no.such.buffer", nullptr, &none), GPUBROKER_NOT_FOUND);
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_NONE) << "the last failure had none";
  EXPECT_EQ(gpubroker_allocate(q, 512 * kKiB, &shared, &refused), GPUBROKER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_QUOTA);

  gpubroker_client_t* s = nullptr;
  ASSERT_EQ(gpubroker_connect(small.socket_dir().c_str(), &s), GPUBROKER_OK);
  gpubroker_buffer_t* big = nullptr;
  ASSERT_EQ(gpubroker_allocate(s, 1536 * kKiB, nullptr, &big), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_allocate(s, kMiB, nullptr, &refused), GPUBROKER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_OUT_OF_MEMORY);
  EXPECT_EQ(gpubroker_allocate(s, kMiB, &shared, &refused), GPUBROKER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(gpubroker_last_error_reason(), GPUBROKER_REASON_OUT_OF_MEMORY);
  EXPECT_EQ(small.Metric("gpubroker_allocations_total{result=\"out_of_memory\"}"), 2);
  EXPECT_EQ(quota.Metric("gpubroker_allocations_total{result=\"quota\"}"), 2);

  EXPECT_EQ(gpubroker_buffer_release(big), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(held), GPUBROKER_OK);
  gpubroker_disconnect(s);
  gpubroker_disconnect(q);
}

TEST(Refusals, ThrowErrorPicksTheClassByReason) {
  auto thrown = [](ErrorCode code, RefusalReason reason) -> std::string {
    try {
      ThrowError(code, "m", reason);
    } catch (const LimitExceededError& e) {
      return e.reason() == reason ? "limit" : "limit?";
    } catch (const QuotaExceededError&) {
      return "quota";
    } catch (const OutOfMemoryError&) {
      return "oom";
    } catch (const ResourceExhaustedError& e) {
      return e.reason() == RefusalReason::kNone ? "exhausted" : "exhausted?";
    } catch (const Error&) {
      return "error";
    }
    return "";
  };
  EXPECT_EQ(thrown(ErrorCode::kResourceExhausted, RefusalReason::kQuota), "quota");
  EXPECT_EQ(thrown(ErrorCode::kResourceExhausted, RefusalReason::kOutOfMemory), "oom");
  EXPECT_EQ(thrown(ErrorCode::kResourceExhausted, RefusalReason::kLimit), "limit");
  EXPECT_EQ(thrown(ErrorCode::kResourceExhausted, RefusalReason::kNone), "exhausted");
  // A reason this library does not know yet (a newer daemon) is a plain refusal.
  EXPECT_EQ(thrown(ErrorCode::kResourceExhausted, static_cast<RefusalReason>(9)), "exhausted");
  EXPECT_EQ(thrown(ErrorCode::kNotFound, RefusalReason::kNone), "error");
  EXPECT_STREQ(RefusalReasonName(RefusalReason::kOutOfMemory), "out_of_memory");
}

TEST(Refusals, ACancelledOpenIsCountedAsCancelledNotAsATimeout) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  RawSession session(daemon.socket_dir());
  ASSERT_TRUE(session.ok());
  auto stub = v1::Broker::NewStub(grpc::CreateChannel(
      "unix:" + daemon.socket_dir() + "/gpubroker.sock", grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("gpubroker-token", session.token_hex());
  v1::OpenRequest req;
  req.mutable_ref()->set_name("never.there");
  req.set_wait(true);
  req.set_timeout_ms(60000);
  grpc::Status status;
  std::thread waiter([&] {
    v1::OpenResponse resp;
    status = stub->Open(&ctx, req, &resp);
  });
  std::this_thread::sleep_for(500ms);  // the Open is waiting in the daemon by now
  ctx.TryCancel();
  waiter.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The daemon counts it once it notices (within its wait slice of 100 ms).
  EXPECT_TRUE(Eventually(
      [&] { return daemon.Metric("gpubroker_opens_total{result=\"cancelled\"}") == 1; }, 5s));
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"timeout\"}"), 0);
}

}  // namespace
}  // namespace gpubroker::testing
