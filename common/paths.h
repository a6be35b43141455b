#pragma once

#include <string>

namespace gpubroker {

inline constexpr const char* kSessionSocketName = "session.sock";
inline constexpr const char* kGrpcSocketName = "gpubroker.sock";
inline constexpr const char* kLockFileName = "gpubrokerd.lock";

/// The daemon's default socket directory: /run/gpubroker for root, else
/// $XDG_RUNTIME_DIR/gpubroker (or /tmp/gpubroker-<uid> without XDG_RUNTIME_DIR).
std::string DefaultSocketDir();

/// The system daemon's socket directory (the systemd unit, the DaemonSet).
inline constexpr const char* kSystemSocketDir = "/run/gpubroker";

/// What a client connects to: $GPUBROKER_SOCKET_DIR; else DefaultSocketDir()
/// when a daemon serves there; else the system daemon's /run/gpubroker when
/// one serves there (a user's client reaches the node's service by default);
/// else DefaultSocketDir().
std::string ClientSocketDir();

}  // namespace gpubroker
