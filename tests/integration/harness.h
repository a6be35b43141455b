#pragma once

// Real processes for the integration tests: a gpubrokerd on a temporary
// socket directory, and helper client processes that take commands on stdin.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/http_get.h"
#include "common/unique_fd.h"
#include "common/wire/frame.h"
#include "gpubroker/v1/session.pb.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {

/// Directory of this test binary; the daemon, CLI and helper are built beside it.
std::string BinDir();

/// A temporary directory, world-traversable (so that helpers running as other
/// users can reach the sockets), removed with its contents at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A child process with pipes on stdin and stdout.
class Process {
 public:
  Process() = default;
  ~Process();
  Process(Process&&) noexcept;
  Process& operator=(Process&&) noexcept;

  /// fork+exec; stdout is read through ReadLine; stderr goes to `stderr_path` ("" = inherit).
  /// `env`: "NAME=value" entries added to (or replacing in) this process's environment.
  static Process Spawn(const std::vector<std::string>& argv, const std::string& stderr_path = "",
                       const std::vector<std::string>& env = {});

  pid_t pid() const { return pid_; }
  bool WriteLine(const std::string& line);
  /// A line from stdout, or nullopt on EOF or timeout.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout);
  /// Sends a signal and reaps; returns the wait status.
  int Signal(int sig);
  /// Waits for exit; returns the exit code, or 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  void CloseStdin() { stdin_.reset(); }

 private:
  pid_t pid_ = -1;
  UniqueFd stdin_;
  UniqueFd stdout_;
  std::string pending_;
  bool reaped_ = false;
  int status_ = 0;
};

/// A --config with two tenants besides the uid tenants: blue (uid 60001)
/// and green (uid 60002), for tests that run helpers as those users.
inline constexpr char kBlueAndGreenTenants[] = R"(
tenants:
  - name: blue
    uids: [60001]
  - name: green
    uids: [60002]
)";

/// The real gpubrokerd, on its own socket directory and an ephemeral metrics port.
class Daemon {
 public:
  /// Starts and waits for the start line. `config_yaml` (if any) is written to
  /// a file and passed with --config. `env`: as for Process::Spawn.
  /// `launcher` (e.g. prlimit and its arguments) is put before the daemon's
  /// command line; it must exec it.
  explicit Daemon(std::vector<std::string> extra_args = {}, const std::string& config_yaml = "",
                  const std::vector<std::string>& env = {}, std::vector<std::string> launcher = {});
  ~Daemon();

  bool ok() const { return ok_; }
  const std::string& start_line() const { return start_line_; }
  const std::string& socket_dir() const { return dir_.path(); }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return process_.pid(); }
  std::string log() const;
  /// How many times the log holds `what` so far.
  int LogCount(const std::string& what) const;
  /// The --config file (when the daemon was given YAML); rewrite it to test reloads.
  std::string config_path() const { return dir_.path() + "/gpubroker.yaml"; }
  /// Sends a signal and leaves the daemon running (SIGHUP: reload).
  void Signal(int sig) const;

  /// SIGTERM and wait; returns the exit code.
  int Stop();
  /// SIGKILL and reap.
  void Kill();

  /// Samples of /metrics, keyed by the series as written ("name{a=\"b\"}").
  std::map<std::string, double> Metrics() const;
  /// One sample; 0 when the series is absent.
  double Metric(const std::string& series) const;

 private:
  TempDir dir_;
  Process process_;
  std::string start_line_;
  std::string metrics_address_;
  bool ok_ = false;
  bool stopped_ = false;
};

/// A client process: gpubroker-test-helper.
class Helper {
 public:
  /// Starts it and waits until it has a session. `uid` >= 0: run as that
  /// user. `suballocate` false: every buffer it allocates is the daemon's
  /// (none is made in the client's own ranges).
  explicit Helper(const std::string& socket_dir, int uid = -1, bool suballocate = true);
  /// Starts `argv`: a command line that ends by exec'ing gpubroker-test-helper
  /// (under unshare, say); waits until it has a session.
  explicit Helper(const std::vector<std::string>& argv);
  ~Helper();

  bool ok() const { return ok_; }
  pid_t pid() const { return process_.pid(); }
  /// Sends a command and returns the reply line ("" on timeout or death).
  std::string Send(const std::string& command,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Sends without waiting; pair with Reply().
  void Post(const std::string& command);
  std::string Reply(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Like Send, but fails the test unless the reply starts with "ok"; returns what follows.
  std::string Ok(const std::string& command,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30));
  void Kill9();
  /// One figure of the client's "stats" line (its ClientStats); -1 when absent.
  int64_t Stat(const std::string& key);
  /// "exit" and wait; returns the exit code.
  int Exit();

 private:
  void Start(const std::vector<std::string>& argv);

  Process process_;
  bool ok_ = false;
  bool gone_ = false;
};

/// `argv` run as another user, through setpriv: real and effective uid and
/// gid `uid`, supplementary group 0 only (so that the 0660 root:root sockets
/// of a test daemon are reachable, as a socket group's members reach them).
/// `groups`: more supplementary groups.
std::vector<std::string> AsUser(uid_t uid, std::vector<std::string> argv,
                                const std::vector<gid_t>& groups = {});

/// CPU seconds (user + system) a process has used so far; -1 when unknown.
double CpuSeconds(pid_t pid);
/// CPU seconds the calling thread has used so far.
double ThreadCpuSeconds();

/// Descriptors a process holds now; -1 when unknown.
int OpenDescriptors(pid_t pid);
/// How many descriptor numbers below `limit` (its RLIMIT_NOFILE) process
/// `pid` has free: what the kernel can still give it. Not `limit` minus
/// OpenDescriptors: a process may hold descriptors above its limit, inherited
/// from a parent with a higher one (a test runner's or make's pipes), and
/// those take no room from it.
int FreeDescriptors(pid_t pid, int limit);

/// The service manager's end of sd_notify: a datagram socket (pass
/// "NOTIFY_SOCKET=" + path() to the daemon) that collects what the daemon
/// sends, one message per datagram.
class NotifySocket {
 public:
  NotifySocket();
  const std::string& path() const { return path_; }
  /// The next message that contains `what`, skipping others; "" on timeout.
  std::string WaitFor(const std::string& what,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Everything received so far, for failure messages.
  std::string Seen() const;

 private:
  TempDir dir_;
  std::string path_;
  UniqueFd fd_;
  std::vector<std::string> seen_;
};

/// A command line that runs gpubroker-test-helper as in a pod: under unshare,
/// in PID, mount, network, IPC and UTS namespaces of its own, with a private
/// /run where the daemon's socket directory is bind-mounted at
/// /run/gpubroker and its real path hidden. Needs root.
std::vector<std::string> InPodNamespaces(const std::string& socket_dir);

/// Polls `pred` until it holds or the timeout passes.
bool Eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// `count()` once two looks 50 ms apart agree: a figure (a process's
/// descriptors, say) that settles as a daemon finishes what it was handling.
int Settled(const std::function<int()>& count);

bool IsRoot();

/// The source tree (scripts and files that tests read).
std::string SourceDir();

/// The full path of `name` on $PATH; "" when there is none.
std::string FindProgram(const std::string& name);

struct CommandResult {
  int exit_code = -1;  ///< -1: it did not end in time (it is killed)
  std::string out;     ///< stdout
  std::string err;     ///< stderr
  std::string output;  ///< stdout, then stderr
};

/// Runs a program to its end with `input` on its stdin.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace gpubroker::testing
