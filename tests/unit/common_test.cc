// Frames, names, units, tokens, the wake board.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/names.h"
#include "common/token.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "common/wake_board.h"
#include "common/wire/frame.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

v1::SessionFrame Hello(const std::string& name) {
  v1::SessionFrame f;
  f.mutable_hello()->set_protocol_version(1);
  f.mutable_hello()->set_client_name(name);
  return f;
}

TEST(FrameCodec, RoundTripsFramesSplitAtEveryByte) {
  std::string stream = EncodeFrame(Hello("a")) + EncodeFrame(Hello(std::string(300, 'b')));
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameDecoder d;
    d.Append(std::string_view(stream).substr(0, cut));
    std::vector<std::string> names;
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      names.push_back((*f)->hello().client_name());
    }
    d.Append(std::string_view(stream).substr(cut));
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      names.push_back((*f)->hello().client_name());
    }
    ASSERT_EQ(names.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(names[0], "a");
    EXPECT_EQ(names[1], std::string(300, 'b'));
    EXPECT_EQ(d.buffered(), 0u);
  }
}

TEST(FrameCodec, RejectsOversizeLength) {
  FrameDecoder d;
  const char header[4] = {0, 0, 0, 0x40};  // 1 GiB
  d.Append(std::string_view(header, 4));
  auto f = d.Next();
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FrameCodec, RejectsBodyThatDoesNotParse) {
  FrameDecoder d;
  const char bytes[] = {5, 0, 0, 0, '\xff', '\xff', '\xff', '\xff', '\xff'};
  d.Append(std::string_view(bytes, sizeof(bytes)));
  EXPECT_FALSE(d.Next().ok());
}

TEST(FrameCodec, RejectsEmptyFrame) {
  FrameDecoder d;
  const char bytes[] = {0, 0, 0, 0};
  d.Append(std::string_view(bytes, sizeof(bytes)));
  EXPECT_FALSE(d.Next().ok());
}

TEST(FrameCodec, TruncatedFrameWaitsForMore) {
  FrameDecoder d;
  std::string frame = EncodeFrame(Hello("xyz"));
  d.Append(std::string_view(frame).substr(0, frame.size() - 1));
  auto f = d.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_value());
  EXPECT_EQ(d.buffered(), frame.size() - 1);
}

TEST(Names, AcceptsTheDocumentedCharset) {
  EXPECT_TRUE(ValidateName("a").ok());
  EXPECT_TRUE(ValidateName("_x").ok());
  EXPECT_TRUE(ValidateName("dataset:train.v2-shard_07").ok());
  EXPECT_TRUE(ValidateName(std::string(kMaxNameLength, 'n')).ok());
}

TEST(Names, RejectsWhatIsOutside) {
  EXPECT_FALSE(ValidateName("").ok());
  EXPECT_FALSE(ValidateName("a/b").ok());
  EXPECT_FALSE(ValidateName("7up").ok());
  EXPECT_FALSE(ValidateName(".hidden").ok());
  EXPECT_FALSE(ValidateName("has space").ok());
  EXPECT_FALSE(ValidateName(std::string("nul\0x", 5)).ok());
  EXPECT_FALSE(ValidateName(std::string(kMaxNameLength + 1, 'n')).ok());
  auto s = ValidateName(std::string(300, 'n'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("300"), std::string::npos);
  EXPECT_NE(std::string(ValidateName("a/b").message()).find("'/'"), std::string::npos);
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseBytes("64mib"), 64u << 20);
  EXPECT_EQ(*ParseBytes("1G"), 1u << 30);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3u << 29);
  EXPECT_EQ(*ParseBytes("2 KiB"), 2048u);
  EXPECT_EQ(*ParseBytes("1GB"), 1000000000u);
  EXPECT_EQ(*ParseBytes("512k"), 512u * 1024);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("MiB").ok());
  EXPECT_FALSE(ParseBytes("12 parsecs").ok());
  EXPECT_FALSE(ParseBytes("-1").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999").ok());
  EXPECT_FALSE(ParseBytes("17000000TiB").ok());
}

TEST(Units, ParsesSizesOrShares) {
  auto share = ParseSizeOrShare(" 90% ");
  ASSERT_TRUE(share.ok());
  EXPECT_TRUE(share->is_share());
  EXPECT_EQ(share->Of(1000), 900u);
  auto bytes = ParseSizeOrShare("64GiB");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(bytes->is_share());
  EXPECT_EQ(bytes->Of(1), uint64_t{64} << 30);
  EXPECT_FALSE(ParseSizeOrShare("0").ok());
  EXPECT_FALSE(ParseSizeOrShare("0%").ok());
  EXPECT_FALSE(ParseSizeOrShare("101%").ok());
  EXPECT_FALSE(ParseSizeOrShare("lots").ok());
  EXPECT_TRUE(ParseSizeOrShare("100%").ok());
}

TEST(Units, FormatsSizes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(64u << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(3u << 29), "1.50 GiB");
  EXPECT_EQ(FormatMicros(12.34), "12.3 us");
  EXPECT_EQ(FormatMicros(std::chrono::nanoseconds(2500)), "2.5 us");
}

TEST(Units, ParsesDurations) {
  EXPECT_EQ(*ParseDurationMs("500ms"), 500u);
  EXPECT_EQ(*ParseDurationMs("30s"), 30000u);
  EXPECT_EQ(*ParseDurationMs("30"), 30000u);
  EXPECT_EQ(*ParseDurationMs("5m"), 300000u);
  EXPECT_EQ(*ParseDurationMs("2h"), 7200000u);
  EXPECT_FALSE(ParseDurationMs("5 fortnights").ok());
}

TEST(Tokens, HexRoundTripAndRejectsJunk) {
  Token t = RandomToken();
  EXPECT_NE(t, RandomToken());
  EXPECT_EQ(TokenToHex(t).size(), 32u);
  EXPECT_EQ(*TokenFromHex(TokenToHex(t)), t);
  EXPECT_FALSE(TokenFromHex("xyz"));
  EXPECT_FALSE(TokenFromHex(std::string(32, 'g')));
  EXPECT_FALSE(TokenFromHex(std::string(31, 'a')));
}

// Every process of a tenant, whatever its build, picks the same word for a
// name: the hash is fixed (FNV-1a), not std::hash.
TEST(WakeBoardWords, ANameHasTheSameWordEverywhere) {
  EXPECT_EQ(WakeWordOfName("a"), 140u);
  EXPECT_EQ(WakeWordOfName("bench.seal.3"), 267u);
  EXPECT_EQ(WakeWordOfId(1), 420u);
  EXPECT_EQ(WakeWordOfId(12345), 76u);
  EXPECT_LT(WakeWordOfId(~0ull), kWakeBoardNameWords);
  for (const std::string& name :
       {std::string("a"), std::string("frames.0"), std::string(128, 'x')}) {
    EXPECT_LT(WakeWordOfName(name), kWakeBoardNameWords);
  }
}

TEST(WakeBoardWords, AWakeReachesOnlyASleeperThatArmed) {
  auto board = WakeBoard::Create();
  ASSERT_TRUE(board.ok()) << board.status();
  EXPECT_FALSE(board->Wake(3)) << "nobody armed: one load, no futex call";
  const uint32_t armed = board->Arm(3);
  EXPECT_EQ(armed & 1u, 1u);
  EXPECT_TRUE(board->Wake(3));
  EXPECT_NE(board->Load(3), armed) << "the count moved";
  EXPECT_EQ(board->Load(3) & 1u, 0u) << "and the flag is cleared";
  EXPECT_FALSE(board->Wake(3));
  // A sleep on a value that has moved returns at once.
  const auto start = std::chrono::steady_clock::now();
  const uint32_t word = 3;
  board->Sleep(&word, &armed, 1, std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// Two words at once (a session's and a name's): a wake of either ends the
// sleep; with neither, it ends at its timeout.
TEST(WakeBoardWords, ASleepOnTwoWordsEndsWithAWakeOfEither) {
  auto board = WakeBoard::Create();
  ASSERT_TRUE(board.ok());
  for (const uint32_t woken : {700u, 9u}) {
    const uint32_t words[2] = {700, 9};
    const uint32_t values[2] = {board->Arm(words[0]), board->Arm(words[1])};
    std::atomic<bool> done{false};
    std::thread sleeper([&] {
      board->Sleep(words, values, 2, std::chrono::seconds(20));
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done);
    EXPECT_TRUE(board->Wake(woken));
    sleeper.join();
    EXPECT_TRUE(done);
    board->Wake(words[0]);  // clear what is left armed
    board->Wake(words[1]);
  }
  const uint32_t words[2] = {700, 9};
  const uint32_t values[2] = {board->Arm(words[0]), board->Arm(words[1])};
  const auto start = std::chrono::steady_clock::now();
  board->Sleep(words, values, 2, std::chrono::milliseconds(30));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(25));
}

// A second mapping of the same board (another process's, in practice) sees
// and wakes the same words.
// A seal wakes the daemon ahead of its frame only where the daemon sleeps
// and will poll after the Ahead, and its wake-up has something to overlap.
TEST(WakeBoardWords, ASealWakesTheDaemonAheadOnlyWhereItHelps) {
  using D = DaemonState;
  for (bool consumer : {false, true}) {
    for (bool fence : {false, true}) {
      EXPECT_EQ(WantsAhead(D::kAsleep, consumer, fence, false), consumer || fence)
          << consumer << fence;
      EXPECT_FALSE(WantsAhead(D::kPolling, consumer, fence, false)) << "it reads at once";
      EXPECT_FALSE(WantsAhead(D::kAsleepNoPoll, consumer, fence, false)) << "it sleeps again";
      // The earlier rule: whenever a consumer sleeps.
      for (D d : {D::kAsleep, D::kPolling, D::kAsleepNoPoll}) {
        EXPECT_EQ(WantsAhead(d, consumer, fence, true), consumer);
      }
    }
  }
  // A word that holds none of the states (a neighbour wrote it) asks for none.
  EXPECT_FALSE(WantsAhead(static_cast<D>(7), true, true, false));
  static_assert(kDaemonWord == kWakeBoardWords - 1 &&
                kWakeBoardNameWords + kWakeBoardSessionWords == kDaemonWord);
}

TEST(WakeBoardWords, AnotherMappingSharesTheWords) {
  auto board = WakeBoard::Create();
  ASSERT_TRUE(board.ok());
  auto other = WakeBoard::Map(board->fd());
  ASSERT_TRUE(other.ok()) << other.status();
  const uint32_t armed = other->Arm(42);
  EXPECT_EQ(board->Load(42), armed);
  EXPECT_TRUE(board->Wake(42));
  EXPECT_NE(other->Load(42), armed);
}

// A wait of a millisecond or two on a socket that stays quiet waits that
// long: poll's whole milliseconds are rounded up, never down to a poll that
// returns at once (what a reader woken ahead of its answer waits with).
TEST(UnixSocket, AShortWaitForAQuietSocketWaitsItsWholeTimeout) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  for (const auto timeout : {std::chrono::milliseconds(1), std::chrono::milliseconds(2)}) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = WaitReadable(a.get(), timeout);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_GE(std::chrono::steady_clock::now() - start, timeout);
  }
  ASSERT_EQ(::write(b.get(), "x", 1), 1);
  EXPECT_TRUE(WaitReadable(a.get(), std::chrono::milliseconds(1)).ok());
}

}  // namespace
}  // namespace gpubroker
