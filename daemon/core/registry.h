#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/token.h"
#include "common/unix_socket.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/leased_range.h"
#include "daemon/core/name_table.h"
#include "daemon/core/node_status.h"
#include "daemon/core/tenant_books.h"
#include "daemon/core/tenants.h"
#include "daemon/core/types.h"
#include "daemon/core/wait_list.h"

namespace gpubroker {

using RangeId = uint64_t;
/// The longest TTL a buffer may have (ten years). Longer ones are refused with
/// INVALID_ARGUMENT rather than saturated: a TTL that large is a mistake (or an
/// attempt to wrap the expiry time), and a buffer meant to stay uses `keep`.
inline constexpr uint64_t kMaxTtlMs = uint64_t{10} * 365 * 24 * 3600 * 1000;

struct SessionView {
  SessionId id = 0;
  PeerCredentials peer;
  std::string tenant;
  Token token{};
  std::string client_name;
  bool admin = false;  // root or the admin group: sees every tenant in Status
};

struct BufferView {
  BufferId id = 0;
  std::string name;
  uint64_t size = 0;
  uint64_t reserved_size = 0;
  std::string device_uuid;
  int device = 0;
  std::string tenant;
  BufferState state = BufferState::kAllocated;
  std::optional<TensorDesc> tensor;
  bool keep = false;
  int64_t expires_unix_ms = 0;
  std::vector<std::string> shared_with;
  uint32_t leases = 0;
  SessionId owner_session = 0;
  int64_t created_unix_ms = 0;
  std::string backing;       // "host-arena", "host-fd", "cuda-arena", "cuda-pool", "cuda-vmm"
  bool client_made = false;  // a published block of its owner's range
};

/// A lease granted by Allocate or Open, with what the client needs to map it.
/// A field added to it (or to BufferView, ImportInfo) goes into ToProto and
/// ToFlatAnswer alike (daemon/service/convert.h), and into the grant that
/// tests/unit/flat_answer_test.cc fills to hold the two to the same bytes.
struct BufferGrant {
  BufferView buffer;
  ImportInfo import;
};

struct AllocateParams {
  uint64_t size = 0;
  std::string device;  // UUID or ordinal; empty: the first device
  std::string name;
  std::optional<TensorDesc> tensor;
  bool keep = false;
  uint64_t ttl_ms = 0;  // 0: none; at most kMaxTtlMs
  std::vector<std::string> share_with;
  // What the transport allows (not the request's): session.sock's one thread
  // may not wait, and at or over the quick allocation limit it is served
  // only from a kept allocation (common/wire/routing.h).
  bool may_wait = true;
  bool kept_only = false;
};

/// Which buffer: by id when id != 0, else by name.
struct BufferKey {
  BufferId id = 0;
  std::string name;
  std::string ToString() const;
};

struct OpenParams {
  bool wait = false;
  /// When a wait ends; max(): WaitLimits::default_timeout from the call.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool allow_unsealed = false;
};

/// The answer to an Open that was parked, delivered once.
using OpenDone = std::function<void(absl::StatusOr<BufferGrant>)>;

/// What bounds the Opens that wait.
struct WaitLimits {
  uint32_t max_per_session = 0;  // parked at once by one session; 0: no cap
  uint32_t max_per_tenant = 0;   // by all of a tenant's sessions; 0: no cap
  /// The deadline of a wait that names none: every wait ends.
  std::chrono::milliseconds default_timeout{60000};
};

/// How a session ended.
enum class SessionEnd {
  kClosed,    // the client said Goodbye
  kDied,      // its connection ended without one (a crash, kill -9)
  kShutdown,  // the daemon is stopping (not counted)
};

/// A range lease asked for (docs/fast-path.md).
struct RangeParams {
  std::string device;  // UUID or ordinal; empty: the first device
  uint64_t min_bytes = 0;
  uint64_t want_bytes = 0;
};

/// A range granted: charged to the tenant as a whole.
struct RangeGrant {
  RangeId id = 0;
  uint64_t length = 0;
  ImportInfo import;  // the whole range
};

/// A block of a session's range that becomes a buffer of the books.
struct PublishParams {
  RangeId range = 0;
  uint64_t offset = 0;
  uint64_t reserved = 0;  // bytes of the block
  uint64_t size = 0;      // bytes asked for
  std::string name;
  std::optional<TensorDesc> tensor;
  bool seal = false;
  uint64_t fence_offset = 0;
  uint64_t fence_value = 0;
};

/// A published block whose last lease dropped: its range's owner may reuse it.
struct ReturnedBlock {
  RangeId range = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

/// What ending a session gave back.
struct SessionEndReport {
  SessionView session;
  uint32_t leases_dropped = 0;
  uint32_t buffers_freed = 0;      // owned, not kept: freed by the session's end
  uint32_t buffers_destroyed = 0;  // memory actually returned now
  uint64_t reclaimed_bytes = 0;    // bytes of those, and of its ranges
  uint32_t ranges_returned = 0;
  uint64_t bytes_kept_for_others = 0;  // published blocks that other sessions still hold
};

/// A ticket to hold (docs/fast-path.md, "Tickets"): the buffer by id, or by
/// the block of the session's range it was published from (range, offset).
struct HoldParams {
  BufferId id = 0;
  RangeId range = 0;
  uint64_t offset = 0;
  std::string secret;
  uint64_t ttl_ms = 0;  // 0: kDefaultTicketTtlMs
};
inline constexpr uint64_t kDefaultTicketTtlMs = 60 * 1000;
inline constexpr uint64_t kMaxTicketTtlMs = 3600 * 1000;
inline constexpr size_t kMinTicketSecret = 16;
inline constexpr size_t kMaxTicketSecret = 64;
/// Tickets a tenant may have held and not yet claimed at once.
inline constexpr uint32_t kMaxTicketsPerTenant = 65536;

struct ExpiryReport {
  uint32_t tickets_expired = 0;
  uint32_t buffers_expired = 0;
  uint32_t buffers_destroyed = 0;
  uint64_t reclaimed_bytes = 0;
};

/// The broker's books: sessions, buffers, names, leases, tenants and quotas.
///
/// Rules it enforces:
///  * a buffer is visible to its tenant and to the tenants it is shared with,
///    and to nobody else (others get NOT_FOUND, as for a buffer that does not
///    exist);
///  * memory goes back to the backend only when the buffer is freed (by Free,
///    by its owner's session ending unless `keep`, or by its TTL) and no lease
///    remains;
///  * a tenant's bytes (rounded as the backend rounds them) never exceed its
///    quota.
///
/// It also knows which sessions keep which allocations mapped after their
/// buffers went (ReleaseRequest.keep_mapping): the backend asks it before it
/// truly frees such memory, and it asks those sessions to unmap
/// (MappingHolders; the session server sends the requests).
///
/// Thread-safe. One mutex guards the books; it is never held across a backend
/// call, a socket write or an RPC: memory is taken before a buffer is entered
/// and given back after it has been removed, outside the lock.
class Registry final : public MappingHolders {
 public:
  using Clock = std::function<int64_t()>;  // unix time in ms

  Registry(Backend& backend, TenantDirectory tenants, Clock clock = {}, TenantLimits limits = {},
           WaitLimits waits = {});
  ~Registry() override;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Sessions ---------------------------------------------------------------

  /// UNAVAILABLE once shutdown has begun.
  absl::StatusOr<SessionView> OpenSession(const PeerCredentials& peer, std::string client_name);
  /// Drops the session's leases and frees what it owned (but `keep` buffers),
  /// and counts the end and what it reclaimed in the same step.
  SessionEndReport EndSession(SessionId session, SessionEnd how = SessionEnd::kClosed);
  /// The session a token belongs to; UNAUTHENTICATED when none.
  absl::StatusOr<SessionView> Authenticate(const Token& token) const;

  // Buffers ----------------------------------------------------------------

  absl::StatusOr<BufferGrant> Allocate(SessionId session, const AllocateParams& params);

  /// An Open that may wait, without holding a thread. Returns the answer when
  /// there is one now (the grant, a refusal, or a wait refused: over a cap,
  /// or past its deadline). Otherwise the call is parked: nullopt, `*parked`
  /// set, and `done` gets the answer exactly once, later — from the thread
  /// whose allocation or seal makes it servable, from ExpireWaits at its
  /// deadline, from CancelWait, from the end of its session or from
  /// shutdown; never from within this call, never under the registry's lock.
  /// `may_appear` (optional) is set for a refusal that a frame already on
  /// its way could end, as CouldBecomeOpenable says, found in the same look.
  std::optional<absl::StatusOr<BufferGrant>> OpenOrPark(SessionId session, const BufferKey& key,
                                                        const OpenParams& params, OpenDone done,
                                                        WaitId* parked, bool* may_appear = nullptr);
  /// True when an Open of `key` that does not wait would be refused now for
  /// a reason that a frame already on its way could end: the name is not
  /// known yet, or the buffer is not sealed (and `allow_unsealed` is not
  /// asked). Takes no lease: the caller decides whether to look at other
  /// sessions' pending frames first (SessionServer, posted seals).
  bool CouldBecomeOpenable(SessionId session, const BufferKey& key, bool allow_unsealed);
  /// Answers a parked Open with `why` (CANCELLED, say); false when it is no
  /// longer parked (it has been answered, or is being).
  bool CancelWait(WaitId id, absl::Status why);
  /// OpenOrPark that blocks until the answer comes (for callers that own a
  /// thread anyway: tools and tests).
  absl::StatusOr<BufferGrant> Open(SessionId session, const BufferKey& key,
                                   const OpenParams& params);
  absl::StatusOr<BufferView> Seal(SessionId session, BufferId id);
  /// `keep_mapping`: the session keeps its mapping of the buffer's memory
  /// (its allocation id) after the lease drops; it is asked to unmap before
  /// that memory is truly freed.
  absl::Status Release(SessionId session, BufferId id, bool free, bool keep_mapping = false);
  absl::StatusOr<BufferView> Free(SessionId session, const BufferKey& key);
  std::vector<BufferView> List(SessionId session) const;

  // Ranges and client-made buffers (session.sock; docs/fast-path.md) --------

  /// A range of the tenant's arena, charged to its quota as a whole.
  absl::StatusOr<RangeGrant> LeaseRange(SessionId session, const RangeParams& params);
  /// Gives a range back; its published blocks that others hold stay.
  absl::Status ReturnRange(SessionId session, RangeId range);
  // Tickets (session.sock; docs/fast-path.md, "Tickets") -------------------

  /// Keeps one lease on a buffer the session holds a lease on, for whoever
  /// claims `secret` within the TTL; the session may end meanwhile. Returns
  /// the buffer's id.
  absl::StatusOr<BufferId> Hold(SessionId session, const HoldParams& params);
  /// The ticket's lease becomes the session's (once): an Open's grant.
  /// NOT_FOUND for a secret not held (claimed, expired, never held) or a
  /// buffer the session's tenant may not see (the ticket then stays);
  /// FAILED_PRECONDITION while the buffer is not sealed.
  absl::StatusOr<BufferGrant> Claim(SessionId session, const std::string& secret);
  /// True when a Claim of `secret` would be refused now for a reason that a
  /// frame already on its way could end: no such ticket yet, or its buffer
  /// not sealed yet (posted seals and holds; SessionServer looks ahead).
  bool CouldBecomeClaimable(const std::string& secret) const;

  /// Makes a block of the session's range a buffer (sealed at once with `seal`).
  absl::StatusOr<BufferGrant> Publish(SessionId session, const PublishParams& params);
  /// The session's blocks returned since the last call (its client reuses them).
  std::vector<ReturnedBlock> TakeReturnedBlocks(SessionId session);
  /// Records what the session's client says it did; the increments of its
  /// totals since its last report (for the metrics' counters).
  ClientCounters RecordCounters(SessionId session, const ClientCounters& counters);

  // Mappings that outlive buffers (docs/fast-path.md) ----------------------

  /// The session no longer maps these allocations (it was asked to, or its
  /// cache let them go); memory that waited for it may be freed now.
  void Unmapped(SessionId session, const std::vector<AllocationId>& ids);
  /// Requests to unmap, by session, since the last call; the caller sends them.
  std::vector<std::pair<SessionId, std::vector<AllocationId>>> TakeUnmapRequests();
  /// Called (outside the lock) when requests to unmap are waiting to be taken.
  void set_unmap_notifier(std::function<void()> notify);
  // MappingHolders: the backend asks, outside the registry's lock.
  bool Held(AllocationId id) const override;
  void AskToUnmap(AllocationId id) override;

  // Descriptors (session.sock) ---------------------------------------------

  /// The descriptor of a region (arena, slab, pool, fence page) of the session's tenant.
  absl::StatusOr<FdGrant> ExportRegionFd(SessionId session, RegionId region);
  /// The descriptor of a buffer with an fd of its own, on which the session holds a lease.
  absl::StatusOr<FdGrant> ExportBufferFd(SessionId session, BufferId id);

  // Time, state, shutdown --------------------------------------------------

  /// Frees buffers whose TTL has passed at `now_unix_ms`.
  ExpiryReport ExpireDue(int64_t now_unix_ms);
  /// Unix ms of the next TTL to pass, if any.
  std::optional<int64_t> NextExpiry() const;
  /// Answers the parked Opens whose deadline has passed (DEADLINE_EXCEEDED).
  /// Returns how many.
  uint32_t ExpireWaits(std::chrono::steady_clock::time_point now);
  /// Sleeps until a TTL or a wait may be due: the earliest deadline passes, an
  /// earlier one is set, `at_most` elapses, or StopTimers. False once stopped.
  bool AwaitTimers(absl::Duration at_most);
  /// Ends AwaitTimers, now and for good.
  void StopTimers();

  /// Fills in the books' part of the node's status: sessions, buffers,
  /// tenants, and buffers per device and tenant (NodeStatusCollector adds the devices).
  void AddBooksTo(NodeStatus& status) const;
  /// The tenant directory in force.
  std::shared_ptr<const TenantDirectory> tenants() const;
  /// Puts a new tenant directory in force (a config reload). Sessions keep the
  /// tenant they were opened as and buffers keep theirs; new sessions map
  /// through `tenants`, and every allocation from now on is held to its quotas
  /// (a quota lowered under a tenant's use refuses its next allocations but
  /// takes nothing back).
  void ReplaceTenants(TenantDirectory tenants);
  Backend& backend() { return backend_; }
  const Backend& backend() const { return backend_; }
  const WaitLimits& wait_limits() const { return wait_limits_; }

  /// New sessions and calls get UNAVAILABLE; parked Opens are answered so.
  void BeginShutdown();
  bool shutting_down() const;
  /// Ends every session and gives back every buffer (at shutdown). Returns bytes.
  uint64_t ReleaseAll();

 private:
  struct Session {
    SessionView view;
    absl::flat_hash_map<BufferId, uint32_t> leases;  // buffer -> lease count
    absl::flat_hash_set<BufferId> owned;
    absl::flat_hash_set<RegionId> regions;  // held: named by its buffers, or fetched
    absl::flat_hash_set<RangeId> ranges;
    std::vector<ReturnedBlock> returned;       // not yet told to the client
    ClientCounters counters;                   // as last reported
    absl::flat_hash_set<AllocationId> mapped;  // kept mapped after their buffers went
    std::vector<AllocationId> unmap_asked;     // requests to unmap, not yet sent
  };
  struct Buffer {
    BufferView view;
    bool freed = false;
    bool sealed_when_freed = false;  // its writes were complete: a ticket's claimer may read them
    bool in_expiries = false;        // {view.expires_unix_ms, id} is in expiries_
    bool owns_descriptor = false;    // counted as such in the books
    std::shared_ptr<BackendBuffer> memory;
    // A client-made buffer: its range while that lives (its bytes are the
    // range's, charged with it), and its offset there.
    RangeId range = 0;
    uint64_t range_offset = 0;
    bool charged = true;  // its reserved bytes count in its tenant's books by themselves
  };
  // A lease kept for a ticket's claimer.
  struct Ticket {
    BufferId buffer = 0;
    std::string tenant;  // the buffer's, whose cap it counts in
    int64_t expires_unix_ms = 0;
  };
  struct Range {
    SessionId session = 0;
    std::string tenant;
    int device = 0;
    uint64_t length = 0;
    std::unique_ptr<LeasedRange> memory;
    absl::flat_hash_set<BufferId> published;  // live buffers carved from it
  };
  // One attempt at an Open: the grant, or why not and whether waiting may
  // change that. What a waiter, wherever it waits, retries.
  struct OpenAttempt {
    absl::StatusOr<BufferGrant> result;
    bool may_wait = false;
  };
  // Destroyed after the lock is released: ranges first (their gaps go back),
  // then buffers (published blocks that outlived their range go back then).
  struct Graveyard {
    std::vector<std::shared_ptr<BackendBuffer>> buffers;
    std::vector<std::unique_ptr<LeasedRange>> ranges;
    void push_back(std::shared_ptr<BackendBuffer> b) { buffers.push_back(std::move(b)); }
  };
  // A parked Open: what it asked for, and whom to answer.
  struct Parked {
    SessionId session = 0;
    BufferKey key;
    bool allow_unsealed = false;
    OpenDone done;
  };
  // Answers for parked Opens, collected under the lock and delivered by the
  // destructor: declared before the MutexLock, it runs after the unlock.
  class Answers {
   public:
    Answers() = default;
    Answers(const Answers&) = delete;
    Answers& operator=(const Answers&) = delete;
    ~Answers();
    void Add(OpenDone done, absl::StatusOr<BufferGrant> result);

   private:
    std::vector<std::pair<OpenDone, absl::StatusOr<BufferGrant>>> items_;
  };

  int64_t Now() const;
  // Wakes the timer thread if it sleeps past `unix_ms` (a TTL or a ticket's
  // expiry), or past `deadline` (a parked Open's).
  void WakeTimersFor(int64_t unix_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeTimersFor(std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int> ResolveDevice(const std::string& device) const;
  absl::Status ValidateAllocation(const AllocateParams& params) const;
  /// The session, or UNAVAILABLE during shutdown / UNAUTHENTICATED once it has ended.
  absl::StatusOr<Session*> LiveSession(SessionId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Session* FindSession(SessionId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  OpenAttempt TryOpen(Session& s, const BufferKey& key, bool allow_unsealed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Buffer*> FindVisible(const Session& s, const BufferKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool Visible(const Buffer& b, const std::string& tenant);
  /// The buffer as `tenant` may see it.
  static BufferView ViewFor(const Buffer& b, const std::string& tenant);
  void GrantLease(Session& s, Buffer& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session holds the regions of its tenant that `b`'s facts name.
  void HoldRegionsOf(Session& s, const Buffer& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its name goes; Opens waiting for it by id to be sealed are answered
  // NOT_FOUND (it never will be) through `answers`.
  void MarkFreed(Buffer& b, Answers& answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a freed buffer with no lease; its memory goes to `dead`. Returns
  // the bytes that left the tenant's books (0 for a block that went back to
  // its live range, whose owner is told).
  uint64_t MaybeDestroy(BufferId id, Graveyard& dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A session's leases, buffers and ranges at its end.
  void EndSessionBooks(const Session& session, SessionEndReport& report, Graveyard& dead,
                       Answers& answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets that `s` maps `id`; true when nobody maps it any more.
  bool Unmap(SessionId s, AllocationId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a range: its bytes leave the books but for its published blocks
  // that live on, which are charged by themselves from now. Returns the
  // bytes that went back.
  uint64_t EndRange(RangeId id, Graveyard& dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::chrono::steady_clock::time_point WaitDeadline(const OpenParams& params) const;
  // Sealed, or freed after it was: a ticket's buffer may be claimed.
  static bool SealedForClaim(const Buffer& b);
  // Drops a ticket (claimed: its lease moves; expired: its lease goes).
  void ForgetTicket(absl::flat_hash_map<std::string, Ticket>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the tickets whose TTL has passed; their buffers may go.
  void ExpireTickets(int64_t now_unix_ms, ExpiryReport& report, Graveyard& dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest TTL of a buffer or a ticket, if any.
  std::optional<int64_t> NextExpiryLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Retries the waiters that a change to `b` (it appeared, or was sealed) may serve.
  void Wake(BufferId id, Answers& answers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unparks a waiter and answers it with `result`.
  void Answer(WaitId id, absl::StatusOr<BufferGrant> result, Answers& answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every waiter of `session` (every waiter when 0) with `why`.
  void AnswerAll(SessionId session, const absl::Status& why, Answers& answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend& backend_;
  const Clock clock_;
  const WaitLimits wait_limits_;

  mutable absl::Mutex mu_;
  absl::CondVar timers_;  // an earlier TTL or wait deadline was set; timers stopped
  bool timers_stopped_ ABSL_GUARDED_BY(mu_) = false;
  // While the timer thread sleeps in AwaitTimers: when it will look next (at
  // the latest), on the registry's clock and on the steady one. A TTL or a
  // deadline at or after that wakes nobody: the thread finds it then (a
  // ticket's 60 s or a parked Open's 30 s would otherwise wake it at every
  // call, a context switch that contends for mu_ with the caller).
  bool timers_asleep_ ABSL_GUARDED_BY(mu_) = false;
  int64_t timers_look_unix_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point timers_look_steady_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  SessionId next_session_ ABSL_GUARDED_BY(mu_) = 1;
  BufferId next_buffer_ ABSL_GUARDED_BY(mu_) = 1;
  RangeId next_range_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<RangeId, Range> ranges_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, Session> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, SessionId> by_token_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BufferId, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
  NameTable names_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const TenantDirectory> tenants_ ABSL_GUARDED_BY(mu_);
  TenantBooks books_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<int64_t, BufferId>> expiries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Ticket> tickets_ ABSL_GUARDED_BY(mu_);  // by secret
  std::set<std::pair<int64_t, std::string>> ticket_expiries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> tickets_by_tenant_ ABSL_GUARDED_BY(mu_);
  NodeStatus::Totals totals_ ABSL_GUARDED_BY(mu_);
  // Who keeps which allocation mapped after its buffers went.
  absl::flat_hash_map<AllocationId, absl::flat_hash_set<SessionId>> mapped_by_ ABSL_GUARDED_BY(mu_);
  std::function<void()> unmap_notifier_ ABSL_GUARDED_BY(mu_);
  WaitList waits_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaitId, Parked> parked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpubroker
