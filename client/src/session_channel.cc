#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "client/src/client_impl.h"
#include "common/spin.h"
#include "common/strings.h"
#include "common/unix_socket.h"
#include "common/version.h"
#include "gpubroker/error.hpp"

namespace gpubroker::detail {
namespace {

// The longest a reader blocks in one poll: it looks at its deadline (and a
// deadline of days fits in poll's int) between slices.
constexpr auto kReadSlice = std::chrono::milliseconds(1000);

// How long a reader woken on the wake board waits on its socket, after its
// spin, before it goes back to the board: the daemon's answer follows a
// producer's wake by the daemon's own wake-up and turn (tens of µs, a few
// hundred when its CPU wakes late).
constexpr auto kAwakeAfterWake = std::chrono::milliseconds(1);

uint64_t RequestIdOf(const v1::SessionFrame& f) {
  if (f.has_reply()) return f.reply().request_id();
  if (f.has_error()) return f.error().request_id();
  if (f.has_fd_grant()) return f.fd_grant().request_id();
  return 0;
}

double MicrosSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

thread_local SessionChannel::Timing last_timing;

}  // namespace

const SessionChannel::Timing& SessionChannel::LastTiming() { return last_timing; }

SessionChannel::SessionChannel(const std::string& path, const std::string& client_name,
                               std::chrono::milliseconds timeout, std::chrono::microseconds spin)
    : timeout_(timeout), spin_(spin) {
  auto fd = ConnectUnix(path);
  if (!fd.ok()) {
    ThrowError(ErrorCode::kUnavailable,
               StrCat("no gpubrokerd answers at ", path, ": ", View(fd.status().message())));
  }
  fd_ = std::move(*fd);
  v1::SessionFrame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_client_name(client_name);
  // Answers to Open and Claim in the flat layout, which this process reads
  // in about half of protobuf's time when it has just woken
  // (common/wire/flat_answer.h); GPUBROKER_FLAT_ANSWERS=0 asks for protobuf.
  const char* flat = std::getenv("GPUBROKER_FLAT_ANSWERS");
  if (flat == nullptr || std::string_view(flat) != "0") {
    hello.mutable_hello()->set_flat_answers(true);
    hello.mutable_hello()->set_flat_publish_answers(true);
    decoder_.AcceptFlatAnswers();
  }
  // A wait for a name sleeps on the tenant's wake board, where the
  // producer's seal wakes it (common/wake_board.h); GPUBROKER_WAKE_BOARD=0
  // sleeps on the socket alone.
  const char* board = std::getenv("GPUBROKER_WAKE_BOARD");
  hello.mutable_hello()->set_wake_board(board == nullptr || std::string_view(board) != "0");
  const char* seal_wake = std::getenv("GPUBROKER_SEAL_WAKE");
  wake_after_frame_ = seal_wake != nullptr && std::string_view(seal_wake) == "after";
  // A seal wakes the daemon ahead of its frame when the board says it is
  // asleep and its wake-up has something to overlap (WantsAhead);
  // GPUBROKER_SEAL_AHEAD=sleepers when a consumer sleeps for the buffer
  // instead, whatever the daemon does (the earlier way, for comparing the
  // two).
  const char* seal_ahead = std::getenv("GPUBROKER_SEAL_AHEAD");
  ahead_only_for_sleepers_ = seal_ahead != nullptr && std::string_view(seal_ahead) == "sleepers";
  const absl::Status sent = SendAll(fd_.get(), EncodeFrame(hello));
  // The answer to Hello has no request id: read it here, before anyone else can.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<v1::SessionFrame> reply;
  std::string failure;
  std::vector<UniqueFd> received;  // the wake board, with the Welcome
  while (!reply && failure.empty()) {
    auto frame = decoder_.Next();
    if (!frame.ok()) {
      failure = StrCat("bad frame from the daemon: ", View(frame.status().message()));
    } else if (frame->has_value()) {
      reply = std::move(**frame);
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (!WaitReadable(fd_.get(), std::max(left, std::chrono::milliseconds(0))).ok()) {
        ThrowError(ErrorCode::kDeadlineExceeded, "session.sock: the daemon did not answer in time");
      }
      char buf[4096];
      auto got = RecvSome(fd_.get(), buf, sizeof(buf), &received);
      if (!got.ok()) {
        failure = std::string(View(got.status().message()));
      } else if (got->eof) {
        failure = "gpubrokerd closed the session";
      } else {
        decoder_.Append(std::string_view(buf, got->bytes));
      }
    }
  }
  // A daemon that turns a connection away (too many of this uid's, or no
  // descriptors left) says why and closes, maybe before our Hello arrived:
  // its answer is what to report, not the failed write.
  if (reply && reply->has_error()) ThrowErrorFrame(reply->error());
  if (!sent.ok())
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(sent.message())));
  if (!reply) ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", failure));
  if (!reply->has_welcome() || reply->welcome().token().size() != 16) {
    ThrowError(ErrorCode::kInternal, "session.sock: the daemon did not answer Hello with Welcome");
  }
  welcome_ = reply->welcome();
  if (welcome_.wake_word() >= kWakeBoardNameWords && welcome_.wake_word() < kWakeBoardWords &&
      !received.empty()) {
    // Without it (a board that does not map), waits sleep on the socket.
    if (auto mapped = WakeBoard::Map(received.front().get()); mapped.ok()) {
      board_ = std::move(*mapped);
      wake_word_ = welcome_.wake_word();
    }
  }
  // The calls of a hand-over's path in the flat layout, where the daemon
  // reads them: with the flat answers, neither side of an Open runs
  // protobuf's parser (common/wire/flat_call.h). GPUBROKER_FLAT_CALLS=0
  // sends protobuf.
  const char* flat_calls = std::getenv("GPUBROKER_FLAT_CALLS");
  if (welcome_.flat_calls() && (flat_calls == nullptr || std::string_view(flat_calls) != "0")) {
    flat_calls_ = FlatFrames::kCalls;
  }
}

SessionChannel::~SessionChannel() = default;

void SessionChannel::ThrowEnded() const {
  if (ended_by_) ThrowErrorFrame(*ended_by_);
  ThrowError(
      ended_.code() == absl::StatusCode::kInternal ? ErrorCode::kInternal : ErrorCode::kUnavailable,
      std::string(View(ended_.message())));
}

void SessionChannel::Dispatch(v1::SessionFrame frame) {
  UniqueFd fd;
  if (frame.has_fd_grant()) {
    // The descriptor travelled in the same sendmsg as this frame, so it has
    // arrived by the time the frame is complete.
    if (fds_.empty()) {
      ended_ = absl::InternalError("session.sock: FdGrant without a descriptor");
      return;
    }
    fd = std::move(fds_.front());
    fds_.pop_front();
  }
  if (frame.has_goodbye()) {
    ended_ =
        absl::UnavailableError(StrCat("gpubrokerd ended the session: ", frame.goodbye().reason()));
    return;
  }
  const uint64_t id = RequestIdOf(frame);
  if (id == 0) {
    if (frame.has_error()) {
      ended_by_ = frame.error();  // the session failed
      ended_ = absl::UnavailableError(frame.error().message());
      return;
    }
    // Blocks that came back (just before the answer they travel with, so
    // handled before its caller sees it) and requests to unmap.
    Unasked(frame);
    return;
  }
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    // The answer to a request whose caller gave up. An Open granted by then
    // holds a lease that nobody will release: give it back.
    if (frame.has_reply() && frame.reply().has_open()) {
      orphans_.push_back(frame.reply().open().buffer().id());
    }
    return;
  }
  Slot& slot = *it->second;
  slot.answer.frame = std::move(frame);
  slot.answer.fd = std::move(fd);
  if (slot.posted && !slot.done) posted_waiting_--;
  slot.done = true;
}

void SessionChannel::DispatchFlat(const FlatAnswerFacts& facts, std::string_view body) {
  auto it = slots_.find(facts.request_id);
  if (it == slots_.end()) {
    // As in Dispatch: an Open granted after its caller gave up.
    if (facts.kind == FlatAnswerFacts::Kind::kOpen && facts.has_buffer) {
      orphans_.push_back(facts.id);
    }
    return;
  }
  Slot& slot = *it->second;
  slot.answer.flat.assign(body);
  if (slot.posted && !slot.done) posted_waiting_--;
  slot.done = true;
}

bool SessionChannel::ReadSome(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout,
                              std::chrono::microseconds spin, uint32_t sleep_word) {
  lock.unlock();
  char buf[16 * 1024];
  std::vector<UniqueFd> received;
  absl::StatusOr<Received> got = Received{};
  bool arrived = false;
  if (spin.count() > 0) {
    // An answer on this socket takes tens of microseconds; waking from a
    // blocked poll can take as long again. Wait awake first (common/spin.h).
    const auto until = std::chrono::steady_clock::now() + spin;
    for (;;) {
      got = RecvSome(fd_.get(), buf, sizeof(buf), &received, /*dont_wait=*/true);
      if (!got.ok() || got->eof || got->bytes > 0) {
        arrived = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      SpinPause();
    }
  }
  absl::Status readable = absl::OkStatus();
  if (!arrived && sleep_word != kNoWord) {
    readable = SleepOnBoard(sleep_word, std::min(timeout, kReadSlice), spin, buf, sizeof(buf),
                            &received, &got);
  } else if (!arrived) {
    readable = WaitReadable(fd_.get(), std::min(timeout, kReadSlice));
    if (readable.ok()) got = RecvSome(fd_.get(), buf, sizeof(buf), &received);
  }
  lock.lock();
  if (readable.code() == absl::StatusCode::kDeadlineExceeded) return false;
  if (!readable.ok()) {
    ended_ = absl::UnavailableError(StrCat("session.sock: ", View(readable.message())));
    return false;
  }
  if (!got.ok()) {
    ended_ = absl::UnavailableError(StrCat("session.sock: ", View(got.status().message())));
    return false;
  }
  if (got->eof) {
    ended_ = absl::UnavailableError("gpubrokerd closed the session");
    return false;
  }
  for (auto& r : received) fds_.push_back(std::move(r));
  decoder_.Append(std::string_view(buf, got->bytes));
  while (ended_.ok()) {
    auto body = decoder_.NextBody();
    absl::Status read = body.status();
    if (read.ok() && !body->has_value()) return arrived;
    if (read.ok() && (*body)->flat) {
      // An Open's or a Claim's answer: checked and matched to its caller
      // here, and kept as its bytes, which the caller reads in place
      // (Grant) instead of through a message.
      FlatAnswerRead answer;
      read = DecodeFlatAnswer((*body)->bytes, &answer);
      if (read.ok()) DispatchFlat(answer.facts(), (*body)->bytes);
    } else if (read.ok()) {
      v1::SessionFrame frame;
      read = FrameDecoder::Decode(**body, FlatFrames::kAnswers, &frame);
      if (read.ok()) Dispatch(std::move(frame));
    }
    if (!read.ok()) {
      ended_ = absl::InternalError(
          StrCat("session.sock: bad frame from the daemon: ", View(read.message())));
      return false;
    }
  }
  return arrived;
}

absl::Status SessionChannel::SleepOnBoard(uint32_t sleep_word, std::chrono::milliseconds timeout,
                                          std::chrono::microseconds spin, char* buf, size_t size,
                                          std::vector<UniqueFd>* received,
                                          absl::StatusOr<Received>* got) {
  const uint32_t words[2] = {wake_word_, sleep_word};
  const uint32_t values[2] = {board_.Arm(words[0]), board_.Arm(words[1])};
  // Armed first, then one more look: a frame written before the daemon saw
  // the flag is on the socket now; one written after wakes the word.
  auto ready = [&] {
    *got = RecvSome(fd_.get(), buf, size, received, /*dont_wait=*/true);
    return !got->ok() || (*got)->eof || (*got)->bytes > 0;
  };
  if (ready()) return absl::OkStatus();
  board_.Sleep(words, values, 2, timeout);
  const bool by_seal = board_.Load(words[1]) != values[1];
  if (board_.Load(words[0]) == values[0] && !by_seal) {
    // The slice passed (or a signal): the caller looks at its deadline.
    return ready() ? absl::OkStatus() : absl::DeadlineExceededError("nothing yet");
  }
  if (by_seal) seal_wakes_.fetch_add(1, std::memory_order_relaxed);
  if (ready()) return absl::OkStatus();
  // Woken ahead of the answer (by the producer's seal), which is tens of µs
  // away: wait for it as a call waits for its answer, awake for the
  // client's spin (giving the CPU to whatever else is ready to run, the
  // daemon included), then on the socket. Either way on a CPU that has
  // just woken, rather than asleep on the board.
  if (spin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + spin;
    do {
      SpinPause();
      if (ready()) return absl::OkStatus();
    } while (std::chrono::steady_clock::now() < until);
  }
  absl::Status readable = WaitReadable(fd_.get(), kAwakeAfterWake);
  if (!readable.ok()) return readable;
  *got = RecvSome(fd_.get(), buf, size, received);
  return absl::OkStatus();
}

void SessionChannel::SealAhead(std::string_view name, uint64_t id, bool records_fence) {
  if (!board_.valid()) return;
  // Whoever sleeps for the name, or for the id (a wait_sealed).
  const uint32_t words[2] = {name.empty() ? kNoWord : WakeWordOfName(name),
                             id == 0 ? kNoWord : WakeWordOfId(id)};
  auto flagged = [&](uint32_t word) { return word != kNoWord && (board_.Load(word) & 1u) != 0; };
  const bool sleepers = flagged(words[0]) || flagged(words[1]);
  // The daemon, when it sleeps: woken now, it comes out of its wait while
  // the fence is recorded and polls for the seal's frame (WantsAhead).
  const bool ahead =
      WantsAhead(board_.daemon_state(), sleepers, records_fence, ahead_only_for_sleepers_);
  if (!sleepers && !ahead) return;
  // The daemon first (its wake-up is the longer path: it then serves the
  // seal and writes the answer), then the consumer. A failed send shows on
  // the seal's own frame.
  static const std::string kAhead = [] {
    v1::SessionFrame frame;
    frame.mutable_ahead();
    return EncodeFrame(frame);
  }();
  std::lock_guard send(send_mu_);
  if (ahead) (void)SendAll(fd_.get(), kAhead);
  if (!sleepers) return;
  std::copy(std::begin(words), std::end(words), pending_wake_);
  if (!wake_after_frame_) WakePending();
}

void SessionChannel::WakePending() {
  for (uint32_t& word : pending_wake_) {
    if (word != kNoWord) board_.Wake(word);
    word = kNoWord;
  }
}

absl::Status SessionChannel::SendFrame(std::string_view bytes) {
  std::lock_guard send(send_mu_);
  absl::Status sent = SendAll(fd_.get(), bytes);
  WakePending();
  return sent;
}

namespace {

// The name part of an Open's reference ("name" or "tenant/name").
std::string_view NamePart(std::string_view ref) {
  const size_t slash = ref.find('/');
  return slash == std::string_view::npos ? ref : ref.substr(slash + 1);
}

}  // namespace

uint32_t SessionChannel::SleepWordOf(const v1::Call& call) const {
  if (!board_.valid() || !call.has_open() || !call.open().wait()) return kNoWord;
  const v1::BufferRef& ref = call.open().ref();
  if (ref.has_name()) return WakeWordOfName(NamePart(ref.name()));
  if (ref.has_id()) return WakeWordOfId(ref.id());
  return kNoWord;
}

uint32_t SessionChannel::SleepWordOf(const FlatCallFacts& call) const {
  if (!board_.valid() || call.kind != FlatCallFacts::Kind::kOpen || !call.wait) return kNoWord;
  if (call.by_name) return WakeWordOfName(NamePart(call.name));
  if (call.by_id) return WakeWordOfId(call.id);
  return kNoWord;
}

void SessionChannel::ReleaseOrphans() {
  std::vector<uint64_t> orphans;
  {
    std::lock_guard lock(mu_);
    orphans.swap(orphans_);
  }
  for (uint64_t buffer : orphans) {
    v1::SessionFrame frame;
    {
      std::lock_guard lock(mu_);
      frame.mutable_call()->set_request_id(next_request_id_++);  // its answer is dropped
    }
    frame.mutable_call()->mutable_release()->set_id(buffer);
    std::lock_guard send(send_mu_);
    (void)SendAll(fd_.get(), EncodeFrame(frame));
  }
}

SessionChannel::Answer SessionChannel::Exchange(const std::string& frame, uint64_t id,
                                                std::chrono::milliseconds timeout,
                                                std::chrono::microseconds awake,
                                                uint32_t sleep_word) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  Slot slot;
  slot.sleep_word = sleep_word;
  {
    std::lock_guard lock(mu_);
    if (!ended_.ok()) ThrowEnded();
    slots_[id] = &slot;
    CallerIn();  // before the frame goes: its answer must not wake Poll
  }
  if (absl::Status s = SendFrame(frame); !s.ok()) {
    std::lock_guard lock(mu_);
    slots_.erase(id);
    CallerOut();
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(s.message())));
  }
  const auto sent = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  bool read = false;
  bool awake_read = false;
  try {
    // Never past the deadline (which also keeps the sum from overflowing).
    Await(lock, slot, id, deadline, &read, &awake_read,
          start + std::min<std::chrono::microseconds>(awake, timeout));
  } catch (...) {
    CallerOut();  // Await throws with the lock held
    throw;
  }
  CallerOut();
  last_timing.send_us = std::chrono::duration<double, std::micro>(sent - start).count();
  last_timing.answer_us = MicrosSince(sent);
  last_timing.how = !read        ? "read by another caller"
                    : awake_read ? "while waiting awake"
                                 : "after blocking";
  const bool orphans = !orphans_.empty();
  lock.unlock();
  if (read && orphans) ReleaseOrphans();
  if (slot.answer.frame.has_error()) ThrowErrorFrame(slot.answer.frame.error());
  return std::move(slot.answer);
}

void SessionChannel::Await(std::unique_lock<std::mutex>& lock, Slot& slot, uint64_t id,
                           std::chrono::steady_clock::time_point deadline, bool* read, bool* awake,
                           std::chrono::steady_clock::time_point awake_until) {
  while (!slot.done) {
    if (!ended_.ok()) {
      slots_.erase(id);
      ThrowEnded();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      slots_.erase(id);  // a late answer is dropped (and a late grant given back)
      ThrowError(ErrorCode::kDeadlineExceeded, "session.sock: the daemon did not answer in time");
    }
    if (reading_) {
      answered_.wait_until(lock, deadline);
      continue;
    }
    // Nobody reads: this caller reads for everyone until its own answer is in.
    reading_ = true;
    *read = true;
    // A wait asked to stay awake polls until its end (or its deadline).
    const auto spin = std::max<std::chrono::microseconds>(
        spin_, std::chrono::duration_cast<std::chrono::microseconds>(
                   std::min(awake_until, deadline) - now));
    *awake = ReadSome(lock,
                      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                          std::chrono::milliseconds(1),
                      spin, slot.sleep_word);
    reading_ = false;
    answered_.notify_all();
  }
  slots_.erase(id);
}

uint64_t SessionChannel::Post(v1::Call call) { return PostAs(std::move(call)); }

uint64_t SessionChannel::Post(FlatCallFacts call) { return PostAs(call); }

std::string SessionChannel::Encode(v1::Call call, uint64_t id) const {
  call.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_call() = std::move(call);
  return EncodeFrameFor(frame, flat_calls_);
}

std::string SessionChannel::Encode(FlatCallFacts call, uint64_t id) const {
  call.request_id = id;
  std::string bytes;
  if (flat_calls_ == FlatFrames::kCalls && AppendFlatCallFrame(call, &bytes)) return bytes;
  v1::SessionFrame frame;
  ToCall(call, frame.mutable_call());
  return EncodeFrame(frame);
}

template <typename CallT>
uint64_t SessionChannel::PostAs(CallT call) {
  uint64_t id = 0;
  {
    std::unique_lock lock(mu_);
    if (!ended_.ok()) ThrowEnded();
    // Too many answers unread: take the oldest in first. Its slot stays
    // posted (done) until its own Collect.
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (posted_waiting_ >= kMaxPosted) {
      auto oldest = std::find_if(posted_.begin(), posted_.end(),
                                 [](const auto& p) { return !p.second->done; });
      if (oldest == posted_.end()) break;  // never: the count says one waits
      const uint64_t oldest_id = oldest->first;
      std::shared_ptr<Slot> slot = oldest->second;  // kept while its answer is awaited
      bool read = false, awake = false;
      Await(lock, *slot, oldest_id, deadline, &read, &awake);
    }
    id = next_request_id_++;
  }
  const std::string bytes = Encode(std::move(call), id);
  if (bytes.size() - kFrameHeaderBytes > kMaxFrameBytes) return 0;
  {
    std::lock_guard lock(mu_);
    if (!ended_.ok()) ThrowEnded();
    auto slot = std::make_shared<Slot>();
    slot->posted = true;
    slots_[id] = slot.get();
    posted_.emplace(id, std::move(slot));
    posted_waiting_++;
  }
  if (absl::Status sent = SendFrame(bytes); !sent.ok()) {
    std::lock_guard lock(mu_);
    slots_.erase(id);
    ForgetPosted(id);
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(sent.message())));
  }
  return id;
}

std::shared_ptr<SessionChannel::Slot> SessionChannel::ForgetPosted(uint64_t id) {
  auto it = posted_.find(id);
  if (it == posted_.end()) return nullptr;
  std::shared_ptr<Slot> slot = std::move(it->second);
  posted_.erase(it);
  if (!slot->done) posted_waiting_--;
  slot->posted = false;  // its answer, should it come, counts for nothing now
  return slot;
}

v1::Reply SessionChannel::Collect(uint64_t id, std::chrono::milliseconds timeout) {
  v1::Reply reply;
  Take(CollectAnswer(id, timeout), &reply);
  return reply;
}

void SessionChannel::Collect(uint64_t id, std::chrono::milliseconds timeout, Grant* grant) {
  Take(CollectAnswer(id, timeout), grant);
}

SessionChannel::Answer SessionChannel::CollectAnswer(uint64_t id,
                                                     std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // Taken out first: nobody else collects it, and a late answer after a
  // failed wait finds no slot and is dropped.
  std::shared_ptr<Slot> slot = ForgetPosted(id);
  if (!slot) ThrowError(ErrorCode::kInternal, StrCat("no posted call ", id, " to collect"));
  bool read = false;
  if (!slot->done) {
    bool awake = false;
    CallerIn();  // the answer may be on its way: from now on it wakes this caller only
    try {
      Await(lock, *slot, id, std::chrono::steady_clock::now() + timeout, &read, &awake);
    } catch (...) {
      CallerOut();  // Await throws with the lock held
      throw;
    }
    CallerOut();
  }
  slots_.erase(id);
  const bool orphans = read && !orphans_.empty();
  lock.unlock();
  if (orphans) ReleaseOrphans();
  if (slot->answer.frame.has_error()) ThrowErrorFrame(slot->answer.frame.error());
  return std::move(slot->answer);
}

void SessionChannel::Take(Answer answer, v1::Reply* reply) {
  if (!answer.flat.empty()) {
    // Checked when it arrived: this reads what was accepted then.
    if (absl::Status st = DecodeFlatAnswer(answer.flat, reply); !st.ok()) ThrowStatus(st);
    return;
  }
  if (!answer.frame.has_reply())
    ThrowError(ErrorCode::kInternal, "session.sock: a call answered with an FdGrant");
  *reply = std::move(*answer.frame.mutable_reply());
}

void SessionChannel::Take(Answer answer, Grant* grant) {
  if (!answer.flat.empty()) {
    if (absl::Status st = grant->TakeFlat(std::move(answer.flat)); !st.ok()) ThrowStatus(st);
    return;
  }
  v1::Reply& reply = *answer.frame.mutable_reply();
  if (reply.has_open()) {
    grant->Take(std::move(*reply.mutable_open()));
  } else if (reply.has_claim()) {
    grant->Take(std::move(*reply.mutable_claim()));
  } else if (reply.has_publish()) {
    grant->Take(reply.publish().buffer());
  } else {
    ThrowError(ErrorCode::kInternal,
               "session.sock: an Open, a Claim or a Publish answered with another reply");
  }
}

bool SessionChannel::Unasked(const v1::SessionFrame& frame) {
  if (frame.has_blocks_returned()) {
    if (on_returned_) on_returned_(frame.blocks_returned());
    return true;
  }
  if (frame.has_unmap_request()) {
    if (on_unmap_) on_unmap_(frame.unmap_request());
    return true;
  }
  return false;
}

void SessionChannel::CallerIn() {
  if (callers_++ > 0 || !watch_) return;
  epoll_event ev{};
  ev.data.fd = fd_.get();  // no events: only a hang-up or an error still wakes Poll
  ::epoll_ctl(watch_.get(), EPOLL_CTL_MOD, fd_.get(), &ev);
}

void SessionChannel::CallerOut() {
  if (--callers_ > 0 || !watch_) return;
  // Level-triggered: what came meanwhile and nobody read wakes Poll now.
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd_.get();
  ::epoll_ctl(watch_.get(), EPOLL_CTL_MOD, fd_.get(), &ev);
}

bool SessionChannel::Poll(int wake_fd, std::chrono::milliseconds timeout) {
  int watch = -1;
  {
    std::lock_guard lock(mu_);
    if (!ended_.ok()) return false;
    if (!watch_ || watch_wake_ != wake_fd) {
      UniqueFd set(::epoll_create1(EPOLL_CLOEXEC));
      epoll_event ev{};
      ev.events = callers_ > 0 ? 0u : static_cast<uint32_t>(EPOLLIN);
      ev.data.fd = fd_.get();
      epoll_event wake{};
      wake.events = EPOLLIN;
      wake.data.fd = wake_fd;
      if (set.get() < 0 || ::epoll_ctl(set.get(), EPOLL_CTL_ADD, fd_.get(), &ev) != 0 ||
          ::epoll_ctl(set.get(), EPOLL_CTL_ADD, wake_fd, &wake) != 0) {
        ended_ = absl::InternalError(StrCat("session.sock: epoll: ", std::strerror(errno)));
        return false;
      }
      watch_ = std::move(set);
      watch_wake_ = wake_fd;
    }
    watch = watch_.get();
  }
  // Waits without the lock and without the reader's role: a call may run
  // meanwhile and read what comes, its answer among it.
  epoll_event events[2];
  const int n = ::epoll_wait(watch, events, 2, static_cast<int>(timeout.count()));
  bool socket = false;
  for (int i = 0; i < n; ++i) {
    socket = socket || (events[i].data.fd == fd_.get() &&
                        (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0);
  }
  if (!socket) return true;
  std::unique_lock lock(mu_);
  if (!ended_.ok()) return false;
  if (reading_ || callers_ > 0) {
    // A caller waits for an answer and reads (or is about to) for everyone,
    // what came unasked among it: leave it the socket.
    answered_.wait_for(lock, timeout);
    return ended_.ok();
  }
  reading_ = true;
  ReadSome(lock, std::chrono::milliseconds(0), std::chrono::microseconds(0));
  reading_ = false;
  answered_.notify_all();
  const bool orphans = !orphans_.empty();
  const bool live = ended_.ok();
  lock.unlock();
  if (orphans) ReleaseOrphans();
  return live;
}

void SessionChannel::Send(const v1::SessionFrame& frame) {
  {
    std::lock_guard lock(mu_);
    if (!ended_.ok()) ThrowEnded();
  }
  std::lock_guard send(send_mu_);
  if (auto s = SendAll(fd_.get(), EncodeFrame(frame)); !s.ok()) {
    ThrowError(ErrorCode::kUnavailable, StrCat("session.sock: ", View(s.message())));
  }
}

UniqueFd SessionChannel::RequestFd(v1::FdRequest request, v1::FdGrant* grant) {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_request_id_++;
  }
  request.set_request_id(id);
  v1::SessionFrame frame;
  *frame.mutable_fd_request() = std::move(request);
  Answer answer = Exchange(EncodeFrame(frame), id, timeout_);
  if (!answer.frame.has_fd_grant())
    ThrowError(ErrorCode::kInternal, "session.sock: FdRequest answered with a Reply");
  if (grant != nullptr) *grant = answer.frame.fd_grant();
  return std::move(answer.fd);
}

template <typename CallT>
std::optional<SessionChannel::Answer> SessionChannel::CallAnswer(CallT call,
                                                                 std::chrono::milliseconds timeout,
                                                                 std::chrono::microseconds awake) {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_request_id_++;
  }
  const uint32_t sleep_word = SleepWordOf(call);
  const std::string bytes = Encode(std::move(call), id);
  if (bytes.size() - kFrameHeaderBytes > kMaxFrameBytes) return std::nullopt;
  Answer answer = Exchange(bytes, id, timeout, awake, sleep_word);
  if (answer.flat.empty() && !answer.frame.has_reply())
    ThrowError(ErrorCode::kInternal, "session.sock: Call answered with an FdGrant");
  return answer;
}

template <typename CallT, typename Out>
bool SessionChannel::CallInto(CallT call, Out* out, std::chrono::milliseconds timeout,
                              std::chrono::microseconds awake) {
  std::optional<Answer> answer = CallAnswer(std::move(call), timeout, awake);
  if (!answer) return false;
  Take(std::move(*answer), out);
  return true;
}

bool SessionChannel::Call(v1::Call call, v1::Reply* reply, std::chrono::milliseconds timeout,
                          std::chrono::microseconds awake) {
  return CallInto(std::move(call), reply, timeout, awake);
}

bool SessionChannel::Call(v1::Call call, Grant* grant, std::chrono::milliseconds timeout,
                          std::chrono::microseconds awake) {
  return CallInto(std::move(call), grant, timeout, awake);
}

bool SessionChannel::Call(FlatCallFacts call, v1::Reply* reply, std::chrono::milliseconds timeout,
                          std::chrono::microseconds awake) {
  return CallInto(call, reply, timeout, awake);
}

bool SessionChannel::Call(FlatCallFacts call, Grant* grant, std::chrono::milliseconds timeout,
                          std::chrono::microseconds awake) {
  return CallInto(call, grant, timeout, awake);
}

void SessionChannel::SayGoodbye() noexcept {
  {
    std::lock_guard lock(mu_);
    if (!ended_.ok()) return;
    ended_ = absl::UnavailableError("the session is closed");
  }
  v1::SessionFrame bye;
  bye.mutable_goodbye()->set_reason("client closed");
  std::lock_guard send(send_mu_);
  (void)SendAll(fd_.get(), EncodeFrame(bye));
}

}  // namespace gpubroker::detail
