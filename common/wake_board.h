#pragma once

// A tenant's wake board: one page of shared memory, made by the daemon and
// mapped by every client of the tenant that asks for it (Hello.wake_board),
// whose 32-bit words a sleeping thread waits on with a futex instead of on
// its socket.
//
// Why: a consumer asleep in Open(wait) for a name is otherwise woken by the
// daemon's answer, and the daemon itself is woken by the producer's seal:
// two cold wake-ups one after the other. With the board the producer's
// client, as its seal begins, wakes the word of that name (and the daemon,
// with an Ahead frame), so the consumer wakes while the daemon does; it then
// waits for the answer, tens of µs away, as a call does: awake for the
// client's spin, then on its socket (docs/architecture.md, "The wake board").
//
// The board never carries an answer, only "look now". The daemon wakes a
// session's own word after every frame it sends to it, so a sleeper misses
// nothing that arrives on its socket; a word woken for nothing (another name
// of the same word, or a neighbour of the tenant that writes the page) costs
// a look at the socket. So the page is shared by the clients of one tenant
// only, which trust each other with as much (the tenant's fence page) and
// can do no more through it than wake each other.
//
// Words [0, kWakeBoardNameWords) belong to names and ids (WakeWordOfName,
// WakeWordOfId), the last one to the daemon (kDaemonWord), the rest to
// sessions (Welcome.wake_word). Each name's or session's word is a count with a flag in bit
// 0, "someone sleeps on me": a sleeper sets the flag, looks once more at what it waits for, and
// sleeps while the word holds what it set; a waker that finds the flag set clears it and moves the
// count in one step, then wakes every sleeper of the word. Sleepers and wakers only ever change the
// word by those two steps, so a wake between a sleeper's look and its sleep changes the word and
// the sleep returns at once.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace gpubroker {

inline constexpr uint32_t kWakeBoardWords = 1024;
inline constexpr uint32_t kWakeBoardNameWords = 512;
inline constexpr size_t kWakeBoardBytes = kWakeBoardWords * sizeof(uint32_t);

/// The daemon's word: what session.sock's thread is doing, written by the
/// daemon whenever that changes and read by a producer's client as its seal
/// begins. Nobody sleeps on it. Asleep, the daemon is woken ahead of the
/// seal's frame (an Ahead frame, while the fence is recorded) and polls for
/// the frame that follows; polling, it needs no Ahead. Like every word of
/// the board it is a hint that the tenant's clients can write: a wrong value
/// costs a wake-up, or an Ahead, never an answer.
inline constexpr uint32_t kDaemonWord = kWakeBoardWords - 1;
enum class DaemonState : uint32_t {
  kAsleep = 0,        // an Ahead frame wakes it, and it then polls (--busy-poll-us)
  kPolling = 1,       // a frame is read at once: no Ahead
  kAsleepNoPoll = 2,  // asleep and never polling after a frame: an Ahead would be lost
};
/// Whether a producer's seal sends the daemon an Ahead frame before it
/// records its fence and sends the seal's frame. Only to a daemon that
/// sleeps and then polls (kAsleep), and only where its wake-up has
/// something to overlap: a consumer that sleeps for the buffer (woken at
/// the same time) or a device fence to record (CUDA: 15-20 µs). On the host
/// backend with nobody waiting, the Ahead would come a microsecond before
/// the frame and cost a send for nothing. `only_for_sleepers` is the rule
/// before the daemon's word (GPUBROKER_SEAL_AHEAD=sleepers): an Ahead
/// whenever a consumer sleeps, whatever the daemon does.
constexpr bool WantsAhead(DaemonState daemon, bool consumer_sleeps, bool records_fence,
                          bool only_for_sleepers) {
  if (only_for_sleepers) return consumer_sleeps;
  return daemon == DaemonState::kAsleep && (consumer_sleeps || records_fence);
}

/// How many words sessions have: those between the names' and the daemon's.
inline constexpr uint32_t kWakeBoardSessionWords = kDaemonWord - kWakeBoardNameWords;

/// The word of a buffer's name (the name alone, without "tenant/"): the same
/// in every process, whatever its build.
uint32_t WakeWordOfName(std::string_view name);
/// The word of a buffer's id, for a wait for the seal of a buffer by id
/// (wait_sealed): among the names' words, where a collision costs a look.
uint32_t WakeWordOfId(uint64_t id);

/// One process's mapping of a board. Movable, not copyable.
class WakeBoard {
 public:
  WakeBoard() = default;
  ~WakeBoard();
  WakeBoard(WakeBoard&& other) noexcept;
  WakeBoard& operator=(WakeBoard&& other) noexcept;
  WakeBoard(const WakeBoard&) = delete;
  WakeBoard& operator=(const WakeBoard&) = delete;

  /// A new board (the daemon): a memfd of kWakeBoardBytes, sealed so that
  /// no client can shrink or grow it under the daemon's mapping.
  static absl::StatusOr<WakeBoard> Create();
  /// Maps the board that `fd` is (a client, from its Welcome); the mapping
  /// keeps it, and the fd may be closed after.
  static absl::StatusOr<WakeBoard> Map(int fd);

  bool valid() const { return words_ != nullptr; }
  /// The daemon's descriptor of its board, to send; -1 in a client.
  int fd() const { return fd_.get(); }

  /// Wakes the sleepers of `word`, if one said it sleeps there. True when it
  /// did (a futex call); false, at the cost of one load, when none did.
  /// `word` must be < kWakeBoardWords.
  bool Wake(uint32_t word) const;

  /// The word's value now (a sleeper tells by it what woke it).
  uint32_t Load(uint32_t word) const { return at(word)->load(); }

  /// The daemon's state, as the daemon last wrote it (kDaemonWord).
  DaemonState daemon_state() const {
    return static_cast<DaemonState>(at(kDaemonWord)->load(std::memory_order_relaxed));
  }
  /// Writes the daemon's state (the daemon only).
  void set_daemon_state(DaemonState state) const {
    at(kDaemonWord)->store(static_cast<uint32_t>(state), std::memory_order_relaxed);
  }

  /// A sleeper's first step: says that it is about to sleep on `word` and
  /// returns the value to sleep on. After it, the sleeper looks once more at
  /// what it waits for, then calls Sleep.
  uint32_t Arm(uint32_t word) const;

  /// Sleeps until one of `words` (up to two) no longer holds its `values`
  /// (what Arm returned), a waker woke it, or `timeout` passes. Returns at
  /// once if a word has moved already. `n` is 1 or 2.
  void Sleep(const uint32_t* words, const uint32_t* values, int n,
             std::chrono::microseconds timeout) const;

 private:
  std::atomic<uint32_t>* at(uint32_t word) const { return &words_[word]; }

  UniqueFd fd_;
  std::atomic<uint32_t>* words_ = nullptr;
};

}  // namespace gpubroker
