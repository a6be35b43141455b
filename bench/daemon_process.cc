#include "bench/daemon_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <thread>

namespace gpubroker::bench {

DaemonProcess::DaemonProcess(const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/gpubroker-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  const std::string daemon =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpubrokerd").string();
  // Metrics on a port of the kernel's choosing: the benchmark reads the
  // daemon's own time per call off them (bench/daemon_calls.h).
  std::vector<std::string> argv = {daemon,        "--socket-dir", dir_,  "--metrics-address",
                                   "127.0.0.1:0", "--log-level",  "info"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(2, 1);  // its start line must not mix with our (JSON) output
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  for (int i = 0; i < 3000 && !std::filesystem::exists(dir_ + "/gpubroker.sock"); ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("gpubrokerd exited at start (see its message above)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace gpubroker::bench
