#include "daemon/util/descriptors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <utility>
#include <vector>

namespace gpubroker {

DescriptorLimit RaiseDescriptorLimit() {
  DescriptorLimit out;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return out;
  out.was = lim.rlim_cur;
  out.hard = lim.rlim_max;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  out.soft = lim.rlim_cur;
  return out;
}

AcceptEnd AcceptBatch(int listener, int batch, const std::function<void(UniqueFd)>& admit,
                      const std::function<void(int)>& failed) {
  for (int i = 0; i < batch; ++i) {
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd) {
      admit(std::move(fd));
      continue;
    }
    switch (errno) {
      case EINTR:
        continue;
      case EAGAIN:
        return AcceptEnd::kDrained;
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM:
        return AcceptEnd::kOutOfDescriptors;
      default:
        failed(errno);
        continue;
    }
  }
  return AcceptEnd::kDrained;
}

namespace {

// The descriptors this process holds (entries of /proc/self/fd, less the
// directory's own); false when /proc/self/fd cannot be read.
bool OwnDescriptors(std::vector<int>* out) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != ::dirfd(dir)) out->push_back(fd);
  }
  ::closedir(dir);
  return true;
}

}  // namespace

int CountOpenDescriptors() {
  std::vector<int> open;
  return OwnDescriptors(&open) ? static_cast<int>(open.size()) : -1;
}

int CloseInheritedDescriptors() {
  rlimit limit{};
  const int below =
      ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < static_cast<rlim_t>(INT_MAX)
          ? static_cast<int>(limit.rlim_cur)
          : INT_MAX;
  std::vector<int> open;
  if (!OwnDescriptors(&open)) {
    if (below > 3) ::close_range(3, static_cast<unsigned>(below - 1), 0);
    return -1;
  }
  int closed = 0;
  for (int fd : open) {
    if (fd <= 2 || fd >= below) continue;
    ::close(fd);
    ++closed;
  }
  return closed;
}

ReserveDescriptor::ReserveDescriptor() : reserve_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

bool ReserveDescriptor::Shed(int listener, const std::function<void(int fd)>& turn_away) {
  absl::MutexLock lock(&mu_);
  reserve_.reset();
  UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  const bool accepted = fd.valid();
  if (accepted) turn_away(fd.get());
  fd.reset();
  reserve_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return accepted;
}

uint64_t DescriptorBudget::LimitFor(uint64_t soft) {
  const uint64_t headroom = std::max<uint64_t>(128, soft / 8);
  return soft > headroom ? soft - headroom : soft / 2;
}

bool DescriptorBudget::TryCharge(uint64_t n) {
  if (limit_ == 0) {
    used_.fetch_add(n, std::memory_order_relaxed);
    return true;
  }
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + n > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return true;
}

void DescriptorBudget::Release(uint64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }

bool PerUidConnections::TryAdmit(uid_t uid) {
  absl::MutexLock lock(&mu_);
  uint32_t& count = counts_[uid];
  if (max_ != 0 && count >= max_) return false;
  ++count;
  ++total_;
  return true;
}

void PerUidConnections::Release(uid_t uid) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(uid);
  if (it == counts_.end()) return;
  --total_;
  if (--it->second == 0) counts_.erase(it);
}

uint64_t PerUidConnections::total() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

}  // namespace gpubroker
