/**
 * @file gpubroker.h
 * @brief C ABI of the gpubroker client library (libgpubroker.so).
 *
 * Opaque handles, plain status codes and a thread-local error message, so that
 * any language with a C FFI (Python's ctypes, Rust, Go, Julia) can bind to it.
 *
 * Every function that can fail returns a gpubroker_status_t; on failure,
 * gpubroker_last_error() returns what went wrong on the calling thread (valid
 * until the next failing call on that thread), and gpubroker_last_error_reason()
 * why a GPUBROKER_RESOURCE_EXHAUSTED refusal was made. Output pointers are written
 * only on success. A client handle may be used from several threads; a buffer
 * handle from one thread at a time.
 *
 * Memory that outlives its handle: a view (gpubroker_buffer_view) or a DLPack
 * export (gpubroker_buffer_to_dlpack) keeps the buffer's mapping and lease
 * alive after gpubroker_buffer_release, until the last of them is released,
 * from any thread. So an array built over a buffer never outlives its memory.
 *
 * After fork(): the child cannot use its parent's handles. Calls on them fail
 * with GPUBROKER_FAILED_PRECONDITION, and releasing or disconnecting them
 * there leaves the parent's session alone. The child connects anew.
 */
#ifndef GPUBROKER_GPUBROKER_H_
#define GPUBROKER_GPUBROKER_H_

#include <stddef.h>
#include <stdint.h>

#if defined(GPUBROKER_BUILDING_LIBRARY)
#define GPUBROKER_C_API __attribute__((visibility("default")))
#else
#define GPUBROKER_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Result codes; the numbers are gRPC's status codes. */
typedef enum gpubroker_status {
  GPUBROKER_OK = 0,
  GPUBROKER_CANCELLED = 1,
  GPUBROKER_UNKNOWN = 2,
  GPUBROKER_INVALID_ARGUMENT = 3,
  GPUBROKER_DEADLINE_EXCEEDED = 4,
  GPUBROKER_NOT_FOUND = 5,
  GPUBROKER_ALREADY_EXISTS = 6,
  GPUBROKER_PERMISSION_DENIED = 7,
  GPUBROKER_RESOURCE_EXHAUSTED = 8,
  GPUBROKER_FAILED_PRECONDITION = 9,
  GPUBROKER_ABORTED = 10,
  GPUBROKER_OUT_OF_RANGE = 11,
  GPUBROKER_UNIMPLEMENTED = 12,
  GPUBROKER_INTERNAL = 13,
  GPUBROKER_UNAVAILABLE = 14,
  GPUBROKER_DATA_LOSS = 15,
  GPUBROKER_UNAUTHENTICATED = 16
} gpubroker_status_t;

/**
 * @brief Why the daemon refused with GPUBROKER_RESOURCE_EXHAUSTED (values of
 * gpubroker.v1.RefusalReason).
 */
typedef enum gpubroker_reason {
  GPUBROKER_REASON_NONE = 0,          /**< no reason, or not such a refusal */
  GPUBROKER_REASON_QUOTA = 1,         /**< the tenant's byte quota */
  GPUBROKER_REASON_OUT_OF_MEMORY = 2, /**< the device or host pool has no room */
  GPUBROKER_REASON_LIMIT = 3 /**< a count limit (sessions, buffers, descriptors, waiters) */
} gpubroker_reason_t;

/** @brief Element types (values of gpubroker.v1.DType). */
typedef enum gpubroker_dtype {
  GPUBROKER_DTYPE_UNSPECIFIED = 0,
  GPUBROKER_DTYPE_BOOL = 1,
  GPUBROKER_DTYPE_INT8 = 2,
  GPUBROKER_DTYPE_UINT8 = 3,
  GPUBROKER_DTYPE_INT16 = 4,
  GPUBROKER_DTYPE_UINT16 = 5,
  GPUBROKER_DTYPE_INT32 = 6,
  GPUBROKER_DTYPE_UINT32 = 7,
  GPUBROKER_DTYPE_INT64 = 8,
  GPUBROKER_DTYPE_UINT64 = 9,
  GPUBROKER_DTYPE_FLOAT16 = 10,
  GPUBROKER_DTYPE_BFLOAT16 = 11,
  GPUBROKER_DTYPE_FLOAT32 = 12,
  GPUBROKER_DTYPE_FLOAT64 = 13,
  GPUBROKER_DTYPE_COMPLEX64 = 14,
  GPUBROKER_DTYPE_COMPLEX128 = 15
} gpubroker_dtype_t;

/** @brief A session with gpubrokerd. */
typedef struct gpubroker_client gpubroker_client_t;
/** @brief A lease on a buffer plus this process's mapping of it. */
typedef struct gpubroker_buffer gpubroker_buffer_t;
/** @brief A hold on a buffer's mapping and lease that may outlive the buffer's handle. */
typedef struct gpubroker_view gpubroker_view_t;

/** @brief Flags of gpubroker_buffer_to_dlpack. */
enum gpubroker_dlpack_flags {
  /** A DLManagedTensorVersioned (DLPack 1.x); without: a DLManagedTensor (0.x). */
  GPUBROKER_DLPACK_VERSIONED = 1u << 0,
  /** Sets DLPACK_FLAG_BITMASK_READ_ONLY (versioned tensors only). */
  GPUBROKER_DLPACK_READ_ONLY = 1u << 1
};

/** @brief Options of gpubroker_allocate. Initialize with gpubroker_alloc_options_init. */
typedef struct gpubroker_alloc_options {
  uint32_t struct_size; /**< sizeof(gpubroker_alloc_options_t), for evolution */
  const char* device;   /**< UUID or ordinal; NULL or "": the first device */
  const char* name;     /**< NULL or "": unnamed */
  int keep;             /**< nonzero: outlive this session */
  uint64_t ttl_ms;      /**< 0: no TTL */
  int32_t dtype;        /**< gpubroker_dtype_t; UNSPECIFIED: no tensor descriptor */
  uint32_t ndim;
  const int64_t* shape;   /**< ndim extents */
  const int64_t* strides; /**< ndim strides in elements, or NULL for C-contiguous */
  uint64_t byte_offset;
  const char* const* share_with; /**< tenant names */
  uint32_t n_share_with;
} gpubroker_alloc_options_t;

/** @brief Options of gpubroker_open. Initialize with gpubroker_open_options_init. */
typedef struct gpubroker_open_options {
  uint32_t struct_size;
  int wait;           /**< nonzero: wait until the buffer exists and is sealed */
  int64_t timeout_ms; /**< bound of the wait (default 30000) */
  int allow_unsealed; /**< nonzero: open a buffer still being written */
  /** nonzero: return at once, without waiting for the daemon's answer,
   *  with a handle that takes the answer in at its first call that needs
   *  it (facts, view, DLPack, wait_ready, ready_stream, settle, release),
   *  which returns the refusal instead (GPUBROKER_NOT_FOUND, ...). Opens
   *  posted one after another share one round trip. Not with `wait`
   *  (GPUBROKER_INVALID_ARGUMENT). See Client::open_posted. */
  int posted;
  /** With `wait`: µs this wait stays awake (polling, here and in the
   *  daemon's session thread) before it sleeps, so that a seal within it
   *  reaches the consumer without two wake-ups; costs a CPU here and one in
   *  the daemon meanwhile. 0: both sleep; < 0, or > 0 without `wait`:
   *  GPUBROKER_INVALID_ARGUMENT. See OpenOptions::awake. */
  int64_t awake_us;
  /** With `wait`: µs the daemon's session thread polls while this wait is
   *  parked, while the caller sleeps (woken early by the producer's seal
   *  where the tenant has a wake board): one CPU, the daemon's, instead of
   *  the two that awake_us costs. 0: as awake_us says; < 0, or > 0 without
   *  `wait`: GPUBROKER_INVALID_ARGUMENT. See OpenOptions::daemon_awake. */
  int64_t daemon_awake_us;
} gpubroker_open_options_t;

/** @brief Options of gpubroker_connect_with. Initialize with gpubroker_connect_options_init. */
typedef struct gpubroker_connect_options {
  uint32_t struct_size;
  const char* client_name; /**< shown in the daemon's log; NULL or "": "c" */
  /** How long a call waits awake for the daemon's answer before it blocks,
   *  in µs (0: block at once); < 0: the default (100). $GPUBROKER_SPIN_US,
   *  where set, wins. */
  int64_t spin_us;
} gpubroker_connect_options_t;

GPUBROKER_C_API void gpubroker_alloc_options_init(gpubroker_alloc_options_t* options);
GPUBROKER_C_API void gpubroker_open_options_init(gpubroker_open_options_t* options);
GPUBROKER_C_API void gpubroker_connect_options_init(gpubroker_connect_options_t* options);

/** @brief Message of the last failure on this thread ("" when none). */
GPUBROKER_C_API const char* gpubroker_last_error(void);
/**
 * @brief Reason of the last failure on this thread: with
 * GPUBROKER_RESOURCE_EXHAUSTED, which limit refused; GPUBROKER_REASON_NONE for
 * any other failure, and when the thread had none.
 */
GPUBROKER_C_API gpubroker_reason_t gpubroker_last_error_reason(void);
/** @brief "OK", "NOT_FOUND", ... */
GPUBROKER_C_API const char* gpubroker_status_name(gpubroker_status_t status);
/** @brief The library's version, e.g. "0.1.0". */
GPUBROKER_C_API const char* gpubroker_version(void);

/**
 * @brief Connects to gpubrokerd.
 * @param socket_dir NULL or "": $GPUBROKER_SOCKET_DIR, else the daemon's default.
 * @return GPUBROKER_UNAVAILABLE when no daemon answers.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_connect(const char* socket_dir,
                                                     gpubroker_client_t** out);
/** @brief gpubroker_connect with options (NULL: the defaults). */
GPUBROKER_C_API gpubroker_status_t gpubroker_connect_with(
    const char* socket_dir, const gpubroker_connect_options_t* options, gpubroker_client_t** out);
/** @brief Drops this handle; the session ends once its buffers are gone too. */
GPUBROKER_C_API void gpubroker_disconnect(gpubroker_client_t* client);
/**
 * @brief Whether this process may use the client.
 * @return GPUBROKER_FAILED_PRECONDITION in a process made by fork() after the
 *         client connected (the session is the parent's), else GPUBROKER_OK.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_client_check(const gpubroker_client_t* client);
/** @brief The session's id, as the daemon's status and logs show it. */
GPUBROKER_C_API uint64_t gpubroker_client_session_id(const gpubroker_client_t* client);
/** @brief The session's tenant. Valid as long as the handle. */
GPUBROKER_C_API const char* gpubroker_client_tenant(const gpubroker_client_t* client);
/**
 * @brief Gives back to the daemon every range this client holds empty (its
 * buffers are carved from ranges it leases; docs/fast-path.md).
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_trim(gpubroker_client_t* client);
/**
 * @brief JSON of what this client did, by path (allocations made here or by
 * the daemon, maps of memory mapped already or imported), and of its own
 * allocator's books; free with gpubroker_string_free.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_client_stats_json(const gpubroker_client_t* client,
                                                               char** out);

/** @brief Allocates a buffer owned by this session. options may be NULL. */
GPUBROKER_C_API gpubroker_status_t gpubroker_allocate(gpubroker_client_t* client, uint64_t size,
                                                      const gpubroker_alloc_options_t* options,
                                                      gpubroker_buffer_t** out);
/**
 * @brief gpubroker_allocate with the buffer's name given beside the options
 * (whose `name` is ignored; NULL or "": unnamed), so that a caller may prepare
 * the options of a kind of buffer once and pass them for every buffer of it
 * (the library only reads them). options may be NULL.
 */
GPUBROKER_C_API gpubroker_status_t
gpubroker_allocate_named(gpubroker_client_t* client, uint64_t size, const char* name,
                         const gpubroker_alloc_options_t* options, gpubroker_buffer_t** out);
/** @brief Opens a buffer by name, or by id when name_or_id is all digits. options may be NULL. */
GPUBROKER_C_API gpubroker_status_t gpubroker_open(gpubroker_client_t* client,
                                                  const char* name_or_id,
                                                  const gpubroker_open_options_t* options,
                                                  gpubroker_buffer_t** out);
/** @brief Opens a buffer by id. */
GPUBROKER_C_API gpubroker_status_t gpubroker_open_id(gpubroker_client_t* client, uint64_t id,
                                                     const gpubroker_open_options_t* options,
                                                     gpubroker_buffer_t** out);
/** @brief Frees a buffer of this tenant by name or id. */
GPUBROKER_C_API gpubroker_status_t gpubroker_free(gpubroker_client_t* client,
                                                  const char* name_or_id);
/** @brief JSON array of the buffers this tenant may see; free with gpubroker_string_free. */
GPUBROKER_C_API gpubroker_status_t gpubroker_list_json(gpubroker_client_t* client, char** out);
/** @brief JSON document of the daemon's status; free with gpubroker_string_free. */
GPUBROKER_C_API gpubroker_status_t gpubroker_status_json(gpubroker_client_t* client, char** out);
GPUBROKER_C_API void gpubroker_string_free(char* s);

/**
 * @brief Makes a buffer this client made known to the daemon now, under its
 * name, unsealed, so that others may open it (gpubroker_buffer_id does it
 * too). GPUBROKER_ALREADY_EXISTS when its name is taken.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_publish(gpubroker_buffer_t* buffer);
/** @brief Marks the producer's writes complete (the ready fence on the legacy default stream). */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_seal(gpubroker_buffer_t* buffer);
/**
 * @brief Records the ready fence on `stream` (a cudaStream_t) and marks the
 * writes complete: the producer need not synchronize. Host backend: as seal.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_seal_on(gpubroker_buffer_t* buffer,
                                                            void* stream);
/**
 * @brief gpubroker_buffer_seal_on without waiting for the daemon's answer:
 * returns once the seal's frame is written. An open() on session.sock that
 * comes after anything this process writes next still finds the buffer
 * sealed; a refusal (the name taken) is returned by the handle's next call
 * that needs the daemon's answer (facts, publish, seal, release), or printed
 * when the handle is destroyed without one. See Buffer::seal_posted.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_seal_posted(gpubroker_buffer_t* buffer,
                                                                void* stream);
/**
 * @brief A ticket for `buffer`: opaque bytes that another process passes to
 * gpubroker_claim to take a lease of its own on the buffer, without knowing
 * its name. Until it is claimed (once) or ttl_ms passes (0: 60 s; at most an
 * hour), the daemon keeps the buffer for it, even after this handle, its
 * owner or this process has gone. Costs no round trip (the hold is posted; a
 * refusal comes back at this handle's next call that needs an answer). Seal
 * first: a claim of an unsealed buffer is refused. *out holds *size bytes
 * (they may contain NULs); free them with gpubroker_string_free. See
 * Buffer::ticket.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_ticket(gpubroker_buffer_t* buffer,
                                                           uint64_t ttl_ms, char** out,
                                                           size_t* size);
/**
 * @brief Claims a ticket (once): a lease of this session's on its buffer, as
 * gpubroker_open gives. posted == 0: waits for the daemon's answer
 * (GPUBROKER_NOT_FOUND: claimed already, expired, unknown, or not visible to
 * this tenant). posted != 0: returns at once with the buffer's size, name and
 * layout from the ticket; the answer is taken by the handle's first call that
 * needs it (facts, view, DLPack, wait_ready, ready_stream, settle, release),
 * which returns the refusal instead.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_claim(gpubroker_client_t* client, const void* ticket,
                                                   size_t size, int posted,
                                                   gpubroker_buffer_t** out);
/**
 * @brief The socket directory of the daemon a ticket belongs to (for a
 * process that has no client yet); free with gpubroker_string_free.
 * GPUBROKER_INVALID_ARGUMENT for bytes that are not a ticket.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_ticket_socket_dir(const void* ticket, size_t size,
                                                               char** out);
/** @brief Takes in the answers of the handle's posted calls now; returns the first refusal. */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_settle(gpubroker_buffer_t* buffer);
/** @brief Makes `stream` (a cudaStream_t) wait for the producer's sealed writes. */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_wait_ready(gpubroker_buffer_t* buffer,
                                                               void* stream);
/**
 * @brief Waits on the host until a buffer opened before its seal
 * (allow_unsealed) is sealed; at once for a sealed one. The handle then reads
 * sealed, so that the calls that order a stream (view_on, to_dlpack_on) wait
 * for the producer's writes. timeout_ms < 0: 30 s. See Buffer::wait_sealed.
 * @return GPUBROKER_NOT_FOUND when the buffer was freed, or its producer's
 *         session ended, before the seal; GPUBROKER_DEADLINE_EXCEEDED after
 *         the timeout; GPUBROKER_FAILED_PRECONDITION for a buffer this client made.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_wait_sealed(gpubroker_buffer_t* buffer,
                                                                int64_t timeout_ms);
/**
 * @brief gpubroker_buffer_wait_sealed, the wait kept awake for up to awake_us
 * (see awake_us of gpubroker_open_options_t); awake_us < 0 is refused.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_wait_sealed_awake(gpubroker_buffer_t* buffer,
                                                                      int64_t timeout_ms,
                                                                      int64_t awake_us);
/**
 * @brief A stream of the library's own on the buffer's device (one per device
 * and process), made to wait for the producer's sealed writes: what the CUDA
 * Array Interface v3 calls the producer's stream. Work ordered after it sees
 * the writes. *stream is NULL on the host backend.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_ready_stream(gpubroker_buffer_t* buffer,
                                                                 void** stream);
/**
 * @brief Destroys the handle, whatever the result; NULL is a no-op. Unmaps and
 * drops the lease (an owner's unkept buffer is also freed) now, or, while
 * views or DLPack exports of the buffer are alive, when the last of them is
 * released; errors are reported only in the first case.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_release(gpubroker_buffer_t* buffer);
/**
 * @brief Destroys the handle and gives the buffer back once the work queued on
 * `stream` (a cudaStream_t; NULL: the legacy default stream) so far is
 * complete, without waiting for it (gpubroker_buffer_release waits for the
 * device's work first). Until then the memory stays this client's; the
 * client gives it back at its next allocate or open after the work is done,
 * at gpubroker_trim, or when it disconnects. All work that uses the
 * buffer must be queued on `stream` or ordered before its queued work. On
 * the host backend, and while views are alive, as gpubroker_buffer_release.
 * Destroys the handle whatever the result: a stream that is not of the
 * buffer's device is an error, and the buffer is released as by
 * gpubroker_buffer_release. NULL buffer: a no-op.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_release_on(gpubroker_buffer_t* buffer,
                                                               void* stream);

/**
 * @brief A view: a hold on the buffer's mapping and lease that outlives the
 * handle. Release it with gpubroker_view_release (any thread).
 * @return GPUBROKER_FAILED_PRECONDITION in a process made by fork().
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_view(gpubroker_buffer_t* buffer,
                                                         gpubroker_view_t** out);
/** @brief The memory the view holds: gpubroker_buffer_data of its buffer. */
GPUBROKER_C_API void* gpubroker_view_data(const gpubroker_view_t* view);
/** @brief Drops the view; the last hold on a released buffer unmaps it. NULL is a no-op. */
GPUBROKER_C_API void gpubroker_view_release(gpubroker_view_t* view);

/**
 * @brief Exports the buffer as a DLPack tensor that holds a view of it.
 *
 * *out is a DLManagedTensorVersioned* (flags has GPUBROKER_DLPACK_VERSIONED;
 * version 1.0) or a DLManagedTensor*. Its dtype, shape and strides are the
 * buffer's tensor descriptor (uint8[size] when it has none), strides always
 * given; the descriptor's byte offset is added to `data` and `byte_offset` is
 * 0. The device is kDLCUDA with the ordinal of gpubroker_buffer_device_ordinal,
 * or kDLCPU. The consumer calls its deleter (any thread) when done: that
 * releases the view. Nothing is synchronized: order a consumer's stream with
 * gpubroker_buffer_wait_ready first.
 * @return GPUBROKER_INVALID_ARGUMENT for unknown flags.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_to_dlpack(gpubroker_buffer_t* buffer,
                                                              uint32_t flags, void** out);

GPUBROKER_C_API void* gpubroker_buffer_data(const gpubroker_buffer_t* buffer);
GPUBROKER_C_API uint64_t gpubroker_buffer_size(const gpubroker_buffer_t* buffer);
/**
 * @brief The buffer's id. A buffer this client made is published first (one
 * round trip, the first time). 0 when that fails (its name taken, say):
 * call gpubroker_buffer_publish first where the id matters, which says why.
 */
GPUBROKER_C_API uint64_t gpubroker_buffer_id(const gpubroker_buffer_t* buffer);
/** @brief "" when unnamed. Valid as long as the handle. */
GPUBROKER_C_API const char* gpubroker_buffer_name(const gpubroker_buffer_t* buffer);
/** @brief UUID of the buffer's device. Valid as long as the handle. */
GPUBROKER_C_API const char* gpubroker_buffer_device(const gpubroker_buffer_t* buffer);
GPUBROKER_C_API int gpubroker_buffer_is_sealed(const gpubroker_buffer_t* buffer);
GPUBROKER_C_API int gpubroker_buffer_is_owner(const gpubroker_buffer_t* buffer);
/**
 * @brief 0 for a buffer this client made and has not published yet (it has
 * no id; no other process can open it), else 1. Makes no call.
 */
GPUBROKER_C_API int gpubroker_buffer_is_published(const gpubroker_buffer_t* buffer);
/**
 * @brief The CUDA ordinal of the buffer's device in this process (DLPack's
 * device_id; CUDA_VISIBLE_DEVICES may make it differ from the daemon's), or -1
 * for host memory.
 */
GPUBROKER_C_API int32_t gpubroker_buffer_device_ordinal(const gpubroker_buffer_t* buffer);
/**
 * @brief The tensor descriptor; GPUBROKER_NOT_FOUND when the producer declared none.
 * shape and strides point into the handle (strides are filled in C-contiguous when
 * the producer gave none).
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_tensor(const gpubroker_buffer_t* buffer,
                                                           int32_t* dtype, uint32_t* ndim,
                                                           const int64_t** shape,
                                                           const int64_t** strides,
                                                           uint64_t* byte_offset);
/**
 * @brief JSON of the buffer's description; free with gpubroker_string_free.
 * Takes in the answers of a posted seal, claim or ticket first: their refusal
 * is this call's status (the getters that return a value, such as
 * gpubroker_buffer_id, read a refused claim as no buffer: 0, NULL).
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_info_json(const gpubroker_buffer_t* buffer,
                                                              char** out);

/** @brief Bits of gpubroker_buffer_facts_t.flags. */
enum gpubroker_buffer_flags {
  GPUBROKER_BUFFER_OWNER = 1u << 0,  /**< the handle came from gpubroker_allocate */
  GPUBROKER_BUFFER_SEALED = 1u << 1, /**< sealed, as the handle last saw it */
  GPUBROKER_BUFFER_TENSOR = 1u << 2  /**< the producer declared a tensor descriptor */
};

/**
 * @brief What a handle knows of its buffer, all in one call: what the getters
 * above return one at a time. For bindings, to which each call costs (a
 * ctypes call costs more than the work of most getters).
 *
 * Pointers stay valid as long as the handle. Set struct_size (to
 * sizeof(gpubroker_buffer_facts_t)) before the call: the library writes the
 * fields that fit in it, so a caller built against this header keeps
 * working when later versions append fields.
 */
typedef struct gpubroker_buffer_facts {
  uint32_t struct_size;
  uint32_t flags;         /**< gpubroker_buffer_flags */
  uint64_t id;            /**< 0 for a buffer this client made and has not published */
  uint64_t size;          /**< bytes asked for at allocation */
  void* data;             /**< gpubroker_buffer_data */
  const char* name;       /**< "" when unnamed */
  const char* device;     /**< UUID of the buffer's device */
  int32_t device_ordinal; /**< gpubroker_buffer_device_ordinal: -1 for host memory */
  int32_t dtype;          /**< gpubroker_dtype_t; UNSPECIFIED without a descriptor */
  uint32_t ndim;          /**< 0 without a descriptor */
  uint32_t reserved;      /**< 0 */
  uint64_t byte_offset;
  const int64_t* shape;   /**< ndim extents, or NULL */
  const int64_t* strides; /**< ndim strides in elements (filled in C-contiguous), or NULL */
} gpubroker_buffer_facts_t;

/**
 * @brief Fills `facts` (its struct_size set by the caller) from the handle.
 * Makes no call to the daemon.
 * @return GPUBROKER_INVALID_ARGUMENT when struct_size is smaller than this
 *         header's first version of the struct (everything up to `strides`).
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_get_facts(const gpubroker_buffer_t* buffer,
                                                              gpubroker_buffer_facts_t* facts);

/**
 * @brief gpubroker_buffer_wait_ready on `stream`, then gpubroker_buffer_to_dlpack,
 * in one call: the export a DLPack consumer asks for with its stream. The
 * stream waits only for a sealed buffer's writes (an unsealed one has none
 * recorded yet) and only on a GPU; flags as for gpubroker_buffer_to_dlpack.
 * On failure nothing is exported.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_to_dlpack_on(gpubroker_buffer_t* buffer,
                                                                 uint32_t flags, void* stream,
                                                                 void** out);

/**
 * @brief gpubroker_buffer_wait_ready on `stream`, then gpubroker_buffer_view, in
 * one call: what a consumer that builds its array over the memory itself (the
 * CUDA Array Interface, CuPy's UnownedMemory, Numba) needs before it uses the
 * memory on `stream`. As for gpubroker_buffer_to_dlpack_on, the stream waits
 * only for a sealed buffer's writes and only on a GPU. On failure no view is
 * made.
 * @return GPUBROKER_FAILED_PRECONDITION in a process made by fork().
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_view_on(gpubroker_buffer_t* buffer,
                                                            void* stream, gpubroker_view_t** out);
/**
 * @brief gpubroker_buffer_get_facts, then gpubroker_buffer_view_on, in one
 * call: what a binding needs to build a framework's array over a buffer it
 * has asked nothing yet (the layout, the address, the device) and use it on
 * `stream`. `facts` may be NULL (then it is gpubroker_buffer_view_on). On
 * failure no view is made; `facts` is filled when only the view failed.
 */
GPUBROKER_C_API gpubroker_status_t gpubroker_buffer_view_on_facts(gpubroker_buffer_t* buffer,
                                                                  void* stream,
                                                                  gpubroker_buffer_facts_t* facts,
                                                                  gpubroker_view_t** out);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // GPUBROKER_GPUBROKER_H_
