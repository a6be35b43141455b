// gpubrokerd: wiring only. Parses options, sets up logging and signals, runs
// the daemon until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "common/version.h"
#include "daemon/config/options.h"
#include "daemon/daemon.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  using namespace gpubroker;
  auto parsed = ParseCommandLine(argc, argv, [](const char* name) { return std::getenv(name); });
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

#ifdef NDEBUG
  // Abseil's lock-order graph costs microseconds per lock on the hot path;
  // debug and sanitizer builds keep it (the tests run there too).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  auto logger = spdlog::stderr_color_mt("gpubrokerd");
  // Protobuf complains on stderr about every malformed frame a client sends;
  // route that through our (rate-limited, levelled) log instead.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        if (level >= google::protobuf::LOGLEVEL_FATAL) {
          spdlog::critical("protobuf {}:{}: {}", file, line, message);
        } else {
          spdlog::debug("protobuf: {}", message);
        }
      });
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(parsed->options.log_level));

  // Signals are taken synchronously by this thread; every other thread is
  // started after this and inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Daemon daemon(parsed->options);
  if (auto s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "gpubrokerd: %s\n", std::string(s.message()).c_str());
    daemon.Shutdown();
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  daemon.Shutdown();
  return 0;
}
