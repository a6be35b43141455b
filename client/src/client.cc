// Over 500 lines on purpose: the public Buffer and Client, each call a few
// lines over ClientImpl, in one place (a handle's posted answers, tickets and
// claims, releases). The paths they take live in client_impl.cc,
// client_ranges.cc and client_mapping.cc.
#include "gpubroker/client.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "client/src/client_impl.h"
#include "client/src/ticket_fields.h"
#include "common/paths.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/trace.h"
#include "common/units.h"
#include "common/version.h"
#include "common/wire/routing.h"

namespace gpubroker {

namespace detail {

std::string TicketSocketDir(const void* ticket, size_t size) {
  auto dir = TicketSocketDirOf(std::string_view(static_cast<const char*>(ticket), size));
  if (!dir) {
    ThrowError(ErrorCode::kInvalidArgument, "not a gpubroker ticket (Buffer::ticket() makes them)");
  }
  return std::move(*dir);
}
bool ParseBufferId(std::string_view s, BufferId* id) {
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s.front())) && ParseInt(s, id);
}
}  // namespace detail

namespace {

// `awake` and `daemon_awake` shape a wait: an Open that does not wait has
// none to keep awake.
void CheckAwake(const OpenOptions& options) {
  if (options.awake.count() < 0) {
    ThrowError(ErrorCode::kInvalidArgument, "awake is negative");
  }
  if (options.daemon_awake.count() < 0) {
    ThrowError(ErrorCode::kInvalidArgument, "daemon_awake is negative");
  }
  if ((options.awake.count() > 0 || options.daemon_awake.count() > 0) && !options.wait) {
    ThrowError(ErrorCode::kInvalidArgument,
               "awake and daemon_awake apply to an open that waits for its buffer (set wait)");
  }
}

// Takes the daemon's description of a buffer this handle has just published,
// keeping the handle's own name and tensor where they are: the pointers that
// gpubroker_buffer_get_facts and gpubroker_buffer_tensor handed out before
// the publication stay valid for the handle's life.
void AdoptPublished(BufferInfo& info, BufferInfo published) {
  published.name = std::move(info.name);
  published.tensor = std::move(info.tensor);
  info = std::move(published);
}

}  // namespace

const char* ClientVersion() { return kVersion; }

// Buffer ---------------------------------------------------------------------

Buffer::Buffer(std::shared_ptr<detail::ClientImpl> impl, BufferInfo info,
               std::unique_ptr<detail::Mapping> mapping, bool owner)
    : impl_(std::move(impl)), info_(std::move(info)), mapping_(std::move(mapping)), owner_(owner) {}

Buffer::Buffer() = default;

Buffer::~Buffer() { Reset(false); }

Buffer::Buffer(Buffer&& other) noexcept
    : impl_(std::move(other.impl_)),
      info_(std::move(other.info_)),
      mapping_(std::move(other.mapping_)),
      owner_(other.owner_),
      posted_(std::exchange(other.posted_, 0)),
      claim_(std::exchange(other.claim_, false)),
      holds_(std::move(other.holds_)),
      quiet_(std::move(other.quiet_)),
      refused_(std::exchange(other.refused_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset(false);
    impl_ = std::move(other.impl_);
    info_ = std::move(other.info_);
    mapping_ = std::move(other.mapping_);
    owner_ = other.owner_;
    posted_ = std::exchange(other.posted_, 0);
    claim_ = std::exchange(other.claim_, false);
    holds_ = std::move(other.holds_);
    quiet_ = std::move(other.quiet_);
    refused_ = std::exchange(other.refused_, nullptr);
  }
  return *this;
}

void* Buffer::data() const noexcept {
  if (claim_) SettleQuietly();
  return mapping_ ? mapping_->data() : nullptr;
}

BufferId Buffer::id() const noexcept {
  SettleQuietly();
  if (info_.id == 0 && !refused_) EnsurePublished();
  return info_.id;
}

const BufferInfo& Buffer::info() const noexcept {
  SettleQuietly();
  if (info_.id == 0 && !refused_) EnsurePublished();
  return info_;
}

bool Buffer::is_published() const noexcept {
  SettleQuietly();
  return info_.id != 0;
}

void Buffer::Settle() const {
  if (!impl_) return;
  if (posted_ != 0) {
    const uint64_t request = std::exchange(posted_, 0);
    if (claim_) {
      // A posted claim's or open's lease is this handle's from here on: a
      // failed map still releases it.
      detail::Grant granted;
      impl_->CollectCall(request, &granted);
      info_ = std::move(granted.info);
      mapping_ = impl_->Map(granted.import, info_.id);
      claim_ = false;  // left set when refused: the handle never gets memory
    } else if (v1::Reply reply = impl_->CollectCall(request); reply.has_publish()) {
      AdoptPublished(info_, detail::FromProto(reply.publish().buffer()));
    } else {
      info_ = detail::FromProto(reply.seal().buffer());
    }
  }
  // Tickets' holds: only a refusal matters (the buffer is the one held).
  // Every answer is taken, even past a refusal; the first refusal is thrown.
  std::exception_ptr refused;
  for (const uint64_t request : std::exchange(holds_, {})) {
    try {
      impl_->CollectCall(request);
    } catch (...) {
      if (!refused) refused = std::current_exception();
    }
  }
  if (refused) std::rethrow_exception(refused);
}

void Buffer::SettleClaim() const {
  if (!claim_) return;
  Settle();        // the answer, if it is still out
  ThrowRefused();  // its refusal, once
  if (claim_) {
    ThrowError(ErrorCode::kFailedPrecondition,
               "this handle's posted claim or open was refused: it holds no buffer");
  }
}

void Buffer::settle_claim() {
  if (!impl_ || !claim_) return;
  impl_->CheckProcess();
  SettleClaim();
}

void Buffer::settle() {
  if (!impl_) return;
  impl_->CheckProcess();
  Settle();
  ThrowRefused();
}

void Buffer::SettleQuietly() const noexcept {
  try {
    Settle();
  } catch (...) {
    refused_ = std::current_exception();
  }
}

void Buffer::ThrowRefused() const {
  if (refused_) std::rethrow_exception(std::exchange(refused_, nullptr));
}

BufferId Buffer::publish() {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "publish on an empty Buffer handle");
  Settle();
  ThrowRefused();
  const detail::LocalBlock* block = mapping_ ? mapping_->local_block() : nullptr;
  if (block != nullptr && info_.id == 0)
    AdoptPublished(info_, impl_->Publish(*block, info_, false));
  return info_.id;
}

void Buffer::EnsurePublished() const noexcept {
  const detail::LocalBlock* block = mapping_ ? mapping_->local_block() : nullptr;
  if (!impl_ || block == nullptr) return;
  try {
    AdoptPublished(info_, impl_->Publish(*block, info_, false));
  } catch (const std::exception& e) {
    // Still private, with id 0: an open elsewhere finds nothing to open.
    detail::ClientImpl::Debug(StrCat("publish of a client-made buffer failed: ", e.what()));
  }
}

void Buffer::seal_posted(void* stream) { Seal(stream, true); }

void Buffer::seal(void* stream) { Seal(stream, false); }

void Buffer::Seal(void* stream, bool posted) {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "seal on an empty Buffer handle");
  impl_->CheckProcess();
  if (!mapping_) ThrowError(ErrorCode::kFailedPrecondition, "seal on a buffer opened without map");
  Settle();
  ThrowRefused();
  // A consumer asleep for this name, and the daemon, wake now, while the
  // fence is recorded and the frame made (common/wake_board.h).
  impl_->SealAhead(info_.name, info_.id, mapping_->device_ordinal() >= 0);
  // Fence first, then the state: a reader that sees SEALED finds the fence recorded.
  const auto fence_start = std::chrono::steady_clock::now();
  mapping_->RecordReady(stream);
  if (detail::ClientImpl::DebugOn()) {
    detail::ClientImpl::Debug(StrCat("seal: fence recorded in ",
                                     FormatMicros(std::chrono::steady_clock::now() - fence_start)));
  }
  const detail::LocalBlock* block = mapping_->local_block();
  const bool publish = block != nullptr && info_.id == 0;  // name and seal in one frame
  if (posted) {
    if (publish) {
      posted_ = impl_->PostPublish(*block, info_);
    } else {
      v1::Call call;
      call.mutable_seal()->set_id(info_.id);
      posted_ = impl_->PostCall(std::move(call));
    }
    if (posted_ != 0) return;
    // Not sent (too large for a frame, which these never are): sealed as seal() does.
  }
  if (publish) {
    AdoptPublished(info_, impl_->Publish(*block, info_, true));
    return;
  }
  v1::Call call;
  call.mutable_seal()->set_id(info_.id);
  v1::Reply reply;
  if (impl_->Call(std::move(call), &reply)) {
    info_ = detail::FromProto(reply.seal().buffer());
    return;
  }
  grpc::ClientContext ctx;
  impl_->Prepare(ctx);
  v1::SealRequest req;
  req.set_id(info_.id);
  v1::SealResponse resp;
  grpc::Status s = impl_->stub().Seal(&ctx, req, &resp);
  if (!s.ok()) impl_->Throw(s);
  info_ = detail::FromProto(resp.buffer());
}

std::string Buffer::ticket(std::chrono::milliseconds ttl) {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "ticket on an empty Buffer handle");
  impl_->CheckProcess();
  SettleClaim();
  ThrowRefused();
  if (ttl.count() <= 0) ThrowError(ErrorCode::kInvalidArgument, "a ticket's ttl must be positive");
  const detail::LocalBlock* block = mapping_ ? mapping_->local_block() : nullptr;
  if (info_.id == 0 && block != nullptr && posted_ == 0) {
    // Never published: the daemon must know it before it can hold it.
    AdoptPublished(info_, impl_->Publish(*block, info_, false));
  }
  const Token secret = RandomToken();
  v1::Call call;
  v1::HoldRequest* hold = call.mutable_hold();
  if (info_.id != 0) {
    hold->set_id(info_.id);
  } else {
    // Published by a posted seal whose answer (the id) is not read yet.
    hold->set_range_id(block->block.range_id);
    hold->set_offset(block->block.offset);
  }
  hold->set_secret(secret.data(), secret.size());
  hold->set_ttl_ms(static_cast<uint64_t>(ttl.count()));
  const uint64_t request = impl_->PostCall(call);
  if (request != 0) {
    holds_.push_back(request);
  } else {
    v1::Reply reply;  // not sent (never: a hold is small): held as a call
    impl_->Call(std::move(call), &reply);
  }
  v1::Ticket t;
  t.set_secret(secret.data(), secret.size());
  // Absolute (made so at connect): the claimer may run in another directory.
  t.set_socket_dir(impl_->absolute_socket_dir());
  BufferInfo preview = info_;
  if (posted_ != 0) preview.state = BufferState::kSealed;  // its seal is on its way
  *t.mutable_buffer() = detail::ToProto(preview);
  t.set_expires_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch() + ttl)
                            .count());
  if (detail::ClientImpl::DebugOn()) {
    detail::ClientImpl::Debug(StrCat("ticket for buffer ",
                                     info_.id != 0 ? StrCat(info_.id) : "(id on its way)",
                                     ": hold posted"));
  }
  return t.SerializeAsString();
}

void Buffer::wait_ready(void* stream) {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "wait_ready on an empty Buffer handle");
  impl_->CheckProcess();
  SettleClaim();
  ThrowRefused();
  if (!mapping_) {
    ThrowError(ErrorCode::kFailedPrecondition, "wait_ready on a buffer opened without map");
  }
  mapping_->WaitReady(stream);
}

void Buffer::wait_sealed(std::chrono::milliseconds timeout) {
  wait_sealed(timeout, std::chrono::microseconds(0));
}

void Buffer::wait_sealed(std::chrono::milliseconds timeout, std::chrono::microseconds awake) {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "wait_sealed on an empty Buffer handle");
  impl_->CheckProcess();
  SettleClaim();
  ThrowRefused();
  if (info_.state == BufferState::kSealed) return;
  if (owner_ || info_.id == 0) {
    ThrowError(ErrorCode::kFailedPrecondition,
               "wait_sealed on a buffer this client made: its seal is this process's to make");
  }
  // An Open of the same buffer by id that waits for its seal, parked in the
  // daemon, and that maps nothing: the answer is the sealed description.
  OpenOptions options;
  options.wait = true;
  options.timeout = timeout;
  options.map = false;
  options.awake = awake;
  CheckAwake(options);
  {
    detail::Grant sealed;
    impl_->AskOpen(info_.id, {}, options, &sealed);
    info_ = std::move(sealed.info);
  }
  // That Open's own lease goes without a wait: its answer is taken when this
  // handle goes (nothing can be refused: the lease is there).
  if (const uint64_t posted = impl_->PostCall(detail::ReleaseCall(info_.id)); posted != 0) {
    quiet_.push_back(posted);
  } else {
    impl_->Release(detail::BufferRelease{info_.id, false, nullptr}, true);
  }
}

void* Buffer::ready_stream() {
  if (!impl_) ThrowError(ErrorCode::kFailedPrecondition, "ready_stream on an empty Buffer handle");
  impl_->CheckProcess();
  SettleClaim();
  ThrowRefused();
  return mapping_->ReadyStream();
}

int Buffer::device_ordinal() const noexcept {
  if (claim_) SettleQuietly();
  return mapping_ ? mapping_->device_ordinal() : -1;
}

void Buffer::release() { Reset(true); }

void Buffer::TakeQuietAnswers() {
  for (const uint64_t request : std::exchange(quiet_, {})) {
    try {
      impl_->CollectCall(request);
    } catch (const std::exception&) {
      // An answer nobody waits for: a session that ended dropped the lease too.
    }
  }
}

void Buffer::release_on(void* stream) {
  if (!impl_) return;
  if (!impl_->forked()) {
    SettleQuietly();
    TakeQuietAnswers();
  }
  if (refused_) {
    Reset(true);  // released at once; the refusal thrown after it
    return;
  }
  if (impl_->forked() || !mapping_) {
    Reset(true);
    return;
  }
  // Recorded before the handle lets go, so that a bad stream leaves it as it was.
  void* event = mapping_->RecordDone(stream);
  auto impl = std::move(impl_);
  detail::BufferRelease release{info_.id, owner_ && !info_.keep, std::move(mapping_)};
  if (event == nullptr) {
    impl->Release(std::move(release), true);  // the host: no work to wait for
    return;
  }
  impl->ReleaseAfter(std::move(release), stream, event);
  impl->FinishReleases(false);
}

void Buffer::Reset(bool report_errors) {
  if (!impl_) return;
  // A posted seal's answer first: whether the buffer was published decides
  // how it goes back.
  if (!impl_->forked()) {
    SettleQuietly();
    TakeQuietAnswers();
  }
  std::exception_ptr refused = std::exchange(refused_, nullptr);
  if (refused && !report_errors) {
    try {
      std::rethrow_exception(refused);
    } catch (const std::exception& e) {
      detail::ClientImpl::Warn(
          StrCat("a posted call on buffer '", info_.name, "' was refused: ", e.what()));
    }
    refused = nullptr;
  }
  ResetNow(report_errors);
  if (refused) std::rethrow_exception(refused);
}

void Buffer::ResetNow(bool report_errors) {
  if (impl_->forked()) {
    // The lease is the parent's: keep out of its session. A host mapping is
    // this process's own to undo; the CUDA ones skip their calls themselves.
    mapping_.reset();
    auto impl = std::move(impl_);
    if (report_errors) impl->CheckProcess();
    return;
  }
  auto impl = std::move(impl_);
  detail::BufferRelease release{info_.id, owner_ && !info_.keep, std::move(mapping_)};
  if (impl->DefersSync(release)) {
    impl->ReleaseUnsynced(std::move(release));
    return;
  }
  impl->Release(std::move(release), report_errors);
}

namespace detail {

void ClientImpl::AskOpen(BufferId id, std::string_view name, const OpenOptions& options,
                         Grant* grant) {
  // A waiting Open is parked in the daemon and answered on the session's
  // connection when the buffer is sealed; the connection serves this
  // client's other calls meanwhile. A daemon that does not say it parks
  // them gets them through gRPC.
  const auto wait = options.wait ? options.timeout : std::chrono::milliseconds(0);
  // awake comes with wait only (CheckAwake, at every way in).
  if ((!options.wait || waits_on_session()) &&
      Call(OpenCall(id, name, options), grant, wait, options.awake)) {
    if (DebugOn()) Debug(StrCat("open buffer ", grant->info.id, CallTiming()));
    return;
  }
  const v1::OpenRequest req = ToOpenRequest(id, name, options);
  v1::OpenResponse resp;
  grpc::ClientContext ctx;
  Prepare(ctx, wait);
  grpc::Status s = stub().Open(&ctx, req, &resp);
  if (!s.ok()) Throw(s);
  Count(Path::kOpenGrpc);
  grant->Take(std::move(resp));
}

void ClientImpl::Release(BufferRelease release, bool report_errors) {
  std::optional<LocalBlock> block;
  if (release.mapping && release.mapping->local_block() != nullptr) {
    block = *release.mapping->local_block();
  }
  // Memory of its own may stay mapped, in the mapping cache, for the next
  // buffer the daemon serves from it: the release says so, and the daemon
  // asks before it frees that memory. Anything else is unmapped before the
  // lease drops: the daemon may hand the memory to someone else as soon as
  // the last lease is gone.
  const bool keep_mapping = release.mapping && !block && KeepMapping(*release.mapping);
  release.mapping.reset();
  if (block) {
    // A client-made buffer: back to this client's allocator, with no call
    // unless it was published (then it waits, in quarantine, until the
    // daemon says nobody else holds it).
    const bool published = release.id != 0;
    FreeLocal(*block, published);
    if (!published) return;
  }
  if (release.id == 0) return;  // a posted claim that was refused: no lease
  v1::Reply reply;
  try {
    Call(ReleaseCall(release.id, release.free, keep_mapping), &reply);  // always fits in a frame
  } catch (const Error&) {
    // A daemon that is gone has already dropped the lease with the session.
    if (report_errors) throw;
  }
}

void ClientImpl::ReleaseAfter(BufferRelease release, void* stream, void* event) {
  std::lock_guard lock(pending_mu_);
  pending_.push_back({stream, event, std::move(release)});
  pending_count_.store(pending_.size(), std::memory_order_relaxed);
}

namespace {
// The batch of release()d blocks that share one device synchronize: small
// enough that what it keeps out of use stays small.
constexpr size_t kUnsyncedBlocks = 64;
constexpr uint64_t kUnsyncedBytes = uint64_t{16} << 20;
}  // namespace

bool ClientImpl::DefersSync(const BufferRelease& release) const {
  if (release.id != 0 || !release.mapping || release.mapping->device_ordinal() < 0) return false;
  const LocalBlock* block = release.mapping->local_block();
  return block != nullptr && block->block.size < kUnsyncedBytes;
}

void ClientImpl::ReleaseUnsynced(BufferRelease release) {
  bool full = false;
  {
    std::lock_guard lock(pending_mu_);
    unsynced_bytes_ += release.mapping->local_block()->block.size;
    unsynced_.push_back(std::move(release));
    unsynced_count_.store(unsynced_.size(), std::memory_order_relaxed);
    full = unsynced_.size() >= kUnsyncedBlocks || unsynced_bytes_ >= kUnsyncedBytes;
  }
  if (full) FlushUnsynced();
}

void ClientImpl::FlushUnsynced() {
  if (unsynced_count_.load(std::memory_order_relaxed) == 0) return;
  std::vector<BufferRelease> taken;
  {
    std::lock_guard lock(pending_mu_);
    taken.swap(unsynced_);
    unsynced_bytes_ = 0;
    unsynced_count_.store(0, std::memory_order_relaxed);
  }
#ifdef GPUBROKER_HAVE_CUDA
  std::vector<int> devices;
  for (const BufferRelease& r : taken) {
    const int d = r.mapping->device_ordinal();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  for (int d : devices) CudaSynchronize(d);
#endif
  for (BufferRelease& r : taken) {
    r.mapping->MarkDone();
    Release(std::move(r), false);  // back to the allocator: no call
  }
}

void ClientImpl::FinishReleases(bool wait) {
  if (wait) FlushUnsynced();
  if (pending_count_.load(std::memory_order_relaxed) == 0) return;
  std::vector<PendingRelease> taken;
  {
    std::lock_guard lock(pending_mu_);
    if (wait) {
      taken.swap(pending_);
    } else {
      // A stream's events fire in the order they were recorded: once one is
      // not done, the later ones of its stream are not asked (so a stream
      // far behind costs one query a call, not one per release). Events of
      // different streams fire in any order.
      std::vector<void*> behind;
      size_t kept = 0;
      for (PendingRelease& p : pending_) {
        bool done = false;
        if (std::find(behind.begin(), behind.end(), p.stream) == behind.end()) {
#ifdef GPUBROKER_HAVE_CUDA
          done = CudaWorkDone(p.release.mapping->device_ordinal(), p.event, false);
#else
          done = true;
#endif
          if (!done) behind.push_back(p.stream);
        }
        if (done) {
          p.event = nullptr;
          taken.push_back(std::move(p));
        } else {
          pending_[kept++] = std::move(p);
        }
      }
      pending_.resize(kept);
    }
    pending_count_.store(pending_.size(), std::memory_order_relaxed);
  }
  for (PendingRelease& p : taken) {
#ifdef GPUBROKER_HAVE_CUDA
    if (p.event != nullptr) CudaWorkDone(p.release.mapping->device_ordinal(), p.event, true);
#endif
    p.release.mapping->MarkDone();
    try {
      Release(std::move(p.release), false);
    } catch (const std::exception&) {
      // The handle is gone: there is nobody to tell. A daemon that is gone
      // dropped the lease with the session.
    }
  }
}

}  // namespace detail

// Client ---------------------------------------------------------------------

Client::Client(std::shared_ptr<detail::ClientImpl> impl) : impl_(std::move(impl)) {}

Client Client::connect(const std::string& socket_dir, const ConnectOptions& options) {
  const std::string dir = socket_dir.empty() ? ClientSocketDir() : socket_dir;
  return Client(std::make_shared<detail::ClientImpl>(dir, options));
}

Buffer Client::allocate(uint64_t size, const AllocateOptions& options) {
  impl_->FinishReleases(false);  // memory whose work is done may serve this one
  BufferInfo local;
  if (auto mapping = impl_->AllocateLocal(size, options, &local)) {
    return Buffer(impl_, std::move(local), std::move(mapping), true);
  }
  const v1::AllocateRequest req = detail::ToAllocateRequest(size, options);
  v1::AllocateResponse resp;
  // The routing rule the daemon advertises and enforces: session.sock for a
  // small one, and for a large one that a kept allocation may serve (the
  // daemon answers ABORTED when none does, or when it would have to wait).
  const AllocateRoute route = RouteAllocate(req, impl_->quick_allocation_limit());
  bool on_session = false;
  if (route != AllocateRoute::kGrpc) {
    v1::Call call;
    *call.mutable_allocate() = req;
    v1::Reply reply;
    try {
      on_session = impl_->Call(std::move(call), &reply);  // false: too large for a frame
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kAborted) throw;
    }
    if (on_session) resp = std::move(*reply.mutable_allocate());
  }
  if (on_session) {
    impl_->Count(detail::ClientImpl::Path::kDaemonSession);
  } else {
    grpc::ClientContext ctx;
    impl_->Prepare(ctx);
    grpc::Status s = impl_->stub().Allocate(&ctx, req, &resp);
    if (!s.ok()) impl_->Throw(s);
    impl_->Count(detail::ClientImpl::Path::kDaemonGrpc);
  }
  if (detail::ClientImpl::DebugOn()) {
    detail::ClientImpl::Debug(StrCat(
        "allocate ", FormatBytes(size), ": the daemon's, on ",
        on_session
            ? (route == AllocateRoute::kSessionIfKept ? "session.sock (a kept allocation)"
                                                      : "session.sock")
            : (route == AllocateRoute::kSessionIfKept ? "gRPC (no kept allocation)" : "gRPC"),
        " (", resp.buffer().backing(), ")"));
  }
  BufferInfo info = detail::FromProto(resp.buffer());
  // From here on the lease is ours: hand it to a Buffer before mapping, so
  // that a failed mapping still releases it.
  Buffer buffer(impl_, std::move(info), nullptr, true);
  buffer.mapping_ = impl_->Map(resp.import(), buffer.id());
  return buffer;
}

Buffer Client::Open(BufferId id, std::string_view name, const OpenOptions& options) {
  CheckAwake(options);
  impl_->FinishReleases(false);
  detail::Grant granted;
  impl_->AskOpen(id, name, options, &granted);
  Trace(TraceMark::kClientAnswerTaken);
  Buffer buffer(impl_, std::move(granted.info), nullptr, false);
  if (!options.map) return buffer;
  buffer.mapping_ = impl_->Map(granted.import, buffer.id());
  Trace(TraceMark::kClientMapped);
  if (options.stream != nullptr) buffer.mapping_->WaitReady(options.stream);
  return buffer;
}

Buffer Client::Claim(std::string_view ticket, bool posted) {
  impl_->CheckProcess();
  impl_->FinishReleases(false);
  v1::Ticket t;
  if (!t.ParseFromArray(ticket.data(), static_cast<int>(ticket.size())) || t.secret().empty()) {
    ThrowError(ErrorCode::kInvalidArgument, "not a gpubroker ticket (Buffer::ticket() makes them)");
  }
  FlatCallFacts call;
  call.kind = FlatCallFacts::Kind::kClaim;
  call.secret = t.secret();  // a view into the ticket, which outlives the call
  if (posted) {
    const uint64_t request = impl_->PostCall(call);
    if (request != 0) {
      BufferInfo preview = detail::FromProto(t.buffer());
      preview.id = 0;  // no lease until the answer: nothing to give back before it
      Buffer buffer(impl_, std::move(preview), nullptr, false);
      buffer.posted_ = request;
      buffer.claim_ = true;
      if (detail::ClientImpl::DebugOn()) detail::ClientImpl::Debug("claim: posted");
      return buffer;
    }
  }
  detail::Grant granted;
  impl_->Call(call, &granted);
  if (detail::ClientImpl::DebugOn()) {
    detail::ClientImpl::Debug(
        StrCat("claim buffer ", granted.info.id, detail::ClientImpl::CallTiming()));
  }
  Buffer buffer(impl_, std::move(granted.info), nullptr, false);
  buffer.mapping_ = impl_->Map(granted.import, buffer.id());
  return buffer;
}

Buffer Client::claim(std::string_view ticket) { return Claim(ticket, false); }

Buffer Client::claim_posted(std::string_view ticket) { return Claim(ticket, true); }

Buffer Client::OpenPosted(BufferId id, std::string_view name, const OpenOptions& options) {
  impl_->CheckProcess();
  if (options.wait) {
    // A parked Open could hold the session's posted answers back for its
    // whole wait, and with them every seal and ticket posted after it.
    ThrowError(ErrorCode::kInvalidArgument,
               "a posted open does not wait: use open(wait) (it is parked in the daemon)");
  }
  CheckAwake(options);
  if (options.stream != nullptr || !options.map) {
    ThrowError(ErrorCode::kInvalidArgument,
               "a posted open maps its buffer and orders no stream: call wait_ready(stream) "
               "on the handle, or use open()");
  }
  impl_->FinishReleases(false);
  const uint64_t request = impl_->PostCall(detail::OpenCall(id, name, options));
  if (request == 0) return Open(id, name, options);  // too large a frame: asked and waited for
  BufferInfo preview;
  preview.name = std::string(name);  // no id, size or layout before the answer
  Buffer buffer(impl_, std::move(preview), nullptr, false);
  buffer.posted_ = request;
  buffer.claim_ = true;
  if (detail::ClientImpl::DebugOn()) detail::ClientImpl::Debug("open: posted");
  return buffer;
}

Buffer Client::open(std::string_view name, const OpenOptions& options) {
  return Open(0, name, options);
}

Buffer Client::open_posted(std::string_view name, const OpenOptions& options) {
  return OpenPosted(0, name, options);
}

Buffer Client::open_posted(BufferId id, const OpenOptions& options) {
  if (id == 0) ThrowError(ErrorCode::kInvalidArgument, "buffer id 0 is not an id");
  return OpenPosted(id, {}, options);
}

Buffer Client::open(BufferId id, const OpenOptions& options) {
  if (id == 0) ThrowError(ErrorCode::kInvalidArgument, "buffer id 0 is not an id");
  return Open(id, {}, options);
}

Buffer Client::open(std::string_view name_or_id, bool wait, std::chrono::milliseconds timeout) {
  OpenOptions options;
  options.wait = wait;
  options.timeout = timeout;
  BufferId id = 0;
  if (detail::ParseBufferId(name_or_id, &id)) return open(id, options);
  return open(name_or_id, options);
}

BufferInfo Client::Free(BufferId id, std::string_view name) {
  v1::FreeRequest req;
  *req.mutable_ref() = detail::ToRef(id, name);
  grpc::ClientContext ctx;
  impl_->Prepare(ctx);
  v1::FreeResponse resp;
  grpc::Status s = impl_->stub().Free(&ctx, req, &resp);
  if (!s.ok()) impl_->Throw(s);
  return detail::FromProto(resp.buffer());
}

BufferInfo Client::free(std::string_view name_or_id) {
  BufferId id = 0;
  if (detail::ParseBufferId(name_or_id, &id)) return free(id);
  return Free(0, name_or_id);
}

BufferInfo Client::free(BufferId id) {
  if (id == 0) ThrowError(ErrorCode::kInvalidArgument, "buffer id 0 is not an id");
  return Free(id, {});
}

std::vector<BufferInfo> Client::list() {
  grpc::ClientContext ctx;
  impl_->Prepare(ctx);
  v1::ListResponse resp;
  grpc::Status s = impl_->stub().List(&ctx, v1::ListRequest(), &resp);
  if (!s.ok()) impl_->Throw(s);
  std::vector<BufferInfo> out;
  for (const auto& b : resp.buffers()) out.push_back(detail::FromProto(b));
  return out;
}

BrokerStatus Client::status() {
  grpc::ClientContext ctx;
  impl_->Prepare(ctx);
  v1::StatusResponse resp;
  grpc::Status s = impl_->stub().Status(&ctx, v1::StatusRequest(), &resp);
  if (!s.ok()) impl_->Throw(s);
  return detail::FromProto(resp);
}

void Client::trim() { impl_->Trim(); }
void Client::evict_mappings() { impl_->EvictMappings(); }
ClientStats Client::stats() const { return impl_->Stats(); }

const SessionInfo& Client::session() const { return impl_->session(); }
const std::string& Client::socket_dir() const { return impl_->socket_dir(); }

}  // namespace gpubroker
