#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "common/token.h"
#include "common/unix_socket.h"
#include "gtest/gtest.h"

namespace gpubroker::testing {

namespace {
// A child that dies must fail its test, not kill the test binary on its next write.
const bool kSigpipeIgnored = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();
}  // namespace

std::string BinDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

bool IsRoot() { return ::geteuid() == 0; }

std::string SourceDir() {
  // A bundle that runs elsewhere says where its copy of the tree is.
  const char* dir = std::getenv("GPUBROKER_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : GPUBROKER_SOURCE_DIR;
}

std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input,
                         std::chrono::milliseconds timeout) {
  TempDir dir;
  const std::string err_path = dir.path() + "/stderr";
  Process p = Process::Spawn(argv, err_path);
  // The programs run here read all their input before they print; one that
  // exits without reading makes the write fail (EPIPE), not kill the test.
  ::signal(SIGPIPE, SIG_IGN);
  if (!input.empty()) p.WriteLine(input);
  p.CloseStdin();
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (auto line = p.ReadLine(std::chrono::duration_cast<std::chrono::milliseconds>(
             deadline - std::chrono::steady_clock::now()))) {
    r.out += *line + "\n";
  }
  r.exit_code = p.Wait(std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
      deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{})));
  if (r.exit_code == -1) p.Signal(SIGKILL);
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  r.err = text.str();
  r.output = r.out + r.err;
  return r;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpubroker-test-XXXXXX").string();
  char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr) << std::strerror(errno);
  path_ = tmpl;
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// Process ----------------------------------------------------------------------

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

Process::Process(Process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      stdin_(std::move(o.stdin_)),
      stdout_(std::move(o.stdout_)),
      pending_(std::move(o.pending_)),
      reaped_(o.reaped_),
      status_(o.status_) {}

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = std::exchange(o.pid_, -1);
    stdin_ = std::move(o.stdin_);
    stdout_ = std::move(o.stdout_);
    pending_ = std::move(o.pending_);
    reaped_ = o.reaped_;
    status_ = o.status_;
  }
  return *this;
}

Process Process::Spawn(const std::vector<std::string>& argv, const std::string& stderr_path,
                       const std::vector<std::string>& env) {
  int in[2], out[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child's environment is built before fork: after it, only exec.
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& x : env) replaced = replaced || x.substr(0, x.find('=')) == name;
    if (!replaced) environment.push_back(entry);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  int err_fd = -1;
  if (!stderr_path.empty()) {
    err_fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (err_fd >= 0) ::close(err_fd);
  Process p;
  p.pid_ = pid;
  p.stdin_.reset(in[1]);
  p.stdout_.reset(out[0]);
  return p;
}

bool Process::WriteLine(const std::string& line) {
  if (!stdin_) return false;
  std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(stdin_.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> Process::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = pending_.find('\n'); nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    if (!stdout_) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{stdout_.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return std::nullopt;
    char buf[65536];
    ssize_t n = ::read(stdout_.get(), buf, sizeof(buf));
    if (n <= 0) {
      stdout_.reset();
      continue;
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

int Process::Signal(int sig) {
  if (pid_ <= 0 || reaped_) return status_;
  ::kill(pid_, sig);
  ::waitpid(pid_, &status_, 0);
  reaped_ = true;
  return status_;
}

int Process::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

// Daemon -----------------------------------------------------------------------

Daemon::Daemon(std::vector<std::string> extra_args, const std::string& config_yaml,
               const std::vector<std::string>& env, std::vector<std::string> launcher) {
  std::vector<std::string> argv = std::move(launcher);
  argv.insert(argv.end(), {BinDir() + "/gpubrokerd", "--socket-dir", dir_.path(),
                           "--metrics-address", "127.0.0.1:0", "--hello-timeout", "300ms",
                           "--backend", "host", "--host-pool-bytes", "256MiB"});
  if (!config_yaml.empty()) {
    const std::string path = config_path();
    std::ofstream(path) << config_yaml;
    argv.push_back("--config");
    argv.push_back(path);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = Process::Spawn(argv, dir_.path() + "/gpubrokerd.log", env);
  auto line = process_.ReadLine(std::chrono::seconds(20));
  if (!line) {
    ADD_FAILURE() << "gpubrokerd printed no start line; log:\n" << log();
    return;
  }
  start_line_ = *line;
  if (auto at = start_line_.rfind("metrics "); at != std::string::npos) {
    metrics_address_ = start_line_.substr(at + 8);
  }
  ok_ = true;
}

Daemon::~Daemon() {
  if (!stopped_) {
    const int code = Stop();
    EXPECT_EQ(code, 0) << "gpubrokerd did not exit cleanly; log:\n" << log();
  }
  if (::testing::Test::HasFailure()) std::cerr << "---- gpubrokerd log ----\n" << log() << "\n";
}

std::string Daemon::log() const {
  std::ifstream in(dir_.path() + "/gpubrokerd.log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Daemon::LogCount(const std::string& what) const {
  const std::string text = log();
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

int Daemon::Stop() {
  stopped_ = true;
  ::kill(process_.pid(), SIGTERM);
  return process_.Wait(std::chrono::seconds(20));
}

void Daemon::Signal(int sig) const { ::kill(process_.pid(), sig); }

void Daemon::Kill() {
  stopped_ = true;
  process_.Signal(SIGKILL);
}

std::map<std::string, double> Daemon::Metrics() const {
  std::map<std::string, double> out;
  std::stringstream body(HttpGet(metrics_address_, "/metrics"));
  std::string line;
  while (std::getline(body, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

double Daemon::Metric(const std::string& series) const {
  auto m = Metrics();
  auto it = m.find(series);
  return it == m.end() ? 0 : it->second;
}

// Helper -----------------------------------------------------------------------

Helper::Helper(const std::string& socket_dir, int uid, bool suballocate) {
  std::vector<std::string> argv = {BinDir() + "/gpubroker-test-helper", "--socket-dir", socket_dir};
  if (uid >= 0) {
    argv.push_back("--uid");
    argv.push_back(std::to_string(uid));
  }
  if (!suballocate) argv.push_back("--no-suballocate");
  Start(argv);
}

Helper::Helper(const std::vector<std::string>& argv) { Start(argv); }

void Helper::Start(const std::vector<std::string>& argv) {
  process_ = Process::Spawn(argv);
  auto line = process_.ReadLine(std::chrono::seconds(20));
  ok_ = line && line->rfind("ok ready", 0) == 0;
  EXPECT_TRUE(ok_) << "helper did not start: " << line.value_or("(nothing)");
}

Helper::~Helper() {
  if (!gone_) Exit();
}

void Helper::Post(const std::string& command) { process_.WriteLine(command); }

std::string Helper::Reply(std::chrono::milliseconds timeout) {
  return process_.ReadLine(timeout).value_or("");
}

std::string Helper::Send(const std::string& command, std::chrono::milliseconds timeout) {
  Post(command);
  return Reply(timeout);
}

int64_t Helper::Stat(const std::string& key) {
  const std::string s = " " + Ok("stats") + " ";
  const size_t at = s.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  return std::stoll(s.substr(at + key.size() + 2));
}

std::string Helper::Ok(const std::string& command, std::chrono::milliseconds timeout) {
  const std::string reply = Send(command, timeout);
  EXPECT_EQ(reply.rfind("ok", 0), 0u) << "'" << command << "' got: " << reply;
  return reply.size() > 3 ? reply.substr(3) : "";
}

void Helper::Kill9() {
  gone_ = true;
  process_.Signal(SIGKILL);
}

int Helper::Exit() {
  gone_ = true;
  process_.WriteLine("exit");
  process_.CloseStdin();
  const int code = process_.Wait(std::chrono::seconds(20));
  if (code == -1) process_.Signal(SIGKILL);
  return code;
}

// NotifySocket, pods -------------------------------------------------------------

NotifySocket::NotifySocket() : path_(dir_.path() + "/notify.sock") {
  fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
  EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{0, 100000};
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

std::string NotifySocket::WaitFor(const std::string& what, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    char buf[4096];
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n <= 0) continue;
    std::string message(buf, static_cast<size_t>(n));
    seen_.push_back(message);
    if (message.find(what) != std::string::npos) return message;
  }
  return "";
}

std::string NotifySocket::Seen() const {
  std::string out;
  for (const auto& m : seen_) out += "[" + m + "] ";
  return out;
}

// What runs inside the new namespaces before the client: the pod's hostPath
// mount, and the directory's real path hidden under a tmpfs.
constexpr const char* kPodSetup = R"(set -e
helper=$1 sock=$2
mount -t tmpfs tmpfs /run
mkdir /run/gpubroker
mount --bind "$sock" /run/gpubroker
mount -t tmpfs tmpfs "$sock"
test ! -e "$sock/session.sock"
exec "$helper" --socket-dir /run/gpubroker
)";

std::vector<std::string> InPodNamespaces(const std::string& socket_dir) {
  return {
      "/usr/bin/unshare", "--pid", "--fork",  "--kill-child", "--mount-proc",
      "--mount",          "--net", "--ipc",   "--uts",        "--",
      "/bin/sh",          "-c",    kPodSetup, "sh",           BinDir() + "/gpubroker-test-helper",
      socket_dir};
}

// Utilities --------------------------------------------------------------------

std::vector<std::string> AsUser(uid_t uid, std::vector<std::string> argv,
                                const std::vector<gid_t>& groups) {
  const std::string id = std::to_string(uid);
  std::string group_list = "0";
  for (gid_t g : groups) group_list += "," + std::to_string(g);
  std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=" + id, "--regid=" + id,
                                  "--groups=" + group_list, "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::strtod(field.c_str(), nullptr);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The numbers of the descriptors process `pid` holds now; none when unknown.
static std::optional<std::vector<int>> DescriptorNumbers(pid_t pid) {
  std::error_code ec;
  std::vector<int> numbers;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    numbers.push_back(std::stoi(it->path().filename().string()));
  }
  if (ec) return std::nullopt;
  return numbers;
}

int OpenDescriptors(pid_t pid) {
  const auto numbers = DescriptorNumbers(pid);
  return numbers ? static_cast<int>(numbers->size()) : -1;
}

int FreeDescriptors(pid_t pid, int limit) {
  const auto numbers = DescriptorNumbers(pid);
  if (!numbers) return -1;
  return limit - static_cast<int>(std::count_if(numbers->begin(), numbers->end(),
                                                [limit](int fd) { return fd < limit; }));
}

int Settled(const std::function<int()>& count) {
  int now = count();
  for (int again = -1; again != now; now = again) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    again = count();
  }
  return now;
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace gpubroker::testing
