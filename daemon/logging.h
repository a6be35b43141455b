#pragma once

#include <string>

namespace gpubroker {

/// The daemon's log: stderr, timestamped and coloured on a terminal; under
/// journald (stderr is the journal's stream) each line is prefixed with its
/// syslog priority instead, so `journalctl -p warning` filters it. Protobuf's
/// own complaints are routed through it at debug level.
void SetUpLogging(const std::string& level);

/// trace, debug, info, warn, error or off (a reload may change it).
void SetLogLevel(const std::string& level);

}  // namespace gpubroker
