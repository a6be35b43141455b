// The registry's parts: names, the tenants' books, the node's status, and the
// status macros and checks they are written with.
#include "common/check.h"
#include "common/dtype.h"
#include "common/names.h"
#include "common/refusal.h"
#include "common/status_macros.h"
#include "daemon/backend/host_backend.h"
#include "daemon/core/name_table.h"
#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "daemon/core/tenant_books.h"
#include "gpubroker/v1/broker.pb.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

TEST(NameTable, HoldsBindsAndGivesBackNames) {
  NameTable names;
  ASSERT_TRUE(names.Hold("t", "a").ok());
  EXPECT_EQ(names.Hold("t", "a").code(), absl::StatusCode::kAlreadyExists) << "held is taken";
  EXPECT_FALSE(names.Find("t", "a")) << "a held name names nothing yet";
  names.Bind("t", "a", 7);
  EXPECT_EQ(names.Find("t", "a"), 7u);
  names.Remove("t", "a", 8);
  EXPECT_EQ(names.Find("t", "a"), 7u) << "only the buffer it names removes it";
  names.Remove("t", "a", 7);
  EXPECT_FALSE(names.Find("t", "a"));
  ASSERT_TRUE(names.Hold("t", "b").ok());
  names.Drop("t", "b");
  EXPECT_TRUE(names.Hold("t", "b").ok()) << "a failed allocation gives its name back";
}

TEST(NameTable, EachTenantHasItsOwnNames) {
  NameTable names;
  ASSERT_TRUE(names.Hold("blue", "frames").ok());
  names.Bind("blue", "frames", 1);
  ASSERT_TRUE(names.Hold("green", "frames").ok()) << "another tenant's name takes nothing";
  names.Bind("green", "frames", 2);
  EXPECT_EQ(names.Find("blue", "frames"), 1u);
  EXPECT_EQ(names.Find("green", "frames"), 2u);
  names.Remove("green", "frames", 2);
  EXPECT_EQ(names.Find("blue", "frames"), 1u);
}

TEST(NameRef, BareNamesAndTenantQualifiedNames) {
  auto bare = ParseNameRef("frames");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->tenant, "");
  EXPECT_EQ(bare->name, "frames");
  auto qualified = ParseNameRef("blue/frames");
  ASSERT_TRUE(qualified.ok());
  EXPECT_EQ(qualified->tenant, "blue");
  EXPECT_EQ(qualified->name, "frames");
  EXPECT_FALSE(ParseNameRef("/frames").ok());
  EXPECT_FALSE(ParseNameRef("blue/").ok());
  EXPECT_FALSE(ParseNameRef("a/b/c").ok()) << "a name has no '/'";
  EXPECT_FALSE(ParseNameRef("9lives/frames").ok());
}

TEST(TenantBooks, EnforcesTheQuotaAndTalliesTenants) {
  auto dir = TenantDirectory::Create({{"blue", {100}, {}, 1000}}, 0);
  ASSERT_TRUE(dir.ok());
  TenantBooks books(std::make_shared<const TenantDirectory>(std::move(*dir)), {});
  ASSERT_TRUE(books.ReserveBuffer("blue", 600, false).ok());
  const absl::Status over = books.ReserveBuffer("blue", 500, false);
  EXPECT_EQ(RefusalOf(over), Refusal::kQuota);
  EXPECT_NE(std::string(over.message()).find("600 of 1000 in use, 400 left"), std::string::npos)
      << over;
  books.Settle("blue", 600, 400);
  EXPECT_TRUE(books.ReserveBuffer("blue", 500, false).ok()) << "settled to what the buffer took";
  books.SessionOpened("uid-5");
  const auto tally = books.Tally();
  ASSERT_EQ(tally.size(), 2u);
  EXPECT_EQ(tally[0].name, "blue");
  EXPECT_EQ(tally[0].used_bytes, 900u);
  EXPECT_EQ(tally[0].buffers, 2u);
  EXPECT_EQ(tally[1].name, "uid-5");
  EXPECT_EQ(tally[1].sessions, 1u);
}

TEST(NodeStatus, OneCollectorCountsBuffersPerDeviceTenantAndNode) {
  HostBackend backend(uint64_t{16} << 20);
  auto dir = TenantDirectory::Create({{"green", {}, {}, 0}}, 0);
  Registry registry(backend, std::move(*dir));
  auto a = registry.OpenSession({1, 10, 10}, "a");
  auto b = registry.OpenSession({2, 11, 11}, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(registry.Allocate(a->id, {.size = 4096}).ok());
  ASSERT_TRUE(registry.Allocate(a->id, {.size = 8192}).ok());
  ASSERT_TRUE(registry.Allocate(b->id, {.size = 4096}).ok());
  const NodeStatus s = NodeStatusCollector(registry, backend).Collect();
  EXPECT_EQ(s.backend, "host");
  EXPECT_EQ(s.sessions, 2u);
  EXPECT_EQ(s.buffers, 3u);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].buffers, 3u);
  EXPECT_EQ(s.devices[0].usage.used_bytes, 16384u);
  ASSERT_EQ(s.cells.size(), 2u);
  EXPECT_EQ(s.cells[0].device_uuid, "host");
  EXPECT_EQ(s.cells[0].tenant, "uid-10");
  EXPECT_EQ(s.cells[0].buffers, 2u);
  EXPECT_EQ(s.cells[0].bytes, 12288u);
  ASSERT_EQ(s.tenants.size(), 3u) << "two with sessions, one configured";
  EXPECT_EQ(s.tenants[0].name, "green");
}

absl::StatusOr<int> Half(int n) {
  if (n % 2 != 0) return absl::InvalidArgumentError("odd");
  return n / 2;
}

absl::StatusOr<int> Quarter(int n) {
  GPUBROKER_ASSIGN_OR_RETURN(const int half, Half(n));
  GPUBROKER_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status EvenQuarter(int n) {
  GPUBROKER_RETURN_IF_ERROR(Quarter(n).status());
  return absl::OkStatus();
}

TEST(StatusMacros, ReturnEarlyWithTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EvenQuarter(12).ok());
  EXPECT_FALSE(EvenQuarter(10).ok());
}

TEST(Check, AbortsWithFileAndLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(GPUBROKER_CHECK(1 + 1 == 3, "arithmetic"),
               "core_parts_test.cc:[0-9]+: check failed: 1 \\+ 1 == 3: arithmetic");
}

TEST(DTypes, TheOneTableMatchesTheWireEnum) {
  const auto* descriptor = v1::DType_descriptor();
  ASSERT_EQ(static_cast<int>(std::size(kDTypes)), descriptor->value_count());
  for (const DTypeTraits& t : kDTypes) {
    const auto* value = descriptor->FindValueByNumber(t.value);
    ASSERT_NE(value, nullptr) << t.name;
    std::string expected = "DTYPE_";
    for (char c : t.name) expected += static_cast<char>(std::toupper(c));
    EXPECT_EQ(value->name(), expected);
    EXPECT_EQ(FindDType(t.name), &t);
  }
  EXPECT_EQ(FindDType(99), nullptr);
  EXPECT_EQ(FindDType("float128"), nullptr);
}

}  // namespace
}  // namespace gpubroker
