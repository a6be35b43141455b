// gpubrokerd: wiring only. Parses options, sets up logging and signals, runs
// the daemon until SIGTERM or SIGINT; SIGHUP re-reads the configuration.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/units.h"
#include "common/version.h"
#include "daemon/config/options.h"
#include "daemon/daemon.h"
#include "daemon/logging.h"
#include "daemon/util/descriptors.h"
#include "spdlog/spdlog.h"

namespace {

const char* Getenv(const char* name) { return std::getenv(name); }

// --check-config: what the daemon would refuse at start or reload, or what it
// would run with.
int CheckConfig(const gpubroker::DaemonOptions& options) {
  auto tenants = gpubroker::Daemon::Check(options);
  if (!tenants.ok()) {
    std::fprintf(stderr, "gpubrokerd: %s: %s\n", options.config_file.c_str(),
                 std::string(tenants.status().message()).c_str());
    return 1;
  }
  const std::string quota = options.default_quota_bytes == 0
                                ? "unlimited"
                                : gpubroker::FormatBytes(options.default_quota_bytes);
  std::printf("%s: ok: %zu tenants, default quota %s, backend %s, sockets in %s\n",
              options.config_file.c_str(), tenants->configured().size(), quota.c_str(),
              options.backend.c_str(), options.socket_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpubroker;
  auto parsed = ParseCommandLine(argc, argv, Getenv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "gpubrokerd: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->show_help) {
    std::fputs(HelpText("gpubrokerd").c_str(), stdout);
    return 0;
  }
  if (parsed->show_version) {
    std::printf("gpubrokerd %s\n", kVersion);
    return 0;
  }
  if (parsed->show_markdown) {
    std::fputs(OptionsMarkdown().c_str(), stdout);
    return 0;
  }
  if (parsed->check_config) return CheckConfig(parsed->options);
  // Before any thread or descriptor of the daemon's own exists.
  const int inherited = CloseInheritedDescriptors();

#ifdef NDEBUG
  // Abseil's lock-order graph costs microseconds per lock on the hot path;
  // debug and sanitizer builds keep it (the tests run there too).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  SetUpLogging(parsed->options.log_level);
  if (inherited != 0) {
    spdlog::info("closed {} descriptors inherited from the process that started gpubrokerd",
                 inherited < 0 ? std::string("the") : std::to_string(inherited));
  }

  // Signals are taken synchronously by this thread; every other thread is
  // started after this and inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Daemon daemon(parsed->options);
  if (auto s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "gpubrokerd: %s\n", std::string(s.message()).c_str());
    daemon.Shutdown();
    return 1;
  }
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGHUP) {
      spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    // The same sources as at start (file, environment, flags), read anew.
    spdlog::info("received SIGHUP: reloading the configuration");
    auto fresh = ParseCommandLine(argc, argv, Getenv);
    if (!fresh.ok()) {
      spdlog::error("reload refused, the running configuration stays: {}",
                    std::string(fresh.status().message()));
      continue;
    }
    (void)daemon.Reload(fresh->options);
  }
  daemon.Shutdown();
  return 0;
}
