// Item 7: information and identity. A tenant's Status shows itself and the
// node's totals (root and the admin group see every tenant), a share does
// not tell who else it is shared with, tenant names that would absorb a
// user ("uid-<n>") are refused in the config, and a session token is worth
// nothing to another user: it is bound to the uid of its session.
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/adversarial/adversary.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

#define SKIP_UNLESS_USERS() \
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root and setpriv to run clients as other users"

constexpr const char* kTenants = R"(
admin_group: 60100
tenants:
  - name: blue
    uids: [60011]
  - name: green
    uids: [60012]
  - name: red
    uids: [60014]
)";

json Reply(const std::string& reply) {
  EXPECT_EQ(reply.rfind("ok ", 0), 0u) << reply;
  return reply.size() > 3 ? json::parse(reply.substr(3)) : json();
}

std::vector<std::string> TenantNames(const json& status) {
  std::vector<std::string> out;
  for (const auto& t : status["tenants"]) out.push_back(t["name"]);
  return out;
}

TEST(Identity, StatusShowsATenantItselfAndTheNodeTotals) {
  SKIP_UNLESS_USERS();
  Daemon daemon({}, kTenants);
  ASSERT_TRUE(daemon.ok());
  Adversary blue(daemon.socket_dir(), 60011);
  Adversary green(daemon.socket_dir(), 60012);
  Adversary admin(daemon.socket_dir(), 60013, {60100});
  ASSERT_EQ(Field(blue.Send("alloc 1 1048576 name=blue.secret"), "ok"), 1);

  const std::string seen_by_green = green.Send("status");
  const json g = Reply(seen_by_green);
  EXPECT_EQ(TenantNames(g), std::vector<std::string>{"green"});
  EXPECT_EQ(seen_by_green.find("blue"), std::string::npos) << seen_by_green;
  EXPECT_FALSE(g["all_tenants"]);
  EXPECT_FALSE(g["self"]["admin"]);
  EXPECT_GE(g["devices"][0]["used_bytes"], 1048576) << "the node's totals stay visible";
  EXPECT_GE(g["sessions"], 2);

  const json a = Reply(admin.Send("status"));
  EXPECT_TRUE(a["all_tenants"]);
  EXPECT_TRUE(a["self"]["admin"]);
  const auto names = TenantNames(a);
  EXPECT_NE(std::find(names.begin(), names.end(), "blue"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "green"), names.end());

  Helper root(daemon.socket_dir());
  const json r = json::parse(root.Ok("status"));
  EXPECT_TRUE(r["all_tenants"]);
  EXPECT_GE(r["tenants"].size(), 3u);
}

TEST(Identity, ASharedBufferDoesNotTellWhoElseItIsSharedWith) {
  SKIP_UNLESS_USERS();
  Daemon daemon({}, kTenants);
  ASSERT_TRUE(daemon.ok());
  Adversary blue(daemon.socket_dir(), 60011);
  Adversary green(daemon.socket_dir(), 60012);
  ASSERT_EQ(Field(blue.Send("alloc 1 4096 name=both share=green,red"), "ok"), 1);
  const json listed = Reply(green.Send("list"));
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["shared_with"], json::array({"green"}));
  EXPECT_EQ(listed[0]["owner_session"], 0) << "the owner's session is the owner's business";
  const json own = Reply(blue.Send("list"));
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0]["shared_with"], json::array({"green", "red"})) << "its owner sees them all";
  EXPECT_NE(own[0]["owner_session"], 0);
}

TEST(Identity, TenantNamesThatWouldAbsorbAUserAreRefused) {
  TempDir dir;
  const std::string config = dir.path() + "/gpubroker.yaml";
  std::ofstream(config) << "tenants:\n  - name: uid-60020\n    uids: [60021]\n";
  Process p = Process::Spawn({BinDir() + "/gpubrokerd", "--socket-dir", dir.path(), "--backend",
                              "host", "--metrics-address", "", "--config", config},
                             dir.path() + "/stderr.txt");
  p.CloseStdin();
  EXPECT_NE(p.Wait(20s), 0);
  std::ifstream in(dir.path() + "/stderr.txt");
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(err.find("uid-60020"), std::string::npos) << err;
  EXPECT_NE(err.find("reserved"), std::string::npos) << err;
}

TEST(Identity, ASessionTokenIsBoundToItsUser) {
  SKIP_UNLESS_USERS();
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Adversary owner(daemon.socket_dir(), 60031);
  Adversary thief(daemon.socket_dir(), 60032);
  const std::string token = owner.Send("token").substr(3);
  ASSERT_EQ(token.size(), 32u) << token;
  EXPECT_EQ(owner.Send("grpc-token " + token).rfind("ok", 0), 0u) << "its own user may use it";
  const std::string stolen = thief.Send("grpc-token " + token);
  EXPECT_EQ(stolen.rfind("err UNAUTHENTICATED", 0), 0u) << stolen;
  // Root too is another user to this session.
  auto stub = BrokerStub(daemon.socket_dir());
  v1::ListResponse resp;
  EXPECT_EQ(stub->List(CallContext(token).get(), v1::ListRequest(), &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace gpubroker::testing
