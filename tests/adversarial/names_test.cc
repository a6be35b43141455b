// Item 3: names are the tenant's. A hostile tenant that claims the name
// another tenant's producer will use, shares it with that tenant and seals it
// neither blocks the producer nor feeds the consumer its bytes, and no
// answer tells it which names the other tenant uses. Another tenant's share
// is opened by "tenant/name" (or by id), and only when it is shared.
#include "gtest/gtest.h"
#include "tests/adversarial/adversary.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTenants = R"(
tenants:
  - name: blue
    uids: [60041, 60043]
  - name: green
    uids: [60042]
)";

TEST(Names, AnotherTenantCannotSquatSpoofOrProbeNames) {
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root to run clients as other users";
  Daemon daemon({}, kTenants);
  ASSERT_TRUE(daemon.ok());
  Helper squatter(daemon.socket_dir(), 60042);  // green
  Helper producer(daemon.socket_dir(), 60041);  // blue
  Helper consumer(daemon.socket_dir(), 60043);  // blue too

  // Green takes the name blue's pipeline will use, shares it with blue, seals it.
  squatter.Ok("alloc fake 4096 name=camera0.frame share=blue");
  squatter.Ok("fill fake 66");
  squatter.Ok("seal fake");

  // Blue's producer still gets the name, in its own tenant...
  producer.Ok("alloc real 4096 name=camera0.frame");
  producer.Ok("fill real 11");
  producer.Ok("seal real");
  // ... and blue's consumer opens blue's buffer, not green's.
  consumer.Ok("open v camera0.frame");
  EXPECT_EQ(consumer.Send("check v 11"), "ok") << "the consumer must read its own tenant's bytes";
  // Green's share is there for blue, by its qualified name only.
  consumer.Ok("open g green/camera0.frame");
  EXPECT_EQ(consumer.Send("check g 66"), "ok");

  // Probing: green's answers are the same whether blue uses a name or not.
  producer.Ok("alloc p 4096 name=blue.private");
  producer.Ok("seal p");
  squatter.Ok("alloc q 4096 name=blue.private publish");  // no ALREADY_EXISTS: nothing to learn
  const std::string used = squatter.Send("open x blue/blue.private");
  const std::string unused = squatter.Send("open x blue/never.used");
  EXPECT_EQ(used.rfind("err NOT_FOUND", 0), 0u) << used;
  EXPECT_EQ(unused.rfind("err NOT_FOUND", 0), 0u) << unused;
  EXPECT_EQ(used.substr(0, used.find('\'')), unused.substr(0, unused.find('\'')))
      << used << " / " << unused;
  EXPECT_EQ(squatter.Send("free blue/blue.private").rfind("err NOT_FOUND", 0), 0u);
  // The bare name is green's own buffer, not blue's.
  squatter.Ok("open own blue.private unsealed");
  EXPECT_NE(squatter.Ok("info own").find("size=4096"), std::string::npos);
}

}  // namespace
}  // namespace gpubroker::testing
