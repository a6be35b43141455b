// gpubroker: the command-line tool. status, ls, alloc, free; --json on each.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"

namespace {

using gpubroker::StrAppend;
using gpubroker::StrCat;

constexpr const char* kUsage = R"(Usage: gpubroker [--socket-dir DIR] [--json] COMMAND [ARGS]

Commands:
  status                      the daemon: version, backend, devices, tenants, sessions
  ls                          buffers this tenant may see
  alloc SIZE [--name NAME] [--keep] [--device UUID|INDEX] [--ttl DURATION]
                              allocate a buffer (SIZE like 4096, 64MiB, 1G); without
                              --keep it is freed again when this command exits
  free NAME|ID                free a buffer of this tenant

Options:
  --socket-dir DIR   where gpubrokerd listens (default: $GPUBROKER_SOCKET_DIR, else
                     /run/gpubroker as root, $XDG_RUNTIME_DIR/gpubroker otherwise)
  --json             print JSON instead of tables
  --help, --version
Exit status: 0 on success, 1 when the daemon refuses or cannot be reached, 2 on bad usage.
)";

struct UsageError {
  std::string message;
};

// Left-aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string Duration(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return StrCat(s, "s");
  if (s < 7200) return StrCat(s / 60, "m");
  if (s < 172800) return StrCat(s / 3600, "h");
  return StrCat(s / 86400, "d");
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Tensor(const std::optional<gpubroker::TensorDesc>& t) {
  if (!t) return "-";
  std::string out = StrCat(gpubroker::DTypeName(t->dtype), "[");
  for (size_t i = 0; i < t->shape.size(); ++i) StrAppend(&out, i ? "," : "", t->shape[i]);
  return out + "]";
}

void PrintStatus(const gpubroker::BrokerStatus& s) {
  std::cout << "gpubrokerd " << s.version << ", backend " << s.backend << ", up "
            << Duration(NowMs() - s.started_unix_ms) << ", " << s.sessions << " sessions, "
            << s.buffers << " buffers\n"
            << "sockets " << s.socket_dir << ", metrics "
            << (s.metrics_address.empty() ? "off" : s.metrics_address) << "\n"
            << "this session: " << s.self_session_id << ", tenant " << s.self_tenant << "\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"DEVICE", "NAME", "CAPACITY", "RESERVED", "USED", "FREE", "BUFFERS"}};
  for (const auto& d : s.devices) {
    rows.push_back({StrCat(d.ordinal, " ", d.uuid), d.name,
                    gpubroker::FormatBytes(d.capacity_bytes),
                    gpubroker::FormatBytes(d.reserved_bytes), gpubroker::FormatBytes(d.used_bytes),
                    gpubroker::FormatBytes(d.free_bytes), StrCat(d.buffers)});
  }
  PrintTable(rows);
  std::cout << "\n";
  rows = {{"TENANT", "QUOTA", "USED", "BUFFERS", "SESSIONS"}};
  for (const auto& t : s.tenants) {
    rows.push_back({t.name, t.quota_bytes ? gpubroker::FormatBytes(t.quota_bytes) : "unlimited",
                    gpubroker::FormatBytes(t.used_bytes), StrCat(t.buffers), StrCat(t.sessions)});
  }
  PrintTable(rows);
  if (!s.all_tenants) {
    std::cout << "(this tenant only: root and the daemon's admin group see every tenant)\n";
  }
}

void PrintBuffers(const std::vector<gpubroker::BufferInfo>& buffers) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "SIZE", "DEVICE", "BACKING",
                                                 "TENANT", "STATE", "LEASES", "KEEP", "TTL",
                                                 "TENSOR"}};
  const int64_t now = NowMs();
  for (const auto& b : buffers) {
    rows.push_back(
        {StrCat(b.id), b.name.empty() ? "-" : b.name, gpubroker::FormatBytes(b.size), b.device_uuid,
         b.backing.empty() ? "-" : b.backing, b.tenant,
         std::string(gpubroker::BufferStateName(b.state)), StrCat(b.leases), b.keep ? "yes" : "no",
         b.expires_unix_ms ? Duration(std::max<int64_t>(0, b.expires_unix_ms - now)) : "-",
         Tensor(b.tensor)});
  }
  PrintTable(rows);
}

int Run(int argc, char** argv) {
  std::string socket_dir;
  bool json = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--version") {
      std::cout << "gpubroker " << gpubroker::ClientVersion() << "\n";
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a == "--socket-dir" || a.starts_with("--socket-dir=")) {
      if (a.size() > 12) {
        socket_dir = a.substr(13);
      } else {
        if (++i >= argc) throw UsageError{"--socket-dir needs a value"};
        socket_dir = argv[i];
      }
    } else {
      args.push_back(std::move(a));
    }
  }
  if (args.empty()) throw UsageError{"no command given"};
  const std::string command = args[0];
  args.erase(args.begin());

  if (command == "status" || command == "ls") {
    if (!args.empty()) throw UsageError{StrCat(command, " takes no arguments")};
    auto client = gpubroker::Client::connect(socket_dir, {"cli"});
    if (command == "status") {
      auto s = client.status();
      if (json) {
        std::cout << gpubroker::ToJson(s) << "\n";
      } else {
        PrintStatus(s);
      }
    } else {
      auto buffers = client.list();
      if (json) {
        std::cout << gpubroker::ToJson(buffers) << "\n";
      } else {
        PrintBuffers(buffers);
      }
    }
    return 0;
  }
  if (command == "alloc") {
    std::string size_text;
    gpubroker::AllocateOptions options;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= args.size()) throw UsageError{StrCat(a, " needs a value")};
        return args[++i];
      };
      if (a == "--name") {
        options.name = value();
      } else if (a == "--keep") {
        options.keep = true;
      } else if (a == "--device") {
        options.device = value();
      } else if (a == "--ttl") {
        auto ms = gpubroker::ParseDurationMs(value());
        if (!ms.ok()) throw UsageError{std::string(gpubroker::View(ms.status().message()))};
        // Saturated, not wrapped: the daemon refuses a TTL over its limit by name.
        options.ttl =
            std::chrono::milliseconds(std::min<uint64_t>(*ms, std::numeric_limits<int64_t>::max()));
      } else if (a.starts_with("--")) {
        throw UsageError{StrCat("unknown option ", a, " for alloc")};
      } else if (size_text.empty()) {
        size_text = a;
      } else {
        throw UsageError{StrCat("unexpected argument '", a, "'")};
      }
    }
    if (size_text.empty()) throw UsageError{"alloc needs a SIZE"};
    auto size = gpubroker::ParseBytes(size_text);
    if (!size.ok()) throw UsageError{std::string(gpubroker::View(size.status().message()))};
    auto client = gpubroker::Client::connect(socket_dir, {"cli"});
    auto buffer = client.allocate(*size, options);
    if (json) {
      std::cout << gpubroker::ToJson(buffer.info()) << "\n";
    } else {
      PrintBuffers({buffer.info()});
      if (!options.keep) {
        std::cerr << "note: without --keep the buffer is freed as this command exits\n";
      }
    }
    return 0;
  }
  if (command == "free") {
    if (args.size() != 1) throw UsageError{"free needs exactly one NAME or ID"};
    auto client = gpubroker::Client::connect(socket_dir, {"cli"});
    auto info = client.free(args[0]);
    if (json) {
      std::cout << gpubroker::ToJson(info) << "\n";
    } else {
      std::cout << "freed " << info.id << (info.name.empty() ? "" : StrCat(" (", info.name, ")"))
                << ", " << gpubroker::FormatBytes(info.size)
                << (info.leases > 0
                        ? StrCat("; memory returns when ", info.leases, " open leases are released")
                        : "")
                << "\n";
    }
    return 0;
  }
  throw UsageError{StrCat("unknown command '", command, "'")};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "gpubroker: " << e.message << "\n(see gpubroker --help)\n";
    return 2;
  } catch (const gpubroker::Error& e) {
    std::cerr << "gpubroker: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gpubroker: " << e.what() << "\n";
    return 1;
  }
}
