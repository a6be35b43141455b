#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "client/src/fork_guard.h"
#include "common/unique_fd.h"
#include "common/wire/frame.h"
#include "gpubroker/error.hpp"
#include "gpubroker/types.hpp"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "gpubroker/v1/session.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpubroker::detail {

/// This process's view of one buffer's memory; unmaps on destruction.
class Mapping {
 public:
  virtual ~Mapping() = default;
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
  SessionChannel(const std::string& path, const std::string& client_name,
                 std::chrono::milliseconds timeout);
  ~SessionChannel();

  const v1::Welcome& welcome() const { return welcome_; }

  /// Asks for a pool's or a buffer's descriptor and waits for it. Throws the
  /// daemon's refusal as an Error.
  UniqueFd RequestFd(v1::FdRequest request, v1::FdGrant* grant);

  /// Makes one broker call on the session's connection and waits for its
  /// Reply. Throws the daemon's refusal as an Error. False, with nothing sent,
  /// when the call does not fit in one frame (the caller uses gRPC instead).
  bool Call(v1::Call call, v1::Reply* reply, std::chrono::milliseconds timeout);

  /// Tells the daemon that this session ends on purpose ("closed", not "died").
  void SayGoodbye() noexcept;

 private:
  // Where the answer to one request lands.
  struct Slot {
    bool done = false;
    v1::SessionFrame frame;
    UniqueFd fd;
  };

  /// Sends `frame` (the request `id`) and waits until its answer comes:
  /// returns it, or throws the ErrorFrame that came instead, or why the
  /// session ended.
  v1::SessionFrame Exchange(const std::string& frame, uint64_t id, UniqueFd* fd,
                            std::chrono::milliseconds timeout);
  /// Reads what arrives within `timeout` and hands each frame to its slot.
  /// The reader's role is held (reading_); `lock` is released while blocked.
  void ReadSome(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout);
  void Dispatch(v1::SessionFrame frame);  // under mu_
  /// Gives back the leases of Opens answered after their caller gave up.
  void ReleaseOrphans();
  [[noreturn]] void ThrowEnded() const;  // under mu_

  UniqueFd fd_;
  v1::Welcome welcome_;
  std::chrono::milliseconds timeout_;

  std::mutex send_mu_;  // one frame goes out whole before the next
  std::mutex mu_;       // all that follows
  std::condition_variable answered_;
  FrameDecoder decoder_;
  std::deque<UniqueFd> fds_;  // received, not yet matched to their FdGrant
  uint64_t next_request_id_ = 1;
  std::unordered_map<uint64_t, Slot*> slots_;
  bool reading_ = false;
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
  ClientImpl(std::string socket_dir, ConnectOptions options);
  ~ClientImpl();

  v1::Broker::Stub& stub() { return *stub_; }
  /// One data-path call on the session's connection, bounded by the call
  /// timeout (`extra` on top: a waiting Open's own timeout).
  bool Call(v1::Call call, v1::Reply* reply,
            std::chrono::milliseconds extra = std::chrono::milliseconds(0)) {
    CheckProcess();
    return session_channel_->Call(std::move(call), reply, options_.call_timeout + extra);
  }
  /// True when the daemon serves waiting Opens on session.sock.
  bool waits_on_session() const { return session_channel_->welcome().max_waiting_opens() > 0; }

  /// True in a process made by fork() after this client connected: the
  /// session belongs to the parent.
  bool forked() const noexcept { return ForkedSince(fork_generation_); }
  /// Throws FailedPreconditionError when forked().
  void CheckProcess() const;
  /// Token metadata and deadline for a call (`extra` on top of the call timeout).
  void Prepare(grpc::ClientContext& ctx,
               std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;

  /// Maps a buffer the daemon just granted (fetching and caching its region).
  std::unique_ptr<Mapping> Map(const v1::ImportDescriptor& import, BufferId id);

  const SessionInfo& session() const { return session_; }
  /// Allocations at or above this size go through gRPC (0: none do).
  uint64_t quick_allocation_limit() const {
    return session_channel_->welcome().quick_allocation_limit();
  }
  const std::string& socket_dir() const { return socket_dir_; }

  /// Throws the typed Error for a failed call.
  [[noreturn]] void Throw(const grpc::Status& status) const;

 private:
  std::shared_ptr<ImportedRegion> Region(uint64_t region_id, const std::string& device_uuid);
  /// The mapped fence page that holds a CUDA buffer's fence word, or 0 when
  /// the word is inside the buffer.
  uint64_t FencePage(const v1::ImportDescriptor& import);

  std::string socket_dir_;
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
};

/// True (and the id) when `name_or_id` is an id: all digits. Names never start
/// with a digit, so nothing else reads as one.
bool ParseBufferId(std::string_view name_or_id, BufferId* id);

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
                                            const v1::ImportDescriptor& import);
/// Maps a buffer of an imported pool. `fence_page`: the mapped page that holds
/// its fence word, or 0 when the word is inside the buffer.
std::unique_ptr<Mapping> MapCudaPoolBuffer(void* pool, uint64_t fence_page,
                                           const v1::ImportDescriptor& import);
/// Imports, reserves, maps and opens access to a VMM buffer (descriptor consumed).
std::unique_ptr<Mapping> MapCudaVmmBuffer(UniqueFd fd, uint64_t fence_page,
                                          const v1::ImportDescriptor& import);
#endif

// Conversions to and from the wire (convert.cc).
BufferInfo FromProto(const v1::BufferInfo& info);
BrokerStatus FromProto(const v1::StatusResponse& status);
/// By id when `id` is not 0, else by name.
v1::BufferRef ToRef(BufferId id, std::string_view name);
v1::AllocateRequest ToAllocateRequest(uint64_t size, const AllocateOptions& options);
v1::OpenRequest ToOpenRequest(BufferId id, std::string_view name, const OpenOptions& options);

}  // namespace gpubroker::detail
