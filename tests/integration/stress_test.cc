// Eight client processes, a thousand allocate/share/free cycles each: the pool
// ends exactly as it began.
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(Stress, EightProcessesThousandCyclesLeaveThePoolAsItBegan) {
  constexpr int kProcesses = 8;
  constexpr int kCycles = 1000;
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  std::vector<std::unique_ptr<Helper>> ring;
  for (int i = 0; i < kProcesses; ++i)
    ring.push_back(std::make_unique<Helper>(daemon.socket_dir()));
  const auto before = nlohmann::json::parse(ring[0]->Ok("status"))["devices"][0];

  for (int i = 0; i < kProcesses; ++i) {
    ring[i]->Post("churn " + std::to_string(i) + " " + std::to_string(kProcesses) + " " +
                  std::to_string(kCycles));
  }
  for (int i = 0; i < kProcesses; ++i) {
    EXPECT_EQ(ring[i]->Reply(600s), "ok cycles=" + std::to_string(kCycles)) << "process " << i;
  }
  // Every buffer went back to its maker's ranges; the ranges go back now.
  for (auto& h : ring) h->Ok("trim");
  const auto status = nlohmann::json::parse(ring[0]->Ok("status"));
  const auto after = status["devices"][0];
  EXPECT_EQ(after["used_bytes"], before["used_bytes"]);
  EXPECT_EQ(after["used_bytes"], 0);
  EXPECT_EQ(after["reserved_bytes"], 0) << "pages of freed buffers must go back to the kernel";
  EXPECT_EQ(status["buffers"], 0);
  // Client-made, all of them, as the clients reported with their calls.
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"ok\"}"), kProcesses * kCycles);
  EXPECT_EQ(daemon.Metric("gpubroker_client_allocations_total{path=\"client\"}"),
            kProcesses * kCycles);
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"ok\"}"), kProcesses * kCycles);
  EXPECT_EQ(daemon.Metric("gpubroker_buffers{device=\"host\",tenant=\"uid-" +
                          std::to_string(::geteuid()) + "\"}"),
            0);
}

}  // namespace
}  // namespace gpubroker::testing
