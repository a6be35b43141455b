// Opens that wait: parked in the registry with no thread behind them, woken
// by the allocation or seal of their own buffer only, answered exactly once
// (grant, deadline, cancellation, the session's end, shutdown), and capped
// per session and per tenant.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/refusal.h"
#include "daemon/backend/host_backend.h"
#include "daemon/core/registry.h"
#include "daemon/core/wait_list.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(WaitList, FilesWaitersByNameBufferSessionAndDeadline) {
  WaitList list;
  const auto t0 = Clock::now();
  const WaitId a = list.Add(1, "blue", {"blue", "frames", 0}, t0 + 10ms);
  const WaitId b = list.Add(2, "green", {"blue", "frames", 0}, t0 + 30ms);
  const WaitId c = list.Add(1, "blue", {"", "", 42}, t0 + 20ms);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(list.Wakeable(42, "blue", "frames").size(), 3u);
  EXPECT_EQ(list.Wakeable(7, "blue", "frames").size(), 2u);
  EXPECT_EQ(list.Wakeable(7, "green", "frames").size(), 0u) << "a name is its tenant's";
  EXPECT_EQ(list.Wakeable(42, "blue", "").size(), 1u);
  EXPECT_EQ(list.CountForSession(1), 2u);
  EXPECT_EQ(list.CountForTenant("blue"), 2u);
  EXPECT_EQ(list.CountForTenant("green"), 1u);
  EXPECT_EQ(list.Due(t0 + 25ms), (std::vector<WaitId>{a, c})) << "earliest first";
  EXPECT_EQ(list.NextDeadline(), t0 + 10ms);
  EXPECT_TRUE(list.Remove(a));
  EXPECT_FALSE(list.Remove(a));
  EXPECT_EQ(list.NextDeadline(), t0 + 20ms);
  EXPECT_EQ(list.OfSession(1), std::vector<WaitId>{c});
  EXPECT_TRUE(list.Remove(b));
  EXPECT_TRUE(list.Remove(c));
  EXPECT_EQ(list.size(), 0u);
  EXPECT_EQ(list.CountForTenant("blue"), 0u);
  EXPECT_FALSE(list.NextDeadline());
}

class Waits : public ::testing::Test {
 protected:
  explicit Waits(WaitLimits limits = {}) : backend_(64 << 20) {
    registry_ = std::make_unique<Registry>(backend_, *TenantDirectory::Create({}, 0),
                                           Registry::Clock(), TenantLimits{}, limits);
  }

  SessionId Session(uid_t uid = 1000) {
    auto s = registry_->OpenSession(PeerCredentials{100, uid, uid}, "test");
    EXPECT_TRUE(s.ok());
    return s->id;
  }

  // Parks an Open; its answers land in `answers` (one per call of `done`).
  WaitId Park(SessionId s, BufferKey key, std::vector<absl::StatusOr<BufferGrant>>* answers,
              Clock::duration timeout = 10s, bool allow_unsealed = false) {
    OpenParams params;
    params.wait = true;
    params.allow_unsealed = allow_unsealed;
    params.deadline = Clock::now() + timeout;
    WaitId id = 0;
    auto now = registry_->OpenOrPark(
        s, key, params, [answers](absl::StatusOr<BufferGrant> r) { answers->push_back(r); }, &id);
    EXPECT_FALSE(now.has_value()) << (now ? now->status().ToString() : "");
    EXPECT_TRUE(answers->empty()) << "never answered from within OpenOrPark";
    return id;
  }

  uint32_t Waiting() const {
    NodeStatus status;
    registry_->AddBooksTo(status);
    return status.waiting_opens;
  }

  HostBackend backend_;
  std::unique_ptr<Registry> registry_;
};

TEST_F(Waits, AParkedOpenWakesOnItsOwnBufferOnlyAndIsAnsweredOnce) {
  const SessionId producer = Session(1000);
  const SessionId consumer = Session(1000);
  const SessionId stranger = Session(2000);  // tenant uid-2000
  std::vector<absl::StatusOr<BufferGrant>> mine, theirs, unsealed;
  Park(consumer, {0, "frames"}, &mine);
  Park(consumer, {0, "uid-2000/frames"}, &theirs);
  Park(consumer, {0, "frames"}, &unsealed, 10s, /*allow_unsealed=*/true);
  EXPECT_EQ(Waiting(), 3u);

  // Another tenant's buffer of the same name, unshared, wakes nobody.
  auto other = registry_->Allocate(stranger, {.size = 4096, .name = "frames"});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(registry_->Seal(stranger, other->buffer.id).ok());
  EXPECT_TRUE(mine.empty());
  EXPECT_TRUE(theirs.empty()) << "an unshared buffer reads as missing, so its waiter waits on";

  // The producer's allocation answers the allow_unsealed waiter, its seal the other.
  auto made = registry_->Allocate(producer, {.size = 4096, .name = "frames"});
  ASSERT_TRUE(made.ok());
  ASSERT_EQ(unsealed.size(), 1u);
  ASSERT_TRUE(unsealed[0].ok()) << unsealed[0].status();
  EXPECT_EQ(unsealed[0]->buffer.state, BufferState::kAllocated);
  EXPECT_TRUE(mine.empty()) << "not sealed yet";
  ASSERT_TRUE(registry_->Seal(producer, made->buffer.id).ok());
  ASSERT_EQ(mine.size(), 1u);
  ASSERT_TRUE(mine[0].ok()) << mine[0].status();
  EXPECT_EQ(mine[0]->buffer.id, made->buffer.id);
  EXPECT_EQ(mine[0]->buffer.state, BufferState::kSealed);
  const auto listed = registry_->List(consumer);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].leases, 3u) << "the producer's lease and the two grants";
  ASSERT_TRUE(registry_->Seal(producer, made->buffer.id).ok());
  EXPECT_EQ(mine.size(), 1u) << "answered once";

  // The session's end answers what it still has parked.
  EXPECT_EQ(Waiting(), 1u);
  registry_->EndSession(consumer);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Waiting(), 0u);
}

TEST_F(Waits, DeadlinesCancellationAndShutdownEndParkedOpens) {
  const SessionId s = Session();
  std::vector<absl::StatusOr<BufferGrant>> soon, later, cancelled;
  Park(s, {0, "soon"}, &soon, 20ms);
  Park(s, {0, "later"}, &later, 10s);
  const WaitId c = Park(s, {0, "gone"}, &cancelled, 10s);

  EXPECT_EQ(registry_->ExpireWaits(Clock::now()), 0u);
  EXPECT_EQ(registry_->ExpireWaits(Clock::now() + 50ms), 1u);
  ASSERT_EQ(soon.size(), 1u);
  EXPECT_EQ(soon[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(soon[0].status().message().find("did not appear"), std::string::npos);

  EXPECT_TRUE(registry_->CancelWait(c, absl::CancelledError("gave up")));
  EXPECT_FALSE(registry_->CancelWait(c, absl::CancelledError("again")));
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].status().code(), absl::StatusCode::kCancelled);

  registry_->BeginShutdown();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Waiting(), 0u);
}

TEST_F(Waits, AnOpenThatNeedNotWaitIsAnsweredAtOnce) {
  const SessionId s = Session();
  auto g = registry_->Allocate(s, {.size = 1, .name = "here"});
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(registry_->Seal(s, g->buffer.id).ok());
  OpenParams params;
  params.wait = true;
  WaitId id = 0;
  auto now = registry_->OpenOrPark(
      s, {0, "here"}, params, [](absl::StatusOr<BufferGrant>) { ADD_FAILURE(); }, &id);
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(now->ok());
  EXPECT_EQ(id, 0u);
  // An unknown id never comes into existence: no wait for it.
  now = registry_->OpenOrPark(
      s, {987654, {}}, params, [](absl::StatusOr<BufferGrant>) { ADD_FAILURE(); }, &id);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->status().code(), absl::StatusCode::kNotFound);
  // Nor for a bad name.
  now = registry_->OpenOrPark(
      s, {0, "a/b/c"}, params, [](absl::StatusOr<BufferGrant>) { ADD_FAILURE(); }, &id);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->status().code(), absl::StatusCode::kInvalidArgument);
}

class CappedWaits : public Waits {
 protected:
  CappedWaits() : Waits(WaitLimits{2, 3, 100ms}) {}
};

TEST_F(CappedWaits, WaitsAreCappedPerSessionAndTenantAndEndByDefault) {
  const SessionId a = Session(1000);
  const SessionId b = Session(1000);
  const SessionId other = Session(2000);
  std::vector<absl::StatusOr<BufferGrant>> answers;
  Park(a, {0, "x1"}, &answers);
  Park(a, {0, "x2"}, &answers);
  OpenParams params;
  params.wait = true;
  params.deadline = Clock::now() + 10s;
  WaitId id = 0;
  auto over = registry_->OpenOrPark(
      a, {0, "x3"}, params, [](absl::StatusOr<BufferGrant>) { ADD_FAILURE(); }, &id);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(over->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RefusalOf(over->status()), Refusal::kLimit);
  EXPECT_NE(over->status().message().find("max_waiters_per_session"), std::string::npos);
  Park(b, {0, "x4"}, &answers);
  over = registry_->OpenOrPark(
      b, {0, "x5"}, params, [](absl::StatusOr<BufferGrant>) { ADD_FAILURE(); }, &id);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(RefusalOf(over->status()), Refusal::kLimit);
  EXPECT_NE(over->status().message().find("max_waiters_per_tenant"), std::string::npos);
  Park(other, {0, "x6"}, &answers);  // another tenant's count is its own
  EXPECT_TRUE(answers.empty());

  // A wait that names no deadline ends at the default one (100 ms here).
  const auto start = Clock::now();
  OpenParams open_ended;
  open_ended.wait = true;
  EXPECT_EQ(registry_->Open(other, {0, "never"}, open_ended).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(Clock::now() - start, 100ms);
  EXPECT_LT(Clock::now() - start, 5s);
  registry_->BeginShutdown();  // before `answers` goes: it answers the four parked
  EXPECT_EQ(answers.size(), 4u);
}

}  // namespace
}  // namespace gpubroker
