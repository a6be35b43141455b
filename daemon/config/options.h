#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/tenants.h"

namespace gpubroker {

/// Everything gpubrokerd can be told. Each field is declared once, in the
/// option table (options.cc), with its flag, environment variable, config-file
/// key, default and help; --help and docs/configuration.md come from there.
struct DaemonOptions {
  std::string socket_dir;  // resolved at parse time when left empty
  std::string backend = "auto";
  uint64_t host_pool_bytes = uint64_t{1} << 30;
  std::string metrics_address = "127.0.0.1:9464";
  std::string health_address;  // grpc.health.v1 alone over TCP (kubelet probes); empty: off
  std::string log_level = "info";
  std::string config_file;
  std::string socket_group;
  std::string admin_group;  // its members (and root) see every tenant in Status
  uint64_t hello_timeout_ms = 5000;
  uint32_t busy_poll_us = 100;         // session.sock's thread stays awake this long after a frame
  uint32_t busy_poll_max_us = 1000;    // ... or up to this long, fitted to the gaps between frames
  uint32_t max_wait_awake_us = 10000;  // the longest an Open(wait, awake) keeps that thread awake
  uint64_t default_quota_bytes = 0;    // 0: unlimited
  std::string devices;                 // CUDA devices by UUID or ordinal; empty: all
  std::string pool_bytes = "90%";      // per CUDA device: bytes or a share
  uint64_t vmm_threshold = uint64_t{2} << 30;
  uint64_t pool_retain = uint64_t{2} << 30;  // per CUDA pool: freed bytes kept mapped
  std::string small_buffers = "arena";       // "arena" or "pool"
  uint32_t max_sessions_per_uid = 256;       // 0: no cap
  uint32_t max_grpc_connections_per_uid = 256;
  uint32_t max_buffers_per_tenant = 65536;
  uint32_t max_descriptors_per_tenant = 1024;
  uint32_t max_waiters_per_session = 256;  // 0: no cap
  uint32_t max_waiters_per_tenant = 4096;
  uint64_t wait_timeout_ms = 60000;  // of a wait that names no deadline
  bool grpc_reflection = false;      // serve grpc.reflection on gpubroker.sock
  std::vector<TenantSpec> tenants;   // config file only
  // Option flag -> the text that set it, from whichever source won (file,
  // environment, flag); unset options are absent. A reload compares these.
  std::map<std::string, std::string> given;
};

struct OptionSpec {
  std::string_view flag;          // "socket-dir" for --socket-dir
  std::string_view env;           // "GPUBROKER_SOCKET_DIR"
  std::string_view key;           // "socket_dir" in the YAML file; empty: not a file key
  std::string_view value_name;    // "DIR"; empty: a switch (--flag alone means true)
  std::string_view default_text;  // for people
  std::string_view help;
  absl::Status (*apply)(DaemonOptions& options, std::string_view value);
};

/// The option table.
const std::vector<OptionSpec>& OptionTable();

/// Reads an environment variable; injectable for tests.
using EnvLookup = std::function<const char*(const char*)>;

struct ParsedCommandLine {
  DaemonOptions options;
  bool show_help = false;
  bool show_version = false;
  bool show_markdown = false;  // --help-markdown: the option table as Markdown
  bool check_config = false;   // --check-config FILE: validate and exit
};

/// Defaults, then the config file (--config or GPUBROKER_CONFIG; --check-config
/// FILE names it too), then the environment, then flags: the later wins. INVALID_ARGUMENT with a
/// message that names the option and the source of the bad value.
absl::StatusOr<ParsedCommandLine> ParseCommandLine(int argc, const char* const* argv,
                                                   const EnvLookup& env);

/// Applies a YAML document's keys to `options` (tenants included).
absl::Status ApplyConfigYaml(const std::string& yaml_text, const std::string& origin,
                             DaemonOptions& options);

std::string HelpText(std::string_view program);
std::string OptionsMarkdown();

}  // namespace gpubroker
