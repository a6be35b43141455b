// Buffers travel as descriptors over session.sock, so a client needs neither
// the daemon's PID namespace nor its IPC namespace, only the socket directory
// (a Kubernetes worker without hostPID or hostIPC). A client in PID, mount,
// network, IPC and UTS namespaces of its own, which sees the socket directory
// only where a pod would mount it, shares a buffer both ways with one outside.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

TEST(Namespaces, AClientInItsOwnPidMountNetAndIpcNamespacesSharesBuffersBothWays) {
  if (!IsRoot()) GTEST_SKIP() << "creating mount and PID namespaces needs root";
  struct stat st {};
  ASSERT_EQ(::stat("/usr/bin/unshare", &st), 0) << "util-linux's unshare is missing";

  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  Helper outside(daemon.socket_dir());
  ASSERT_TRUE(outside.ok());
  outside.Ok("alloc out 1048576 name=pod.out");
  outside.Ok("fill out 11");
  outside.Ok("seal out");

  Helper inside(InPodNamespaces(daemon.socket_dir()));
  ASSERT_TRUE(inside.ok()) << daemon.log();
  // Its own PID namespace: it is process 1 there.
  EXPECT_EQ(inside.Ok("ping"), "1");

  // Outside -> inside: it reads the outside process's memory in place, and
  // what it writes lands there.
  inside.Ok("open in pod.out");
  inside.Ok("check in 11");
  inside.Ok("poke in 4096 42");
  EXPECT_EQ(outside.Ok("peek out 4096"), "42");

  // Inside -> outside.
  inside.Ok("alloc mine 65536 name=pod.in");
  inside.Ok("fill mine 22");
  inside.Ok("seal mine");
  outside.Ok("open theirs pod.in");
  outside.Ok("check theirs 22");

  // When the pod dies, the daemon takes back its leases as for any client.
  auto leases_of = [&](const std::string& name) {
    for (const auto& b : nlohmann::json::parse(outside.Ok("list"))) {
      if (b["name"] == name) return b["leases"].get<int>();
    }
    return -1;
  };
  ASSERT_EQ(leases_of("pod.out"), 2);
  inside.Kill9();
  ASSERT_TRUE(Eventually([&] { return leases_of("pod.out") == 1; })) << outside.Ok("list");
  outside.Ok("check theirs 22");  // our lease keeps the dead pod's buffer readable
  outside.Ok("release theirs");
}

}  // namespace
}  // namespace gpubroker::testing
