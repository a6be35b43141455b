#pragma once

/// @file types.hpp
/// @brief Value types of the gpubroker C++ client: tensors, buffers, status.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpubroker/export.h"

namespace gpubroker {

/// @brief Element type of a tensor; the values are gpubroker.v1.DType's.
enum class DType : int {
  kUnspecified = 0,
  kBool = 1,
  kInt8 = 2,
  kUInt8 = 3,
  kInt16 = 4,
  kUInt16 = 5,
  kInt32 = 6,
  kUInt32 = 7,
  kInt64 = 8,
  kUInt64 = 9,
  kFloat16 = 10,
  kBFloat16 = 11,
  kFloat32 = 12,
  kFloat64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
};

/// @brief NumPy's name of a dtype ("float32", "bfloat16", ...).
GPUBROKER_API std::string_view DTypeName(DType dtype);
/// @brief The dtype of a NumPy-style name; std::nullopt when unknown.
GPUBROKER_API std::optional<DType> DTypeFromName(std::string_view name);
/// @brief Bytes per element (0 for kUnspecified).
GPUBROKER_API uint64_t DTypeSize(DType dtype);

/// @brief What a consumer needs to build a framework array over a buffer.
struct TensorDesc {
  DType dtype = DType::kUnspecified;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  ///< in elements (DLPack); empty: C-contiguous
  uint64_t byte_offset = 0;
};

using BufferId = uint64_t;

enum class BufferState {
  kAllocated,  ///< the producer is still writing
  kSealed,     ///< writes complete; readers may start
  kFreed,      ///< freed; its memory returns once the last lease drops
};

/// @brief "allocated", "sealed", "freed".
GPUBROKER_API std::string_view BufferStateName(BufferState state);

/// @brief A buffer as the daemon describes it.
struct BufferInfo {
  BufferId id = 0;
  std::string name;
  uint64_t size = 0;           ///< bytes asked for
  uint64_t reserved_size = 0;  ///< bytes taken from the device (rounded)
  std::string device_uuid;
  std::string tenant;
  BufferState state = BufferState::kAllocated;
  std::optional<TensorDesc> tensor;
  bool keep = false;
  int64_t expires_unix_ms = 0;  ///< 0: no TTL
  std::vector<std::string> shared_with;
  uint32_t leases = 0;
  uint64_t owner_session = 0;  ///< 0 once the owner's session has ended
  int64_t created_unix_ms = 0;
  std::string backing;  ///< "host-arena", "host-fd", "cuda-arena", "cuda-pool", "cuda-vmm"
  /// Made by its owner's client in a range it leased (docs/fast-path.md).
  bool client_made = false;
};

struct DeviceStatus {
  std::string uuid;
  std::string name;
  std::string backend;
  int ordinal = 0;
  uint64_t total_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
  uint32_t buffers = 0;
  std::string compute_capability;
};

struct TenantStatus {
  std::string name;
  uint64_t quota_bytes = 0;  ///< 0: unlimited
  uint64_t used_bytes = 0;
  uint32_t buffers = 0;
  uint32_t sessions = 0;
  uint64_t range_bytes = 0;  ///< of used_bytes: ranges that its clients lease
  uint32_t ranges = 0;
};

/// @brief This client's session.
struct SessionInfo {
  uint64_t id = 0;
  std::string tenant;
  std::string daemon_version;
  std::string backend;
};

struct BrokerStatus {
  std::string version;
  std::string backend;
  std::vector<DeviceStatus> devices;
  std::vector<TenantStatus> tenants;
  uint32_t sessions = 0;
  uint32_t buffers = 0;
  std::string metrics_address;
  std::string socket_dir;
  int64_t started_unix_ms = 0;
  uint64_t self_session_id = 0;
  std::string self_tenant;
  bool self_admin = false;   ///< root or the daemon's admin group
  bool all_tenants = false;  ///< `tenants` lists every tenant; else only this one's
};

/// @brief Options of Client::allocate.
struct AllocateOptions {
  std::string device;  ///< UUID or ordinal; empty: the first device
  std::string name;    ///< optional; unique within this tenant
  std::optional<TensorDesc> tensor;
  bool keep = false;                    ///< outlive this process's session (until freed or TTL)
  std::chrono::milliseconds ttl{0};     ///< 0: no TTL
  std::vector<std::string> share_with;  ///< tenants that may open it too
};

/// @brief Options of Client::open.
struct OpenOptions {
  bool wait = false;  ///< wait until the buffer exists and is sealed
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  ///< bound of the wait
  bool allow_unsealed = false;  ///< open a buffer that is still being written
  /// A cudaStream_t that is to wait for the buffer's ready fence (CUDA
  /// backends; the same as calling Buffer::wait_ready(stream) after open).
  void* stream = nullptr;
  /// false: take the lease and the description only, without mapping the
  /// memory (Buffer::data() is null; seal and wait_ready are refused). For
  /// tools that watch buffers: no mapping, and on a GPU no CUDA context.
  bool map = true;
  /// With `wait`: how long this wait stays awake before it sleeps, counted
  /// from the call. This thread polls its socket instead of blocking, and
  /// the daemon's session thread polls too while the Open is parked (up to
  /// the daemon's --max-wait-awake-us), so that a seal within it reaches
  /// this consumer without two wake-ups of sleeping threads
  /// (docs/fast-path.md, "Waiting awake for a seal"). Costs a CPU here and
  /// one in the daemon for as long as it lasts; 0: both sleep (the
  /// connection's `spin` still applies).
  std::chrono::microseconds awake{0};
  /// With `wait`: how long the daemon's session thread polls while this
  /// Open is parked, counted from the call (up to --max-wait-awake-us), while
  /// this thread sleeps as usual. Where the tenant has a wake board, the
  /// producer's seal wakes this thread before the daemon has answered, so
  /// its wake-up is off the path and the seal finds the daemon running: the
  /// latency of `awake` for one CPU (the daemon's) instead of two, and none
  /// in this process (docs/fast-path.md, "Waiting awake for a seal"). The
  /// daemon polls for the longer of the two; 0: as `awake` says.
  std::chrono::microseconds daemon_awake{0};
};

/// @brief Options of Client::connect.
struct ConnectOptions {
  std::string client_name = "cpp";                                   ///< shown in the daemon's log
  std::chrono::milliseconds call_timeout{std::chrono::seconds(30)};  ///< deadline of each call
  /// Serve allocate() from ranges this client leases, with no call per
  /// buffer, where the daemon leases ranges (docs/fast-path.md). The
  /// environment variable GPUBROKER_SUBALLOCATE=0 turns it off too.
  bool suballocate = true;
  /// Empty ranges the client keeps for its next allocations (charged to its
  /// tenant's quota while kept); beyond it they go back to the daemon.
  uint64_t retain_bytes = uint64_t{2} << 30;
  /// Bytes of freed buffers' memory of their own (cuda-vmm, host-fd) that the
  /// client keeps mapped, least recently kept out first, so that the next
  /// buffer the daemon serves from the same memory needs no import
  /// (docs/fast-path.md). The memory stays the daemon's: it asks the client
  /// to unmap before it frees it. 0 turns the cache off; so does the
  /// environment variable GPUBROKER_MAPPING_CACHE_BYTES=0 (which sets the
  /// bound otherwise).
  uint64_t mapping_cache_bytes = uint64_t{256} << 30;
  /// How long a call waits awake for the daemon's answer (polling its
  /// socket) before it blocks: most answers come within it, and a blocked
  /// thread's wake-up would cost as much again. It costs the caller's CPU
  /// for at most this long per call. 0 blocks at once; the environment
  /// variable GPUBROKER_SPIN_US (microseconds) sets it too.
  std::chrono::microseconds spin{100};
};

/// @brief What this client did, by path: no slow path is silent. Totals
/// since connect; the books of its own allocator as of now.
struct ClientStats {
  // Allocations.
  uint64_t client_made = 0;        ///< served by the client's own allocator: no call
  uint64_t cache_hits = 0;         ///< of those, by the calling thread's cache
  uint64_t daemon_session = 0;     ///< made by the daemon, asked on session.sock
  uint64_t daemon_grpc = 0;        ///< made by the daemon, asked through gRPC (large, shared)
  uint64_t publishes = 0;          ///< client-made buffers made known to the daemon
  uint64_t pending_releases = 0;   ///< release_on()s waiting for their stream's work, now
  uint64_t unsynced_releases = 0;  ///< release()d blocks of its own waiting for one device sync
  // Opens (and the owner's own map of a daemon-made buffer).
  uint64_t maps_mapped = 0;    ///< the memory was mapped already (arena, slab): a pointer
  uint64_t maps_imported = 0;  ///< imported and mapped anew
  uint64_t maps_cached = 0;    ///< memory of its own kept mapped from an earlier buffer
  uint64_t opens_grpc = 0;     ///< the open itself went through gRPC (it waited)
  /// Opens that waited for a name, asleep, and were woken by the producer's
  /// seal on the tenant's wake board rather than by the daemon's answer.
  uint64_t seal_wakes = 0;
  // The mapping cache of memory of its own (cuda-vmm, host-fd).
  uint64_t mapping_cache_hits = 0;       ///< maps that found the memory kept mapped
  uint64_t mapping_cache_misses = 0;     ///< maps that imported it
  uint64_t mapping_cache_evictions = 0;  ///< unmapped: for room, on request, by evict
  uint64_t mapping_cache_entries = 0;    ///< allocations kept mapped now
  uint64_t mapping_cache_bytes = 0;      ///< their bytes
  // The client's own allocator, now.
  uint64_t ranges = 0;
  uint64_t range_bytes = 0;
  uint64_t in_use_blocks = 0;
  uint64_t in_use_bytes = 0;
  uint64_t cached_bytes = 0;       ///< in threads' caches
  uint64_t free_bytes = 0;         ///< free inside the ranges
  uint64_t quarantined_bytes = 0;  ///< published blocks released here, still leased elsewhere
};

/// @brief JSON renderings, as `gpubroker --json` prints them.
GPUBROKER_API std::string ToJson(const BufferInfo& info);
GPUBROKER_API std::string ToJson(const std::vector<BufferInfo>& buffers);
GPUBROKER_API std::string ToJson(const BrokerStatus& status);
GPUBROKER_API std::string ToJson(const ClientStats& stats);

}  // namespace gpubroker
