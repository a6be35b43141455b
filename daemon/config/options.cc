#include "daemon/config/options.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/paths.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "yaml-cpp/yaml.h"

namespace gpubroker {
namespace {

absl::Status SetString(std::string& field, std::string_view value) {
  field = std::string(value);
  return absl::OkStatus();
}

// Empty, or HOST:PORT with a port of 0 to 65535.
absl::Status CheckHostPort(std::string_view v) {
  if (v.empty()) return absl::OkStatus();
  auto colon = v.rfind(':');
  int port = -1;
  if (colon == std::string_view::npos || colon == 0 || !ParseInt(v.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(StrCat("'", v, "' is not HOST:PORT (e.g. 127.0.0.1:9464)"));
  }
  return absl::OkStatus();
}

absl::Status SetSwitch(bool& field, std::string_view value) {
  const std::string v = ToLower(Trim(value));
  if (v == "true" || v == "1" || v == "yes" || v == "on") {
    field = true;
  } else if (v == "false" || v == "0" || v == "no" || v == "off") {
    field = false;
  } else {
    return absl::InvalidArgumentError(StrCat("'", value, "' is not true or false"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ParseQuota(std::string_view value) {
  const std::string v = ToLower(Trim(value));
  if (v == "unlimited" || v == "none") return 0;
  return ParseBytes(v);
}

// A count limit: a whole number, 0 meaning none.
absl::Status SetCount(uint32_t& field, std::string_view value) {
  uint64_t n = 0;
  if (!ParseInt(Trim(value), &n) || n > 0xffffffffu) {
    return absl::InvalidArgumentError(StrCat("'", value, "' is not a count (0 for no limit)"));
  }
  field = static_cast<uint32_t>(n);
  return absl::OkStatus();
}

const std::vector<OptionSpec> kOptions = {
    {"socket-dir", "GPUBROKER_SOCKET_DIR", "socket_dir", "DIR",
     "/run/gpubroker as root, else $XDG_RUNTIME_DIR/gpubroker",
     "Directory of session.sock and gpubroker.sock (created if missing).",
     [](DaemonOptions& o, std::string_view v) { return SetString(o.socket_dir, v); }},
    {"backend", "GPUBROKER_BACKEND", "backend", "auto|cuda|host", "auto",
     "Memory backend: cuda where a GPU qualifies, host (memfd) otherwise, or forced.",
     [](DaemonOptions& o, std::string_view v) {
       if (v != "auto" && v != "cuda" && v != "host") {
         return absl::InvalidArgumentError(
             StrCat("unknown backend '", v, "' (use auto, cuda or host)"));
       }
       return SetString(o.backend, v);
     }},
    {"host-pool-bytes", "GPUBROKER_HOST_POOL_BYTES", "host_pool_bytes", "SIZE", "1GiB",
     "Capacity of the host backend: all host buffers together (units: KiB, MiB, GiB, ...).",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto bytes, ParseBytes(v));
       if (bytes < 4096) return absl::InvalidArgumentError("must be at least 4KiB");
       o.host_pool_bytes = bytes;
       return absl::OkStatus();
     }},
    {"metrics-address", "GPUBROKER_METRICS_ADDRESS", "metrics_address", "HOST:PORT",
     "127.0.0.1:9464",
     "Where Prometheus scrapes /metrics; port 0 picks a free port; empty turns metrics off.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       if (auto s = CheckHostPort(v); !s.ok()) return s;
       return SetString(o.metrics_address, v);
     }},
    {"health-address", "GPUBROKER_HEALTH_ADDRESS", "health_address", "HOST:PORT", "off",
     "Serves grpc.health.v1 alone (no broker calls) over TCP here, for probes such as "
     "Kubernetes' grpc probes; port 0 picks a free port.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       if (auto s = CheckHostPort(v); !s.ok()) return s;
       return SetString(o.health_address, v);
     }},
    {"log-level", "GPUBROKER_LOG_LEVEL", "log_level", "LEVEL", "info",
     "trace, debug, info, warn, error or off.",
     [](DaemonOptions& o, std::string_view v) {
       static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
       for (const char* l : kLevels) {
         if (v == l) return SetString(o.log_level, v);
       }
       return absl::InvalidArgumentError(
           StrCat("unknown log level '", v, "' (use trace, debug, info, warn, error or off)"));
     }},
    {"config", "GPUBROKER_CONFIG", "", "FILE", "none",
     "YAML file with any of these keys, plus tenants (see docs/configuration.md).",
     [](DaemonOptions& o, std::string_view v) { return SetString(o.config_file, v); }},
    {"socket-group", "GPUBROKER_SOCKET_GROUP", "socket_group", "GROUP", "the daemon's group",
     "Group that owns the sockets (mode 0660): the users who may connect.",
     [](DaemonOptions& o, std::string_view v) { return SetString(o.socket_group, v); }},
    {"admin-group", "GPUBROKER_ADMIN_GROUP", "admin_group", "GROUP", "none (root only)",
     "Group (name or gid) whose members see every tenant in Status, as root does; others see "
     "their own tenant and the node's totals.",
     [](DaemonOptions& o, std::string_view v) { return SetString(o.admin_group, v); }},
    {"hello-timeout", "GPUBROKER_HELLO_TIMEOUT", "hello_timeout", "DURATION", "5s",
     "A client that connects to session.sock and says nothing is dropped after this.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto ms, ParseDurationMs(v));
       if (ms == 0) return absl::InvalidArgumentError("must be positive");
       o.hello_timeout_ms = ms;
       return absl::OkStatus();
     }},
    {"devices", "GPUBROKER_DEVICES", "devices", "LIST", "all visible GPUs",
     "GPUs to serve, by UUID (or a unique prefix) or ordinal, comma-separated.",
     [](DaemonOptions& o, std::string_view v) { return SetString(o.devices, v); }},
    {"pool-bytes", "GPUBROKER_POOL_BYTES", "pool_bytes", "SIZE|PERCENT", "90%",
     "What the broker may lend per GPU: bytes (64GiB) or a share of the device (90%).",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       // Checked here; resolved against each device by the CUDA backend.
       GPUBROKER_RETURN_IF_ERROR(ParseSizeOrShare(v).status());
       return SetString(o.pool_bytes, Trim(v));
     }},
    {"vmm-threshold", "GPUBROKER_VMM_THRESHOLD", "vmm_threshold", "SIZE", "2GiB",
     "Buffers this large or larger get memory of their own (GPU: a VMM allocation; host: a "
     "memfd), kept when freed for the tenant's next buffer of the size, and clients may keep "
     "it mapped; shares across tenants get memory of their own too.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto bytes, ParseBytes(v));
       o.vmm_threshold = bytes;
       return absl::OkStatus();
     }},
    {"small-buffers", "GPUBROKER_SMALL_BUFFERS", "small_buffers", "arena|pool", "arena",
     "How GPU buffers under --vmm-threshold are made: arena (ranges of the tenant's VMM slabs, "
     "each mapped once per client) or pool (cudaMallocFromPoolAsync, mapped per buffer).",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       const std::string_view t = Trim(v);
       if (t != "arena" && t != "pool") {
         return absl::InvalidArgumentError(
             StrCat("--small-buffers is arena or pool, not '", t, "'"));
       }
       return SetString(o.small_buffers, t);
     }},
    {"pool-retain", "GPUBROKER_POOL_RETAIN", "pool_retain", "SIZE", "2GiB",
     "Freed memory each tenant's GPU pool keeps mapped for its next allocations (and their "
     "importers); beyond it, freed memory goes back to the device.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto bytes, ParseBytes(v));
       o.pool_retain = bytes;
       return absl::OkStatus();
     }},
    {"busy-poll-us", "GPUBROKER_BUSY_POLL_US", "busy_poll_us", "MICROSECONDS", "100",
     "After serving a frame, session.sock's thread polls for the next one this long before it "
     "sleeps: a hand-over's second call comes within it and finds the thread awake. Costs the "
     "daemon's CPU for that long after each burst of calls; 0: sleep at once.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.busy_poll_us, v); }},
    {"busy-poll-max-us", "GPUBROKER_BUSY_POLL_MAX_US", "busy_poll_max_us", "MICROSECONDS", "1000",
     "The longest that busy poll grows to: while frames keep coming soon after it ran out (a "
     "pipeline's steady rhythm), the window grows to cover their gaps, up to this; after "
     "longer gaps it shrinks back toward --busy-poll-us (by halves, but not under what the "
     "recent gaps within this needed). Costs up to one of the daemon's CPUs "
     "while such traffic lasts (gpubroker_session_busy_poll_seconds_total); at or under "
     "--busy-poll-us: the window stays --busy-poll-us.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.busy_poll_max_us, v); }},
    {"max-wait-awake-us", "GPUBROKER_MAX_WAIT_AWAKE_US", "max_wait_awake_us", "MICROSECONDS",
     "10000",
     "The longest that an Open which waits for a seal and asks to wait awake keeps "
     "session.sock's thread polling while it is parked, so that the seal finds the thread "
     "running. Costs the daemon one CPU while such waits are parked; 0: never (the thread "
     "sleeps as usual).",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.max_wait_awake_us, v); }},
    {"max-sessions-per-uid", "GPUBROKER_MAX_SESSIONS_PER_UID", "max_sessions_per_uid", "N", "256",
     "Connections to session.sock one uid may hold (each client process holds one); 0: no cap.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.max_sessions_per_uid, v); }},
    {"max-grpc-connections-per-uid", "GPUBROKER_MAX_GRPC_CONNECTIONS_PER_UID",
     "max_grpc_connections_per_uid", "N", "256",
     "Connections to gpubroker.sock one uid may hold; 0: no cap.",
     [](DaemonOptions& o, std::string_view v) {
       return SetCount(o.max_grpc_connections_per_uid, v);
     }},
    {"max-buffers-per-tenant", "GPUBROKER_MAX_BUFFERS_PER_TENANT", "max_buffers_per_tenant", "N",
     "65536", "Buffers one tenant may hold at once; 0: no cap.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.max_buffers_per_tenant, v); }},
    {"max-descriptors-per-tenant", "GPUBROKER_MAX_DESCRIPTORS_PER_TENANT",
     "max_descriptors_per_tenant", "N", "1024",
     "Buffers with a descriptor of their own (shares across tenants, VMM buffers) one tenant may "
     "hold at once: the daemon keeps a descriptor open for each; 0: no cap.",
     [](DaemonOptions& o, std::string_view v) {
       return SetCount(o.max_descriptors_per_tenant, v);
     }},
    {"max-waiters-per-session", "GPUBROKER_MAX_WAITERS_PER_SESSION", "max_waiters_per_session", "N",
     "256", "Opens with wait one session may have parked at once; 0: no cap.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.max_waiters_per_session, v); }},
    {"max-waiters-per-tenant", "GPUBROKER_MAX_WAITERS_PER_TENANT", "max_waiters_per_tenant", "N",
     "4096", "Opens with wait all of one tenant's sessions may have parked at once; 0: no cap.",
     [](DaemonOptions& o, std::string_view v) { return SetCount(o.max_waiters_per_tenant, v); }},
    {"wait-timeout", "GPUBROKER_WAIT_TIMEOUT", "wait_timeout", "DURATION", "60s",
     "How long an Open with wait waits when neither its timeout_ms nor a gRPC deadline says: "
     "every wait ends.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto ms, ParseDurationMs(v));
       if (ms == 0) return absl::InvalidArgumentError("must be positive");
       o.wait_timeout_ms = ms;
       return absl::OkStatus();
     }},
    {"grpc-reflection", "GPUBROKER_GRPC_REFLECTION", "grpc_reflection", "", "off",
     "Serve gRPC server reflection (grpc.reflection.v1alpha) on gpubroker.sock, so that "
     "tools such as grpcurl can call the broker without its .proto files.",
     [](DaemonOptions& o, std::string_view v) { return SetSwitch(o.grpc_reflection, v); }},
    {"default-quota", "GPUBROKER_DEFAULT_QUOTA", "default_quota", "SIZE", "unlimited",
     "Byte quota of a tenant that the config file does not list.",
     [](DaemonOptions& o, std::string_view v) -> absl::Status {
       GPUBROKER_ASSIGN_OR_RETURN(auto q, ParseQuota(v));
       o.default_quota_bytes = q;
       return absl::OkStatus();
     }},
};

const OptionSpec* FindByFlag(std::string_view flag) {
  for (const auto& o : kOptions) {
    if (o.flag == flag) return &o;
  }
  return nullptr;
}

absl::Status Annotate(const absl::Status& s, std::string_view where) {
  return absl::InvalidArgumentError(StrCat(where, ": ", s.message()));
}

template <typename T>
absl::StatusOr<std::vector<T>> IdList(const YAML::Node& node, std::string_view what) {
  std::vector<T> out;
  if (!node) return out;
  if (!node.IsSequence()) return absl::InvalidArgumentError(StrCat(what, " must be a list"));
  for (const auto& item : node) {
    uint64_t v = 0;
    if (!item.IsScalar() || !ParseInt(item.Scalar(), &v) || v > 0xffffffffu) {
      return absl::InvalidArgumentError(StrCat(what, " holds '", item.Scalar(), "', not a number"));
    }
    out.push_back(static_cast<T>(v));
  }
  return out;
}

absl::Status ApplyTenants(const YAML::Node& node, DaemonOptions& options) {
  if (!node.IsSequence()) return absl::InvalidArgumentError("tenants must be a list");
  for (const auto& t : node) {
    if (!t.IsMap()) return absl::InvalidArgumentError("each tenant must be a map");
    TenantSpec spec;
    for (const auto& kv : t) {
      const std::string key = kv.first.Scalar();
      if (key != "name" && key != "uids" && key != "gids" && key != "quota") {
        return absl::InvalidArgumentError(
            StrCat("unknown tenant key '", key, "' (use name, uids, gids, quota)"));
      }
    }
    if (!t["name"] || !t["name"].IsScalar()) {
      return absl::InvalidArgumentError("a tenant has no name");
    }
    spec.name = t["name"].Scalar();
    const std::string where = StrCat("tenant '", spec.name, "'");
    auto uids = IdList<uid_t>(t["uids"], "uids");
    if (!uids.ok()) return Annotate(uids.status(), where);
    auto gids = IdList<gid_t>(t["gids"], "gids");
    if (!gids.ok()) return Annotate(gids.status(), where);
    spec.uids = std::move(*uids);
    spec.gids = std::move(*gids);
    if (t["quota"]) {
      auto q = ParseQuota(t["quota"].Scalar());
      if (!q.ok()) return Annotate(q.status(), StrCat(where, " quota"));
      spec.quota_bytes = *q;
    }
    options.tenants.push_back(std::move(spec));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<OptionSpec>& OptionTable() { return kOptions; }

absl::Status ApplyConfigYaml(const std::string& yaml_text, const std::string& origin,
                             DaemonOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(origin, ": not valid YAML: ", e.what()));
  }
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) return absl::InvalidArgumentError(StrCat(origin, ": must be a map"));
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar();
      if (key == "tenants") {
        if (auto s = ApplyTenants(kv.second, options); !s.ok()) return Annotate(s, origin);
        continue;
      }
      const OptionSpec* spec = nullptr;
      for (const auto& o : kOptions) {
        if (!o.key.empty() && o.key == key) spec = &o;
      }
      if (spec == nullptr) {
        return absl::InvalidArgumentError(StrCat(origin, ": unknown key '", key, "'"));
      }
      if (!kv.second.IsScalar() && !kv.second.IsNull()) {
        return absl::InvalidArgumentError(StrCat(origin, ": ", key, " must be a value"));
      }
      const std::string value = kv.second.IsNull() ? "" : kv.second.Scalar();
      if (auto s = spec->apply(options, value); !s.ok()) {
        return Annotate(s, StrCat(origin, ": ", key));
      }
      options.given[std::string(spec->flag)] = value;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(origin, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedCommandLine> ParseCommandLine(int argc, const char* const* argv,
                                                   const EnvLookup& env) {
  ParsedCommandLine out;
  std::vector<std::pair<const OptionSpec*, std::string>> flags;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out.show_help = true;
      continue;
    }
    if (arg == "--version") {
      out.show_version = true;
      continue;
    }
    if (arg == "--help-markdown") {
      out.show_markdown = true;
      continue;
    }
    if (arg == "--check-config" || arg.starts_with("--check-config=")) {
      std::string file;
      if (arg.starts_with("--check-config=")) {
        file = std::string(arg.substr(std::string_view("--check-config=").size()));
      } else if (i + 1 < argc) {
        file = argv[++i];
      }
      if (file.empty()) return absl::InvalidArgumentError("--check-config needs a FILE");
      out.check_config = true;
      flags.emplace_back(FindByFlag("config"), std::move(file));
      continue;
    }
    if (!arg.starts_with("--")) {
      return absl::InvalidArgumentError(StrCat("unexpected argument '", arg, "'"));
    }
    arg.remove_prefix(2);
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const OptionSpec* spec = FindByFlag(arg);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(StrCat("unknown option --", arg, " (see --help)"));
    }
    if (!has_value && spec->value_name.empty()) {
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(StrCat("--", arg, " needs a value"));
      }
      value = argv[++i];
    }
    flags.emplace_back(spec, std::move(value));
  }

  // The config file is named by flag or environment; read it first so that
  // both can override what it says.
  std::string config;
  if (const char* e = env("GPUBROKER_CONFIG"); e != nullptr) config = e;
  for (const auto& [spec, value] : flags) {
    if (spec->flag == "config") config = value;
  }
  if (!config.empty()) {
    std::ifstream in(config);
    // The reason matters under systemd, where ProtectHome= makes a file in
    // /home unreadable although it exists.
    if (!in) {
      return absl::InvalidArgumentError(
          StrCat("cannot read config file ", config, ": ", std::strerror(errno)));
    }
    std::stringstream text;
    text << in.rdbuf();
    GPUBROKER_RETURN_IF_ERROR(ApplyConfigYaml(text.str(), config, out.options));
    out.options.config_file = config;
  }
  for (const auto& spec : kOptions) {
    const std::string name(spec.env);
    if (const char* e = env(name.c_str()); e != nullptr) {
      if (auto s = spec.apply(out.options, e); !s.ok()) return Annotate(s, name);
      out.options.given[std::string(spec.flag)] = e;
    }
  }
  for (const auto& [spec, value] : flags) {
    if (auto s = spec->apply(out.options, value); !s.ok()) {
      return Annotate(s, StrCat("--", spec->flag));
    }
    out.options.given[std::string(spec->flag)] = value;
  }
  if (out.options.socket_dir.empty()) out.options.socket_dir = DefaultSocketDir();
  return out;
}

std::string HelpText(std::string_view program) {
  std::string out = StrCat(
      "Usage: ", program, " [OPTION]...\n",
      "The gpubroker daemon: lends GPU (or host) memory to processes on this node and\n"
      "lets them share it with no copy.\n\nOptions (flag, environment variable, default):\n");
  for (const auto& o : kOptions) {
    StrAppend(&out, "  --", o.flag, o.value_name.empty() ? "" : " ", o.value_name, "\n      ",
              o.help, "\n      env ", o.env, o.key.empty() ? "" : StrCat(", config key ", o.key),
              "; default: ", o.default_text, "\n");
  }
  StrAppend(&out,
            "  --check-config FILE\n"
            "      check FILE (with the environment and the other flags) as the daemon\n"
            "      would at start or reload, print what it found, and exit: 0 when good\n"
            "  --help          this text\n"
            "  --version       print the version and exit\n"
            "Flags override the environment, which overrides the config file.\n");
  return out;
}

std::string OptionsMarkdown() {
  auto cell = [](std::string_view s) {
    std::string out;
    for (char ch : s) {
      if (ch == '|') out += '\\';
      out += ch;
    }
    return out;
  };
  std::string out =
      "| flag | environment | config key | default | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const auto& o : kOptions) {
    StrAppend(&out, "| `--", o.flag, o.value_name.empty() ? "" : " ", cell(o.value_name), "` | `",
              o.env, "` | ", o.key.empty() ? "—" : StrCat("`", o.key, "`"), " | ",
              cell(o.default_text), " | ", cell(o.help), " |\n");
  }
  return out;
}

}  // namespace gpubroker
