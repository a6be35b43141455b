#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gpubroker::bench {

/// A gpubrokerd of the benchmark's own, on a temporary socket directory,
/// found beside the benchmark binary. Stopped (SIGTERM) when destroyed.
class DaemonProcess {
 public:
  explicit DaemonProcess(const std::vector<std::string>& args);
  ~DaemonProcess();
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string dir_;
};

}  // namespace gpubroker::bench
