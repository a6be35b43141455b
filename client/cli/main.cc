// gpubroker: the command-line tool. status, ls, alloc, free, wait, top.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/cli/render.h"
#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"
#include "nlohmann/json.hpp"

namespace {

using gpubroker::StrCat;

// The exit statuses, as --help states them.
enum Exit : int {
  kOk = 0,
  kRefused = 1,   // the daemon answered, and said no
  kUsage = 2,     // the command line is wrong
  kNoDaemon = 3,  // nothing answers on the socket directory, or it went away
  kTimedOut = 4,  // a wait ran out
};

constexpr const char* kFooter = R"(
Exit status: 0 success; 1 the daemon refused (not found, over quota, ...);
2 bad usage; 3 no daemon answers (or it went away); 4 a wait timed out.
With --json, results go to stdout as JSON and errors to stderr as
{"error": {"code", "reason", "message", "exit_status"}}.)";

struct UsageError {
  std::string message;
};

struct Settings {
  std::string socket_dir;
  bool json = false;
};

int ExitFor(const gpubroker::Error& e) {
  switch (e.code()) {
    case gpubroker::ErrorCode::kUnavailable:
      return kNoDaemon;
    case gpubroker::ErrorCode::kDeadlineExceeded:
      return kTimedOut;
    default:
      return kRefused;
  }
}

void ReportError(bool json, const std::string& code, const std::string& reason,
                 const std::string& message, int exit_status) {
  if (json) {
    nlohmann::json e = {{"code", code}, {"message", message}, {"exit_status", exit_status}};
    if (!reason.empty()) e["reason"] = reason;
    std::cerr << nlohmann::json{{"error", e}}.dump() << "\n";
  } else {
    std::cerr << "gpubroker: " << message << "\n";
  }
}

std::chrono::milliseconds Duration(const std::string& text, const char* what) {
  auto ms = gpubroker::ParseDurationMs(text);
  if (!ms.ok()) throw UsageError{StrCat(what, ": ", gpubroker::View(ms.status().message()))};
  // Saturated, not wrapped: the daemon refuses a TTL over its limit by name.
  return std::chrono::milliseconds(std::min<uint64_t>(*ms, std::numeric_limits<int64_t>::max()));
}

gpubroker::Client Connect(const Settings& s) {
  return gpubroker::Client::connect(s.socket_dir, {"cli"});
}

int Status(const Settings& s) {
  auto status = Connect(s).status();
  if (s.json) {
    std::cout << gpubroker::ToJson(status) << "\n";
  } else {
    gpubroker::cli::PrintStatus(std::cout, status);
  }
  return kOk;
}

int List(const Settings& s) {
  auto buffers = Connect(s).list();
  if (s.json) {
    std::cout << gpubroker::ToJson(buffers) << "\n";
  } else {
    gpubroker::cli::PrintBuffers(std::cout, buffers);
  }
  return kOk;
}

struct AllocArgs {
  std::string size;
  bool seal = false;
  gpubroker::AllocateOptions options;
  std::string ttl;
};

int Alloc(const Settings& s, AllocArgs& a) {
  auto size = gpubroker::ParseBytes(a.size);
  if (!size.ok()) throw UsageError{std::string(gpubroker::View(size.status().message()))};
  if (!a.ttl.empty()) a.options.ttl = Duration(a.ttl, "--ttl");
  auto client = Connect(s);
  auto buffer = client.allocate(*size, a.options);
  if (a.seal) buffer.seal();
  if (s.json) {
    std::cout << gpubroker::ToJson(buffer.info()) << "\n";
  } else {
    gpubroker::cli::PrintBuffers(std::cout, {buffer.info()});
    if (!a.options.keep) {
      std::cerr << "note: without --keep the buffer is freed as this command exits\n";
    }
  }
  return kOk;
}

int Free(const Settings& s, const std::string& ref) {
  auto info = Connect(s).free(ref);
  if (s.json) {
    std::cout << gpubroker::ToJson(info) << "\n";
  } else {
    std::cout << "freed " << info.id << (info.name.empty() ? "" : StrCat(" (", info.name, ")"))
              << ", " << gpubroker::FormatBytes(info.size)
              << (info.leases > 0
                      ? StrCat("; memory returns when ", info.leases, " open leases are released")
                      : "")
              << "\n";
  }
  return kOk;
}

// An all-digit reference is an id, as for free.
bool IsId(const std::string& ref, gpubroker::BufferId* id) {
  return !ref.empty() && ref.find_first_not_of("0123456789") == std::string::npos &&
         gpubroker::ParseInt(ref, id);
}

int Wait(const Settings& s, const std::string& ref, const std::string& timeout_text) {
  gpubroker::OpenOptions options;
  options.wait = true;
  options.map = false;  // a lease and a description: no mapping, no CUDA context
  const auto timeout = Duration(timeout_text, "--timeout");
  options.timeout = timeout.count() == 0 ? std::chrono::hours(24 * 365) : timeout;
  auto client = Connect(s);
  gpubroker::BufferId id = 0;
  gpubroker::Buffer buffer = IsId(ref, &id) ? client.open(id, options) : client.open(ref, options);
  if (s.json) {
    std::cout << gpubroker::ToJson(buffer.info()) << "\n";
  } else {
    gpubroker::cli::PrintBuffers(std::cout, {buffer.info()});
  }
  return kOk;
}

struct TopArgs {
  std::string interval = "1s";
  int count = 0;
  size_t buffers = 10;
};

// Refreshes in place on a terminal; elsewhere (a pipe, a log) frames follow
// one another. A daemon that goes away is waited for, not given up on.
int Top(const Settings& s, const TopArgs& a) {
  const auto interval = Duration(a.interval, "--interval");
  if (interval.count() <= 0) throw UsageError{"--interval must be positive"};
  const bool tty = !s.json && ::isatty(STDOUT_FILENO);
  std::optional<gpubroker::Client> client;
  int status = kOk;
  for (int frame = 0; a.count == 0 || frame < a.count; ++frame) {
    if (frame > 0) std::this_thread::sleep_for(interval);
    std::string text;
    try {
      if (!client) client = Connect(s);
      const auto st = client->status();
      const auto buffers = client->list();
      text = s.json ? nlohmann::json{{"unix_ms", gpubroker::cli::NowMs()},
                                     {"status", nlohmann::json::parse(gpubroker::ToJson(st))},
                                     {"buffers", nlohmann::json::parse(gpubroker::ToJson(buffers))}}
                              .dump() +
                          "\n"
                    : gpubroker::cli::TopFrame(st, buffers, a.buffers);
      status = kOk;
    } catch (const gpubroker::UnavailableError& e) {
      client.reset();
      status = kNoDaemon;
      text = s.json ? nlohmann::json{{"unix_ms", gpubroker::cli::NowMs()},
                                     {"error", {{"code", "UNAVAILABLE"}, {"message", e.message()}}}}
                              .dump() +
                          "\n"
                    : StrCat("waiting for gpubrokerd: ", e.message(), "\n");
    }
    if (tty) {
      std::cout << "\x1b[H\x1b[2J";  // home, clear
    } else if (frame > 0 && !s.json) {
      std::cout << "\n";
    }
    std::cout << text << std::flush;
  }
  return status;
}

int Run(int argc, char** argv) {
  Settings settings;
  CLI::App app{"gpubroker: look at and use the node's GPU memory broker (gpubrokerd).",
               "gpubroker"};
  app.set_version_flag("--version", StrCat("gpubroker ", gpubroker::ClientVersion()));
  app.require_subcommand(1);
  app.fallthrough();  // the global options may come after the command too
  app.footer(kFooter);
  app.add_option("--socket-dir", settings.socket_dir,
                 "where gpubrokerd listens (default: $GPUBROKER_SOCKET_DIR, else /run/gpubroker "
                 "as root, $XDG_RUNTIME_DIR/gpubroker otherwise)");
  app.add_flag("--json", settings.json, "print JSON instead of tables (errors too, on stderr)");

  auto* status = app.add_subcommand(
      "status", "the daemon: version, backend, devices and their pools, tenants, sessions");
  auto* ls = app.add_subcommand("ls", "the buffers this tenant may see");

  AllocArgs alloc_args;
  auto* alloc = app.add_subcommand(
      "alloc", "allocate a buffer; without --keep it is freed again as this command exits");
  alloc->add_option("SIZE", alloc_args.size, "bytes, or with a unit: 4096, 64MiB, 1G")->required();
  alloc->add_option("--name", alloc_args.options.name, "a name, unique within the tenant");
  alloc->add_flag("--keep", alloc_args.options.keep, "outlive this command (until freed or TTL)");
  alloc->add_flag("--seal", alloc_args.seal,
                  "seal it at once: readers may open it (it holds zeros)");
  alloc->add_option("--device", alloc_args.options.device, "a device UUID or ordinal");
  alloc->add_option("--ttl", alloc_args.ttl, "free it after this long: 90s, 10m, 1h");
  alloc->add_option("--share-with", alloc_args.options.share_with,
                    "a tenant that may open it too (repeatable)");

  std::string free_ref;
  auto* free = app.add_subcommand("free", "free a buffer of this tenant");
  free->add_option("NAME|ID", free_ref, "the buffer's name, or its id")->required();

  std::string wait_ref;
  std::string wait_timeout = "30s";
  auto* wait = app.add_subcommand(
      "wait", "wait until a buffer exists and is sealed, then print it (exit status 4 on timeout)");
  wait->add_option("NAME|ID", wait_ref, "the buffer's name (tenant/name for a share), or its id")
      ->required();
  wait->add_option("--timeout", wait_timeout, "give up after this long; 0: never")
      ->capture_default_str();

  TopArgs top_args;
  auto* top = app.add_subcommand(
      "top", "a live view of devices, pools, tenants and the largest buffers (Ctrl-C stops it)");
  top->add_option("--interval", top_args.interval, "time between refreshes")->capture_default_str();
  top->add_option("--count", top_args.count, "stop after this many refreshes (0: never)")
      ->capture_default_str();
  top->add_option("--buffers", top_args.buffers, "how many of the largest buffers to show")
      ->capture_default_str();

  // The command word: the first argument that is neither an option nor the
  // value of --socket-dir.
  std::string command;
  for (int i = 1; i < argc && command.empty(); ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--socket-dir") {
      ++i;
    } else if (!arg.starts_with("-")) {
      command = arg;
    }
  }
  const auto known =
      app.get_subcommands([&](const CLI::App* sub) { return sub->check_name(command); });
  if (!command.empty() && known.empty()) {
    throw UsageError{StrCat("unknown command '", command, "'")};
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    std::cout << "gpubroker " << gpubroker::ClientVersion() << "\n";
    return kOk;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    throw UsageError{
        StrCat(e.what(), " (see gpubroker ", command, command.empty() ? "" : " ", "--help)")};
  }
  if (*status) return Status(settings);
  if (*ls) return List(settings);
  if (*alloc) return Alloc(settings, alloc_args);
  if (*free) return Free(settings, free_ref);
  if (*wait) return Wait(settings, wait_ref, wait_timeout);
  if (*top) return Top(settings, top_args);
  throw UsageError{"no command given"};
}

}  // namespace

int main(int argc, char** argv) {
  // Errors are reported the way the command line asked for, even when it
  // did not parse.
  bool json = false;
  for (int i = 1; i < argc; ++i) json = json || std::string_view(argv[i]) == "--json";
  try {
    return Run(argc, argv);
  } catch (const UsageError& e) {
    ReportError(json, "USAGE", "", e.message, kUsage);
    return kUsage;
  } catch (const gpubroker::Error& e) {
    const int exit_status = ExitFor(e);
    ReportError(json, gpubroker::ErrorCodeName(e.code()), gpubroker::RefusalReasonName(e.reason()),
                json ? e.message() : e.what(), exit_status);
    return exit_status;
  } catch (const std::exception& e) {
    ReportError(json, "INTERNAL", "", e.what(), kRefused);
    return kRefused;
  }
}
