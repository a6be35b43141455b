#pragma once

/// @file client.hpp
/// @brief The gpubroker C++ client: connect to gpubrokerd, allocate, share and
/// open buffers with no copy.
///
/// @code
///   auto client = gpubroker::Client::connect();
///   auto buf = client.allocate(64 << 20, {.name = "frames"});
///   std::memset(buf.data(), 1, buf.size());
///   buf.seal();
///   // in another process:
///   auto view = client.open("frames", {.wait = true});
/// @endcode
///
/// A Client is thread-safe. A Buffer is a handle for one thread at a time.
/// A process made by fork() cannot use its parent's clients: every call fails
/// with FailedPreconditionError, and destroying them leaves the parent's
/// session alone. The child connects anew.
///
/// The headers need C++17; Buffer::as() (a std::span) is there from C++20 on.
/// The examples above use C++20's designated initializers.

#include <cstdint>
#include <exception>
#include <memory>
#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#define GPUBROKER_HAVE_SPAN 1
#endif
#include <string>
#include <string_view>
#include <vector>

#include "gpubroker/error.hpp"
#include "gpubroker/export.h"
#include "gpubroker/types.hpp"

namespace gpubroker {

namespace detail {
class ClientImpl;
class Mapping;
}  // namespace detail

/// @brief A lease on a buffer and this process's mapping of it.
///
/// Destroying the handle unmaps the memory first, then drops the lease (the
/// daemon returns the memory only once no lease remains). When the handle came
/// from Client::allocate and the buffer is not `keep`, dropping it also frees
/// the buffer: its name goes away, and its memory returns once every other
/// process's lease has dropped. Move-only.
class GPUBROKER_API Buffer {
 public:
  Buffer();
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  /// @brief The buffer's memory in this process (host pointer on the host
  /// backend, device pointer on the CUDA backends).
  void* data() const noexcept;
  /// @brief Bytes asked for at allocation.
  uint64_t size() const noexcept {
    Learn();
    return info_.size;
  }
  /// @brief The buffer's id. A buffer this client made and has not yet
  /// published is published first (one round trip, the first time), so that
  /// another process may open it by this id. 0 when that fails (its name
  /// taken, say): where the id matters, take it from publish(), which throws.
  BufferId id() const noexcept;
  const std::string& name() const noexcept {
    Learn();
    return info_.name;
  }
  /// @brief UUID of the device the buffer lives on.
  const std::string& device() const noexcept {
    Learn();
    return info_.device_uuid;
  }
  const std::optional<TensorDesc>& tensor() const noexcept {
    Learn();
    return info_.tensor;
  }
  /// @brief The daemon's description, as of the last call on this handle
  /// (publishes a client-made buffer first, as id() does).
  const BufferInfo& info() const noexcept;
  /// @brief False for a buffer this client made and has not yet published:
  /// no other process can open it yet.
  bool is_published() const noexcept;
  /// @brief Makes a buffer this client made known to the daemon now, under
  /// its name, unsealed, so that others may open it (with allow_unsealed, or
  /// wait for its seal). Nothing for a buffer that is known already.
  /// @return The buffer's id, never 0.
  /// @throws AlreadyExistsError when its name is taken.
  BufferId publish();

  /// @brief True when this handle came from allocate().
  bool is_owner() const noexcept { return owner_; }
  bool valid() const noexcept { return impl_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

#if defined(GPUBROKER_HAVE_SPAN)
  /// @brief The memory as a span of T (host backend; C++20).
  template <typename T>
  std::span<T> as() const {
    return {static_cast<T*>(data()), static_cast<size_t>(size() / sizeof(T))};
  }
#endif

  /// @brief Marks the writes complete (ALLOCATED -> SEALED); readers waiting in
  /// open() wake up. A buffer this client made is published and sealed in
  /// one frame; its name is taken then (AlreadyExistsError here).
  ///
  /// On the CUDA backends the buffer's ready fence is recorded on `stream` (a
  /// cudaStream_t; nullptr: the legacy default stream) first, so the producer
  /// need not synchronize: a consumer's stream waits for the work queued on
  /// `stream` before the seal. On the host backend writes are complete when
  /// they return and `stream` is ignored.
  /// @throws FailedPreconditionError without a lease; PermissionDeniedError for
  ///         another tenant's buffer.
  void seal(void* stream = nullptr);

  /// @brief seal(), without waiting for the daemon's answer: returns once
  /// the seal's frame is written (and its fence recorded), and takes the
  /// answer in at the handle's next call that needs it.
  ///
  /// What a consumer sees is the same: an open() on session.sock that the
  /// producer's signal (a pipe, a queue, a socket, anything written after
  /// this call returned) came before finds the buffer sealed, because the
  /// daemon serves the frames other sessions have already sent before it
  /// refuses an Open for a name it does not know yet (docs/fast-path.md,
  /// "Posted seals"). What changes is where a refusal (the name taken, say)
  /// is thrown: at this handle's next id(), publish(), seal() or release(),
  /// or, if nothing else is done with it, printed when the handle goes.
  /// At most 32 answers are left unread per client: the 33rd post reads
  /// the oldest first.
  void seal_posted(void* stream = nullptr);

  /// @brief A ticket for this buffer: bytes that another process passes to
  /// Client::claim() to take a lease of its own on it, without its name
  /// (what torch.multiprocessing's pickled CUDA tensors carry, with the
  /// lifetime managed by the daemon). Until the ticket is claimed, once, or
  /// `ttl` passes (at most an hour), the daemon keeps the buffer for it, even
  /// after this handle, its owner's session or this process has gone.
  ///
  /// Costs no round trip: the hold is posted like seal_posted(), and a
  /// claim that the daemon reads before it (the ticket travelled faster) is
  /// served after it. A refusal is thrown by this handle's next call that
  /// needs an answer (settle(), id(), seal(), release()), or printed when the
  /// handle goes. Hand the ticket to the claimer only after the writes are
  /// sealed (seal() or seal_posted() before ticket()): a claim of an unsealed
  /// buffer is refused. docs/fast-path.md, "Tickets".
  /// @throws FailedPreconditionError on an empty or released handle.
  std::string ticket(std::chrono::milliseconds ttl = std::chrono::seconds(60));

  /// @brief Takes in the answers of this handle's posted calls (a posted
  /// seal, tickets' holds, a posted claim) now.
  /// @throws the first refusal among them.
  void settle();
  /// @brief Takes in a posted claim's answer only, if one is out (what the
  /// calls that need the memory do first; a posted seal's answer stays out).
  /// @throws its refusal.
  void settle_claim();

  /// @brief Makes `stream` (a cudaStream_t) wait for the producer's writes, as
  /// recorded at seal. No-op on the host backend.
  void wait_ready(void* stream = nullptr);
  /// @brief Waits on the host until the buffer is sealed, for a handle opened
  /// before the seal (allow_unsealed, as a consumer that asks first does:
  /// docs/fast-path.md): one call, parked in the daemon and answered by the
  /// seal. Returns at once for a sealed buffer. Afterwards the handle reads
  /// sealed, so that exports and views ordered on a stream (the C ABI's, DLPack)
  /// wait for the producer's writes as for a buffer opened sealed.
  /// @throws NotFoundError when the buffer is freed, or its producer's session
  ///         ends, before the seal (the seal cannot come); DeadlineExceededError
  ///         after `timeout`; FailedPreconditionError for a buffer this client
  ///         made (its seal is this process's own).
  void wait_sealed(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// @brief The same, the wait kept awake for up to `awake` (OpenOptions::awake):
  /// this thread and the daemon's session thread poll instead of sleeping.
  void wait_sealed(std::chrono::milliseconds timeout, std::chrono::microseconds awake);

  /// @brief A stream of the library's own on the buffer's device (one per
  /// device and process), made to wait for the producer's writes: the buffer
  /// is ready for whatever work is ordered after that stream's queued work.
  /// For interfaces that name the producer's stream, such as the CUDA Array
  /// Interface v3. nullptr on the host backend.
  void* ready_stream();

  /// @brief The CUDA ordinal of the buffer's device in this process (what
  /// DLPack calls `device_id`; `CUDA_VISIBLE_DEVICES` renumbers devices, so it
  /// may differ from the daemon's). -1 on the host backend or for an empty handle.
  int device_ordinal() const noexcept;

  /// @brief Unmaps and drops the lease now (what the destructor does), but
  /// reports errors. The handle is empty afterwards.
  ///
  /// On a GPU the memory serves nothing else until all of the device's work
  /// queued before the release is complete, as with cudaFree: the release
  /// synchronizes the device first. A small buffer this client made and
  /// never published is the exception in cost, not in guarantee: its block
  /// waits, out of the allocator, for one synchronize shared by a batch of
  /// such releases (64 blocks or 16 MiB; or when an allocation needs them,
  /// at trim(), when the client ends), so the call does not wait.
  /// @throws Error when the daemon refuses; UnavailableError when it is gone.
  void release();

  /// @brief Gives the buffer back once the work queued on `stream` (a
  /// cudaStream_t; nullptr: the legacy default stream) so far is complete,
  /// without waiting for it: what a CUDA caching allocator does with a
  /// block freed on a stream. release() and the destructor instead wait for
  /// all of the device's work (cudaDeviceSynchronize), as cudaFree does.
  ///
  /// The handle is empty at once. Until the work is done the memory stays
  /// this client's (the lease is held, a client-made block is not handed out
  /// again); this client gives it back at its next allocate() or open()
  /// after the work is done, at trim(), or when the client ends, whichever
  /// comes first. All work that uses the buffer must be queued on `stream`,
  /// or ordered before its queued work. On the host backend, release().
  /// @throws CUDA errors for a stream that is not of the buffer's device
  ///         (the handle stays valid then); as release() on the host.
  void release_on(void* stream);

 private:
  friend class Client;
  Buffer(std::shared_ptr<detail::ClientImpl> impl, BufferInfo info,
         std::unique_ptr<detail::Mapping> mapping, bool owner);
  void Seal(void* stream, bool posted);
  void Reset(bool report_errors);
  void ResetNow(bool report_errors);
  void EnsurePublished() const noexcept;
  /// Takes in the answer to a posted seal, if one is out: throws its refusal.
  void Settle() const;
  /// Settle() for a posted claim, whose memory is not known before its answer.
  void SettleClaim() const;
  /// Settle(), keeping a refusal for the next call that can throw it.
  void SettleQuietly() const noexcept;
  /// A posted open knows nothing of its buffer before its answer (a posted
  /// claim knows what its ticket says): the answer, taken quietly.
  void Learn() const noexcept {
    if (claim_ && info_.size == 0) SettleQuietly();
  }
  /// Throws the refusal that SettleQuietly kept, once.
  void ThrowRefused() const;
  /// Takes the answers of quiet_, as the handle goes.
  void TakeQuietAnswers();

  std::shared_ptr<detail::ClientImpl> impl_;
  mutable BufferInfo info_;  // a client-made buffer gets its id when published
  mutable std::unique_ptr<detail::Mapping> mapping_;  // a posted claim's comes with its answer
  bool owner_ = false;
  mutable uint64_t posted_ = 0;          // request id of a posted seal's (or claim's) unread answer
  mutable bool claim_ = false;           // posted_ is a claim's or an open's
  mutable std::vector<uint64_t> holds_;  // request ids of tickets' holds not yet answered
  std::vector<uint64_t> quiet_;          // posted calls whose answers matter to nobody
  mutable std::exception_ptr refused_;   // a posted call's refusal, not thrown yet
};

/// @brief A session with gpubrokerd. Cheap to copy (copies share the session).
/// The session ends when the last copy and the last Buffer are gone, or when
/// the process dies; the daemon then reclaims what the session held.
class GPUBROKER_API Client {
 public:
  /// @brief Connects to the daemon.
  /// @param socket_dir where the daemon's sockets are; empty: $GPUBROKER_SOCKET_DIR,
  ///        else the daemon's default (/run/gpubroker as root,
  ///        $XDG_RUNTIME_DIR/gpubroker otherwise).
  /// @throws UnavailableError when no daemon answers there.
  static Client connect(const std::string& socket_dir = {}, const ConnectOptions& options = {});

  /// @brief Allocates a buffer; this session owns it and holds a lease on it.
  ///
  /// Served by this client's own allocator, with no call to the daemon, in
  /// ranges it leases from the daemon (charged to the tenant's quota as a
  /// whole), unless `keep`, `ttl` or `share_with` is given or the buffer is
  /// larger than a range: then the daemon makes it. Such a client-made buffer
  /// is private to this process until published (seal(), id(), info()).
  /// Memory of a block this client used before is not zeroed.
  /// @throws InvalidArgumentError (size 0, over the device, bad name or tensor),
  ///         AlreadyExistsError (name taken), QuotaExceededError, OutOfMemoryError or
  ///         LimitExceededError (each a ResourceExhaustedError: quota, device full, count limit).
  Buffer allocate(uint64_t size, const AllocateOptions& options = {});

  /// @brief Opens a buffer by name: a name of this client's tenant, or
  /// "tenant/name" for a buffer another tenant shares with it.
  /// @throws NotFoundError, FailedPreconditionError (not sealed, no wait),
  ///         DeadlineExceededError (the wait ran out).
  Buffer open(std::string_view name, const OpenOptions& options = {});
  /// @brief Opens a buffer by id.
  Buffer open(BufferId id, const OpenOptions& options = {});
  /// @brief Claims a ticket (Buffer::ticket() in another process): a lease
  /// of this session's on its buffer and a mapping, as open() gives. One
  /// claim per ticket.
  /// @throws InvalidArgumentError for bytes that are not a ticket;
  ///         NotFoundError when it was claimed already, has expired, or its
  ///         buffer is not visible to this tenant; FailedPreconditionError
  ///         when its buffer is not sealed.
  Buffer claim(std::string_view ticket);
  /// @brief claim() without waiting for the daemon's answer: the handle
  /// knows the buffer's size, name and layout from the ticket at once, and
  /// takes the answer in at its first call that needs the memory or the
  /// daemon's word (data(), wait_ready(), info(), id(), settle(), release());
  /// data() is nullptr and the other calls throw if it was refused. The
  /// round trip overlaps whatever the caller does in between.
  Buffer claim_posted(std::string_view ticket);
  /// @brief open() without waiting for the daemon's answer, as
  /// claim_posted() is to claim(): the handle knows only the name it was
  /// asked for, and takes the answer in at its first call that needs the
  /// memory or the daemon's word (data(), size(), tensor(), info(), id(),
  /// wait_ready(), settle(), release()), which throws the refusal
  /// (NotFoundError, FailedPreconditionError); data() is nullptr then. The
  /// round trip overlaps whatever the caller does in between, and opens
  /// posted one after another share one: a consumer that needs several
  /// buffers posts all of them, then uses them. Like an Open on
  /// session.sock, it finds a buffer whose seal this process saw posted
  /// before (docs/fast-path.md, "Posted seals").
  /// @throws InvalidArgumentError for `wait` (a posted open is not parked:
  ///         use open()), a `stream` or `map = false`.
  Buffer open_posted(std::string_view name, const OpenOptions& options = {});
  /// @brief open_posted() by id.
  Buffer open_posted(BufferId id, const OpenOptions& options = {});
  /// @brief Opens by name, or by id when `name_or_id` is all digits.
  Buffer open(std::string_view name_or_id, bool wait,
              std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /// @brief Frees a buffer of this tenant: the name goes at once, the memory
  /// once no lease remains. `name_or_id`: all digits means an id; a name is
  /// this tenant's.
  /// @return the buffer as it was when freed.
  BufferInfo free(std::string_view name_or_id);
  BufferInfo free(BufferId id);

  /// @brief The buffers this tenant may see.
  std::vector<BufferInfo> list();
  /// @brief Version, backend, devices, pools, tenants, sessions.
  BrokerStatus status();

  /// @brief Gives back to the daemon every range this client holds empty
  /// (and its threads' cached blocks): quota for others of its tenant.
  void trim();
  /// @brief What this client did, by path, and its allocator's books.
  ClientStats stats() const;
  /// @brief Unmaps every freed buffer's memory that this client keeps mapped
  /// (ConnectOptions::mapping_cache_bytes), and tells the daemon, which may
  /// then free it at once. The next buffer served from such memory imports
  /// it anew.
  void evict_mappings();

  /// @brief This client's session (id, tenant, daemon version, backend).
  const SessionInfo& session() const;
  const std::string& socket_dir() const;

 private:
  explicit Client(std::shared_ptr<detail::ClientImpl> impl);
  Buffer Open(BufferId id, std::string_view name, const OpenOptions& options);
  Buffer OpenPosted(BufferId id, std::string_view name, const OpenOptions& options);
  Buffer Claim(std::string_view ticket, bool posted);
  BufferInfo Free(BufferId id, std::string_view name);

  std::shared_ptr<detail::ClientImpl> impl_;
};

/// @brief The client library's version.
GPUBROKER_API const char* ClientVersion();

}  // namespace gpubroker
