#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "common/wake_board.h"
#include "common/wire/frame.h"
#include "daemon/core/registry.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/calls.h"
#include "daemon/session/busy_poll.h"
#include "daemon/util/descriptors.h"
#include "daemon/util/rate_limiter.h"

namespace gpubroker {

/// Serves session.sock: one epoll thread for all clients. A client says Hello
/// and gets its session id and token; then it may ask for descriptors (pool
/// and buffer fds, sent with SCM_RIGHTS) and make the data path's calls
/// (Allocate, Open, Seal, Release), answered by the same BrokerCalls as gRPC.
/// An Open that waits is parked in the registry and answered by this thread
/// when the wait ends (the seal, the deadline, shutdown), while the
/// connection goes on serving the session's other calls: replies then come
/// out of order, matched to their calls by request id. The connection's end, however it comes
/// (Goodbye, close, kill -9), ends the session and reclaims its memory.
///
/// What one peer can do to the others is bounded:
///  * a peer that sends garbage, a frame over the limit, or nothing within the
///    hello timeout is dropped;
///  * a peer that does not read its replies is not read from until they have
///    gone out (its connection waits for EPOLLOUT; nothing is dropped, and
///    nothing more is queued for it);
///  * each readable event reads one chunk, so a peer that pipelines calls
///    takes its turn with the others;
///  * a uid holds at most `max_sessions_per_uid` connections, and every
///    connection is charged to the daemon's descriptor budget; a connection
///    over either is answered with an ErrorFrame (RESOURCE_EXHAUSTED) and closed;
///  * when the kernel refuses a descriptor (EMFILE), the reserve descriptor
///    lets one waiting peer be told so, and accepting pauses for a moment
///    rather than spinning on a listener that stays readable.
class SessionServer {
 public:
  struct Options {
    std::chrono::milliseconds hello_timeout{5000};
    uint32_t max_sessions_per_uid = 0;  // 0: no cap
    /// How long the loop polls for more after it served something, before
    /// it sleeps in epoll_wait (common/spin.h); 0: it sleeps at once.
    std::chrono::microseconds busy_poll{0};
    /// The most that window grows to when frames keep waking the thread
    /// soon after it ran out (busy_poll.h); at or under `busy_poll`, the
    /// window stays `busy_poll`.
    std::chrono::microseconds busy_poll_max{0};
    /// The longest a parked Open that asks to wait awake (OpenRequest.awake_us)
    /// keeps the loop polling; 0: never.
    std::chrono::microseconds max_wait_awake{0};
  };

  SessionServer(BrokerCalls& calls, DescriptorBudget& descriptors, ReserveDescriptor& reserve,
                Options options);
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  /// Starts serving on a listening socket.
  absl::Status Start(UniqueFd listener);
  /// Stops accepting, says Goodbye to every client and ends their sessions.
  void Stop();

  /// Runs `then` on session.sock's thread once it has served every frame
  /// already received on any connection (any thread may ask): an Open over
  /// gRPC that would be refused thus sees a posted seal that came before it
  /// (docs/fast-path.md, "Posted seals"). After Stop, `then` runs at once,
  /// on the caller's thread.
  void AfterCatchUp(std::function<void()> then);
  /// Connections open now (sessions and peers that have not said Hello yet).
  uint64_t connections() const { return per_uid_.total(); }

 private:
  struct Outgoing {
    std::string bytes;
    UniqueFd fd;  // sent with the first byte, then closed
  };
  struct Connection {
    UniqueFd fd;
    uint64_t serial = 0;  // tells this connection from a later one on the same descriptor
    PeerCredentials peer;
    FrameDecoder decoder;  // reads flat calls (common/wire/flat_call.h) too
    SessionId session = 0;
    SessionView view;  // once the session is open
    bool said_goodbye = false;
    // kAnswers once its Hello asked: Open and Claim answered flat.
    FlatFrames flat = FlatFrames::kNone;
    // And Publish's answer too (Hello.flat_publish_answers with flat_answers).
    bool flat_publish = false;
    std::chrono::steady_clock::time_point hello_deadline;
    std::deque<Outgoing> out;  // replies the peer has not taken yet
    size_t out_offset = 0;     // bytes of out.front() already written
    bool reading = true;       // epoll watches for input (else for output room)
    // The peer has gone (closed, or died): nothing more reaches it, but the
    // frames it sent before it went are served (a dying producer's posted
    // seal and ticket hold take effect); its end of file ends the session.
    bool peer_gone = false;
    // Hello.wake_board: the session's word on its tenant's board, woken
    // after each frame written to it (common/wake_board.h); null: none.
    const WakeBoard* board = nullptr;
    uint32_t wake_word = 0;  // (the board is view.tenant's)
  };
  enum class Outcome { kKeep, kDrop };
  // The end of a parked Open, posted by whichever thread ended it.
  struct Completion {
    int fd = -1;
    uint64_t serial = 0;
    uint64_t request_id = 0;
    absl::StatusOr<BufferGrant> answer;  // the grant, or the refusal
    bool awake = false;                  // counted in awake_waits_ while parked
  };

  void Loop();
  /// An Open that asked to wait awake for `awake_us` has been parked: the
  /// loop polls until the wait ends or that time (capped) has passed.
  void WaitAwake(uint64_t awake_us);
  /// True while a parked Open that asked to wait awake keeps the loop polling.
  bool PollingForWaits(std::chrono::steady_clock::time_point now) const {
    return awake_waits_ > 0 && now < awake_until_;
  }
  /// Drops the peers that connected but never said Hello.
  void DropSilent(std::chrono::steady_clock::time_point now);
  void AcceptAll();
  void Admit(UniqueFd fd);
  void OutOfDescriptors();
  /// Serves what epoll reported for one connection (and drops it if it must go).
  void ServeReady(int fd, uint32_t events);
  /// Reports the turns counted since the last report (turns_).
  void CountTurns();
  /// Before a Claim of a ticket not held yet (or of a buffer not sealed
  /// yet) is refused, serves the frames that other sessions have already
  /// sent: the producer's hold, written before it handed the ticket out, is
  /// then served first. True when the Claim is left for later (it came
  /// within another look-ahead, and is answered at its end). An Open is
  /// tried first and looks ahead only when refused (OnCall, DeferOrCatchUp).
  bool LookAheadForClaim(Connection& asking, const v1::Call& call);
  /// The look-ahead itself, for a call refused for a reason that a frame
  /// already sent could end (a posted seal of an Open's name, docs/fast-path.md,
  /// "Posted seals"): inside another's look-ahead the call is left for its
  /// end (true); otherwise every other ready connection is served once
  /// (false: ask again now).
  bool DeferOrCatchUp(Connection& asking, const v1::Call& call);
  /// Serves every connection readable now but `except_fd` once, then the
  /// Opens that were left for the end of it.
  void CatchUp(int except_fd);
  /// Runs what AfterCatchUp queued (after a CatchUp).
  void RunAfterCatchUp();
  void HandleEvents(Connection& c, uint32_t events, bool* drop);
  Outcome OnReadable(Connection& c);
  Outcome ProcessFrames(Connection& c);
  Outcome OnFrame(Connection& c, const v1::SessionFrame& frame);  // timed: Serve
  Outcome Serve(Connection& c, const v1::SessionFrame& frame);
  Outcome OnHello(Connection& c, const v1::Hello& hello);
  Outcome OnFdRequest(Connection& c, const v1::FdRequest& request);
  Outcome OnCall(Connection& c, const v1::Call& call);
  /// A flat call read in place, timed as OnFrame times a frame: an Open, a
  /// Publish or a Release served from its facts, with no message; a Claim
  /// as its message.
  Outcome OnFlatFrame(Connection& c, const FlatCallFacts& call);
  Outcome OnFlatCall(Connection& c, const FlatCallFacts& call);
  /// OnCall's work, for a call in either form (session_server.cc).
  template <typename CallT>
  Outcome OnCallAs(Connection& c, const CallT& call);
  /// The calls that come as messages only (Allocate, Seal, ranges, tickets):
  /// their status, and a Claim's grant, into the caller's. False when the
  /// call is to be answered later (a Claim that looks ahead).
  bool ServeOther(Connection& c, const v1::Call& call, v1::Reply* r, absl::Status* status,
                  BufferGrant* grant, bool* granted);
  /// Queues a frame (and the descriptor that goes with it) and writes what
  /// the peer takes now.
  Outcome SendFrame(Connection& c, const v1::SessionFrame& frame, UniqueFd fd = UniqueFd());
  /// The same for frames already encoded.
  Outcome SendBytes(Connection& c, std::string bytes, UniqueFd fd = UniqueFd());
  /// Sends the answer to the Open or Claim `request_id`: flat from the grant
  /// to a session that reads flat answers (ToFlatAnswer), else as a Reply;
  /// after `before` (frames already encoded, sent in the same write).
  Outcome SendGrant(Connection& c, uint64_t request_id, bool claim, const BufferGrant& grant,
                    std::string before = {});
  /// The same for a Publish's answer, the published `buffer`: flat from
  /// its facts to a session that said flat_publish_answers (ToFlatPublishAnswer).
  Outcome SendPublished(Connection& c, uint64_t request_id, const BufferView& buffer,
                        std::string before);
  Outcome Flush(Connection& c);
  /// Hands a completion to the loop thread (any thread) and wakes it.
  void Post(Completion completion);
  /// Sends the answers of the waits that ended (loop thread); those of
  /// `serving_fd`, the connection being served, stay for the end of the turn.
  void AnswerParked(int serving_fd = -1);
  void WatchFor(Connection& c, bool reading);
  void Remove(int fd);
  /// Sends the registry's requests to unmap to their sessions' clients.
  void SendUnmapRequests();
  void EndSession(Connection& c, bool clean);
  /// The wake board of `tenant` for one more session, made on first use;
  /// null (and a warning) when it cannot be made: the session then goes
  /// without. Each board taken is given back by ReleaseBoard.
  const WakeBoard* TakeBoard(const std::string& tenant);
  /// A session that had the tenant's board has ended; the board goes with
  /// the tenant's last one (its descriptor counted in the budget meanwhile).
  void ReleaseBoard(const std::string& tenant);
  void Warn(const std::string& message);

  BrokerCalls& calls_;
  Registry& registry_;
  Metrics& metrics_;
  DescriptorBudget& descriptors_;
  ReserveDescriptor& reserve_;
  Options options_;
  PerUidConnections per_uid_;
  UniqueFd listener_;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: Stop() wakes the loop
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_{};  // Loop()'s, once it runs
  RateLimiter warn_limiter_{5.0, 20.0};
  // Touched by the loop thread only (and by Stop after the thread has ended).
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  bool listening_ = true;  // false while accepting pauses after EMFILE
  uint64_t next_serial_ = 1;
  // An Open read during another's look-ahead, answered at its end.
  struct Deferred {
    int fd = -1;
    uint64_t serial = 0;
    v1::Call call;
  };
  bool looking_ahead_ = false;
  bool answering_deferred_ = false;
  // Parked Opens that asked to wait awake, the time until which the loop
  // polls for them, and the seconds it has polled for them not yet counted.
  int awake_waits_ = 0;
  std::chrono::steady_clock::time_point awake_until_;
  double awake_seconds_ = 0;
  // Turns that served client frames, [polling], not yet counted: counted
  // before the thread sleeps and at each sweep, not in a hand-over's turn.
  uint64_t turns_[2] = {0, 0};
  // The busy poll's window, and the seconds polled in it not yet counted.
  BusyPollWindow busy_poll_;
  double polled_seconds_ = 0;
  std::chrono::nanoseconds reported_window_{-1};
  std::vector<epoll_event> look_ahead_events_;
  std::vector<Deferred> after_look_ahead_;
  absl::Mutex completions_mu_;
  std::vector<Completion> completions_ ABSL_GUARDED_BY(completions_mu_);
  std::vector<Completion> answering_;  // AnswerParked's, on the loop's thread
  std::vector<std::function<void()>> after_catch_up_ ABSL_GUARDED_BY(completions_mu_);
  bool stopped_ ABSL_GUARDED_BY(completions_mu_) = false;
  std::chrono::steady_clock::time_point resume_accepting_;
  // The tenants' wake boards, each with the number of sessions that have
  // it, and the next session word to give out (loop thread only).
  struct TenantBoard {
    WakeBoard board;
    int sessions = 0;
  };
  std::unordered_map<std::string, std::unique_ptr<TenantBoard>> boards_;
  uint32_t next_wake_word_ = 0;
  // What the boards say this thread is doing (kDaemonWord), written to
  // every board when it changes.
  DaemonState daemon_state_ = DaemonState::kAsleep;
  void SetDaemonState(DaemonState state);
};

}  // namespace gpubroker
