// The service side on a GPU node: systemd hears READY only once the CUDA
// backend is up, and a worker in pod-like namespaces (no hostPID, no hostIPC)
// imports CUDA buffers from a process outside them. Each test skips, saying
// why, where no GPU is usable (or, for the namespaces, where unshare is not
// allowed).
#include <sys/stat.h>

#include <chrono>
#include <string>

#include "common/cuda/cuda_util.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

TEST(GpuService, ReadyComesOnceTheCudaBackendServes) {
  SKIP_WITHOUT_GPU();
  NotifySocket notify;
  Daemon daemon({"--backend", "cuda"}, "", {"NOTIFY_SOCKET=" + notify.path()});
  ASSERT_TRUE(daemon.ok());
  EXPECT_NE(daemon.start_line().find("backend cuda"), std::string::npos) << daemon.start_line();
  const std::string ready = notify.WaitFor("READY=1", 60s);
  ASSERT_NE(ready, "") << notify.Seen();
  EXPECT_NE(ready.find(" cuda devices"), std::string::npos) << ready;
  Helper client(daemon.socket_dir());
  client.Ok("alloc a 1048576");
  EXPECT_EQ(daemon.Stop(), 0);
  EXPECT_NE(notify.WaitFor("STOPPING=1", 5s), "") << notify.Seen();
}

// unshare may be refused (a container without CAP_SYS_ADMIN, a seccomp profile).
bool CanUnshare() {
  Process p = Process::Spawn({"/usr/bin/unshare", "--pid", "--fork", "--mount", "--net", "--ipc",
                              "--uts", "--", "/bin/true"},
                             "/dev/null");
  return p.Wait(10s) == 0;
}

TEST(GpuService, AWorkerInPodNamespacesImportsCudaBuffers) {
  SKIP_WITHOUT_GPU();
  if (!IsRoot()) GTEST_SKIP() << "creating mount and PID namespaces needs root";
  if (!CanUnshare()) GTEST_SKIP() << "unshare of PID and mount namespaces is refused here";
  // Small buffers on the default path, and one over the VMM threshold.
  Daemon daemon({"--backend", "cuda", "--vmm-threshold", "64MiB"});
  ASSERT_TRUE(daemon.ok());
  Helper outside(daemon.socket_dir());
  ASSERT_TRUE(outside.ok());
  Helper inside(InPodNamespaces(daemon.socket_dir()));
  ASSERT_TRUE(inside.ok()) << daemon.log();
  EXPECT_EQ(inside.Ok("ping"), "1");

  for (const std::string size : {"1048576", "67108864"}) {
    const std::string name = "pod.gpu." + size;
    outside.Ok("alloc out." + size + " " + size + " name=" + name);
    outside.Ok("fill out." + size + " 31");
    outside.Ok("seal out." + size);
    inside.Ok("open in." + size + " " + name);
    inside.Ok("check in." + size + " 31 stream");
    inside.Ok("poke in." + size + " 4096 77");
    EXPECT_EQ(outside.Ok("peek out." + size + " 4096"), "77") << size;
    inside.Ok("release in." + size);
  }
}

}  // namespace
}  // namespace gpubroker::testing
