#pragma once

// What gpubrokerd tells its service manager (sd_notify): READY once both
// sockets serve, RELOADING/READY around a reload, STOPPING at shutdown, a
// STATUS line for `systemctl status`, and WATCHDOG pings when the unit asks
// for them. Each call is a no-op when no service manager listens
// (NOTIFY_SOCKET unset), so the daemon runs the same by hand.

#include <chrono>
#include <string_view>

namespace gpubroker::systemd {

void NotifyReady(std::string_view status);
void NotifyReloading();
void NotifyStopping();
void NotifyStatus(std::string_view status);
void NotifyWatchdog();

/// The interval within which the service manager wants a WATCHDOG=1
/// (WatchdogSec=, passed as WATCHDOG_USEC); zero when it wants none.
std::chrono::microseconds WatchdogInterval();

/// True when stderr is a stream to the journal (JOURNAL_STREAM names it):
/// then log lines carry syslog priorities ("<4>...") instead of timestamps.
bool StderrIsJournal();

}  // namespace gpubroker::systemd
