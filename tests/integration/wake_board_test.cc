// The tenant's wake board (common/wake_board.h): a consumer asleep in a
// wait for a name is woken by the producer's seal, while the daemon wakes to
// answer it; the daemon wakes a session's word after every frame it sends;
// the board is one sealed page per tenant, shared with that tenant's
// sessions only; and what a neighbour of the tenant writes on it costs
// wake-ups, never an answer.
#include "common/wake_board.h"

#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/version.h"
#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_session.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;

// A raw session whose Hello asks (or not) for the board; the descriptors
// that came with the Welcome go to `fds`.
v1::Welcome HelloWithBoard(RawSession& raw, bool board, std::vector<UniqueFd>* fds) {
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_client_name("raw");
  hello.mutable_hello()->set_wake_board(board);
  EXPECT_TRUE(raw.Send(hello).ok());
  auto welcome = raw.Read(5s, fds);
  EXPECT_TRUE(welcome.ok() && welcome->has_value() && (*welcome)->has_welcome());
  if (!welcome.ok() || !welcome->has_value()) return {};
  return (*welcome)->welcome();
}

// A consumer's thread that waits for `name` and tells a byte of what it
// opened.
std::thread WaitFor(Client& consumer, const std::string& name, std::atomic<int>* seen) {
  return std::thread([&consumer, name, seen] {
    OpenOptions o;
    o.wait = true;
    o.timeout = 20s;
    Buffer b = consumer.open(name, o);
    *seen = static_cast<const unsigned char*>(b.data())[100];
  });
}

// A raw session of this process's tenant that asked for the board, the
// board's descriptor that came with its Welcome, and this process's mapping
// of it (which outlives the session and the descriptor).
struct BoardSession {
  RawSession raw;
  v1::Welcome welcome;
  UniqueFd board;
  WakeBoard mapped;
};
std::optional<BoardSession> ConnectWithBoard(const Daemon& daemon) {
  auto raw = RawSession::Connect(daemon.socket_dir());
  EXPECT_TRUE(raw.ok());
  if (!raw.ok()) return std::nullopt;
  BoardSession s{std::move(*raw), {}, {}, {}};
  std::vector<UniqueFd> fds;
  s.welcome = HelloWithBoard(s.raw, true, &fds);
  EXPECT_EQ(fds.size(), 1u);
  if (fds.size() != 1) return std::nullopt;
  s.board = std::move(fds[0]);
  auto mapped = WakeBoard::Map(s.board.get());
  EXPECT_TRUE(mapped.ok()) << mapped.status();
  if (!mapped.ok()) return std::nullopt;
  s.mapped = std::move(*mapped);
  return s;
}

struct stat StatOf(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return st;
}

TEST(WakeBoard, ComesOnlyToASessionThatAsksAndCannotBeResized) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  {
    auto raw = RawSession::Connect(daemon.socket_dir());
    ASSERT_TRUE(raw.ok());
    std::vector<UniqueFd> fds;
    const v1::Welcome w = HelloWithBoard(*raw, false, &fds);
    EXPECT_EQ(w.wake_word(), 0u);
    EXPECT_TRUE(fds.empty());
  }
  auto a = RawSession::Connect(daemon.socket_dir());
  auto b = RawSession::Connect(daemon.socket_dir());
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<UniqueFd> fa, fb;
  const v1::Welcome wa = HelloWithBoard(*a, true, &fa);
  const v1::Welcome wb = HelloWithBoard(*b, true, &fb);
  ASSERT_EQ(fa.size(), 1u);
  ASSERT_EQ(fb.size(), 1u);
  for (uint32_t word : {wa.wake_word(), wb.wake_word()}) {
    EXPECT_GE(word, kWakeBoardNameWords);
    EXPECT_LT(word, kDaemonWord) << "the last word is the daemon's";
  }
  EXPECT_NE(wa.wake_word(), wb.wake_word()) << "each session has a word of its own";
  const struct stat sa = StatOf(fa[0].get());
  EXPECT_EQ(sa.st_ino, StatOf(fb[0].get()).st_ino) << "one board per tenant";
  EXPECT_EQ(sa.st_size, static_cast<off_t>(kWakeBoardBytes));
  // The daemon maps it too: a client that could shrink it would fault the
  // daemon's next wake.
  EXPECT_NE(::ftruncate(fa[0].get(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fa[0].get(), 1 << 20), 0);
  EXPECT_EQ(StatOf(fa[0].get()).st_size, static_cast<off_t>(kWakeBoardBytes));
}

// The board lives while a session of its tenant has it: one that comes
// later, when every earlier one has ended, gets a new page (and the daemon
// keeps no descriptor for a tenant with no session).
TEST(WakeBoard, GoesWithTheTenantsLastSession) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  WakeBoard old_board;
  {
    auto first = ConnectWithBoard(daemon);
    ASSERT_TRUE(first);
    old_board = std::move(first->mapped);
  }
  old_board.Arm(600);
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_sessions") == 0; }));
  auto second = ConnectWithBoard(daemon);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->mapped.Load(600), 0u) << "a new page, not the ended sessions' one";
  EXPECT_EQ(old_board.Load(600), 1u);
}

// Another tenant's session gets another board: the words of one tenant's
// waits are not another's to see or to wake.
TEST(WakeBoard, EachTenantHasItsOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a session as another uid";
  Daemon daemon({}, kBlueAndGreenTenants);
  ASSERT_TRUE(daemon.ok());
  auto mine = ConnectWithBoard(daemon);
  ASSERT_TRUE(mine);
  const ino_t my_board = StatOf(mine->board.get()).st_ino;

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // As tenant blue's uid: the inode of the board it is given, or 0.
    // (The group stays root's, as the test helper's does: the socket is
    // the daemon's group's.)
    uint64_t ino = 0;
    if (::setgroups(0, nullptr) == 0 && ::setuid(60001) == 0) {
      auto blue = RawSession::Connect(daemon.socket_dir());
      std::vector<UniqueFd> blue_fds;
      if (blue.ok()) {
        v1::SessionFrame hello;
        hello.mutable_hello()->set_protocol_version(kProtocolVersion);
        hello.mutable_hello()->set_wake_board(true);
        auto welcome = blue->Send(hello).ok() ? blue->Read(5s, &blue_fds)
                                              : absl::StatusOr<std::optional<v1::SessionFrame>>();
        struct stat st {};
        if (welcome.ok() && welcome->has_value() && (*welcome)->welcome().tenant() == "blue" &&
            blue_fds.size() == 1 && ::fstat(blue_fds[0].get(), &st) == 0) {
          ino = st.st_ino;
        }
      }
    }
    (void)!::write(pipe_fds[1], &ino, sizeof(ino));
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  uint64_t blue_board = 0;
  ASSERT_EQ(::read(pipe_fds[0], &blue_board, sizeof(blue_board)),
            static_cast<ssize_t>(sizeof(blue_board)));
  ::close(pipe_fds[0]);
  ::waitpid(child, nullptr, 0);
  ASSERT_NE(blue_board, 0u) << "tenant blue's session got a board";
  EXPECT_NE(blue_board, static_cast<uint64_t>(my_board));
}

// A client asleep on its word instead of its socket misses nothing: every
// frame the daemon writes to the session wakes the word.
TEST(WakeBoard, TheDaemonWakesASessionsWordAfterEachFrame) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  const v1::Welcome& w = raw->welcome;
  const WakeBoard* board = &raw->mapped;
  for (int round = 0; round < 3; ++round) {
    const uint32_t word = w.wake_word();
    const uint32_t armed = board->Arm(word);
    // An Open of a name that is not there, without waiting: answered at once.
    v1::Call call;
    call.set_request_id(raw->raw.NextRequestId());
    call.mutable_open()->mutable_ref()->set_name("not.there");
    v1::SessionFrame frame;
    *frame.mutable_call() = call;
    ASSERT_TRUE(raw->raw.Send(frame).ok());
    const auto start = std::chrono::steady_clock::now();
    board->Sleep(&word, &armed, 1, 10s);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "woken, not timed out";
    EXPECT_NE(board->Load(word), armed);
    EXPECT_EQ(board->Load(word) & 1u, 0u) << "the waker cleared the flag";
    auto answer = raw->raw.Read(5s);
    ASSERT_TRUE(answer.ok() && answer->has_value());
    EXPECT_TRUE((*answer)->has_error());
  }
}

// Ahead says "a call follows": the daemon takes it and answers nothing; the
// session goes on. Before Hello it is as any other frame then: the end.
TEST(WakeBoard, AnAheadFrameIsTakenWithoutAnAnswer) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  v1::SessionFrame ahead;
  ahead.mutable_ahead();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(raw->raw.Send(ahead).ok());
  auto nothing = raw->raw.Read(300ms);
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value()) << "no answer to Ahead";
  v1::Call call;
  call.mutable_open()->mutable_ref()->set_name("not.there");
  auto answer = raw->raw.Exchange(call);
  ASSERT_TRUE(answer.has_value()) << "the session goes on";
  EXPECT_TRUE(answer->has_error());

  auto early = RawSession::Connect(daemon.socket_dir());
  ASSERT_TRUE(early.ok());
  ASSERT_TRUE(early->Send(ahead).ok());
  EXPECT_TRUE(early->ClosedByDaemon(5s));
}

// The consumer waits for a name and sleeps; the producer's seal wakes it
// (ClientStats::seal_wakes), and it opens what the producer wrote: with the
// wake before the seal's frame (the default) and after it
// (GPUBROKER_SEAL_WAKE=after). With GPUBROKER_WAKE_BOARD=0 the same wait is
// woken by the daemon's answer alone.
TEST(WakeBoard, AProducersSealWakesAConsumerWaitingForTheName) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  for (const std::string way : {"before", "after", "off"}) {
    SCOPED_TRACE("the consumer woken: " + way);
    const bool with_board = way != "off";
    if (!with_board) ::setenv("GPUBROKER_WAKE_BOARD", "0", 1);
    if (way == "after") ::setenv("GPUBROKER_SEAL_WAKE", "after", 1);
    auto producer = Client::connect(daemon.socket_dir());
    auto consumer = Client::connect(daemon.socket_dir());
    ::unsetenv("GPUBROKER_WAKE_BOARD");
    ::unsetenv("GPUBROKER_SEAL_WAKE");
    for (const bool posted : {false, true}) {
      for (int i = 0; i < 3; ++i) {
        const std::string name = "board.frame." + way + (posted ? ".p" : ".c") + std::to_string(i);
        std::atomic<int> seen{-1};
        const double before = daemon.Metric("gpubroker_waiting_opens");
        std::thread waiter = WaitFor(consumer, name, &seen);
        ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") > before; }));
        std::this_thread::sleep_for(20ms);  // past the consumer's spin: asleep
        AllocateOptions ao;
        ao.name = name;
        Buffer a = producer.allocate(4096, ao);
        std::memset(a.data(), 40 + i, a.size());
        if (posted) {
          a.seal_posted();
        } else {
          a.seal();
        }
        waiter.join();
        EXPECT_EQ(seen, 40 + i);
      }
    }
    const ClientStats s = consumer.stats();
    if (with_board) {
      // Each of the six waits slept on the board when its seal came; the
      // producer's wake reaches it first unless the daemon's answer beats
      // it, which a loaded machine allows now and then (and more often when
      // the wake goes after the seal's frame).
      EXPECT_GE(s.seal_wakes, 3u);
      EXPECT_LE(s.seal_wakes, 6u);
    } else {
      EXPECT_EQ(s.seal_wakes, 0u);
    }
  }
}

// A consumer that holds a buffer before its seal and waits for the seal by
// id (wait_sealed) is woken by the producer's seal too, on the id's word.
TEST(WakeBoard, AProducersSealWakesAConsumerWaitingForItById) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 3; ++i) {
    AllocateOptions ao;
    ao.name = "held.early." + std::to_string(i);
    Buffer a = producer.allocate(4096, ao);
    a.publish();
    OpenOptions early;
    early.allow_unsealed = true;
    Buffer held = consumer.open(ao.name, early);
    ASSERT_NE(held.info().state, BufferState::kSealed);
    const double before = daemon.Metric("gpubroker_waiting_opens");
    std::thread waiter([&] { held.wait_sealed(20s); });
    ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") > before; }));
    std::this_thread::sleep_for(20ms);  // past the consumer's spin: asleep
    std::memset(a.data(), 7, a.size());
    a.seal();
    waiter.join();
    EXPECT_EQ(held.info().state, BufferState::kSealed);
    EXPECT_EQ(static_cast<const unsigned char*>(held.data())[4095], 7);
  }
  EXPECT_GE(consumer.stats().seal_wakes, 2u);
}

// A neighbour of the tenant scribbles on every word and wakes them all, or
// clears every flag, while consumers wait and producers seal: every wait is
// still answered, with the right buffer.
TEST(WakeBoard, ANeighbourScribblingOnTheBoardCostsWakeUpsNotAnswers) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  const WakeBoard* board = &raw->mapped;
  void* page =
      ::mmap(nullptr, kWakeBoardBytes, PROT_READ | PROT_WRITE, MAP_SHARED, raw->board.get(), 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* words = static_cast<volatile uint32_t*>(page);

  std::atomic<bool> stop{false};
  std::thread scribbler([&] {
    std::mt19937 rng(11);
    for (int turn = 0; !stop; ++turn) {
      for (uint32_t i = 0; i < kWakeBoardWords; ++i) {
        words[i] = (turn % 2 == 0) ? static_cast<uint32_t>(rng()) : 0u;
        if (turn % 2 == 0) board->Wake(i);
      }
      std::this_thread::sleep_for(100us);
    }
  });
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  for (int i = 0; i < 20; ++i) {
    const std::string name = "scribbled." + std::to_string(i);
    std::atomic<int> seen{-1};
    std::thread waiter = WaitFor(consumer, name, &seen);
    std::this_thread::sleep_for(5ms);
    AllocateOptions ao;
    ao.name = name;
    Buffer a = producer.allocate(4096, ao);
    std::memset(a.data(), i + 1, a.size());
    a.seal();
    waiter.join();
    EXPECT_EQ(seen, i + 1);
  }
  stop = true;
  scribbler.join();
  ::munmap(page, kWakeBoardBytes);
}

// A neighbour that wakes a sleeper's words without pause costs it CPU, but
// bounded: each wake for nothing is followed by the client's spin and then a
// millisecond in poll, out of the board's reach, so the sleeper spends a
// fraction of a CPU (about a sixth with the default spin), not all of one.
TEST(WakeBoard, ANeighbourWakingASleeperWithoutPauseCostsItAFractionOfACpu) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  const WakeBoard* board = &raw->mapped;
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  const std::string name = "woken.for.nothing";
  const uint32_t word = WakeWordOfName(name);

  std::atomic<bool> stop{false};
  std::thread waker([&] {
    while (!stop) {
      board->Wake(word);
      for (uint32_t w = kWakeBoardNameWords; w < kWakeBoardWords; ++w) board->Wake(w);
    }
  });
  double cpu_seconds = -1, wall_seconds = 0;
  int seen = -1;
  std::thread waiter([&] {
    const double cpu_start = ThreadCpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    OpenOptions o;
    o.wait = true;
    o.timeout = 20s;
    Buffer b = consumer.open(name, o);
    cpu_seconds = ThreadCpuSeconds() - cpu_start;
    wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seen = static_cast<const unsigned char*>(b.data())[7];
  });
  std::this_thread::sleep_for(1500ms);
  AllocateOptions ao;
  ao.name = name;
  Buffer a = producer.allocate(4096, ao);
  std::memset(a.data(), 77, a.size());
  a.seal();
  waiter.join();
  stop = true;
  waker.join();
  EXPECT_EQ(seen, 77);
  ASSERT_GT(wall_seconds, 1.0);
  // Woken for nothing many times over (the words moved while it slept)...
  EXPECT_GT(consumer.stats().seal_wakes, 10u);
  // ...and yet mostly asleep: a wake that put it back to its spin at once
  // would keep it on a CPU for the whole wait.
  EXPECT_LT(cpu_seconds, 0.5 * wall_seconds)
      << "the sleeper spent " << cpu_seconds << " s of CPU in a wait of " << wall_seconds << " s";
}

// The board's last word says what the daemon's session thread does:
// polling for a while after each frame and while a consumer keeps it awake,
// asleep otherwise; and with no busy poll, asleep in a way that an Ahead
// frame would not change.
TEST(WakeBoard, TheDaemonsWordSaysWhetherItPolls) {
  Daemon daemon({"--max-wait-awake-us", "10000000"});
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  const WakeBoard& board = raw->mapped;
  EXPECT_TRUE(Eventually([&] { return board.daemon_state() == DaemonState::kAsleep; }));

  auto consumer = Client::connect(daemon.socket_dir());
  OpenOptions o;
  o.wait = true;
  o.timeout = 20s;
  o.daemon_awake = 20s;
  std::thread waiter([&] { consumer.open("kept.awake", o); });
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 1; }));
  // Polling for as long as the wait lasts, far past the busy poll.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(board.daemon_state(), DaemonState::kPolling) << "read " << i;
    std::this_thread::sleep_for(20ms);
  }
  auto producer = Client::connect(daemon.socket_dir());
  AllocateOptions ao;
  ao.name = "kept.awake";
  producer.allocate(4096, ao).seal();
  waiter.join();
  EXPECT_TRUE(Eventually([&] { return board.daemon_state() == DaemonState::kAsleep; }));

  Daemon never_polls({"--busy-poll-us", "0"});
  ASSERT_TRUE(never_polls.ok());
  auto other = ConnectWithBoard(never_polls);
  ASSERT_TRUE(other);
  EXPECT_TRUE(
      Eventually([&] { return other->mapped.daemon_state() == DaemonState::kAsleepNoPoll; }));
}

// A seal wakes the daemon ahead of its frame (an Ahead frame, counted by
// gpubroker_session_aheads_total) when the board says the daemon sleeps and
// its wake-up has something to overlap: on the host backend, a consumer
// sleeping for the buffer (a CUDA seal's fence too: WantsAhead). Not when
// the daemon polls, as it does while a consumer keeps it awake; there the
// seal wakes only the consumer. GPUBROKER_SEAL_AHEAD=sleepers goes back to
// an Ahead whenever a consumer sleeps.
TEST(WakeBoard, ASealWakesTheDaemonAheadOnlyWhenItSleeps) {
  Daemon daemon({"--max-wait-awake-us", "10000000"});
  ASSERT_TRUE(daemon.ok());
  auto raw = ConnectWithBoard(daemon);
  ASSERT_TRUE(raw);
  const WakeBoard& board = raw->mapped;
  const std::string aheads = "gpubroker_session_aheads_total";
  auto asleep = [&] { return board.daemon_state() == DaemonState::kAsleep; };
  auto producer = Client::connect(daemon.socket_dir());
  auto consumer = Client::connect(daemon.socket_dir());
  // Seals `name` while the consumer waits for it; `o` says how it waits.
  auto seal_awaited = [&](const std::string& name, OpenOptions o, Client& by) {
    o.wait = true;
    o.timeout = 20s;
    std::atomic<int> seen{-1};
    std::thread waiter([&] {
      Buffer b = consumer.open(name, o);
      seen = static_cast<const unsigned char*>(b.data())[9];
    });
    AllocateOptions ao;
    ao.name = name;
    Buffer a = by.allocate(4096, ao);
    std::memset(a.data(), 9, a.size());
    EXPECT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 1; }));
    if (o.daemon_awake.count() > 0) {
      EXPECT_TRUE(Eventually([&] { return board.daemon_state() == DaemonState::kPolling; }));
    } else {
      EXPECT_TRUE(Eventually(asleep));
    }
    // Past the consumer's spin: asleep on its name's word.
    EXPECT_TRUE(Eventually([&] { return (board.Load(WakeWordOfName(name)) & 1u) != 0; }));
    a.seal();
    waiter.join();
    EXPECT_EQ(seen, 9);
  };

  // Nobody waits, the daemon sleeps: on the host there is nothing to overlap.
  for (int i = 0; i < 3; ++i) {
    AllocateOptions ao;
    ao.name = "nobody.waits." + std::to_string(i);
    Buffer a = producer.allocate(4096, ao);
    ASSERT_TRUE(Eventually(asleep));
    a.seal();
    EXPECT_EQ(a.info().state, BufferState::kSealed);
  }
  EXPECT_EQ(daemon.Metric(aheads), 0);

  // A consumer sleeps, and so does the daemon: both are woken.
  seal_awaited("asleep.for", OpenOptions{}, producer);
  EXPECT_EQ(daemon.Metric(aheads), 1) << "a sleeping daemon is woken ahead";

  // The consumer keeps the daemon polling: the seal wakes only the consumer.
  OpenOptions kept;
  kept.daemon_awake = 20s;
  seal_awaited("awake.for", kept, producer);
  EXPECT_EQ(daemon.Metric(aheads), 1) << "no Ahead to a polling daemon";

  // The earlier rule sends one all the same.
  ::setenv("GPUBROKER_SEAL_AHEAD", "sleepers", 1);
  auto old_way = Client::connect(daemon.socket_dir());
  ::unsetenv("GPUBROKER_SEAL_AHEAD");
  seal_awaited("awake.for.old", kept, old_way);
  EXPECT_EQ(daemon.Metric(aheads), 2);
}

}  // namespace
}  // namespace gpubroker::testing
