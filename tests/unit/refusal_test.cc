// The refusal attached to a status, and its two conversions at the edge.
#include "common/refusal.h"

#include "daemon/metrics/metrics.h"
#include "daemon/service/convert.h"
#include "gpubroker/v1/broker.pb.h"
#include "gpubroker/v1/session.pb.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

constexpr Refusal kAll[] = {Refusal::kQuota, Refusal::kOutOfMemory, Refusal::kLimit};

TEST(Refusal, RoundTripsOnAStatusAndIsAnErrorInfoOnTheWire) {
  for (Refusal r : kAll) {
    const absl::Status s = WithRefusal(absl::ResourceExhaustedError("full"), r);
    EXPECT_EQ(RefusalOf(s), r);
    EXPECT_EQ(s.message(), "full");
    // The payload is ErrorInfo's serialized form, so that the edge can pass it on as an Any.
    v1::ErrorInfo info;
    ASSERT_TRUE(info.ParseFromString(std::string(*s.GetPayload(kErrorInfoTypeUrl))));
    EXPECT_EQ(static_cast<int>(info.reason()), static_cast<int>(r));
  }
  EXPECT_EQ(RefusalOf(absl::ResourceExhaustedError("no reason")), Refusal::kNone);
  EXPECT_EQ(RefusalOf(WithRefusal(absl::OkStatus(), Refusal::kQuota)), Refusal::kNone);
  EXPECT_EQ(RefusalOf(LimitRefusal("too many")), Refusal::kLimit);
  EXPECT_EQ(LimitRefusal("too many").code(), absl::StatusCode::kResourceExhausted);
}

TEST(Refusal, TravelsInGrpcStatusDetailsAndInTheErrorFrame) {
  for (Refusal r : kAll) {
    const absl::Status s = WithRefusal(absl::ResourceExhaustedError("full"), r);
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(g.error_message(), "full");
    v1::RpcStatus details;
    ASSERT_TRUE(details.ParseFromString(g.error_details()));
    ASSERT_EQ(details.details_size(), 1);
    v1::ErrorInfo info;
    ASSERT_TRUE(details.details(0).UnpackTo(&info));
    EXPECT_EQ(static_cast<int>(info.reason()), static_cast<int>(r));

    v1::ErrorFrame frame;
    ToErrorFrame(s, 7, &frame);
    EXPECT_EQ(frame.request_id(), 7u);
    EXPECT_EQ(frame.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
    EXPECT_EQ(static_cast<int>(frame.reason()), static_cast<int>(r));
  }
  EXPECT_TRUE(ToGrpcStatus(absl::NotFoundError("gone")).error_details().empty());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(Refusal, NamesTheMetricLabels) {
  EXPECT_EQ(Metrics::AllocationResult(absl::OkStatus()), "ok");
  EXPECT_EQ(Metrics::AllocationResult(QuotaRefusal("q")), "quota");
  EXPECT_EQ(Metrics::AllocationResult(OutOfMemoryRefusal("m")), "out_of_memory");
  EXPECT_EQ(Metrics::AllocationResult(LimitRefusal("l")), "limit");
  EXPECT_EQ(Metrics::AllocationResult(absl::UnavailableError("bye")), "unavailable");
  EXPECT_EQ(Metrics::AllocationResult(absl::InvalidArgumentError("bad")), "invalid");
  EXPECT_EQ(Metrics::AllocationResult(absl::ResourceExhaustedError("?")), "invalid");
  EXPECT_EQ(Metrics::OpenResult(absl::CancelledError("c")), "cancelled");
  EXPECT_EQ(Metrics::OpenResult(absl::DeadlineExceededError("d")), "timeout");
}

}  // namespace
}  // namespace gpubroker
