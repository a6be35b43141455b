#include "daemon/systemd.h"

#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpubroker::systemd {
namespace {

void Notify(const std::string& state) { (void)::sd_notify(/*unset_environment=*/0, state.c_str()); }

std::string StatusLine(std::string_view status) {
  return status.empty() ? std::string() : "\nSTATUS=" + std::string(status);
}

}  // namespace

void NotifyReady(std::string_view status) { Notify("READY=1" + StatusLine(status)); }

void NotifyReloading() {
  // MONOTONIC_USEC lets a Type=notify-reload manager match the READY=1 that
  // ends this reload to it.
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t usec = static_cast<uint64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
  char line[64];
  std::snprintf(line, sizeof(line), "RELOADING=1\nMONOTONIC_USEC=%" PRIu64, usec);
  Notify(line);
}

void NotifyStopping() { Notify("STOPPING=1\nSTATUS=shutting down"); }

void NotifyStatus(std::string_view status) { Notify("STATUS=" + std::string(status)); }

void NotifyWatchdog() { Notify("WATCHDOG=1"); }

std::chrono::microseconds WatchdogInterval() {
  uint64_t usec = 0;
  if (::sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0) return {};
  return std::chrono::microseconds(usec);
}

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

}  // namespace gpubroker::systemd
