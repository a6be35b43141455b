// Item 9 on the host backend: memory lent to a tenant holds no byte of
// another tenant's. Each tenant's small buffers live in its own memfd arena
// and every buffer of its own (a share, a large one) is a new memfd, whose
// pages the kernel zeroes; nothing a tenant frees is ever lent to another.
// The GPU side, where the daemon zeroes memory itself, is
// GpuPath.MemoryLentToAnotherTenantCarriesNoneOfItsBytes (tests/gpu).
#include <string>

#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"

namespace gpubroker::testing {
namespace {

constexpr const char* kTenants = R"(
tenants:
  - name: blue
    uids: [60051]
  - name: green0
    uids: [60052]
  - name: green1
    uids: [60053]
  - name: green2
    uids: [60054]
)";

TEST(Hygiene, MemoryAnotherTenantFreedReadsAsZeros) {
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root to run clients as other users";
  Daemon daemon({"--host-pool-bytes", "256MiB"}, kTenants);
  ASSERT_TRUE(daemon.ok());
  Helper blue(daemon.socket_dir(), 60051);
  constexpr int kBuffers = 12;
  constexpr int kBytes = 4 << 20;
  auto key = [](int i) { return "b" + std::to_string(i); };
  // Blue fills buffers of every kind: arena ranges, shares, and frees them all.
  // Each round a tenant that never had memory takes as much: what it gets can
  // only be new or another tenant's, never its own earlier bytes (which its
  // client's sub-allocator, like any caching allocator, reuses as they are).
  for (int round = 0; round < 3; ++round) {
    const std::string tenant = "green" + std::to_string(round);
    Helper green(daemon.socket_dir(), 60052 + round);
    for (int i = 0; i < kBuffers; ++i) {
      const std::string share = i % 3 == 0 ? " share=" + tenant : "";
      blue.Ok("alloc " + key(i) + " " + std::to_string(kBytes) + share);
      blue.Ok("fill " + key(i) + " " + std::to_string(70 + round));
    }
    for (int i = 0; i < kBuffers; ++i) blue.Ok("release " + key(i));
    // The new tenant takes as much, of the same kinds: every byte reads 0.
    for (int i = 0; i < kBuffers; ++i) {
      const std::string share = i % 3 == 0 ? " share=blue" : "";
      green.Ok("alloc " + key(i) + " " + std::to_string(kBytes) + share);
      EXPECT_EQ(green.Send("zeros " + key(i)), "ok") << "round " << round << ", buffer " << i;
      green.Ok("fill " + key(i) + " " + std::to_string(90 + round));
    }
    for (int i = 0; i < kBuffers; ++i) green.Ok("release " + key(i));
  }
}

}  // namespace
}  // namespace gpubroker::testing
