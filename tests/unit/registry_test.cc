// The registry's rules (names, leases, the free rule, quotas, tenants, TTL),
// run over every backend this machine has, with real memory behind them.
//
// Over 500 lines on purpose: one suite, instantiated over every backend.
#include "daemon/core/registry.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "common/refusal.h"
#include "daemon/backend/host_backend.h"
#include "gtest/gtest.h"
#include "tests/unit/backends_under_test.h"

namespace gpubroker {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

class RegistryTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = GetParam().make(&why);
    if (!backend_) GTEST_SKIP() << GetParam().name << ": " << why;
    Make({});
  }

  void Make(std::vector<TenantSpec> tenants, uint64_t default_quota = 0) {
    registry_.reset();
    auto dir = TenantDirectory::Create(std::move(tenants), default_quota);
    ASSERT_TRUE(dir.ok());
    registry_ =
        std::make_unique<Registry>(*backend_, std::move(*dir), [this] { return now_ms_.load(); });
  }

  SessionId Session(uid_t uid = 1000) {
    auto s = registry_->OpenSession(PeerCredentials{100, uid, uid}, "test");
    EXPECT_TRUE(s.ok());
    return s->id;
  }

  BufferGrant Alloc(SessionId s, uint64_t size, std::string name = {}, bool keep = false) {
    AllocateParams p;
    p.size = size;
    p.name = std::move(name);
    p.keep = keep;
    auto g = registry_->Allocate(s, p);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : BufferGrant{};
  }

  uint64_t Used() const { return backend_->Usage(0).used_bytes; }
  NodeStatus Status() const { return NodeStatusCollector(*registry_, *backend_).Collect(); }
  uint64_t TenantUsed(const std::string& tenant) const {
    for (const auto& t : Status().tenants) {
      if (t.name == tenant) return t.used_bytes;
    }
    return 0;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Registry> registry_;
  std::atomic<int64_t> now_ms_{1'000'000};
};

TEST_P(RegistryTest, AllocateDescribesTheBufferAndLeasesItToTheOwner) {
  SessionId s = Session();
  AllocateParams p;
  p.size = 1000;
  p.name = "frames";
  p.tensor = TensorDesc{12, {10, 25}, {}, 0};
  auto g = registry_->Allocate(s, p);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NE(g->buffer.id, 0u);
  EXPECT_EQ(g->buffer.name, "frames");
  EXPECT_EQ(g->buffer.size, 1000u);
  EXPECT_GE(g->buffer.reserved_size, 1000u);
  EXPECT_EQ(g->buffer.tenant, "uid-1000");
  EXPECT_EQ(g->buffer.state, BufferState::kAllocated);
  EXPECT_EQ(g->buffer.leases, 1u);
  EXPECT_EQ(g->buffer.owner_session, s);
  ASSERT_TRUE(g->buffer.tensor);
  EXPECT_EQ(g->buffer.tensor->shape, (std::vector<int64_t>{10, 25}));
  EXPECT_EQ(g->import.mapped_size, g->buffer.reserved_size);
  EXPECT_EQ(Used(), g->buffer.reserved_size);
}

TEST_P(RegistryTest, RefusesBadInputWithInvalidArgument) {
  SessionId s = Session();
  auto code = [&](AllocateParams p) { return registry_->Allocate(s, p).status().code(); };
  EXPECT_EQ(code({.size = 0}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = backend_->devices()[0].capacity_bytes + 1}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 1, .name = "a/b"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 1, .name = std::string(300, 'x')}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 1, .device = "GPU-nonexistent"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 1, .device = "7"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 4, .tensor = TensorDesc{12, {2}, {}, 0}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.size = 1, .share_with = {"no spaces allowed"}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Used(), 0u);
  EXPECT_TRUE(registry_->Allocate(s, {.size = 1, .device = "0"}).ok());
  EXPECT_TRUE(registry_->Allocate(s, {.size = 1, .device = backend_->devices()[0].uuid}).ok());
}

TEST_P(RegistryTest, NamesAreUniqueWithinATenantUntilFreed) {
  SessionId a = Session();
  SessionId a2 = Session();
  SessionId b = Session(2000);
  auto first = Alloc(a, 100, "model.weights");
  auto clash = registry_->Allocate(a2, {.size = 100, .name = "model.weights"});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kAlreadyExists);
  auto other_tenant = registry_->Allocate(b, {.size = 100, .name = "model.weights"});
  ASSERT_TRUE(other_tenant.ok()) << "another tenant's names are its own";
  EXPECT_NE(other_tenant->buffer.id, first.buffer.id);
  ASSERT_TRUE(registry_->Free(a, {0, "model.weights"}).ok());
  EXPECT_TRUE(registry_->Allocate(a2, {.size = 100, .name = "model.weights"}).ok());
}

TEST_P(RegistryTest, OpenNeedsSealUnlessAskedOtherwise) {
  SessionId p = Session();
  SessionId c = Session();
  auto g = Alloc(p, 4096, "x");
  auto early = registry_->Open(c, {0, "x"}, {});
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry_->Open(c, {0, "x"}, {.allow_unsealed = true}).ok());
  ASSERT_TRUE(registry_->Seal(p, g.buffer.id).ok());
  auto opened = registry_->Open(c, {g.buffer.id, {}}, {});
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(opened->buffer.state, BufferState::kSealed);
  EXPECT_EQ(opened->buffer.leases, 3u);
  EXPECT_EQ(opened->import.offset, g.import.offset);
  EXPECT_EQ(registry_->Open(c, {0, "nope"}, {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Open(c, {999999, {}}, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(RegistryTest, OpenWaitWakesWhenTheProducerSeals) {
  SessionId p = Session();
  SessionId c = Session();
  std::atomic<bool> sealed{false};
  std::thread consumer([&] {
    OpenParams params;
    params.wait = true;
    params.deadline = std::chrono::steady_clock::now() + 10s;
    auto g = registry_->Open(c, {0, "later"}, params);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(sealed.load()) << "Open returned before the seal";
    if (g.ok()) {
      EXPECT_EQ(g->buffer.state, BufferState::kSealed);
    }
  });
  std::this_thread::sleep_for(50ms);
  auto g = Alloc(p, 4096, "later");  // exists now, but is not sealed yet
  std::this_thread::sleep_for(50ms);
  sealed = true;
  ASSERT_TRUE(registry_->Seal(p, g.buffer.id).ok());
  consumer.join();
}

TEST_P(RegistryTest, OpenWaitEndsAtTheDeadlineOrShutdown) {
  SessionId c = Session();
  OpenParams params;
  params.wait = true;
  params.deadline = std::chrono::steady_clock::now() + 150ms;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(registry_->Open(c, {0, "never"}, params).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);

  params.deadline = std::chrono::steady_clock::now() + 10s;
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    registry_->BeginShutdown();
  });
  EXPECT_EQ(registry_->Open(c, {0, "never"}, params).status().code(),
            absl::StatusCode::kUnavailable);
  stopper.join();
}

TEST_P(RegistryTest, MemoryReturnsOnlyWhenFreedAndNoLeaseRemains) {
  SessionId p = Session();
  SessionId c = Session();
  auto g = Alloc(p, kMiB, "x");
  ASSERT_TRUE(registry_->Seal(p, g.buffer.id).ok());
  ASSERT_TRUE(registry_->Open(c, {0, "x"}, {}).ok());
  ASSERT_TRUE(registry_->Release(p, g.buffer.id, /*free=*/true).ok());
  EXPECT_EQ(registry_->Open(c, {0, "x"}, {}).status().code(), absl::StatusCode::kNotFound)
      << "a freed name must be gone at once";
  EXPECT_EQ(Used(), g.buffer.reserved_size) << "the consumer's lease keeps the memory";
  ASSERT_EQ(registry_->List(p).size(), 1u);
  EXPECT_EQ(registry_->List(p)[0].state, BufferState::kFreed);
  ASSERT_TRUE(registry_->Release(c, g.buffer.id, false).ok());
  EXPECT_EQ(Used(), 0u);
  EXPECT_TRUE(registry_->List(p).empty());
  EXPECT_EQ(registry_->Release(c, g.buffer.id, false).code(), absl::StatusCode::kNotFound);
}

TEST_P(RegistryTest, SessionEndFreesWhatItOwnedExceptKeep) {
  SessionId owner = Session();
  SessionId reader = Session();
  auto plain = Alloc(owner, kMiB, "plain");
  auto kept = Alloc(owner, 2 * kMiB, "kept", /*keep=*/true);
  auto leased = Alloc(owner, 3 * kMiB, "leased");
  ASSERT_TRUE(registry_->Open(reader, {leased.buffer.id, {}}, {.allow_unsealed = true}).ok());
  const SessionEndReport r = registry_->EndSession(owner);
  EXPECT_EQ(r.buffers_freed, 2u);
  EXPECT_EQ(r.buffers_destroyed, 1u);
  EXPECT_EQ(r.reclaimed_bytes, plain.buffer.reserved_size);
  EXPECT_EQ(Used(), kept.buffer.reserved_size + leased.buffer.reserved_size);
  auto k = registry_->Open(reader, {0, "kept"}, {.allow_unsealed = true});
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->buffer.owner_session, 0u);
  EXPECT_EQ(registry_->Authenticate(Token{}).status().code(), absl::StatusCode::kUnauthenticated);
  const SessionEndReport r2 = registry_->EndSession(reader);
  EXPECT_EQ(r2.leases_dropped, 2u);
  EXPECT_EQ(r2.reclaimed_bytes, leased.buffer.reserved_size);
  EXPECT_EQ(Used(), kept.buffer.reserved_size);
  SessionId later = Session();
  ASSERT_TRUE(registry_->Free(later, {0, "kept"}).ok());
  EXPECT_EQ(Used(), 0u);
}

TEST_P(RegistryTest, TokensAuthenticateTheirSessionOnly) {
  auto s = registry_->OpenSession(PeerCredentials{1, 1000, 1000}, "t");
  ASSERT_TRUE(s.ok());
  auto found = registry_->Authenticate(s->token);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->id, s->id);
  Token wrong = s->token;
  wrong[0] ^= 1;
  EXPECT_EQ(registry_->Authenticate(wrong).status().code(), absl::StatusCode::kUnauthenticated);
  registry_->EndSession(s->id);
  EXPECT_EQ(registry_->Authenticate(s->token).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(registry_->Allocate(s->id, {.size = 1}).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_P(RegistryTest, QuotaRefusesWithTheNumbersAndFreesUp) {
  Make({{"team", {1000}, {}, 4 * kMiB}});
  SessionId s = Session(1000);
  auto a = Alloc(s, 3 * kMiB);
  auto over = registry_->Allocate(s, {.size = 2 * kMiB});
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RefusalOf(over.status()), Refusal::kQuota);
  const std::string msg(over.status().message());
  EXPECT_NE(msg.find("team"), std::string::npos) << msg;
  const uint64_t asked = backend_->RoundedSize(0, 2 * kMiB, false);
  EXPECT_NE(msg.find("requested " + std::to_string(asked)), std::string::npos) << msg;
  EXPECT_EQ(TenantUsed("team"), a.buffer.reserved_size);
  EXPECT_NE(msg.find(std::to_string(4 * kMiB - a.buffer.reserved_size) + " left"),
            std::string::npos)
      << msg;
  ASSERT_TRUE(registry_->Release(s, a.buffer.id, true).ok());
  EXPECT_TRUE(registry_->Allocate(s, {.size = 4 * kMiB - 4096}).ok());
  // Another tenant is not bound by it.
  SessionId other = Session(3000);
  EXPECT_TRUE(registry_->Allocate(other, {.size = 8 * kMiB}).ok());
}

TEST_P(RegistryTest, ReplacedTenantsApplyToNewSessionsAndEveryNewAllocation) {
  Make({{"team", {1000}, {}, 4 * kMiB}});
  SessionId before = Session(1000);
  auto a = Alloc(before, 3 * kMiB, "kept.across.reload");
  ASSERT_FALSE(registry_->Allocate(before, {.size = 2 * kMiB}).ok());

  // uid 1000 moves to tenant "big"; "team" gets a larger quota.
  auto dir = TenantDirectory::Create({{"team", {}, {}, 16 * kMiB}, {"big", {1000}, {}, 0}},
                                     /*default_quota_bytes=*/kMiB);
  ASSERT_TRUE(dir.ok()) << dir.status();
  registry_->ReplaceTenants(std::move(*dir));

  // The old session keeps its tenant and its buffer; the new quota holds.
  EXPECT_TRUE(registry_->Allocate(before, {.size = 2 * kMiB}).ok());
  EXPECT_EQ(TenantUsed("team"), a.buffer.reserved_size + backend_->RoundedSize(0, 2 * kMiB, false));
  auto listed = registry_->List(before);
  ASSERT_FALSE(listed.empty());
  EXPECT_EQ(listed.front().tenant, "team");
  // A new session of the same uid is the new tenant.
  SessionId after = Session(1000);
  EXPECT_EQ(Alloc(after, kMiB).buffer.tenant, "big");
  // The default quota changed too.
  SessionId stranger = Session(3000);
  auto refused = registry_->Allocate(stranger, {.size = 2 * kMiB});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  bool listed_team = false;
  for (const auto& t : Status().tenants) {
    if (t.name != "team") continue;
    listed_team = true;
    EXPECT_EQ(t.quota_bytes, 16 * kMiB);
  }
  EXPECT_TRUE(listed_team);
  EXPECT_EQ(registry_->tenants()->QuotaFor("team"), 16 * kMiB);
}

TEST_P(RegistryTest, OtherTenantsSeeNothingUnlessShared) {
  SessionId alice = Session(1000);
  SessionId bob = Session(2000);
  SessionId carol = Session(3000);
  auto secret = Alloc(alice, 4096, "secret");
  ASSERT_TRUE(registry_->Seal(alice, secret.buffer.id).ok());
  auto by_id = registry_->Open(bob, {secret.buffer.id, {}}, {});
  EXPECT_EQ(by_id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(by_id.status().message()),
            "no buffer with id " + std::to_string(secret.buffer.id))
      << "another tenant's buffer must read like a missing one";
  EXPECT_EQ(registry_->Open(bob, {0, "secret"}, {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Free(bob, {secret.buffer.id, {}}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_->List(bob).empty());
  EXPECT_EQ(registry_->ExportRegionFd(bob, secret.import.region_id).status().code(),
            absl::StatusCode::kNotFound);

  auto shared =
      registry_->Allocate(alice, {.size = 4096, .name = "for-bob", .share_with = {"uid-2000"}});
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->import.region_id, 0u) << "a cross-tenant buffer must have an fd of its own";
  ASSERT_TRUE(registry_->Seal(alice, shared->buffer.id).ok());
  EXPECT_EQ(registry_->Open(bob, {0, "for-bob"}, {}).status().code(), absl::StatusCode::kNotFound)
      << "a bare name is the caller's own tenant's";
  auto opened = registry_->Open(bob, {0, "uid-1000/for-bob"}, {});
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(registry_->ExportBufferFd(bob, shared->buffer.id).ok());
  EXPECT_EQ(registry_->Seal(bob, shared->buffer.id).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_->Free(bob, {0, "uid-1000/for-bob"}).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_->Open(carol, {0, "uid-1000/for-bob"}, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Open(bob, {0, "uid-1000/secret"}, {}).status().message(),
            "no buffer named 'uid-1000/secret'")
      << "an unshared name must read like a missing one";
  EXPECT_EQ(registry_->Open(bob, {0, "uid-1000/no.such"}, {}).status().message(),
            "no buffer named 'uid-1000/no.such'");
  EXPECT_EQ(registry_->ExportBufferFd(carol, shared->buffer.id).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_EQ(registry_->List(bob).size(), 1u);
}

TEST_P(RegistryTest, TtlFreesKeptBuffers) {
  SessionId s = Session();
  auto g = registry_->Allocate(s, {.size = kMiB, .name = "cache", .keep = true, .ttl_ms = 5000});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->buffer.expires_unix_ms, now_ms_.load() + 5000);
  ASSERT_TRUE(registry_->Release(s, g->buffer.id, false).ok());
  registry_->EndSession(s);
  EXPECT_EQ(registry_->NextExpiry(), now_ms_.load() + 5000);
  EXPECT_EQ(registry_->ExpireDue(now_ms_.load() + 4999).buffers_expired, 0u);
  EXPECT_EQ(Used(), g->buffer.reserved_size);
  const ExpiryReport r = registry_->ExpireDue(now_ms_.load() + 5000);
  EXPECT_EQ(r.buffers_expired, 1u);
  EXPECT_EQ(r.reclaimed_bytes, g->buffer.reserved_size);
  EXPECT_EQ(Used(), 0u);
  EXPECT_FALSE(registry_->NextExpiry());
}

TEST_P(RegistryTest, ConcurrentChurnLeavesNothingBehind) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      SessionId mine = Session(1000);
      SessionId reader = Session(1000);
      std::mt19937 rng(t);
      for (int i = 0; i < 300; ++i) {
        const std::string name = "n" + std::to_string(t) + "." + std::to_string(i);
        auto g = registry_->Allocate(mine, {.size = 1 + rng() % 65536, .name = name});
        ASSERT_TRUE(g.ok()) << g.status();
        ASSERT_TRUE(registry_->Seal(mine, g->buffer.id).ok());
        auto o = registry_->Open(reader, {0, name}, {});
        ASSERT_TRUE(o.ok()) << o.status();
        ASSERT_TRUE(registry_->Release(mine, g->buffer.id, true).ok());
        ASSERT_TRUE(registry_->Release(reader, g->buffer.id, false).ok());
      }
      registry_->EndSession(mine);
      registry_->EndSession(reader);
    });
  }
  for (auto& t : threads) t.join();
  const NodeStatus status = Status();
  EXPECT_EQ(status.buffers, 0u);
  EXPECT_EQ(status.sessions, 0u);
  EXPECT_TRUE(status.cells.empty());
  ASSERT_FALSE(status.devices.empty());
  EXPECT_EQ(status.devices[0].buffers, 0u);
  EXPECT_EQ(Used(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, RegistryTest, ::testing::ValuesIn(BackendsUnderTest()),
                         [](const auto& p) { return p.param.name; });

// Backend refusals roll everything back.
TEST(RegistryOnHost, DeviceFullRollsBackNameAndQuota) {
  HostBackend backend(4 * kMiB);
  auto dir = TenantDirectory::Create({}, 0);
  Registry registry(backend, std::move(*dir));
  auto s = registry.OpenSession({1, 1000, 1000}, "t");
  ASSERT_TRUE(registry.Allocate(s->id, {.size = 3 * kMiB}).ok());
  auto full = registry.Allocate(s->id, {.size = 2 * kMiB, .name = "wanted"});
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RefusalOf(full.status()), Refusal::kOutOfMemory);
  EXPECT_EQ(NodeStatusCollector(registry, backend).Collect().tenants[0].used_bytes, 3 * kMiB);
  EXPECT_TRUE(registry.Allocate(s->id, {.size = kMiB, .name = "wanted"}).ok())
      << "the name of a refused allocation must be free again";
}

// The host backend, telling who holds which region: what a path needs to
// give a region back once no client maps it.
class HoldersBackend final : public Backend {
 public:
  explicit HoldersBackend(uint64_t capacity) : host_(capacity) {}
  std::string_view name() const override { return host_.name(); }
  const std::vector<DeviceInfo>& devices() const override { return host_.devices(); }
  uint64_t RoundedSize(int device, uint64_t size, bool isolated) const override {
    return host_.RoundedSize(device, size, isolated);
  }
  absl::StatusOr<std::unique_ptr<BackendBuffer>> Allocate(const AllocationRequest& r) override {
    return host_.Allocate(r);
  }
  absl::StatusOr<FdGrant> ExportRegion(RegionId region, std::string_view tenant) override {
    return host_.ExportRegion(region, tenant);
  }
  DeviceUsage Usage(int device) const override { return host_.Usage(device); }
  uint64_t QuickAllocationLimit() const override { return host_.QuickAllocationLimit(); }
  bool OwnsDescriptor(int device, uint64_t size, bool isolated) const override {
    return host_.OwnsDescriptor(device, size, isolated);
  }
  void RegionHeld(RegionId r) override { held[r]++; }
  void RegionUnheld(RegionId r) override { held[r]--; }
  std::map<RegionId, int> held;

 private:
  HostBackend host_;
};

// A session holds a region from the first buffer there it is told of (an
// allocation, an open), or the first time it receives its descriptor, once
// however often, until it ends, whichever way: a client that has not fetched
// a region yet may, for its next buffer there.
TEST(RegistryOnHost, SessionsHoldTheRegionsTheyAreToldOfOrReceiveUntilTheyEnd) {
  HoldersBackend backend(4 * kMiB);
  auto dir = TenantDirectory::Create({}, 0);
  Registry registry(backend, std::move(*dir));
  auto a = registry.OpenSession({1, 1000, 1000}, "a");
  auto b = registry.OpenSession({2, 1000, 1000}, "b");
  auto c = registry.OpenSession({3, 1000, 1000}, "c");
  auto other = registry.OpenSession({4, 2000, 2000}, "another tenant");
  auto g = registry.Allocate(a->id, {.size = 4096, .name = "x"});
  ASSERT_TRUE(g.ok()) << g.status();
  const RegionId arena = g->import.region_id;
  ASSERT_NE(arena, 0u);
  EXPECT_EQ(backend.held[arena], 1) << "told of it by its allocation";
  ASSERT_TRUE(registry.Allocate(a->id, {.size = 4096}).ok());
  EXPECT_EQ(backend.held[arena], 1) << "once per session";
  ASSERT_TRUE(registry.ExportRegionFd(a->id, arena).ok());
  ASSERT_TRUE(registry.ExportRegionFd(a->id, arena).ok());
  EXPECT_EQ(backend.held[arena], 1);
  ASSERT_TRUE(registry.ExportRegionFd(b->id, arena).ok());
  EXPECT_EQ(backend.held[arena], 2);
  ASSERT_TRUE(registry.Open(c->id, {0, "x"}, {.allow_unsealed = true}).ok());
  EXPECT_EQ(backend.held[arena], 3) << "told of it by an open";
  EXPECT_FALSE(registry.ExportRegionFd(other->id, arena).ok());
  EXPECT_FALSE(registry.ExportRegionFd(b->id, arena + 50).ok());
  EXPECT_EQ(backend.held.count(arena + 50), 0u) << "a refused export holds nothing";
  EXPECT_EQ(backend.held[arena], 3) << "another tenant's refused export holds nothing";
  registry.EndSession(a->id, SessionEnd::kDied);
  EXPECT_EQ(backend.held[arena], 2);
  registry.EndSession(b->id, SessionEnd::kClosed);
  registry.EndSession(c->id, SessionEnd::kClosed);
  EXPECT_EQ(backend.held[arena], 0);
  EXPECT_FALSE(registry.ExportRegionFd(b->id, arena).ok()) << "an ended session gets nothing";
  EXPECT_EQ(backend.held[arena], 0);
}

}  // namespace
}  // namespace gpubroker

namespace gpubroker {
namespace {

// TTL arithmetic: no TTL wraps the expiry, none is saturated into "never"
// silently, and the reaper consumes each entry once.
TEST(RegistryTtl, TtlsOverTheLimitAreRefusedAndExpiriesNeverOverflow) {
  HostBackend backend(64 * kMiB);
  std::atomic<int64_t> now{std::numeric_limits<int64_t>::max() - 10};
  Registry registry(backend, *TenantDirectory::Create({}, 0), [&] { return now.load(); });
  auto s = registry.OpenSession({1, 1000, 1000}, "t");
  for (uint64_t ttl : {kMaxTtlMs + 1, uint64_t{1} << 63, ~uint64_t{0},
                       ~uint64_t{0} - static_cast<uint64_t>(now.load()) + 1}) {
    auto g = registry.Allocate(s->id, {.size = 4096, .keep = true, .ttl_ms = ttl});
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << ttl;
  }
  // At the end of time, an expiry saturates instead of wrapping below now.
  auto last = registry.Allocate(s->id, {.size = 4096, .keep = true, .ttl_ms = kMaxTtlMs});
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->buffer.expires_unix_ms, std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(registry.Release(s->id, last->buffer.id, false).ok());
  EXPECT_EQ(registry.ExpireDue(now.load()).buffers_expired, 0u);
  // Two buffers at the same instant, one of them freed first by hand.
  now = 1'000'000;
  auto a = registry.Allocate(s->id, {.size = 4096, .name = "a", .keep = true, .ttl_ms = 10});
  auto b = registry.Allocate(s->id, {.size = 4096, .name = "b", .keep = true, .ttl_ms = 10});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(registry.Release(s->id, a->buffer.id, true).ok());
  ASSERT_TRUE(registry.Release(s->id, b->buffer.id, false).ok());
  const ExpiryReport r = registry.ExpireDue(1'000'010);
  EXPECT_EQ(r.buffers_expired, 1u);
  EXPECT_EQ(r.buffers_destroyed, 1u);
  EXPECT_EQ(registry.NextExpiry(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(registry.ExpireDue(std::numeric_limits<int64_t>::max()).buffers_expired, 1u);
  EXPECT_FALSE(registry.NextExpiry());
  EXPECT_EQ(backend.Usage(0).used_bytes, 0u);
}

// Count limits: buffers and descriptors per tenant, and the daemon's budget.
TEST(RegistryLimits, BuffersAndDescriptorsPerTenantAndTheBudgetAreCapped) {
  HostBackend backend(64 * kMiB);
  DescriptorBudget budget(5);
  TenantLimits limits;
  limits.max_buffers_per_tenant = 6;
  limits.max_descriptors_per_tenant = 3;
  limits.descriptors = &budget;
  Registry registry(backend, *TenantDirectory::Create({}, 0), {}, limits);
  auto alice = registry.OpenSession({1, 1000, 1000}, "a");
  auto bob = registry.OpenSession({2, 1001, 1001}, "b");
  std::vector<BufferId> shared;
  for (int i = 0; i < 3; ++i) {
    auto g = registry.Allocate(alice->id, {.size = 1, .share_with = {"uid-1001"}});
    ASSERT_TRUE(g.ok()) << g.status();
    shared.push_back(g->buffer.id);
  }
  auto fourth = registry.Allocate(alice->id, {.size = 1, .share_with = {"uid-1001"}});
  EXPECT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RefusalOf(fourth.status()), Refusal::kLimit);
  EXPECT_NE(fourth.status().message().find("max_descriptors_per_tenant"), std::string::npos);
  EXPECT_EQ(budget.in_use(), 3u);
  // Arena buffers hold no descriptor, but count as buffers.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(registry.Allocate(alice->id, {.size = 1}).ok());
  auto seventh = registry.Allocate(alice->id, {.size = 1});
  EXPECT_EQ(RefusalOf(seventh.status()), Refusal::kLimit);
  EXPECT_NE(seventh.status().message().find("max_buffers_per_tenant"), std::string::npos);
  // Another tenant has its own counts, but the daemon's budget is shared.
  ASSERT_TRUE(registry.Allocate(bob->id, {.size = 1, .share_with = {"uid-1000"}}).ok());
  ASSERT_TRUE(registry.Allocate(bob->id, {.size = 1, .share_with = {"uid-1000"}}).ok());
  auto over_budget = registry.Allocate(bob->id, {.size = 1, .share_with = {"uid-1000"}});
  EXPECT_EQ(RefusalOf(over_budget.status()), Refusal::kLimit);
  EXPECT_NE(over_budget.status().message().find("descriptors it may hold"), std::string::npos);
  EXPECT_EQ(budget.in_use(), 5u);
  // Freed, they count no more.
  ASSERT_TRUE(registry.Release(alice->id, shared[0], true).ok());
  EXPECT_EQ(budget.in_use(), 4u);
  EXPECT_TRUE(registry.Allocate(alice->id, {.size = 1, .share_with = {"uid-1001"}}).ok());
  registry.EndSession(alice->id);
  registry.EndSession(bob->id);
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(DescriptorLimits, BudgetAndPerUidCountsRefuseOverTheirLimits) {
  DescriptorBudget budget(3);
  EXPECT_TRUE(budget.TryCharge(2));
  EXPECT_FALSE(budget.TryCharge(2));
  EXPECT_TRUE(budget.TryCharge(1));
  EXPECT_FALSE(budget.TryCharge(1));
  budget.Release(3);
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_EQ(DescriptorBudget::LimitFor(1024), 896u);
  EXPECT_EQ(DescriptorBudget::LimitFor(100), 50u);
  PerUidConnections per_uid(2);
  EXPECT_TRUE(per_uid.TryAdmit(7));
  EXPECT_TRUE(per_uid.TryAdmit(7));
  EXPECT_FALSE(per_uid.TryAdmit(7));
  EXPECT_TRUE(per_uid.TryAdmit(8));
  EXPECT_EQ(per_uid.total(), 3u);
  per_uid.Release(7);
  EXPECT_TRUE(per_uid.TryAdmit(7));
  PerUidConnections uncapped(0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(uncapped.TryAdmit(1));
}

}  // namespace
}  // namespace gpubroker
