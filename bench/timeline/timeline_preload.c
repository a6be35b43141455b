// libgpubroker-timeline.so: a timeline of the socket calls of every process
// that loads it (LD_PRELOAD), for finding where a hand-over's microseconds go
// between processes: which hop waited on a sleeping thread, and how long each
// side worked. The GPU machines have no strace, perf or nsys; this needs
// nothing but the dynamic loader.
//
//   GPUBROKER_TIMELINE_DIR=DIR LD_PRELOAD=libgpubroker-timeline.so gpubroker-bench ...
//   python3 bench/timeline.py DIR
//
// Each call of read, write, recvmsg, sendmsg, poll and epoll_wait is recorded
// with its start and end (CLOCK_MONOTONIC, comparable across the processes of
// a machine), thread, descriptor, timeout and result; a run of calls that
// found nothing (a busy poll, EAGAIN) is folded into one record with a count.
// So are the futex calls made through syscall() on shared words (those of a
// wake board, common/wake_board.h: a client's sleep and the waker's wake),
// with the word's place in its page where a call has a descriptor. Private
// futexes (the mutexes and condition variables of a process) are not
// recorded.
// A program may add its own marks with gpubroker_timeline_mark(code), looked
// up with dlsym so that it runs the same without the library. Records stay in
// memory; each process writes DIR/timeline.PID.bin when it exits normally.
// The cost is two clock reads per call (vDSO, ~20 ns each).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum Op {
  kRead = 1,
  kWrite,
  kRecvmsg,
  kSendmsg,
  kPoll,
  kEpollWait,
  kMark,
  kFutexWait,   // FUTEX_WAIT on a shared word: fd is the word's index in its page
  kFutexWake,   // FUTEX_WAKE on a shared word: the same; result, how many woke
  kFutexWaitv,  // futex_waitv: fd is the first two words' indices, second << 16;
                // result, the index of the word that woke it
};

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
// The kernel's struct futex_waitv (5.16), for headers that lack it.
struct TimelineFutexWaitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};

// One call (or a folded run of empty ones). 40 bytes; the analyzer reads
// the same layout (bench/timeline.py).
struct Record {
  uint64_t start_ns;
  uint64_t end_ns;
  int32_t tid;
  int16_t op;
  int16_t flags;    // 1: folded run of calls that found nothing
  int32_t fd;       // the descriptor; a mark's code
  int32_t timeout;  // poll / epoll_wait's / a futex wait's timeout in ms; -1 none
  int64_t result;   // the call's return value, or -errno
};

#define kCapacity (1u << 22)  // 4M records, 160 MiB of address space, touched as used

static struct Record* records;
static atomic_uint next_record;
static atomic_int dropped;
static pid_t owner;
static __thread int32_t my_tid;
static __thread int64_t my_last = -1;  // this thread's last record, for folding

static ssize_t (*real_read)(int, void*, size_t);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_recvmsg)(int, struct msghdr*, int);
static ssize_t (*real_sendmsg)(int, const struct msghdr*, int);
static int (*real_poll)(struct pollfd*, nfds_t, int);
static int (*real_epoll_wait)(int, struct epoll_event*, int, int);
static long (*real_syscall)(long, ...);

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void forked_child(void) {
  // The parent's records stay the parent's.
  atomic_store(&next_record, 0);
  owner = getpid();
  my_last = -1;
  my_tid = 0;
}

// Also called by a wrapper that runs before the constructor (another
// library's constructor reading a file).
static void resolve(void) {
  real_read = dlsym(RTLD_NEXT, "read");
  real_write = dlsym(RTLD_NEXT, "write");
  real_recvmsg = dlsym(RTLD_NEXT, "recvmsg");
  real_sendmsg = dlsym(RTLD_NEXT, "sendmsg");
  real_poll = dlsym(RTLD_NEXT, "poll");
  real_epoll_wait = dlsym(RTLD_NEXT, "epoll_wait");
  real_syscall = dlsym(RTLD_NEXT, "syscall");
}

#define RESOLVED(f) \
  if (__builtin_expect(f == NULL, 0)) resolve()

__attribute__((constructor)) static void start(void) {
  if (real_epoll_wait == NULL) resolve();
  void* p = mmap(NULL, (size_t)kCapacity * sizeof(struct Record), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  records = p == MAP_FAILED ? NULL : p;
  owner = getpid();
  pthread_atfork(NULL, NULL, forked_child);
}

// True when all `size` bytes went.
static int write_all(int fd, const void* data, size_t size) {
  const char* at = data;
  while (size > 0) {
    const ssize_t w = real_write(fd, at, size);
    if (w <= 0) return 0;
    at += w;
    size -= (size_t)w;
  }
  return 1;
}

__attribute__((destructor)) static void finish(void) {
  const char* dir = getenv("GPUBROKER_TIMELINE_DIR");
  if (dir == NULL || records == NULL || getpid() != owner) return;
  unsigned n = atomic_load(&next_record);
  if (n > kCapacity) n = kCapacity;
  char path[4096];
  snprintf(path, sizeof(path), "%s/timeline.%d.bin", dir, (int)owner);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // Header: "GBTL", version 1, the record count, the records lost, then the
  // program's name.
  char header[64] = "GBTL";
  const uint32_t version = 1;
  memcpy(header + 4, &version, 4);
  memcpy(header + 8, &n, 4);
  const int32_t lost = atomic_load(&dropped);
  memcpy(header + 12, &lost, 4);
  const char* name = program_invocation_short_name;
  strncpy(header + 16, name, sizeof(header) - 17);
  if (write_all(fd, header, sizeof(header))) {
    write_all(fd, records, (size_t)n * sizeof(struct Record));
  }
  close(fd);
}

static int32_t tid(void) {
  if (my_tid == 0) my_tid = (int32_t)gettid();
  return my_tid;
}

// A call that found nothing right after the same empty call of this thread
// extends that record instead of adding one.
static void note(int op, int fd, int timeout, int64_t result, uint64_t start_ns) {
  if (records == NULL) return;
  const uint64_t end_ns = now_ns();
  const int empty = result == -EAGAIN || result == -EWOULDBLOCK ||
                    ((op == kPoll || op == kEpollWait) && result == 0 && timeout == 0);
  if (empty && my_last >= 0) {
    struct Record* last = &records[my_last];
    if (last->op == op && last->fd == fd && last->result == result && last->timeout == timeout) {
      last->end_ns = end_ns;
      last->flags = 1;
      return;
    }
  }
  const unsigned i = atomic_fetch_add(&next_record, 1);
  if (i >= kCapacity) {
    atomic_fetch_add(&dropped, 1);
    return;
  }
  struct Record* r = &records[i];
  r->start_ns = start_ns;
  r->end_ns = end_ns;
  r->tid = tid();
  r->op = (int16_t)op;
  r->flags = 0;
  r->fd = fd;
  r->timeout = timeout;
  r->result = result;
  my_last = empty ? (int64_t)i : -1;
}

static int64_t outcome(int64_t r) { return r < 0 ? -(int64_t)errno : r; }

void gpubroker_timeline_mark(int code) {
  const uint64_t t = now_ns();
  note(kMark, code, -1, 0, t);
}

// Each call: timed, recorded with `fd` and `timeout` (-1: none), its errno kept.
#define TRACED(type, name, op, fd_arg, timeout_arg, params, args) \
  type name params {                                              \
    RESOLVED(real_##name);                                        \
    const uint64_t t = now_ns();                                  \
    const type r = real_##name args;                              \
    const int saved = errno;                                      \
    note(op, fd_arg, timeout_arg, outcome(r), t);                 \
    errno = saved;                                                \
    return r;                                                     \
  }

TRACED(ssize_t, read, kRead, fd, -1, (int fd, void* buf, size_t n), (fd, buf, n))
TRACED(ssize_t, write, kWrite, fd, -1, (int fd, const void* buf, size_t n), (fd, buf, n))
TRACED(ssize_t, recvmsg, kRecvmsg, fd, -1, (int fd, struct msghdr* msg, int flags),
       (fd, msg, flags))
TRACED(ssize_t, sendmsg, kSendmsg, fd, -1, (int fd, const struct msghdr* msg, int flags),
       (fd, msg, flags))
TRACED(int, poll, kPoll, n > 0 ? fds[0].fd : -1, timeout,
       (struct pollfd * fds, nfds_t n, int timeout), (fds, n, timeout))
TRACED(int, epoll_wait, kEpollWait, epfd, timeout,
       (int epfd, struct epoll_event* events, int max, int timeout), (epfd, events, max, timeout))

// A futex word's index in its page: a wake board is one page, mapped at a
// page's start, so this is the word's number on the board.
static int32_t word_index(uint64_t address) { return (int32_t)((address & 4095u) >> 2); }

static int32_t ms_until(const struct timespec* ts, int absolute) {
  if (ts == NULL) return -1;
  int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
  if (absolute) ns -= (int64_t)now_ns();
  return ns <= 0 ? 0 : (int32_t)((ns + 999999) / 1000000);
}

// syscall(2) is variadic; like glibc's own, this passes on six arguments
// whatever the call takes (the ones it does not take are never read).
long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  RESOLVED(real_syscall);
  int op = 0, fd = -1, timeout = -1;
  if (number == SYS_futex && ((int)a[1] & FUTEX_PRIVATE_FLAG) == 0) {
    const int cmd = (int)a[1] & FUTEX_CMD_MASK;
    if (cmd == FUTEX_WAIT) {
      op = kFutexWait;
      timeout = ms_until((const struct timespec*)a[3], 0);
    } else if (cmd == FUTEX_WAKE) {
      op = kFutexWake;
    }
    fd = word_index((uint64_t)a[0]);
  } else if (number == SYS_futex_waitv) {
    const struct TimelineFutexWaitv* w = (const struct TimelineFutexWaitv*)a[0];
    op = kFutexWaitv;
    fd = word_index(w[0].uaddr) | (a[1] > 1 ? word_index(w[1].uaddr) << 16 : 0);
    timeout = ms_until((const struct timespec*)a[3], 1);
  }
  if (op == 0) return real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  const uint64_t t = now_ns();
  const long r = real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  const int saved = errno;
  note(op, fd, timeout, outcome(r), t);
  errno = saved;
  return r;
}
