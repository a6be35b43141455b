#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "client/src/fork_guard.h"
#include "client/src/grant.h"
#include "client/src/mapping_cache.h"
#include "client/src/sub_allocator.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "common/wake_board.h"
#include "common/wire/frame.h"
#include "gpubroker/error.hpp"
#include "gpubroker/types.hpp"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "gpubroker/v1/session.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpubroker::detail {

class DeviceArena;

/// A block of one of this client's ranges that a client-made Buffer holds.
struct LocalBlock {
  DeviceArena* arena = nullptr;
  SubAllocator::Block block;
  uint64_t size = 0;          // bytes asked for
  uint64_t fence_offset = 0;  // CUDA: the ready fence's word, in the block
  uint64_t fence_value = 0;   // 0: none (host)
};

/// This process's view of one buffer's memory; unmaps on destruction.
class Mapping {
 public:
  virtual ~Mapping() = default;
  /// The block of a client-made buffer; null for the daemon's buffers.
  virtual const LocalBlock* local_block() const { return nullptr; }
  virtual void* data() const = 0;
  /// Records the buffer's ready fence on `stream` (CUDA); nothing on the host,
  /// where a write is complete when it returns.
  virtual void RecordReady(void* /*stream*/) {}
  /// Makes `stream` wait for the ready fence (CUDA); nothing on the host.
  virtual void WaitReady(void* /*stream*/) {}
  /// A stream of the library's own on the buffer's device, made to wait for
  /// the ready fence (CUDA); nullptr on the host.
  virtual void* ReadyStream() { return nullptr; }
  /// The CUDA ordinal of the buffer's device in this process; -1 on the host.
  virtual int device_ordinal() const { return -1; }
  /// The daemon's id of the buffer's memory when it is memory of its own
  /// that may serve a next buffer (ImportDescriptor.allocation_id); 0: none.
  virtual uint64_t allocation_id() const { return 0; }
  /// The mapped memory, for the mapping cache, once the work that uses the
  /// buffer is complete (CUDA); null when it cannot outlive the buffer.
  virtual std::unique_ptr<CachedMapping> TakeMemory() { return nullptr; }

  /// Records on `stream` the point after which the work queued on it so far
  /// is complete (CUDA): an event, for CudaWorkDone. nullptr on the host,
  /// where there is no work to wait for.
  virtual void* RecordDone(void* /*stream*/) { return nullptr; }
  /// Says that the work that uses the buffer is complete (its RecordDone
  /// event fired): going, the mapping need not synchronize the device.
  void MarkDone() { done_ = true; }

 protected:
  bool done_ = false;
};

/// What a Buffer gives back when it goes: its mapping (a client-made block
/// inside it) and its lease.
struct BufferRelease {
  BufferId id = 0;    // 0: a client-made buffer never published
  bool free = false;  // the owner's release frees the buffer
  std::unique_ptr<Mapping> mapping;
};

/// The client end of session.sock: the session's lifeline, the channel on
/// which descriptors arrive, and the data path's calls. Thread-safe, and
/// several requests may be out at once: replies come back in any order (an
/// Open that waits is answered when its buffer is sealed) and are matched to
/// their requests by id. No thread of its own: whichever caller is waiting
/// reads for all of them, one at a time.
class SessionChannel {
 public:
  /// Connects, says Hello, waits for Welcome. Throws UnavailableError.
  /// `spin`: how long a caller waits awake for its answer before it blocks.
  SessionChannel(const std::string& path, const std::string& client_name,
                 std::chrono::milliseconds timeout, std::chrono::microseconds spin);
  ~SessionChannel();

  const v1::Welcome& welcome() const { return welcome_; }

  /// A producer's client, about to seal the buffer `name` (`id`; 0: none
  /// yet) and, with `records_fence`, to record a device fence first: where
  /// a consumer sleeps on the name's or the id's word of the wake board
  /// (common/wake_board.h), wakes it, and where the board says the daemon
  /// sleeps (kDaemonWord), wakes it too with an Ahead frame when its
  /// wake-up has something to overlap (WantsAhead), so that they are awake
  /// when the seal's frame comes instead of waking for it one after the
  /// other. Costs three loads when nobody sleeps; nothing without a board.
  void SealAhead(std::string_view name, uint64_t id, bool records_fence);
  /// How many of this session's waits (for a name, or for a seal by id) the
  /// producer's seal woke (ClientStats::seal_wakes).
  uint64_t seal_wakes() const { return seal_wakes_.load(std::memory_order_relaxed); }

  /// Called with the blocks the daemon returns (just before an answer), with
  /// this channel's lock held: it must not call the daemon.
  void set_returned_handler(std::function<void(const v1::BlocksReturned&)> handler) {
    on_returned_ = std::move(handler);
  }
  /// Called with the daemon's requests to unmap (they come unasked, within
  /// a call or between calls), with this channel's lock held: it must not
  /// call the daemon.
  void set_unmap_handler(std::function<void(const v1::UnmapRequest&)> handler) {
    on_unmap_ = std::move(handler);
  }

  /// Between calls: waits up to `timeout` for the daemon to send something
  /// unasked, or for `wake_fd` to become readable, and hands what came to the
  /// handlers. False once the session is over (the daemon closed it).
  bool Poll(int wake_fd, std::chrono::milliseconds timeout);
  /// Sends a frame that has no answer (Unmapped). Throws UnavailableError.
  void Send(const v1::SessionFrame& frame);

  /// Asks for a pool's or a buffer's descriptor and waits for it. Throws the
  /// daemon's refusal as an Error.
  UniqueFd RequestFd(v1::FdRequest request, v1::FdGrant* grant);

  /// Makes one broker call on the session's connection and waits for its
  /// Reply. Throws the daemon's refusal as an Error. False, with nothing sent,
  /// when the call does not fit in one frame (the caller uses gRPC instead).
  /// `awake`: the caller polls for the answer for this long from the call
  /// before it blocks, where that is longer than the connection's spin.
  bool Call(v1::Call call, v1::Reply* reply, std::chrono::milliseconds timeout,
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  /// The same for an Open or a Claim: the answer into `grant`, read straight
  /// from its flat bytes where it came flat.
  bool Call(v1::Call call, Grant* grant, std::chrono::milliseconds timeout,
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  /// The same, the call given as its facts: written flat with no message in
  /// between where the daemon reads flat calls, else as the Call they say.
  bool Call(FlatCallFacts call, v1::Reply* reply, std::chrono::milliseconds timeout,
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  bool Call(FlatCallFacts call, Grant* grant, std::chrono::milliseconds timeout,
            std::chrono::microseconds awake = std::chrono::microseconds(0));

  /// Sends one broker call without waiting for its answer, and returns its
  /// request id for Collect. At most kMaxPosted answers are left unread: a
  /// post beyond that first reads the oldest (so the daemon never blocks on
  /// a full socket of answers nobody reads). 0, with nothing sent, when the
  /// call does not fit in one frame.
  uint64_t Post(v1::Call call);
  uint64_t Post(FlatCallFacts call);
  /// The answer to a posted call (waited for if it has not come yet), once.
  /// Throws the daemon's refusal as an Error.
  v1::Reply Collect(uint64_t id, std::chrono::milliseconds timeout);
  /// The same for a posted Open or Claim, into `grant` (as Call does).
  void Collect(uint64_t id, std::chrono::milliseconds timeout, Grant* grant);
  static constexpr size_t kMaxPosted = 32;

  /// Tells the daemon that this session ends on purpose ("closed", not "died").
  void SayGoodbye() noexcept;

  /// How the calling thread's last call went, for the debug log: where a
  /// slow call spent its time.
  struct Timing {
    double send_us = 0;    ///< writing the frame
    double answer_us = 0;  ///< from then until its answer was in
    const char* how = "";  ///< how the answer was read
  };
  static const Timing& LastTiming();

 private:
  // What came back for one request: a frame, or an Open's or a Claim's
  // answer in the flat layout, kept as its bytes (common/wire/flat_answer.h)
  // for the caller to read in place.
  struct Answer {
    v1::SessionFrame frame;  // empty when the answer came flat
    std::string flat;
    UniqueFd fd;  // with an FdGrant
  };
  // Where the answer to one request lands.
  struct Slot {
    bool done = false;
    bool posted = false;            // in posted_: counted in posted_waiting_ until done
    uint32_t sleep_word = kNoWord;  // Exchange's
    Answer answer;
  };

  /// Sends `frame` (the request `id`) and waits until its answer comes:
  /// returns it, or throws the ErrorFrame that came instead, or why the
  /// session ended.
  /// `sleep_word`: a word of the wake board that the caller also sleeps on
  /// (SleepWordOf), else kNoWord.
  Answer Exchange(const std::string& frame, uint64_t id, std::chrono::milliseconds timeout,
                  std::chrono::microseconds awake = std::chrono::microseconds(0),
                  uint32_t sleep_word = kNoWord);
  static constexpr uint32_t kNoWord = ~0u;
  /// The word an Open that waits sleeps on besides its session's, where
  /// this session has a board: its name's, or its id's; kNoWord for any
  /// other call.
  uint32_t SleepWordOf(const v1::Call& call) const;
  uint32_t SleepWordOf(const FlatCallFacts& call) const;
  /// Sends `call` and waits for its answer; nullopt, with nothing sent, when
  /// it does not fit in one frame.
  template <typename CallT>
  std::optional<Answer> CallAnswer(CallT call, std::chrono::milliseconds timeout,
                                   std::chrono::microseconds awake);
  /// Post's work, for a call in either form.
  template <typename CallT>
  uint64_t PostAs(CallT call);
  /// The frame of a call (the request `id`): flat where the daemon reads
  /// flat calls and the call fits the layout, else protobuf.
  std::string Encode(v1::Call call, uint64_t id) const;
  std::string Encode(FlatCallFacts call, uint64_t id) const;
  /// A posted call's answer (Collect's work).
  Answer CollectAnswer(uint64_t id, std::chrono::milliseconds timeout);
  /// Call's work: the answer into `out`, as Take reads it.
  template <typename CallT, typename Out>
  bool CallInto(CallT call, Out* out, std::chrono::milliseconds timeout,
                std::chrono::microseconds awake);
  /// The Reply of an answer, read from its flat bytes where it came flat.
  static void Take(Answer answer, v1::Reply* reply);
  /// An Open's, a Claim's or a Publish's answer into `grant`; InternalError
  /// for another.
  static void Take(Answer answer, Grant* grant);
  /// Under `lock`: waits until `slot` (the request `id`) is done, reading for
  /// everyone while nobody else does. Throws, with the slot given up, when
  /// the session ends or `deadline` passes. `read`/`awake`: for Timing.
  /// Until `awake_until`, a read polls instead of blocking (the connection's
  /// spin applies besides).
  void Await(std::unique_lock<std::mutex>& lock, Slot& slot, uint64_t id,
             std::chrono::steady_clock::time_point deadline, bool* read, bool* awake,
             std::chrono::steady_clock::time_point awake_until = {});
  /// Reads what arrives within `timeout` and hands each frame to its slot,
  /// polling the socket for up to `spin` before it blocks. The reader's role
  /// is held (reading_); `lock` is released while reading.
  /// True when what it read arrived while it was waiting awake.
  bool ReadSome(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout,
                std::chrono::microseconds spin, uint32_t sleep_word = kNoWord);
  /// ReadSome's blocking step for a reader whose own call sleeps on the
  /// wake board: sleeps on the session's word and `sleep_word` instead of
  /// the socket, then, woken by the producer's seal ahead of the answer,
  /// waits for it awake for up to `spin` and then on the socket. OK with
  /// `*got` filled when something arrived; DEADLINE_EXCEEDED when nothing did.
  absl::Status SleepOnBoard(uint32_t sleep_word, std::chrono::milliseconds timeout,
                            std::chrono::microseconds spin, char* buf, size_t size,
                            std::vector<UniqueFd>* received, absl::StatusOr<Received>* got);
  void Dispatch(v1::SessionFrame frame);  // under mu_
  /// A flat answer (`body`, read into `facts`) to its slot. Under mu_.
  void DispatchFlat(const FlatAnswerFacts& facts, std::string_view body);
  /// Takes a posted call's slot out of posted_ (nullptr if it is not there). Under mu_.
  std::shared_ptr<Slot> ForgetPosted(uint64_t id);
  /// Gives back the leases of Opens answered after their caller gave up.
  void ReleaseOrphans();
  [[noreturn]] void ThrowEnded() const;  // under mu_

  UniqueFd fd_;
  v1::Welcome welcome_;
  // kCalls where the daemon reads flat calls (Welcome.flat_calls) and
  // GPUBROKER_FLAT_CALLS is not 0: Open, Publish, Release and Claim go flat.
  FlatFrames flat_calls_ = FlatFrames::kNone;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds spin_;
  // The tenant's wake board and this session's word on it (Welcome), where
  // the daemon gave one; not valid otherwise.
  WakeBoard board_;
  uint32_t wake_word_ = 0;
  std::atomic<uint64_t> seal_wakes_{0};

  // The words SealAhead is to wake (under send_mu_): at once, or with
  // GPUBROKER_SEAL_WAKE=after once the next frame is sent.
  bool wake_after_frame_ = false;
  // GPUBROKER_SEAL_AHEAD=sleepers: an Ahead where a consumer sleeps, whatever the daemon does.
  bool ahead_only_for_sleepers_ = false;
  uint32_t pending_wake_[2] = {kNoWord, kNoWord};
  /// Wakes the pending words and clears them. Under send_mu_.
  void WakePending();
  /// Sends one whole frame, then wakes any words still pending.
  absl::Status SendFrame(std::string_view bytes);

  std::mutex send_mu_;  // one frame goes out whole before the next
  std::mutex mu_;       // all that follows
  std::condition_variable answered_;
  FrameDecoder decoder_;
  std::deque<UniqueFd> fds_;  // received, not yet matched to their FdGrant
  std::function<void(const v1::BlocksReturned&)> on_returned_;
  std::function<void(const v1::UnmapRequest&)> on_unmap_;
  // A frame the daemon sends unasked: handed to its handler; false for others.
  bool Unasked(const v1::SessionFrame& frame);
  uint64_t next_request_id_ = 1;
  std::unordered_map<uint64_t, Slot*> slots_;
  // The slots of posted calls by request id (oldest first), until their
  // answer is collected; posted_waiting_ of them are not answered yet. A
  // producer may leave thousands uncollected (a ticket's hold is collected
  // when its buffer settles): neither posting nor collecting walks them.
  std::map<uint64_t, std::shared_ptr<Slot>> posted_;
  size_t posted_waiting_ = 0;
  bool reading_ = false;
  // Callers waiting for an answer of their own (Exchange, Collect). While
  // there are any, the socket is out of watch_'s set: an answer wakes its
  // caller only, not the thread in Poll as well (a wake-up and a lock passed
  // back and forth on every call of a client that keeps mappings).
  int callers_ = 0;
  UniqueFd watch_;  // Poll's epoll set: the socket (while no caller waits) and its wake fd
  int watch_wake_ = -1;
  /// A caller begins or ends its wait (under mu_).
  void CallerIn();
  void CallerOut();
  std::vector<uint64_t> orphans_;  // buffers granted to Opens whose caller gave up
  // Why the session is over (the daemon closed it, said Goodbye, failed it,
  // or sent garbage); OK while it serves.
  absl::Status ended_;
  std::optional<v1::ErrorFrame> ended_by_;  // the daemon's ErrorFrame for the session, if so
};

/// A region fetched from the daemon and kept for the life of the session: the
/// descriptor (host arenas are mapped from it buffer by buffer), the imported
/// CUDA pool, or the mapped slab or fence page (the descriptor is closed once
/// imported).
struct ImportedRegion {
  UniqueFd fd;
  uint64_t size = 0;
  void* cuda_pool = nullptr;  // cudaMemPool_t
  uint64_t cuda_mapped = 0;   // device address of a mapped fence page or arena slab
  std::string device_uuid;
  uint64_t fork_generation = ForkGeneration();
  ~ImportedRegion();
};

class ClientImpl {
 public:
  /// The paths that calls and maps take (ClientStats, the daemon's metrics).
  enum class Path {
    kClientMade,
    kDaemonSession,
    kDaemonGrpc,
    kMapped,
    kImported,
    kOpenGrpc,
    kCached,
  };

  ClientImpl(std::string socket_dir, ConnectOptions options);
  ~ClientImpl();

  v1::Broker::Stub& stub() { return *stub_; }
  /// One data-path call on the session's connection, bounded by the call
  /// timeout (`extra` on top: a waiting Open's own timeout); it carries this
  /// client's counters.
  bool Call(v1::Call call, v1::Reply* reply,
            std::chrono::milliseconds extra = std::chrono::milliseconds(0),
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  /// A data-path call posted on the session's connection (its answer is
  /// taken later by CollectCall); 0, with nothing sent, when it does not
  /// fit in a frame.
  uint64_t PostCall(v1::Call call);
  /// An Open or a Claim on the session's connection, as Call, its answer
  /// into `grant` (read in place where it came flat).
  bool Call(v1::Call call, Grant* grant,
            std::chrono::milliseconds extra = std::chrono::milliseconds(0),
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  /// The same, the call given as its facts (SessionChannel::Call).
  bool Call(FlatCallFacts call, v1::Reply* reply,
            std::chrono::milliseconds extra = std::chrono::milliseconds(0),
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  bool Call(FlatCallFacts call, Grant* grant,
            std::chrono::milliseconds extra = std::chrono::milliseconds(0),
            std::chrono::microseconds awake = std::chrono::microseconds(0));
  uint64_t PostCall(FlatCallFacts call);
  /// The answer to a posted call. Throws the daemon's refusal.
  v1::Reply CollectCall(uint64_t id);
  /// The answer to a posted Open or Claim, into `grant`.
  void CollectCall(uint64_t id, Grant* grant);
  /// True when the daemon serves waiting Opens on session.sock.
  bool waits_on_session() const { return session_channel_->welcome().max_waiting_opens() > 0; }
  /// Before the seal of a buffer (SessionChannel::SealAhead).
  void SealAhead(std::string_view name, uint64_t id, bool records_fence) {
    session_channel_->SealAhead(name, id, records_fence);
  }
  /// An Open's answer, mapped nothing yet: on session.sock, or through gRPC
  /// when it waits and the daemon does not park waiting Opens there.
  void AskOpen(BufferId id, std::string_view name, const OpenOptions& options, Grant* grant);

  /// True in a process made by fork() after this client connected: the
  /// session belongs to the parent.
  bool forked() const noexcept { return ForkedSince(fork_generation_); }
  /// Throws FailedPreconditionError when forked().
  void CheckProcess() const;
  /// Token metadata and deadline for a call (`extra` on top of the call timeout).
  void Prepare(grpc::ClientContext& ctx,
               std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;

  /// Maps a buffer the daemon just granted (fetching and caching its region,
  /// or taking its memory's mapping from the mapping cache).
  std::unique_ptr<Mapping> Map(const ImportFacts& import, BufferId id);
  std::unique_ptr<Mapping> Map(const v1::ImportDescriptor& import, BufferId id) {
    return Map(FactsOf(import), id);
  }

  // The mapping cache (docs/fast-path.md, "Mappings that outlive buffers") --

  /// Keeps the memory of a buffer whose handle goes mapped, for the next
  /// buffer served from it; true when the cache took it (the release then
  /// says keep_mapping). Mappings it let go to make room are unmapped and
  /// the daemon is told.
  bool KeepMapping(Mapping& mapping);
  /// Unmaps everything the cache holds, and tells the daemon.
  void EvictMappings();

  // Releases (client.cc) --------------------------------------------------

  /// Gives a buffer back now: its memory stays mapped in the cache or is
  /// unmapped (after the device's work, unless MarkDone), a client-made
  /// block returns to the allocator, the lease drops. Throws the daemon's
  /// refusal when `report_errors`.
  void Release(BufferRelease release, bool report_errors);
  /// Gives it back once `event` (the mapping's RecordDone on `stream`) has
  /// fired, at a later FinishReleases; the caller does not wait.
  void ReleaseAfter(BufferRelease release, void* stream, void* event);
  /// Completes the deferred releases whose work is done; all of them, after
  /// their work, when `wait`. Errors are not reported (the handles are gone).
  void FinishReleases(bool wait);
  size_t pending_releases() const { return pending_count_.load(std::memory_order_relaxed); }
  /// True for what release() may give back after a later, shared device
  /// synchronize: a block this client made on a GPU and never published
  /// (nobody else can hold it), smaller than the batch.
  bool DefersSync(const BufferRelease& release) const;
  /// Gives such a block back to the allocator once the device has
  /// synchronized: one cudaDeviceSynchronize for a batch of blocks (when it
  /// fills, when an allocation would fail without them, at trim and at the
  /// client's end), instead of one per release. Until then no buffer gets
  /// the block.
  void ReleaseUnsynced(BufferRelease release);
  /// Synchronizes the devices of the blocks waiting for it, and frees them.
  void FlushUnsynced();
  size_t unsynced_releases() const { return unsynced_count_.load(std::memory_order_relaxed); }
  MappingCache::Stats MappingCacheStats() const { return cache_.stats(); }
  /// Answers the daemon's requests to unmap that have come: unmaps, then
  /// says Unmapped.
  void ServeUnmapRequests();

  const SessionInfo& session() const { return session_; }
  /// Allocations at or above this size go through gRPC (0: none do).
  uint64_t quick_allocation_limit() const {
    return session_channel_->welcome().quick_allocation_limit();
  }
  const std::string& socket_dir() const { return socket_dir_; }
  /// socket_dir() made absolute and normal once, at connect: what tickets
  /// carry, for a claimer that may run in another directory.
  const std::string& absolute_socket_dir() const { return absolute_socket_dir_; }

  /// Throws the typed Error for a failed call.
  [[noreturn]] void Throw(const grpc::Status& status) const;

  // Client-made buffers (client_ranges.cc; docs/fast-path.md) -------------

  /// A buffer from this client's own allocator, described in `info`; null
  /// when the daemon is to make this one.
  std::unique_ptr<Mapping> AllocateLocal(uint64_t size, const AllocateOptions& options,
                                         BufferInfo* info);
  /// Makes a client-made buffer known to the daemon (one Publish frame).
  BufferInfo Publish(const LocalBlock& block, const BufferInfo& info, bool seal);
  /// The Publish frame posted, seal included: its answer's request id.
  uint64_t PostPublish(const LocalBlock& block, const BufferInfo& info);
  /// The call that publishes a client-made buffer.
  /// Views into `info`, which must outlive it.
  static FlatCallFacts PublishCall(const LocalBlock& block, const BufferInfo& info, bool seal);
  /// A client-made buffer's block goes back: to the allocator when it was
  /// never published, else into quarantine until the daemon returns it.
  void FreeLocal(const LocalBlock& block, bool published);
  void Trim();
  /// Tells the daemon this client's counters (a Call with no request), and
  /// hears of the blocks that came back.
  void Report();
  ClientStats Stats() const;
  /// Maps a range that the daemon just leased; its address here
  /// (`host_mapped`: an mmap of ours, to undo when it goes back).
  uint64_t MapRange(const v1::LeaseRangeResponse& range, bool* host_mapped);

  void Count(Path path);
  /// With GPUBROKER_LOG=debug: a line per call on stderr, saying which path
  /// it took ("allocate 4 KiB: client-made").
  static bool DebugOn();
  static void Debug(const std::string& line);
  /// What must not go unseen (a posted seal the daemon refused, found when
  /// nothing could throw any more): always printed.
  static void Warn(const std::string& line);
  /// How this thread's last session call went, for a Debug line.
  static std::string CallTiming();

 private:
  /// A region of the session's tenant, fetched once; `fetched`: it was
  /// fetched (and imported or mapped) now.
  std::shared_ptr<ImportedRegion> Region(uint64_t region_id, std::string_view device_uuid,
                                         bool* fetched = nullptr);
  /// Map's work; `path`: how the memory came to be mapped.
  std::unique_ptr<Mapping> MapMemory(const ImportFacts& import, BufferId id, Path* path);
  /// The mapping of the buffer's memory that the cache kept, if any.
  std::unique_ptr<CachedMapping> TakeCached(const ImportFacts& import);
  /// The mapped fence page that holds a CUDA buffer's fence word, or 0 when
  /// the word is inside the buffer.
  uint64_t FencePage(const ImportFacts& import);

  std::string socket_dir_;
  std::string absolute_socket_dir_;
  ConnectOptions options_;
  uint64_t fork_generation_ = ForkGeneration();
  pid_t pid_ = 0;  // of the process that connected, for the message
  std::unique_ptr<SessionChannel> session_channel_;
  SessionInfo session_;
  std::string token_hex_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Broker::Stub> stub_;

  std::mutex regions_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<ImportedRegion>> regions_;

  // Client-made buffers.
  DeviceArena& ArenaFor(const std::string& device);
  void OnBlocksReturned(const v1::BlocksReturned& returned);
  void DrainReturned();
  /// The counters a call carries (ClientCounters' fields), compared as
  /// numbers to tell whether they changed.
  // (As a flat call carries them: the client writes them from these.)
  using CounterValues = FlatCallFacts::Counters;
  CounterValues Counters() const;
  // This client's counters, on `call` when they changed since the last
  // frame that carried them (most calls change none: the daemon then skips
  // its books and its metrics for the frame); `always`: whether or not.
  void AttachCounters(v1::Call& call, bool always = false);
  void AttachCounters(FlatCallFacts& call);
  /// The counters to send now, or false when they have not changed since
  /// the last call that carried them (`always`: whether or not).
  bool CountersToSend(CounterValues* now, bool always);
  /// Call's work, for a call in either form and an answer into either.
  template <typename CallT, typename Out>
  bool CallOn(CallT call, Out* out, std::chrono::milliseconds extra,
              std::chrono::microseconds awake);
  std::mutex counters_mu_;
  CounterValues sent_counters_{};  // as last sent

  bool suballocate_ = false;
  mutable std::mutex arenas_mu_;
  std::map<std::string, std::unique_ptr<DeviceArena>> arenas_;  // by the device as asked
  std::unordered_map<uint64_t, DeviceArena*> range_arena_;      // range id -> its arena
  std::mutex returned_mu_;
  std::vector<v1::BlocksReturned::Block> returned_;  // to hand back after the call
  std::atomic<uint64_t> paths_[7] = {};

  // Releases waiting for their stream's work (Buffer::release_on).
  struct PendingRelease {
    void* stream;
    void* event;
    BufferRelease release;
  };
  std::mutex pending_mu_;
  std::vector<PendingRelease> pending_;
  std::atomic<size_t> pending_count_{0};
  // Blocks released by release() that wait for one device synchronize.
  std::vector<BufferRelease> unsynced_;  // under pending_mu_
  uint64_t unsynced_bytes_ = 0;          // under pending_mu_
  std::atomic<size_t> unsynced_count_{0};
  std::atomic<uint64_t> publishes_{0};

  // The mapping cache, and the thread that hears the daemon's requests to
  // unmap while the client makes no call (started with the first kept mapping).
  static MappingCache::Options CacheOptions(const ConnectOptions& options);
  void OnUnmapRequest(const v1::UnmapRequest& request);
  void StartReader();
  void StopReader();
  void ReadUnasked();
  void SendUnmapped(const std::vector<uint64_t>& ids);
  MappingCache cache_;
  std::mutex unmap_mu_;
  std::vector<uint64_t> unmap_asked_;  // by the daemon, not yet answered
  std::mutex reader_mu_;
  std::thread reader_;
  const UniqueFd reader_wake_;  // eventfd: work for the reader, or its stop
  std::atomic<bool> reader_stop_{false};
};

/// True (and the id) when `name_or_id` is an id: all digits. Names never start
/// with a digit, so nothing else reads as one.
bool ParseBufferId(std::string_view name_or_id, BufferId* id);

/// The socket directory of a ticket's daemon. Throws InvalidArgumentError
/// for bytes that are not a ticket.
std::string TicketSocketDir(const void* ticket, size_t size);

/// Throws the Error that matches an internal status.
[[noreturn]] void ThrowStatus(const absl::Status& status);
/// Throws the daemon's refusal that came on session.sock.
[[noreturn]] void ThrowErrorFrame(const v1::ErrorFrame& error);
/// The refusal reason in a failed gRPC call's details (kNone when it carries none).
RefusalReason ReasonOf(const grpc::Status& status);

#ifdef GPUBROKER_HAVE_CUDA
/// Imports a CUDA pool's descriptor (consumed) on the device with this UUID.
void* ImportCudaPool(UniqueFd fd, const std::string& device_uuid);
/// Maps a tenant's fence page or arena slab (descriptor consumed), readable
/// and writable by its device; its device address.
uint64_t MapCudaShared(UniqueFd fd, const std::string& device_uuid, uint64_t size);
void UnmapCudaShared(uint64_t address, uint64_t size, const std::string& device_uuid);
/// A buffer at its offset in a mapped arena slab.
std::unique_ptr<Mapping> MapCudaArenaBuffer(uint64_t slab, uint64_t fence_page,
                                            const ImportFacts& import);
/// Maps a buffer of an imported pool. `fence_page`: the mapped page that holds
/// its fence word, or 0 when the word is inside the buffer.
std::unique_ptr<Mapping> MapCudaPoolBuffer(void* pool, uint64_t fence_page,
                                           const ImportFacts& import);
/// A client-made buffer at `address` (its range is mapped already); its
/// ready fence is the word at block.fence_offset.
std::unique_ptr<Mapping> MapCudaLocalBlock(const LocalBlock& block, uint64_t address,
                                           const std::string& device_uuid);
/// Imports, reserves, maps and opens access to a VMM allocation (descriptor
/// consumed): memory that may outlive its buffer in the mapping cache.
std::unique_ptr<CachedMapping> ImportCudaVmm(UniqueFd fd, const ImportFacts& import);
/// A VMM buffer over its mapped memory (imported now, or kept in the cache).
std::unique_ptr<Mapping> MapCudaVmmBuffer(std::unique_ptr<CachedMapping> memory,
                                          uint64_t fence_page, const ImportFacts& import);
/// True once the work before `event` (a Mapping's RecordDone) is complete,
/// waiting for it when `wait`; the event is recycled then. A failed query
/// (a broken context) counts as done after the device synchronizes.
bool CudaWorkDone(int device, void* event, bool wait);
/// Waits for all of the device's work (cudaDeviceSynchronize); errors are
/// cleared, as a release's are.
void CudaSynchronize(int device);
#endif

// Conversions to and from the wire (convert.cc).
v1::BufferInfo ToProto(const BufferInfo& info);
BrokerStatus FromProto(const v1::StatusResponse& status);
/// By id when `id` is not 0, else by name.
v1::BufferRef ToRef(BufferId id, std::string_view name);
v1::AllocateRequest ToAllocateRequest(uint64_t size, const AllocateOptions& options);
v1::OpenRequest ToOpenRequest(BufferId id, std::string_view name, const OpenOptions& options);
/// The same Open as its facts (views into `name`), for session.sock.
FlatCallFacts OpenCall(BufferId id, std::string_view name, const OpenOptions& options);
/// A Release of the buffer `id` as its facts.
FlatCallFacts ReleaseCall(BufferId id, bool free = false, bool keep_mapping = false);

}  // namespace gpubroker::detail
