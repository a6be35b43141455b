// Over 500 lines on purpose: the session socket's one event loop (accepting,
// framing, calls, parked answers, unmap requests, session ends) shares the
// loop thread's state; split, each part would reach into the others'.
#include "daemon/session/session_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>

#include "common/refusal.h"
#include "common/spin.h"
#include "common/strings.h"
#include "common/trace.h"
#include "common/units.h"
#include "common/version.h"
#include "daemon/service/convert.h"
#include "google/protobuf/arena.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

// An arena whose first block is on the stack of whoever makes it: the
// messages and strings of an answer encoded before it goes cost no heap
// allocation of their own, nor a destructor each.
class StackArena {
 public:
  StackArena() : arena_(Options(block_, sizeof(block_))) {}
  google::protobuf::Arena* get() { return &arena_; }

 private:
  static google::protobuf::ArenaOptions Options(char* block, size_t size) {
    google::protobuf::ArenaOptions o;
    o.initial_block = block;
    o.initial_block_size = size;
    return o;
  }
  alignas(8) char block_[4096];
  google::protobuf::Arena arena_;
};

// A call's answer as a message, made on the stack only when one is needed:
// the calls of a hand-over's path are answered from the registry's facts
// (SendGrant, SendPublished) and make none.
class LazyReply {
 public:
  explicit LazyReply(uint64_t request_id) : request_id_(request_id) {}
  LazyReply(const LazyReply&) = delete;
  LazyReply& operator=(const LazyReply&) = delete;

  v1::SessionFrame& frame() {
    if (frame_ == nullptr) {
      arena_.emplace();
      frame_ = google::protobuf::Arena::CreateMessage<v1::SessionFrame>(arena_->get());
      frame_->mutable_reply()->set_request_id(request_id_);
    }
    return *frame_;
  }
  v1::Reply* reply() { return frame().mutable_reply(); }

 private:
  uint64_t request_id_;
  std::optional<StackArena> arena_;
  v1::SessionFrame* frame_ = nullptr;  // on arena_
};

// The other end of a stream socket has closed (or its process died): a
// non-blocking poll reports a hang-up (or the reset of unread data).
bool PeerGone(int fd) {
  pollfd p{fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0;
}

constexpr auto kSweepInterval = std::chrono::milliseconds(100);
// How long accepting pauses after the kernel refused a descriptor.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

std::string Describe(const PeerCredentials& p) {
  return StrCat("pid ", p.pid, " uid ", p.uid, " gid ", p.gid);
}

// Tells a peer that is not taken why, as an ErrorFrame for request 0 (the
// session), without blocking. The caller closes the connection.
void TurnAway(int fd, const std::string& why) {
  v1::SessionFrame frame;
  ToErrorFrame(LimitRefusal(why), 0, frame.mutable_error());
  (void)SendSome(fd, EncodeFrame(frame));
}

}  // namespace

SessionServer::SessionServer(BrokerCalls& calls, DescriptorBudget& descriptors,
                             ReserveDescriptor& reserve, Options options)
    : calls_(calls),
      registry_(calls.registry()),
      metrics_(calls.metrics()),
      descriptors_(descriptors),
      reserve_(reserve),
      options_(options),
      per_uid_(options.max_sessions_per_uid),
      busy_poll_(options.busy_poll, options.busy_poll_max) {}

SessionServer::~SessionServer() { Stop(); }

absl::Status SessionServer::Start(UniqueFd listener) {
  listener_ = std::move(listener);
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_ || !wake_) {
    return absl::InternalError(StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  for (int fd : {listener_.get(), wake_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(StrCat("epoll_ctl: ", std::strerror(errno)));
    }
  }
  // Requests to unmap come from whichever thread needs memory: the loop
  // sends them, woken here.
  registry_.set_unmap_notifier([this] {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  });
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void SessionServer::Stop() {
  if (!thread_.joinable()) return;
  registry_.set_unmap_notifier(nullptr);
  stopping_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  thread_.join();
  {
    absl::MutexLock lock(&completions_mu_);
    stopped_ = true;
  }
  RunAfterCatchUp();  // asked for while the loop ended: answered now
  listener_.reset();
  v1::SessionFrame bye;
  bye.mutable_goodbye()->set_reason("gpubrokerd is shutting down");
  while (!connections_.empty()) {
    Connection& c = *connections_.begin()->second;
    // Best effort, never blocking: a peer with replies still queued gets none.
    if (c.out.empty()) (void)SendFrame(c, bye);
    if (c.session != 0) {
      const SessionEndReport r = registry_.EndSession(c.session, SessionEnd::kShutdown);
      spdlog::info("session {} ended by shutdown: {} tenant '{}', {} held", c.session,
                   Describe(c.peer), r.session.tenant, FormatBytes(r.reclaimed_bytes));
      c.session = 0;
    }
    Remove(connections_.begin()->first);
  }
}

void SessionServer::Warn(const std::string& message) {
  uint64_t suppressed = 0;
  if (!warn_limiter_.Allow(&suppressed)) return;
  if (suppressed > 0) {
    spdlog::warn("{} ({} similar messages suppressed)", message, suppressed);
  } else {
    spdlog::warn("{}", message);
  }
}

void SessionServer::Loop() {
  loop_thread_ = std::this_thread::get_id();
  epoll_event events[64];
  auto last_event = std::chrono::steady_clock::time_point();
  // The end of the last turn: what each turn decides from (one clock read a turn).
  auto now = std::chrono::steady_clock::now();
  auto next_sweep = now + kSweepInterval;
  while (!stopping_) {
    auto timeout = kSweepInterval;
    if (!listening_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(resume_accepting_ - now);
      timeout = std::clamp(left, std::chrono::milliseconds(0), timeout);
    }
    // Awake for a while after serving something: the next call of a
    // hand-over (the consumer's Open after the producer's Publish) usually
    // comes within it, and finds this thread running instead of asleep. The
    // while follows the gaps between frames (busy_poll.h).
    const bool busy = now - last_event < busy_poll_.window();
    // Awake too while a consumer waits awake for a seal (OpenRequest.awake_us).
    const bool for_waits = PollingForWaits(now);
    const bool awake = busy || for_waits;
    const auto turn_start = now;
    if (!awake) CountTurns();  // about to sleep: off the calls' path
    // Told to the producers before the thread sleeps: a seal then wakes it
    // ahead of its frame (SessionChannel::SealAhead).
    const DaemonState state = awake                            ? DaemonState::kPolling
                              : options_.busy_poll.count() > 0 ? DaemonState::kAsleep
                                                               : DaemonState::kAsleepNoPoll;
    if (state != daemon_state_) SetDaemonState(state);
    const int n =
        ::epoll_wait(epoll_.get(), events, 64, awake ? 0 : static_cast<int>(timeout.count()));
    if (n < 0 && errno != EINTR) {
      spdlog::error("session.sock: epoll_wait: {}", std::strerror(errno));
      break;
    }
    if (n == 0 && awake) SpinPause();
    bool served = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_.get()) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_.get(), &count, sizeof(count));
        SendUnmapRequests();
        bool asked = false;
        {
          absl::MutexLock lock(&completions_mu_);
          asked = !after_catch_up_.empty();
        }
        if (asked) {
          CatchUp(-1);
          RunAfterCatchUp();
        }
        continue;  // the completions of parked Opens are taken below
      }
      if (fd == listener_.get()) {
        AcceptAll();
        continue;
      }
      ServeReady(fd, events[i].events);
      served = true;
    }
    if (served) ++turns_[awake ? 1 : 0];
    // Waits that ended, whichever thread ended them (a seal on this thread
    // too): answered in this same turn of the loop.
    AnswerParked();
    now = std::chrono::steady_clock::now();
    if (n > 0) {
      if (!awake) {
        busy_poll_.Woke(now - last_event);
      } else if (busy) {
        busy_poll_.Caught(now - last_event);
      }
      last_event = now;  // the busy poll counts from the end of serving
    } else if (busy) {
      polled_seconds_ += std::chrono::duration<double>(now - turn_start).count();
    }
    if (for_waits && !busy) {
      awake_seconds_ += std::chrono::duration<double>(now - turn_start).count();
    }
    // Counted when the waits end or every 0.1 s: a counter's add per turn
    // would slow the poll.
    if (awake_seconds_ > 0 && (!PollingForWaits(now) || awake_seconds_ >= 0.1)) {
      metrics_.WaitedAwake(awake_seconds_);
      awake_seconds_ = 0;
    }
    if (!listening_ && now >= resume_accepting_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listener_.get();
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev) == 0) listening_ = true;
    }
    if (now >= next_sweep) {
      CountTurns();
      DropSilent(now);
      next_sweep = now + kSweepInterval;
    }
  }
}

void SessionServer::SetDaemonState(DaemonState state) {
  daemon_state_ = state;
  for (const auto& [tenant, entry] : boards_) entry->board.set_daemon_state(state);
}

void SessionServer::CountTurns() {
  if (polled_seconds_ > 0 || busy_poll_.window() != reported_window_) {
    metrics_.BusyPolled(polled_seconds_, busy_poll_.window());
    polled_seconds_ = 0;
    reported_window_ = busy_poll_.window();
  }
  if (turns_[0] == 0 && turns_[1] == 0) return;
  metrics_.SessionTurns(turns_[0], turns_[1]);
  turns_[0] = turns_[1] = 0;
}

void SessionServer::ServeReady(int fd, uint32_t events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  bool drop = false;
  HandleEvents(*it->second, events, &drop);
  if (drop) {
    Connection& c = *it->second;
    EndSession(c, c.said_goodbye);
    Remove(fd);
  }
}

bool SessionServer::LookAheadForClaim(Connection& asking, const v1::Call& call) {
  const std::string& secret = call.claim().secret();
  if (!registry_.CouldBecomeClaimable(secret)) return false;
  if (DeferOrCatchUp(asking, call)) return true;
  metrics_.OpenLookedAhead(!registry_.CouldBecomeClaimable(secret));
  return false;
}

bool SessionServer::DeferOrCatchUp(Connection& asking, const v1::Call& call) {
  if (looking_ahead_) {
    // Read in a look-ahead: answered once it is over, when whatever was
    // sent before this Open has been served.
    after_look_ahead_.push_back(Deferred{asking.fd.get(), asking.serial, call});
    return true;
  }
  // A posted seal (written before its producer told anyone the name) may
  // wait, unread, on its session's socket: what was written before this
  // Open's frame is readable now. Serve every other ready connection once,
  // then this Open.
  CatchUp(asking.fd.get());
  return false;
}

void SessionServer::CatchUp(int except_fd) {
  looking_ahead_ = true;
  look_ahead_events_.resize(connections_.size() + 2);
  const int n = ::epoll_wait(epoll_.get(), look_ahead_events_.data(),
                             static_cast<int>(look_ahead_events_.size()), 0);
  for (int i = 0; i < n; ++i) {
    const int fd = look_ahead_events_[i].data.fd;
    if (fd == except_fd || fd == wake_.get() || fd == listener_.get()) continue;
    ServeReady(fd, look_ahead_events_[i].events);
  }
  looking_ahead_ = false;
  // Opens that other sessions sent meanwhile: their own senders' frames were
  // readable at this pass's epoll_wait, so they have been served.
  std::vector<Deferred> deferred;
  deferred.swap(after_look_ahead_);
  for (Deferred& d : deferred) {
    auto it = connections_.find(d.fd);
    if (it == connections_.end() || it->second->serial != d.serial) continue;
    Connection& c = *it->second;
    answering_deferred_ = true;
    const Outcome outcome = OnCall(c, d.call);
    answering_deferred_ = false;
    if (outcome == Outcome::kDrop) {
      EndSession(c, c.said_goodbye);
      Remove(d.fd);
    } else if (!c.out.empty()) {
      WatchFor(c, false);
    }
  }
}

void SessionServer::AfterCatchUp(std::function<void()> then) {
  {
    absl::MutexLock lock(&completions_mu_);
    if (!stopped_) {
      after_catch_up_.push_back(std::move(then));
      then = nullptr;
    }
  }
  if (then) {
    then();
    return;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

void SessionServer::RunAfterCatchUp() {
  std::vector<std::function<void()>> ready;
  {
    absl::MutexLock lock(&completions_mu_);
    ready.swap(after_catch_up_);
  }
  for (auto& then : ready) then();
}

void SessionServer::DropSilent(std::chrono::steady_clock::time_point now) {
  std::vector<int> silent;
  for (const auto& [fd, c] : connections_) {
    if (c->session == 0 && now >= c->hello_deadline) silent.push_back(fd);
  }
  for (int fd : silent) {
    Warn(StrCat("session.sock: dropping ", Describe(connections_[fd]->peer),
                ": no Hello within the hello timeout"));
    Remove(fd);
  }
}

void SessionServer::AcceptAll() {
  const AcceptEnd end = AcceptBatch(
      listener_.get(), 64, [this](UniqueFd fd) { Admit(std::move(fd)); },
      [this](int err) { Warn(StrCat("session.sock: accept: ", std::strerror(err))); });
  if (end == AcceptEnd::kOutOfDescriptors) OutOfDescriptors();
}

void SessionServer::OutOfDescriptors() {
  const int err = errno;
  const std::string why = StrCat("gpubrokerd has run out of file descriptors (", std::strerror(err),
                                 "); try again later");
  reserve_.Shed(listener_.get(), [&](int fd) { TurnAway(fd, why); });
  metrics_.ConnectionRefused(Metrics::Socket::kSession, Metrics::TurnedAway::kDescriptors);
  // The listener stays readable while connections wait: stop watching it for
  // a moment instead of spinning on it.
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listening_ = false;
  resume_accepting_ = std::chrono::steady_clock::now() + kAcceptBackoff;
  Warn(StrCat("session.sock: accept: ", std::strerror(err), " (", CountOpenDescriptors(),
              " descriptors open); turning connections away for ", kAcceptBackoff.count(), " ms"));
}

void SessionServer::Admit(UniqueFd fd) {
  auto peer = GetPeerCredentials(fd.get());
  if (!peer.ok()) {
    Warn(StrCat("session.sock: ", peer.status().message()));
    return;
  }
  if (!per_uid_.TryAdmit(peer->uid)) {
    metrics_.ConnectionRefused(Metrics::Socket::kSession, Metrics::TurnedAway::kUidLimit);
    const std::string why = StrCat("uid ", peer->uid, " holds ", per_uid_.max_per_uid(),
                                   " connections to session.sock, the limit "
                                   "(max_sessions_per_uid); close some first");
    Warn(StrCat("session.sock: turning away ", Describe(*peer), ": ", why));
    TurnAway(fd.get(), why);
    return;
  }
  if (!descriptors_.TryCharge()) {
    per_uid_.Release(peer->uid);
    metrics_.ConnectionRefused(Metrics::Socket::kSession, Metrics::TurnedAway::kDescriptors);
    const std::string why =
        StrCat("gpubrokerd holds ", descriptors_.in_use(), " of the ", descriptors_.limit(),
               " descriptors it may hold for clients; try again later");
    Warn(StrCat("session.sock: turning away ", Describe(*peer), ": ", why));
    TurnAway(fd.get(), why);
    return;
  }
  auto c = std::make_unique<Connection>();
  c->serial = next_serial_++;
  c->peer = *peer;
  c->decoder.AcceptFlatCalls();  // a Call all the same: served only after Hello
  c->hello_deadline = std::chrono::steady_clock::now() + options_.hello_timeout;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
    Warn(StrCat("session.sock: epoll_ctl: ", std::strerror(errno)));
    per_uid_.Release(peer->uid);
    descriptors_.Release();
    return;
  }
  c->fd = std::move(fd);
  const int raw = c->fd.get();
  connections_[raw] = std::move(c);
}

void SessionServer::Remove(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  per_uid_.Release(it->second->peer.uid);
  descriptors_.Release();
  if (it->second->board != nullptr) ReleaseBoard(it->second->view.tenant);
  connections_.erase(it);
}

void SessionServer::WatchFor(Connection& c, bool reading) {
  if (c.reading == reading) return;
  epoll_event ev{};
  ev.events = reading ? (EPOLLIN | EPOLLRDHUP) : EPOLLOUT;
  ev.data.fd = c.fd.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) {
    Warn(StrCat("session.sock: epoll_ctl: ", std::strerror(errno)));
  }
  c.reading = reading;
}

void SessionServer::HandleEvents(Connection& c, uint32_t events, bool* drop) {
  if (!c.reading) {
    // Waiting for the peer to take its replies. EPOLLHUP/EPOLLERR come with
    // EPOLLOUT too, and the write then fails: the peer is gone.
    if (Flush(c) == Outcome::kDrop) {
      *drop = true;
      return;
    }
    if (!c.out.empty()) return;
    WatchFor(c, true);
    // Frames that arrived while the peer's replies waited are already read.
    *drop = ProcessFrames(c) == Outcome::kDrop;
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    *drop = OnReadable(c) == Outcome::kDrop;
  }
}

SessionServer::Outcome SessionServer::OnReadable(Connection& c) {
  char buf[16 * 1024];
  // No descriptor buffer: descriptors that a client sends are dropped by the kernel.
  auto got = RecvSome(c.fd.get(), buf, sizeof(buf), nullptr);
  if (!got.ok()) {
    if (c.session == 0)
      Warn(StrCat("session.sock: ", Describe(c.peer), ": ", got.status().message()));
    return Outcome::kDrop;
  }
  if (got->eof) {
    if (c.decoder.buffered() > 0 && !c.said_goodbye) {
      Warn(StrCat("session.sock: ", Describe(c.peer), " closed in the middle of a frame"));
    }
    return Outcome::kDrop;
  }
  if (got->bytes == 0) return Outcome::kKeep;  // nothing after all
  c.decoder.Append(std::string_view(buf, got->bytes));
  return ProcessFrames(c);
}

SessionServer::Outcome SessionServer::ProcessFrames(Connection& c) {
  // No new call is served while replies wait for the peer to read them: the
  // queue holds at most what one call produced.
  while (c.out.empty()) {
    auto body = c.decoder.NextBody();
    absl::Status read = body.status();
    if (read.ok() && !body->has_value()) break;
    Outcome outcome = Outcome::kKeep;
    if (read.ok() && (*body)->flat && c.session != 0) {
      // A call of a hand-over's path, read in place and served from its
      // facts: no message made (the body stays in the decoder until the
      // next read of this connection, after this call is served).
      FlatCallRead call;
      read = DecodeFlatCall((*body)->bytes, &call);
      if (read.ok()) outcome = OnFlatFrame(c, call.facts());
    } else if (read.ok()) {
      // Before Hello a flat call is read as its message, to be refused as
      // any call is there.
      v1::SessionFrame frame;
      read = FrameDecoder::Decode(**body, FlatFrames::kCalls, &frame);
      if (read.ok()) outcome = OnFrame(c, frame);
    }
    if (!read.ok()) {
      Warn(StrCat("session.sock: dropping ", Describe(c.peer), ": ", read.message()));
      return Outcome::kDrop;
    }
    if (outcome == Outcome::kDrop) return Outcome::kDrop;
  }
  if (!c.out.empty()) WatchFor(c, false);
  return Outcome::kKeep;
}

void SessionServer::SendUnmapRequests() {
  const auto requests = registry_.TakeUnmapRequests();
  if (requests.empty()) return;
  std::vector<int> dropped;
  for (const auto& [session, ids] : requests) {
    for (auto& [fd, c] : connections_) {
      if (c->session != session) continue;
      v1::SessionFrame frame;
      for (AllocationId id : ids) frame.mutable_unmap_request()->add_allocation_ids(id);
      metrics_.UnmapRequested(ids.size());
      // Queued behind whatever the peer has not read yet, like any frame.
      if (SendFrame(*c, frame) == Outcome::kDrop) {
        dropped.push_back(fd);
      } else if (!c->out.empty()) {
        WatchFor(*c, false);
      }
      break;
    }
  }
  for (int fd : dropped) {
    auto it = connections_.find(fd);
    if (it == connections_.end()) continue;
    EndSession(*it->second, false);
    Remove(fd);
  }
}

namespace {

Metrics::SessionCall CallOf(const v1::SessionFrame& frame) {
  using C = Metrics::SessionCall;
  if (frame.has_fd_request()) return C::kFdRequest;
  if (!frame.has_call()) return C::kOther;
  switch (frame.call().request_case()) {
    case v1::Call::kAllocate:
      return C::kAllocate;
    case v1::Call::kOpen:
      return C::kOpen;
    case v1::Call::kPublish:
      return C::kPublish;
    case v1::Call::kSeal:
      return C::kSeal;
    case v1::Call::kRelease:
      return C::kRelease;
    case v1::Call::kLeaseRange:
      return C::kLeaseRange;
    case v1::Call::kReturnRange:
      return C::kReturnRange;
    case v1::Call::kHold:
      return C::kHold;
    case v1::Call::kClaim:
      return C::kClaim;
    default:
      return C::kOther;
  }
}

}  // namespace

namespace {

Metrics::SessionCall CallOf(const FlatCallFacts& call) {
  using C = Metrics::SessionCall;
  switch (call.kind) {
    case FlatCallFacts::Kind::kOpen:
      return C::kOpen;
    case FlatCallFacts::Kind::kPublish:
      return C::kPublish;
    case FlatCallFacts::Kind::kRelease:
      return C::kRelease;
    case FlatCallFacts::Kind::kClaim:
      return C::kClaim;
  }
  return C::kOther;
}

// Serves a frame, timed into the per-call metrics.
template <typename Serve>
auto Timed(Metrics& metrics, Metrics::SessionCall what, Serve serve) {
  Trace(TraceMark::kDaemonFrameDecoded);
  const auto start = std::chrono::steady_clock::now();
  const auto outcome = serve();
  metrics.SessionCallServed(
      what, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return outcome;
}

}  // namespace

SessionServer::Outcome SessionServer::OnFrame(Connection& c, const v1::SessionFrame& frame) {
  return Timed(metrics_, CallOf(frame), [&] { return Serve(c, frame); });
}

SessionServer::Outcome SessionServer::OnFlatFrame(Connection& c, const FlatCallFacts& call) {
  return Timed(metrics_, CallOf(call), [&] { return OnFlatCall(c, call); });
}

SessionServer::Outcome SessionServer::Serve(Connection& c, const v1::SessionFrame& frame) {
  switch (frame.body_case()) {
    case v1::SessionFrame::kUnmapped:
      if (c.session == 0) break;
      calls_.Unmapped(c.view, frame.unmapped());
      return Outcome::kKeep;
    case v1::SessionFrame::kHello:
      return OnHello(c, frame.hello());
    case v1::SessionFrame::kFdRequest:
      if (c.session == 0) break;
      return OnFdRequest(c, frame.fd_request());
    case v1::SessionFrame::kCall:
      if (c.session == 0) break;
      return OnCall(c, frame.call());
    case v1::SessionFrame::kGoodbye:
      c.said_goodbye = true;
      return Outcome::kDrop;
    case v1::SessionFrame::kAhead:
      // Nothing to do: having woken for it, the loop polls for the call
      // that follows (Loop, --busy-poll-us).
      if (c.session == 0) break;
      metrics_.AheadTaken();
      return Outcome::kKeep;
    default:
      break;
  }
  Warn(StrCat("session.sock: dropping ", Describe(c.peer), ": unexpected frame (field ",
              static_cast<int>(frame.body_case()), ")", c.session == 0 ? " before Hello" : ""));
  return Outcome::kDrop;
}

SessionServer::Outcome SessionServer::OnHello(Connection& c, const v1::Hello& hello) {
  if (c.session != 0) {
    Warn(StrCat("session.sock: dropping ", Describe(c.peer), ": second Hello"));
    return Outcome::kDrop;
  }
  v1::SessionFrame reply;
  if (hello.protocol_version() != kProtocolVersion) {
    ToErrorFrame(absl::FailedPreconditionError(StrCat("protocol version ", hello.protocol_version(),
                                                      " is not supported; this daemon speaks ",
                                                      kProtocolVersion)),
                 0, reply.mutable_error());
    SendFrame(c, reply);
    return Outcome::kDrop;
  }
  auto session = registry_.OpenSession(c.peer, hello.client_name().substr(0, 64));
  if (!session.ok()) {
    ToErrorFrame(session.status(), 0, reply.mutable_error());
    SendFrame(c, reply);
    return Outcome::kDrop;
  }
  c.session = session->id;
  c.view = *session;
  spdlog::info("session {} opened: {} tenant '{}' client '{}'", session->id, Describe(c.peer),
               session->tenant, session->client_name);
  ToWelcome(*session, registry_.backend(), registry_.wait_limits(), reply.mutable_welcome());
  // The answers a consumer waits for, read in about half of protobuf's time by
  // a process that has just woken (common/wire/flat_answer.h), and the calls
  // of a hand-over's path, which this connection's decoder reads flat too
  // (common/wire/flat_call.h).
  c.flat = hello.flat_answers() ? FlatFrames::kAnswers : FlatFrames::kNone;
  c.flat_publish = hello.flat_answers() && hello.flat_publish_answers();
  reply.mutable_welcome()->set_flat_answers(hello.flat_answers());
  reply.mutable_welcome()->set_flat_publish_answers(c.flat_publish);
  reply.mutable_welcome()->set_flat_calls(true);
  // The tenant's wake board, for a client that sleeps on it while it waits
  // for a name (common/wake_board.h): the descriptor goes with the Welcome.
  UniqueFd board_fd;
  if (hello.wake_board()) {
    if (const WakeBoard* board = TakeBoard(session->tenant); board != nullptr) {
      board_fd.reset(::fcntl(board->fd(), F_DUPFD_CLOEXEC, 0));
      if (board_fd) {
        c.board = board;
        c.wake_word = kWakeBoardNameWords + next_wake_word_++ % kWakeBoardSessionWords;
        reply.mutable_welcome()->set_wake_word(c.wake_word);
      } else {
        ReleaseBoard(session->tenant);
      }
    }
  }
  return SendFrame(c, reply, std::move(board_fd));
}

const WakeBoard* SessionServer::TakeBoard(const std::string& tenant) {
  auto it = boards_.find(tenant);
  if (it == boards_.end()) {
    // Its descriptor is the daemon's for as long as the tenant has a
    // session that took it: counted like a connection's.
    if (!descriptors_.TryCharge()) return nullptr;
    auto board = WakeBoard::Create();
    if (!board.ok()) {
      descriptors_.Release();
      Warn(StrCat("tenant '", tenant, "': no wake board: ", board.status().message()));
      return nullptr;
    }
    auto entry = std::make_unique<TenantBoard>();
    entry->board = std::move(*board);
    entry->board.set_daemon_state(daemon_state_);
    it = boards_.emplace(tenant, std::move(entry)).first;
  }
  it->second->sessions++;
  return &it->second->board;
}

void SessionServer::ReleaseBoard(const std::string& tenant) {
  auto it = boards_.find(tenant);
  if (it == boards_.end() || --it->second->sessions > 0) return;
  boards_.erase(it);
  descriptors_.Release();
}

SessionServer::Outcome SessionServer::OnFdRequest(Connection& c, const v1::FdRequest& request) {
  absl::StatusOr<FdGrant> grant = absl::InvalidArgumentError("FdRequest names no region or buffer");
  if (request.target_case() == v1::FdRequest::kRegionId) {
    grant = registry_.ExportRegionFd(c.session, request.region_id());
  } else if (request.target_case() == v1::FdRequest::kBufferId) {
    grant = registry_.ExportBufferFd(c.session, request.buffer_id());
  }
  v1::SessionFrame reply;
  if (!grant.ok()) {
    Warn(StrCat("session ", c.session, ": fd request refused: ", grant.status().message()));
    ToErrorFrame(grant.status(), request.request_id(), reply.mutable_error());
    return SendFrame(c, reply);
  }
  ToProto(*grant, request, reply.mutable_fd_grant());
  return SendFrame(c, reply, std::move(grant->fd));
}

namespace {

// A call of session.sock arrives as a message, or, for Open, Publish and
// Release, as the facts of a flat call read in place (FlatCallRead): what
// OnCallAs reads of either.
enum class CallKind { kOpen, kPublish, kRelease, kOther };

CallKind KindOf(const v1::Call& call) {
  switch (call.request_case()) {
    case v1::Call::kOpen:
      return CallKind::kOpen;
    case v1::Call::kPublish:
      return CallKind::kPublish;
    case v1::Call::kRelease:
      return CallKind::kRelease;
    default:
      return CallKind::kOther;
  }
}
CallKind KindOf(const FlatCallFacts& call) {
  switch (call.kind) {
    case FlatCallFacts::Kind::kOpen:
      return CallKind::kOpen;
    case FlatCallFacts::Kind::kPublish:
      return CallKind::kPublish;
    case FlatCallFacts::Kind::kRelease:
      return CallKind::kRelease;
    default:
      return CallKind::kOther;  // a Claim: served as its message
  }
}
uint64_t RequestIdOf(const v1::Call& call) { return call.request_id(); }
uint64_t RequestIdOf(const FlatCallFacts& call) { return call.request_id; }
bool SealsOf(const v1::Call& call) { return call.has_publish() || call.has_seal(); }
bool SealsOf(const FlatCallFacts& call) { return call.kind == FlatCallFacts::Kind::kPublish; }
bool IsClaim(const v1::Call& call) { return call.has_claim(); }
bool IsClaim(const FlatCallFacts&) { return false; }
bool HasCounters(const v1::Call& call) { return call.has_counters(); }
bool HasCounters(const FlatCallFacts& call) { return call.has_counters; }
const v1::ClientCounters& CountersOf(const v1::Call& call) { return call.counters(); }
const FlatCallFacts::Counters& CountersOf(const FlatCallFacts& call) { return call.counters; }
// The Open, Publish or Release itself, as BrokerCalls takes it.
const v1::OpenRequest& OpenOf(const v1::Call& call) { return call.open(); }
const v1::PublishRequest& PublishOf(const v1::Call& call) { return call.publish(); }
const v1::ReleaseRequest& ReleaseOf(const v1::Call& call) { return call.release(); }
const FlatCallFacts& OpenOf(const FlatCallFacts& call) { return call; }
const FlatCallFacts& PublishOf(const FlatCallFacts& call) { return call; }
const FlatCallFacts& ReleaseOf(const FlatCallFacts& call) { return call; }
bool WaitsOf(const v1::Call& call) { return call.open().wait(); }
bool WaitsOf(const FlatCallFacts& call) { return call.wait; }
uint64_t AwakeOf(const v1::Call& call) { return call.open().awake_us(); }
uint64_t AwakeOf(const FlatCallFacts& call) { return call.awake_us; }
// The message, for what keeps a call to serve it later (DeferOrCatchUp).
const v1::Call& MessageOf(const v1::Call& call) { return call; }
v1::Call MessageOf(const FlatCallFacts& call) {
  v1::Call message;
  ToCall(call, &message);
  return message;
}

}  // namespace

SessionServer::Outcome SessionServer::OnCall(Connection& c, const v1::Call& call) {
  return OnCallAs(c, call);
}

SessionServer::Outcome SessionServer::OnFlatCall(Connection& c, const FlatCallFacts& call) {
  if (KindOf(call) == CallKind::kOther) return OnCall(c, MessageOf(call));
  return OnCallAs(c, call);
}

template <typename CallT>
SessionServer::Outcome SessionServer::OnCallAs(Connection& c, const CallT& call) {
  const uint64_t request_id = RequestIdOf(call);
  // The answer is encoded before this returns: built on the stack, if at all.
  LazyReply reply(request_id);
  absl::Status status;
  // An Open's or a Claim's answer is the registry's grant, sent by
  // SendGrant: to a session that reads flat answers it is written with no
  // message in between (ToFlatAnswer), on every hand-over's critical path.
  // A Publish's answer is its grant's buffer too (SendPublished), written
  // after the Opens parked on the seal are answered.
  BufferGrant grant;
  bool granted = false;    // the answer is in `grant`, not in `reply`
  bool published = false;  // ... a Publish's, in `grant.buffer`
  // The client's counters ride on its calls. A seal's are booked after the
  // consumers parked on it are answered (their wait is a hand-over's
  // critical path), and before the producer's own answer goes, so that it
  // finds them in the metrics on return; any other call's, first.
  const bool seals = SealsOf(call);
  if (HasCounters(call) && !seals) calls_.RecordCounters(c.view, CountersOf(call));
  if (registry_.shutting_down()) {
    status = absl::UnavailableError("gpubrokerd is shutting down");
  } else {
    switch (KindOf(call)) {
      case CallKind::kOpen: {
        // A waiting Open is parked in the registry, not here: this thread
        // goes on serving the connection (and every other), and answers the
        // wait when it ends (AnswerParked); that reply may overtake others.
        WaitId parked = 0;
        const auto deadline = std::chrono::steady_clock::time_point::max();
        const bool awake =
            WaitsOf(call) && AwakeOf(call) > 0 && options_.max_wait_awake.count() > 0;
        auto answer = [this, fd = c.fd.get(), serial = c.serial, id = request_id,
                       awake](absl::StatusOr<BufferGrant> result) {
          Post(Completion{fd, serial, id, std::move(result), awake});
        };
        // An Open that does not wait is tried at once. Only one refused for a
        // reason that a frame already sent could end (a posted seal of its
        // name) looks at the other sessions' frames first, and is asked again.
        bool absent = false;
        auto now = calls_.OpenAsyncGrant(c.view, OpenOf(call), deadline, &grant, answer, &parked,
                                         answering_deferred_ ? nullptr : &absent);
        if (absent) {
          if (DeferOrCatchUp(c, MessageOf(call))) return Outcome::kKeep;  // answered later
          now = calls_.OpenAsyncGrant(c.view, OpenOf(call), deadline, &grant, answer, &parked);
          metrics_.OpenLookedAhead(now && now->ok());
        }
        if (!now) {
          if (awake) WaitAwake(AwakeOf(call));  // parked (only a wait parks)
          return Outcome::kKeep;
        }
        status = *now;
        granted = status.ok();
        break;
      }
      case CallKind::kPublish:
        status = calls_.Publish(c.view, PublishOf(call), &grant);
        published = status.ok();
        break;
      case CallKind::kRelease:
        status = calls_.Release(c.view, ReleaseOf(call));
        reply.reply()->mutable_release();
        break;
      case CallKind::kOther:
        if constexpr (std::is_same_v<CallT, v1::Call>) {
          if (!ServeOther(c, call, reply.reply(), &status, &grant, &granted)) {
            return Outcome::kKeep;  // answered later
          }
        }
        break;
    }
  }
  Trace(TraceMark::kDaemonCallServed);
  if (!status.ok()) {
    granted = published = false;
    reply.frame().Clear();
    ToErrorFrame(status, request_id, reply.frame().mutable_error());
  } else if (seals && !looking_ahead_ && !answering_deferred_) {
    // The consumers parked on this seal are answered before the producer:
    // their wait is a hand-over's critical path, and a producer that posted
    // its seal is not even waiting. (Only where this connection is the one
    // being served: answering may drop another connection, which a
    // look-ahead further up the stack may be serving.)
    AnswerParked(c.fd.get());
  }
  if (HasCounters(call) && seals) calls_.RecordCounters(c.view, CountersOf(call));
  // Blocks of this session's ranges that came back travel just before the
  // answer, in the same write: the daemon writes only when it answers.
  const std::vector<ReturnedBlock> returned = registry_.TakeReturnedBlocks(c.session);
  std::string bytes;
  if (!returned.empty()) {
    v1::SessionFrame note;
    for (const ReturnedBlock& b : returned) {
      auto* out = note.mutable_blocks_returned()->add_blocks();
      out->set_range_id(b.range);
      out->set_offset(b.offset);
      out->set_size(b.size);
    }
    bytes = EncodeFrame(note);
  }
  if (granted) return SendGrant(c, request_id, IsClaim(call), grant, std::move(bytes));
  if (published) return SendPublished(c, request_id, grant.buffer, std::move(bytes));
  return SendBytes(c, bytes + EncodeFrameFor(reply.frame(), c.flat));
}

bool SessionServer::ServeOther(Connection& c, const v1::Call& call, v1::Reply* r,
                               absl::Status* status, BufferGrant* grant, bool* granted) {
  switch (call.request_case()) {
    case v1::Call::kAllocate:
      *status = calls_.QuickAllocate(c.view, call.allocate(), r->mutable_allocate());
      break;
    case v1::Call::kSeal:
      *status = calls_.Seal(c.view, call.seal(), r->mutable_seal());
      break;
    case v1::Call::kLeaseRange:
      *status = calls_.LeaseRange(c.view, call.lease_range(), r->mutable_lease_range());
      break;
    case v1::Call::kReturnRange:
      *status = calls_.ReturnRange(c.view, call.return_range());
      r->mutable_return_range();
      break;
    case v1::Call::kHold:
      *status = calls_.Hold(c.view, call.hold(), r->mutable_hold());
      break;
    case v1::Call::kClaim:
      if (!answering_deferred_ && LookAheadForClaim(c, call)) return false;  // answered later
      *status = calls_.Claim(c.view, call.claim(), r->mutable_claim(), grant);
      *granted = status->ok();
      break;
    case v1::Call::REQUEST_NOT_SET:
      // A report: the client's counters alone (recorded by the caller).
      if (!call.has_counters()) {
        *status = calls_.Refuse("a call", &c.view,
                                absl::InvalidArgumentError("Call frame without a request"));
      }
      break;
    default:
      *status = calls_.Refuse("a call", &c.view,
                              absl::InvalidArgumentError("Call frame without a request"));
  }
  return true;
}

SessionServer::Outcome SessionServer::SendGrant(Connection& c, uint64_t request_id, bool claim,
                                                const BufferGrant& grant, std::string before) {
  if (c.flat == FlatFrames::kAnswers &&
      AppendFlatAnswerFrame(ToFlatAnswer(grant, request_id, claim), &before)) {
    return SendBytes(c, std::move(before));
  }
  // A protobuf session, or a grant beyond the flat layout's bounds.
  StackArena arena;
  v1::SessionFrame& frame = *google::protobuf::Arena::CreateMessage<v1::SessionFrame>(arena.get());
  frame.mutable_reply()->set_request_id(request_id);
  v1::OpenResponse* a =
      claim ? frame.mutable_reply()->mutable_claim() : frame.mutable_reply()->mutable_open();
  ToProto(grant, a);
  return SendBytes(c, before + EncodeFrameFor(frame, c.flat));
}

SessionServer::Outcome SessionServer::SendPublished(Connection& c, uint64_t request_id,
                                                    const BufferView& buffer, std::string before) {
  // Flat, from the registry's facts, to a session that reads a Publish's
  // answer so (a confirmed seal waits for it).
  if (c.flat_publish && AppendFlatAnswerFrame(ToFlatPublishAnswer(buffer, request_id), &before)) {
    return SendBytes(c, std::move(before));
  }
  StackArena arena;
  v1::SessionFrame& frame = *google::protobuf::Arena::CreateMessage<v1::SessionFrame>(arena.get());
  frame.mutable_reply()->set_request_id(request_id);
  ToProto(buffer, frame.mutable_reply()->mutable_publish()->mutable_buffer());
  return SendBytes(c, before + EncodeFrameFor(frame, c.flat));
}

void SessionServer::WaitAwake(uint64_t awake_us) {
  const auto awake = std::min<std::chrono::microseconds>(
      options_.max_wait_awake,
      std::chrono::microseconds(std::min<uint64_t>(awake_us, uint64_t{1} << 40)));
  awake_waits_++;
  awake_until_ = std::max(awake_until_, std::chrono::steady_clock::now() + awake);
  metrics_.WaitAwakeAsked();
}

void SessionServer::Post(Completion completion) {
  {
    absl::MutexLock lock(&completions_mu_);
    completions_.push_back(std::move(completion));
  }
  // Ended on this thread (a seal read here answers the Opens parked on
  // it): answered at the end of this turn, with no wake-up to send.
  if (std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

void SessionServer::AnswerParked(int serving_fd) {
  // Swapped with completions_ and emptied after, so that neither vector
  // gives its capacity back: a Post on the seal's path does not allocate.
  // (A call from within the loop below, were there one, takes its own.)
  std::vector<Completion> nested;
  std::vector<Completion>& ready = answering_.empty() ? answering_ : nested;
  {
    absl::MutexLock lock(&completions_mu_);
    ready.swap(completions_);
    if (serving_fd >= 0) {
      // The connection being served keeps its answers for the end of the
      // turn: sending to it now could drop it under its caller.
      auto mine =
          std::stable_partition(ready.begin(), ready.end(),
                                [serving_fd](const Completion& d) { return d.fd != serving_fd; });
      std::move(mine, ready.end(), std::back_inserter(completions_));
      ready.erase(mine, ready.end());
    }
  }
  for (Completion& done : ready) {
    // The loop sleeps again once none is left; a later one counts from its own park.
    if (done.awake && --awake_waits_ == 0) awake_until_ = {};
    auto it = connections_.find(done.fd);
    // The connection has gone (its session's end answered its waits), or its
    // descriptor now belongs to a newer one.
    if (it == connections_.end() || it->second->serial != done.serial) continue;
    Connection& c = *it->second;
    Trace(TraceMark::kDaemonParkedAnswer);
    Outcome sent;
    if (done.answer.ok()) {
      sent = SendGrant(c, done.request_id, false, *done.answer);
    } else {
      v1::SessionFrame frame;
      ToErrorFrame(done.answer.status(), done.request_id, frame.mutable_error());
      sent = SendFrame(c, frame);
    }
    if (sent == Outcome::kDrop) {
      EndSession(c, false);
      Remove(done.fd);
      continue;
    }
    if (!c.out.empty()) WatchFor(c, false);
  }
  ready.clear();
}

SessionServer::Outcome SessionServer::SendFrame(Connection& c, const v1::SessionFrame& frame,
                                                UniqueFd fd) {
  if (c.peer_gone) return Outcome::kKeep;  // an answer nobody can read
  return SendBytes(c, EncodeFrameFor(frame, c.flat), std::move(fd));
}

SessionServer::Outcome SessionServer::SendBytes(Connection& c, std::string bytes, UniqueFd fd) {
  if (c.peer_gone) return Outcome::kKeep;
  c.out.push_back(Outgoing{std::move(bytes), std::move(fd)});
  return Flush(c);
}

SessionServer::Outcome SessionServer::Flush(Connection& c) {
  // A client asleep on its wake board rather than on the socket learns
  // that something came (common/wake_board.h).
  struct WakeAfter {
    const Connection& c;
    bool wrote = false;
    ~WakeAfter() {
      if (wrote && c.board != nullptr) c.board->Wake(c.wake_word);
    }
  } wake{c};
  while (!c.out.empty()) {
    Outgoing& o = c.out.front();
    auto sent = SendSome(c.fd.get(), std::string_view(o.bytes).substr(c.out_offset),
                         c.out_offset == 0 ? o.fd.get() : -1);
    if (!sent.ok()) {
      if (PeerGone(c.fd.get())) {
        // What it sent before it went is still served (a posted seal, a
        // ticket's hold: their producer may have been killed right after);
        // the answers go nowhere, and its end of file ends the session.
        c.peer_gone = true;
        c.out.clear();
        c.out_offset = 0;
        return Outcome::kKeep;
      }
      Warn(StrCat("session.sock: dropping ", Describe(c.peer), ": ", sent.status().message()));
      return Outcome::kDrop;
    }
    if (*sent == 0) return Outcome::kKeep;  // the peer's buffer is full: wait for EPOLLOUT
    o.fd.reset();                           // it went with the first byte
    wake.wrote = true;
    c.out_offset += *sent;
    if (c.out_offset == o.bytes.size()) {
      c.out.pop_front();
      c.out_offset = 0;
    }
  }
  return Outcome::kKeep;
}

void SessionServer::EndSession(Connection& c, bool clean) {
  if (c.session == 0) return;
  const SessionEndReport r =
      registry_.EndSession(c.session, clean ? SessionEnd::kClosed : SessionEnd::kDied);
  c.session = 0;
  spdlog::info("session {} {}: {} tenant '{}', {} leases dropped", r.session.id,
               clean ? "closed" : "died", Describe(r.session.peer), r.session.tenant,
               r.leases_dropped);
  if (r.buffers_freed > 0 || r.reclaimed_bytes > 0) {
    spdlog::info("reclaim: session {} ({} tenant '{}'): {} buffers freed, {} returned ({} bytes)",
                 r.session.id, Describe(r.session.peer), r.session.tenant, r.buffers_freed,
                 FormatBytes(r.reclaimed_bytes), r.reclaimed_bytes);
  }
}

}  // namespace gpubroker
