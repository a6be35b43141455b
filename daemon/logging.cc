#include "daemon/logging.h"

#include <cstdio>
#include <memory>
#include <mutex>

#include "daemon/systemd.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

// sd-daemon.h's SD_* prefixes: "<3>" error ... "<7>" debug.
int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical:
      return 2;
    case spdlog::level::err:
      return 3;
    case spdlog::level::warn:
      return 4;
    case spdlog::level::info:
      return 6;
    default:
      return 7;
  }
}

// One line per message on stderr, "<priority>message": journald reads the
// priority from the prefix and adds its own timestamp.
class JournalStreamSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t text;
    formatter_->format(msg, text);
    std::fprintf(stderr, "<%d>%.*s", SyslogPriority(msg.level), static_cast<int>(text.size()),
                 text.data());
    std::fflush(stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

void SetUpLogging(const std::string& level) {
  std::shared_ptr<spdlog::logger> logger;
  if (systemd::StderrIsJournal()) {
    logger = std::make_shared<spdlog::logger>("gpubrokerd", std::make_shared<JournalStreamSink>());
    logger->set_pattern("%v");
  } else {
    logger = spdlog::stderr_color_mt("gpubrokerd");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  spdlog::set_default_logger(logger);
  SetLogLevel(level);
  // Protobuf complains on stderr about every malformed frame a client sends;
  // route that through our (rate-limited, levelled) log instead.
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel severity, const char* file,
                                     int line, const std::string& message) {
    if (severity >= google::protobuf::LOGLEVEL_FATAL) {
      spdlog::critical("protobuf {}:{}: {}", file, line, message);
    } else {
      spdlog::debug("protobuf: {}", message);
    }
  });
}

void SetLogLevel(const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); }

}  // namespace gpubroker
