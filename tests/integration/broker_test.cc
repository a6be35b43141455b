// The data path across real processes: allocate, fill, seal, open, read, write back.
#include <thread>

#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

nlohmann::json StatusOf(Helper& h) { return nlohmann::json::parse(h.Ok("status")); }

TEST(Broker, BufferWrittenInAIsReadInBAndBsWriteBackIsSeenInA) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());
  for (const char* size : {"1", "4096", "1048576", "16777217"}) {
    const std::string name = std::string("data.") + size;
    a.Ok("alloc x " + std::string(size) + " name=" + name);
    a.Ok("fill x 42");
    a.Ok("seal x");
    b.Ok("open y " + name);
    EXPECT_EQ(b.Send("check y 42"), "ok") << size;
    b.Ok("poke y 0 201");
    EXPECT_EQ(a.Send("peek x 0"), "ok 201") << "write-back not seen for size " << size;
    b.Ok("release y");
    a.Ok("release x");
  }
  // A's buffers went back to its ranges; once it gives back what it holds
  // empty, nothing is in use.
  a.Ok("trim");
  EXPECT_EQ(StatusOf(a)["devices"][0]["used_bytes"], 0);
}

TEST(Broker, OpenWithWaitWakesWhenTheProducerSeals) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper producer(daemon.socket_dir());
  Helper consumer(daemon.socket_dir());
  consumer.Post("open y late wait=20000");
  EXPECT_EQ(consumer.Reply(300ms), "") << "Open returned before the buffer existed";
  producer.Ok("alloc x 65536 name=late");
  producer.Ok("fill x 9");
  EXPECT_EQ(consumer.Reply(300ms), "") << "Open returned before the seal";
  const auto sealed_at = std::chrono::steady_clock::now();
  producer.Ok("seal x");
  const std::string reply = consumer.Reply(10s);
  EXPECT_EQ(reply.rfind("ok", 0), 0u) << reply;
  EXPECT_LT(std::chrono::steady_clock::now() - sealed_at, 2s);
  EXPECT_EQ(consumer.Send("check y 9"), "ok");
}

TEST(Broker, OpenWithWaitTimesOutWithDeadlineExceeded) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper c(daemon.socket_dir());
  const std::string reply = c.Send("open y never.there wait=200");
  EXPECT_EQ(reply.rfind("err DEADLINE_EXCEEDED", 0), 0u) << reply;
  EXPECT_EQ(daemon.Metric("gpubroker_opens_total{result=\"timeout\"}"), 1);
}

TEST(Broker, TensorDescriptorTravelsWithTheBuffer) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());
  a.Ok("alloc x 128 name=t tensor=float32:4x8");
  a.Ok("seal x");
  const std::string opened = b.Ok("open y t");
  EXPECT_NE(opened.find("float32:4x8"), std::string::npos) << opened;
  EXPECT_EQ(a.Send("alloc z 100 tensor=float32:4x8").rfind("err INVALID_ARGUMENT", 0), 0u);
}

TEST(Broker, KeepOutlivesTheOwnerAndTtlEndsIt) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  {
    Helper owner(daemon.socket_dir());
    owner.Ok("alloc x 8192 name=left.behind keep");
    owner.Ok("fill x 3");
    owner.Ok("seal x");
    owner.Ok("alloc t 8192 name=short.lived keep ttl=2000");  // room for a slow machine
    owner.Ok("alloc g 8192 name=gone.with.owner");
  }  // the owner exits
  Helper reader(daemon.socket_dir());
  reader.Ok("open y left.behind");
  EXPECT_EQ(reader.Send("check y 3"), "ok");
  EXPECT_EQ(reader.Send("open z gone.with.owner unsealed").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_NE(reader.Ok("list").find("short.lived"), std::string::npos);
  EXPECT_TRUE(
      Eventually([&] { return reader.Ok("list").find("short.lived") == std::string::npos; }, 5s))
      << "TTL did not end the buffer";
  EXPECT_EQ(reader.Send("open z short.lived unsealed").rfind("err NOT_FOUND", 0), 0u);
  reader.Ok("release y");
  reader.Ok("free left.behind");
  EXPECT_EQ(StatusOf(reader)["devices"][0]["used_bytes"], 0);
}

TEST(Broker, QuotaExceededNamesTenantRequestAndWhatIsLeft) {
  Daemon daemon({"--default-quota", "1MiB"});
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  // Client-made: the range it leases takes no more than it needs and half of
  // what the quota leaves, so the next refusal names what is really left.
  a.Ok("alloc x 786432");
  const std::string reply = a.Send("alloc y 524288");
  EXPECT_EQ(reply.rfind("err RESOURCE_EXHAUSTED/quota ", 0), 0u) << reply;
  EXPECT_NE(reply.find("tenant 'uid-"), std::string::npos) << reply;
  EXPECT_NE(reply.find("524288"), std::string::npos) << reply;
  // What is left is the quota less the range that x's client leased.
  const uint64_t used = StatusOf(a)["tenants"][0]["used_bytes"];
  EXPECT_NE(reply.find(std::to_string(1048576 - used) + " left"), std::string::npos) << reply;
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"quota\"}"), 1);
  EXPECT_EQ(daemon.Metric("gpubroker_allocations_total{result=\"ok\"}"), 1);
  a.Ok("release x");
  a.Ok("alloc y 524288");
}

TEST(Broker, CrossTenantShareIsVisibleOnlyToTheNamedTenant) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon({}, kBlueAndGreenTenants);
  ASSERT_TRUE(daemon.ok());
  Helper owner(daemon.socket_dir());  // root: tenant uid-0
  Helper blue(daemon.socket_dir(), 60001);
  Helper green(daemon.socket_dir(), 60002);
  EXPECT_NE(blue.Ok("session").find("blue"), std::string::npos);
  owner.Ok("alloc p 4096 name=private");
  owner.Ok("seal p");
  const std::string private_id = owner.Ok("id p");
  owner.Ok("alloc s 20000 name=for.blue share=blue");
  owner.Ok("fill s 77");
  owner.Ok("seal s");

  EXPECT_EQ(blue.Send("open y for.blue").rfind("err NOT_FOUND", 0), 0u)
      << "a bare name is the caller's own tenant's";
  blue.Ok("open y uid-0/for.blue");
  EXPECT_EQ(blue.Send("check y 77"), "ok");
  blue.Ok("poke y 5 1");
  EXPECT_EQ(owner.Send("peek s 5"), "ok 1");
  EXPECT_EQ(blue.Send("free uid-0/for.blue").rfind("err PERMISSION_DENIED", 0), 0u);
  EXPECT_EQ(blue.Send("open q uid-0/private").rfind("err NOT_FOUND", 0), 0u);
  EXPECT_EQ(blue.Send("open q " + private_id + " id").rfind("err NOT_FOUND", 0), 0u)
      << "a forged id of another tenant must read as not found";
  EXPECT_EQ(green.Send("open q uid-0/for.blue").rfind("err NOT_FOUND", 0), 0u);
  const auto listed = nlohmann::json::parse(green.Ok("list"));
  EXPECT_TRUE(listed.empty()) << listed.dump();
}

TEST(Broker, CliAllocListStatusFree) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  const std::string cli = BinDir() + "/gpubroker";
  auto run = [&](std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), {cli, "--socket-dir", daemon.socket_dir()});
    Process p = Process::Spawn(args, daemon.socket_dir() + "/cli.err");
    p.CloseStdin();
    out->clear();
    while (auto line = p.ReadLine(10s)) *out += *line + "\n";
    return p.Wait(10s);
  };
  std::string out;
  EXPECT_EQ(run({"alloc", "64MiB", "--name", "cli.kept", "--keep", "--json"}, &out), 0);
  auto info = nlohmann::json::parse(out);
  EXPECT_EQ(info["size"], 64 << 20);
  EXPECT_EQ(info["name"], "cli.kept");
  EXPECT_EQ(run({"--json", "ls"}, &out), 0);
  auto listed = nlohmann::json::parse(out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["keep"], true);
  EXPECT_EQ(run({"status", "--json"}, &out), 0);
  auto status = nlohmann::json::parse(out);
  EXPECT_EQ(status["backend"], "host");
  EXPECT_EQ(status["devices"][0]["used_bytes"], 64 << 20);
  EXPECT_EQ(run({"status"}, &out), 0);
  EXPECT_NE(out.find("DEVICE"), std::string::npos) << out;
  EXPECT_EQ(run({"ls"}, &out), 0);
  EXPECT_NE(out.find("cli.kept"), std::string::npos) << out;
  EXPECT_EQ(run({"free", "cli.kept"}, &out), 0);
  EXPECT_EQ(run({"free", "cli.kept"}, &out), 1);
  EXPECT_EQ(run({"alloc", "lots"}, &out), 2);
  EXPECT_EQ(run({"frobnicate"}, &out), 2);
  EXPECT_EQ(run({"alloc", "0"}, &out), 1);
}

TEST(Broker, CAbiExampleRuns) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  ::setenv("GPUBROKER_SOCKET_DIR", daemon.socket_dir().c_str(), 1);
  Process p = Process::Spawn({BinDir() + "/gpubroker-c-example"}, daemon.socket_dir() + "/c.err");
  ::unsetenv("GPUBROKER_SOCKET_DIR");
  p.CloseStdin();
  const std::string line = p.ReadLine(10s).value_or("");
  EXPECT_EQ(p.Wait(10s), 0);
  EXPECT_NE(line.find("'c.example' on host: 4096 bytes, sealed=1"), std::string::npos) << line;
}

TEST(Broker, CppClientReportsTypedErrors) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto client = Client::connect(daemon.socket_dir());
  EXPECT_THROW(client.allocate(0), InvalidArgumentError);
  EXPECT_THROW(client.open("nothing.here"), NotFoundError);
  auto b = client.allocate(4096, {.name = "dup"});
  EXPECT_FALSE(b.is_published());
  EXPECT_THROW(client.open("dup"), NotFoundError)
      << "a client-made buffer is private until published";
  const BufferId id = b.publish();  // the name is taken now; the buffer is unsealed
  EXPECT_NE(id, 0u);
  EXPECT_TRUE(b.is_published());
  EXPECT_EQ(b.id(), id);
  EXPECT_EQ(b.publish(), id) << "published already: nothing is sent, the same id answers";
  EXPECT_THROW(client.open("dup"), FailedPreconditionError);
  // A client-made buffer takes its name when it is published...
  auto c = client.allocate(4096, {.name = "dup"});
  EXPECT_THROW(c.publish(), AlreadyExistsError);
  EXPECT_EQ(c.id(), 0u) << "id() is noexcept: a refused publish answers 0";
  EXPECT_THROW(c.seal(), AlreadyExistsError);
  // ...one of the daemon's (kept past the session) when it is allocated.
  EXPECT_THROW(client.allocate(4096, {.name = "dup", .keep = true}), AlreadyExistsError);
  try {
    client.allocate(uint64_t{1} << 40);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Client::connect(daemon.socket_dir() + "/nowhere"), UnavailableError);
}

}  // namespace
}  // namespace gpubroker::testing
