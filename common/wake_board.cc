#include "common/wake_board.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "common/strings.h"

// Kernel headers before 5.16 (Ubuntu 22.04's, say) lack futex_waitv; its
// layout and number are fixed by the kernel's ABI, and Sleep falls back to
// one word where the running kernel lacks the call.
#ifndef FUTEX_32
#define FUTEX_32 2
struct futex_waitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t __reserved;
};
#endif
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

namespace gpubroker {
namespace {

absl::Status Errno(std::string_view what) {
  return absl::InternalError(StrCat(what, ": ", std::strerror(errno)));
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Shared futexes (no FUTEX_PRIVATE_FLAG): the word is in memory that
  // several processes map.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

timespec RelativeTimespec(std::chrono::microseconds d) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(d.count() / 1000000);
  ts.tv_nsec = static_cast<long>(d.count() % 1000000) * 1000;
  return ts;
}

// FNV-1a: fixed, so that every client of a tenant picks the same word.
uint32_t WordOf(const unsigned char* bytes, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return static_cast<uint32_t>(h % kWakeBoardNameWords);
}

}  // namespace

uint32_t WakeWordOfName(std::string_view name) {
  return WordOf(reinterpret_cast<const unsigned char*>(name.data()), name.size());
}

uint32_t WakeWordOfId(uint64_t id) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(id >> (8 * i));
  return WordOf(le, sizeof(le));
}

WakeBoard::~WakeBoard() {
  if (words_ != nullptr) ::munmap(words_, kWakeBoardBytes);
}

WakeBoard::WakeBoard(WakeBoard&& other) noexcept
    : fd_(std::move(other.fd_)), words_(std::exchange(other.words_, nullptr)) {}

WakeBoard& WakeBoard::operator=(WakeBoard&& other) noexcept {
  if (this != &other) {
    if (words_ != nullptr) ::munmap(words_, kWakeBoardBytes);
    fd_ = std::move(other.fd_);
    words_ = std::exchange(other.words_, nullptr);
  }
  return *this;
}

absl::StatusOr<WakeBoard> WakeBoard::Create() {
  UniqueFd fd(::memfd_create("gpubroker-wake-board", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return Errno("memfd_create");
  if (::ftruncate(fd.get(), kWakeBoardBytes) != 0) return Errno("ftruncate");
  // A client holds the same file: sealed, it can neither shrink it (which
  // would fault the daemon's next access) nor grow it, nor lift the seals.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno("sealing the wake board");
  }
  absl::StatusOr<WakeBoard> board = Map(fd.get());
  if (board.ok()) board->fd_ = std::move(fd);
  return board;
}

absl::StatusOr<WakeBoard> WakeBoard::Map(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Errno("fstat of the wake board");
  if (st.st_size != static_cast<off_t>(kWakeBoardBytes)) {
    return absl::InvalidArgumentError(
        StrCat("the wake board is ", st.st_size, " bytes, not ", kWakeBoardBytes));
  }
  void* p = ::mmap(nullptr, kWakeBoardBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Errno("mmap of the wake board");
  WakeBoard board;
  board.words_ = static_cast<std::atomic<uint32_t>*>(p);
  return board;
}

bool WakeBoard::Wake(uint32_t word) const {
  std::atomic<uint32_t>* w = at(word);
  // What the waker did before (a frame written to the socket, which the
  // sleeper looks at after it armed) is ordered before this load: a store
  // followed by a load needs a full fence, which the system call's own
  // unlock does not give.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t v = w->load();
  while ((v & 1u) != 0) {
    // Flag cleared and count moved in one step: v + 1 carries the flag
    // into the count.
    if (w->compare_exchange_weak(v, v + 1)) {
      Futex(w, FUTEX_WAKE, INT_MAX, nullptr);
      return true;
    }
  }
  return false;
}

uint32_t WakeBoard::Arm(uint32_t word) const { return at(word)->fetch_or(1u) | 1u; }

void WakeBoard::Sleep(const uint32_t* words, const uint32_t* values, int n,
                      std::chrono::microseconds timeout) const {
  if (n == 2) {
    futex_waitv waiters[2] = {};
    for (int i = 0; i < 2; ++i) {
      waiters[i].val = values[i];
      waiters[i].uaddr = reinterpret_cast<uintptr_t>(at(words[i]));
      waiters[i].flags = FUTEX_32;
    }
    timespec until{};
    ::clock_gettime(CLOCK_MONOTONIC, &until);
    const timespec d = RelativeTimespec(timeout);
    until.tv_sec += d.tv_sec;
    until.tv_nsec += d.tv_nsec;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    if (::syscall(SYS_futex_waitv, waiters, 2u, 0u, &until, CLOCK_MONOTONIC) >= 0 ||
        errno != ENOSYS) {
      return;
    }
    // A kernel before 5.16: the first word alone, which the daemon wakes
    // whenever it writes to the socket; only the early wake is lost.
  }
  const timespec d = RelativeTimespec(timeout);
  Futex(at(words[0]), FUTEX_WAIT, values[0], &d);
}

}  // namespace gpubroker
