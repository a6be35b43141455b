// The C ABI: each entry point catches every exception at the boundary and
// turns it into a status code plus a thread-local message.
//
// Over 500 lines on purpose: every entry point of the ABI in one translation
// unit, each a few lines over the C++ API.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "client/src/client_impl.h"
#include "client/src/dlpack_abi.h"
#include "gpubroker/client.hpp"
#include "gpubroker/gpubroker.h"

namespace {

// What a buffer handle and its views share: the last of them to go unmaps
// and drops the lease (~Buffer).
struct Held {
  gpubroker::Buffer buffer;
  std::vector<int64_t> strides;  // filled in when the producer gave none
  bool layout_pending = false;   // a posted open's: strides follow its answer
  uint64_t fork_generation = gpubroker::detail::ForkGeneration();
};

}  // namespace

struct gpubroker_client {
  gpubroker::Client client;
  uint64_t fork_generation = gpubroker::detail::ForkGeneration();
};

struct gpubroker_buffer {
  std::shared_ptr<Held> held;
  gpubroker::Buffer& buffer() const { return held->buffer; }
};

struct gpubroker_view {
  std::shared_ptr<Held> held;
};

namespace {

thread_local std::string last_error;
thread_local gpubroker_reason_t last_reason = GPUBROKER_REASON_NONE;

gpubroker_status_t Fail(gpubroker_status_t status, std::string message,
                        gpubroker_reason_t reason = GPUBROKER_REASON_NONE) {
  last_error = std::move(message);
  last_reason = reason;
  return status;
}

template <typename F>
gpubroker_status_t Guard(F&& f) noexcept {
  try {
    f();
    return GPUBROKER_OK;
  } catch (const gpubroker::Error& e) {
    return Fail(static_cast<gpubroker_status_t>(e.code()), e.message(),
                static_cast<gpubroker_reason_t>(e.reason()));
  } catch (const std::bad_alloc&) {
    return Fail(GPUBROKER_RESOURCE_EXHAUSTED, "out of host memory");
  } catch (const std::exception& e) {
    return Fail(GPUBROKER_INTERNAL, e.what());
  } catch (...) {
    return Fail(GPUBROKER_INTERNAL, "unknown error");
  }
}

char* CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

gpubroker::OpenOptions ToOptions(const gpubroker_open_options_t* o) {
  gpubroker::OpenOptions options;
  if (o != nullptr) {
    options.wait = o->wait != 0;
    if (o->timeout_ms >= 0) options.timeout = std::chrono::milliseconds(o->timeout_ms);
    options.allow_unsealed = o->allow_unsealed != 0;
    // `awake_us` came after the first version of the options.
    // A negative one is refused by the open, as wait_sealed_awake refuses it.
    if (o->struct_size >= offsetof(gpubroker_open_options_t, awake_us) + sizeof(o->awake_us)) {
      options.awake = std::chrono::microseconds(o->awake_us);
    }
    // So did `daemon_awake_us`.
    if (o->struct_size >=
        offsetof(gpubroker_open_options_t, daemon_awake_us) + sizeof(o->daemon_awake_us)) {
      options.daemon_awake = std::chrono::microseconds(o->daemon_awake_us);
    }
  }
  return options;
}

// `posted` came after the first version of the options.
bool Posted(const gpubroker_open_options_t* o) {
  return o != nullptr &&
         o->struct_size >= offsetof(gpubroker_open_options_t, posted) + sizeof(o->posted) &&
         o->posted != 0;
}

// A contiguous tensor's strides, which the C ABI hands out as a pointer.
void FillStrides(Held& held) {
  const auto& t = held.buffer.tensor();
  if (!t || !t->strides.empty() || t->shape.empty()) return;
  held.strides.resize(t->shape.size());
  int64_t stride = 1;
  for (size_t i = t->shape.size(); i-- > 0;) {
    held.strides[i] = stride;
    stride *= t->shape[i];
  }
}

// `posted_open`: the handle learns its buffer's layout with the answer.
gpubroker_buffer_t* Wrap(gpubroker::Buffer buffer, bool posted_open = false) {
  auto held = std::make_shared<Held>();
  held->buffer = std::move(buffer);
  held->layout_pending = posted_open;
  if (!posted_open) FillStrides(*held);
  return new gpubroker_buffer{std::move(held)};
}

void CheckNotForked(const Held& held) {
  if (gpubroker::detail::ForkedSince(held.fork_generation)) {
    gpubroker::ThrowError(gpubroker::ErrorCode::kFailedPrecondition,
                          "this buffer belongs to the process that made this one by fork(); "
                          "connect and open it anew in the child");
  }
}

// DLPack ---------------------------------------------------------------------

namespace dl = gpubroker::dlpack;

dl::DataType ToDlpack(gpubroker::DType dtype) {
  using gpubroker::DType;
  const auto bits = static_cast<uint8_t>(gpubroker::DTypeSize(dtype) * 8);
  switch (dtype) {
    case DType::kBool:
      return {dl::kBool, 8, 1};
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return {dl::kInt, bits, 1};
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return {dl::kUInt, bits, 1};
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      return {dl::kFloat, bits, 1};
    case DType::kBFloat16:
      return {dl::kBfloat, 16, 1};
    case DType::kComplex64:
    case DType::kComplex128:
      return {dl::kComplex, bits, 1};
    case DType::kUnspecified:
      break;
  }
  gpubroker::ThrowError(gpubroker::ErrorCode::kInvalidArgument, "the buffer's dtype is unknown");
}

// One allocation per export: the managed tensor first, then what it points to.
template <typename Managed>
struct Export {
  Managed managed{};
  std::shared_ptr<Held> held;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  static void Delete(Managed* self) noexcept { delete reinterpret_cast<Export*>(self); }
};
static_assert(offsetof(Export<dl::ManagedTensor>, managed) == 0);
static_assert(offsetof(Export<dl::ManagedTensorVersioned>, managed) == 0);

template <typename Managed>
Managed* NewExport(const std::shared_ptr<Held>& held, dl::Tensor** tensor) {
  auto e = std::make_unique<Export<Managed>>();
  e->held = held;
  const gpubroker::Buffer& b = held->buffer;
  dl::Tensor& t = e->managed.dl_tensor;
  // The offset goes into the pointer: consumers disagree on byte_offset.
  auto* data = static_cast<char*>(b.data());
  if (const auto& desc = b.tensor()) {
    t.dtype = ToDlpack(desc->dtype);
    e->shape = desc->shape;
    e->strides = desc->strides.empty() ? held->strides : desc->strides;
    data += desc->byte_offset;
  } else {
    t.dtype = {dl::kUInt, 8, 1};
    e->shape = {static_cast<int64_t>(b.size())};
    e->strides = {1};
  }
  t.data = data;
  const int ordinal = b.device_ordinal();
  t.device = ordinal < 0 ? dl::Device{dl::kCPU, 0} : dl::Device{dl::kCUDA, ordinal};
  t.ndim = static_cast<int32_t>(e->shape.size());
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->managed.manager_ctx = nullptr;
  e->managed.deleter = &Export<Managed>::Delete;
  *tensor = &t;
  return &e.release()->managed;
}

gpubroker_status_t CheckDlpackFlags(uint32_t flags) {
  constexpr uint32_t kKnown = GPUBROKER_DLPACK_VERSIONED | GPUBROKER_DLPACK_READ_ONLY;
  if ((flags & ~kKnown) != 0) {
    return Fail(GPUBROKER_INVALID_ARGUMENT, "unknown gpubroker_buffer_to_dlpack flags");
  }
  if ((flags & GPUBROKER_DLPACK_READ_ONLY) && !(flags & GPUBROKER_DLPACK_VERSIONED)) {
    return Fail(GPUBROKER_INVALID_ARGUMENT, "a legacy DLPack tensor cannot say it is read-only");
  }
  return GPUBROKER_OK;
}

// The consumer's stream waits for the producer's sealed writes. An unsealed
// buffer has no fence recorded yet: waiting on it would wait for a seal that
// may never come. Host memory has nothing to wait for, nor has a buffer this
// client made and not published (it is unsealed; asking for its state would
// publish it, a round trip that the seal's publication makes anyway).
// A posted claim's answer, taken before anything hands out its memory.
gpubroker_status_t SettleClaim(const gpubroker_buffer_t& b) {
  return Guard([&] {
    Held& held = *b.held;
    held.buffer.settle_claim();
    if (held.layout_pending) {
      held.layout_pending = false;
      FillStrides(held);
    }
  });
}

gpubroker_status_t WaitIfSealed(gpubroker_buffer_t& b, void* stream) {
  if (const auto s = SettleClaim(b); s != GPUBROKER_OK) return s;
  gpubroker::Buffer& buffer = b.buffer();
  if (buffer.device_ordinal() < 0 || !buffer.is_published() ||
      buffer.info().state != gpubroker::BufferState::kSealed) {
    return GPUBROKER_OK;
  }
  return Guard([&] { buffer.wait_ready(stream); });
}

#define GPUBROKER_CHECK_ARG(cond)                                                   \
  do {                                                                              \
    if (!(cond)) return Fail(GPUBROKER_INVALID_ARGUMENT, "argument fails: " #cond); \
  } while (false)

}  // namespace

extern "C" {

void gpubroker_alloc_options_init(gpubroker_alloc_options_t* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
}

void gpubroker_open_options_init(gpubroker_open_options_t* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->timeout_ms = 30000;
}

void gpubroker_connect_options_init(gpubroker_connect_options_t* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->spin_us = -1;
}

const char* gpubroker_last_error(void) { return last_error.c_str(); }

gpubroker_reason_t gpubroker_last_error_reason(void) { return last_reason; }

const char* gpubroker_status_name(gpubroker_status_t status) {
  return gpubroker::ErrorCodeName(static_cast<gpubroker::ErrorCode>(status));
}

const char* gpubroker_version(void) { return gpubroker::ClientVersion(); }

gpubroker_status_t gpubroker_connect(const char* socket_dir, gpubroker_client_t** out) {
  return gpubroker_connect_with(socket_dir, nullptr, out);
}

gpubroker_status_t gpubroker_connect_with(const char* socket_dir,
                                          const gpubroker_connect_options_t* o,
                                          gpubroker_client_t** out) {
  GPUBROKER_CHECK_ARG(out != nullptr);
  if (o != nullptr && o->struct_size < sizeof(gpubroker_connect_options_t)) {
    return Fail(GPUBROKER_INVALID_ARGUMENT,
                "gpubroker_connect_options_t.struct_size is wrong: use "
                "gpubroker_connect_options_init");
  }
  gpubroker::ConnectOptions options{"c"};
  if (o != nullptr) {
    if (o->client_name != nullptr && o->client_name[0] != '\0')
      options.client_name = o->client_name;
    if (o->spin_us >= 0) options.spin = std::chrono::microseconds(o->spin_us);
  }
  return Guard([&] {
    auto client = gpubroker::Client::connect(socket_dir != nullptr ? socket_dir : "", options);
    *out = new gpubroker_client{std::move(client)};
  });
}

void gpubroker_disconnect(gpubroker_client_t* client) { delete client; }

gpubroker_status_t gpubroker_client_check(const gpubroker_client_t* client) {
  GPUBROKER_CHECK_ARG(client != nullptr);
  if (gpubroker::detail::ForkedSince(client->fork_generation)) {
    return Fail(GPUBROKER_FAILED_PRECONDITION,
                "this client was connected by the process that made this one by fork(); "
                "connect anew in the child");
  }
  return GPUBROKER_OK;
}

uint64_t gpubroker_client_session_id(const gpubroker_client_t* client) {
  return client ? client->client.session().id : 0;
}

const char* gpubroker_client_tenant(const gpubroker_client_t* client) {
  return client ? client->client.session().tenant.c_str() : "";
}

gpubroker_status_t gpubroker_trim(gpubroker_client_t* client) {
  GPUBROKER_CHECK_ARG(client != nullptr);
  return Guard([&] { client->client.trim(); });
}

gpubroker_status_t gpubroker_client_stats_json(const gpubroker_client_t* client, char** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  return Guard([&] { *out = CopyString(gpubroker::ToJson(client->client.stats())); });
}

gpubroker_status_t gpubroker_allocate(gpubroker_client_t* client, uint64_t size,
                                      const gpubroker_alloc_options_t* o,
                                      gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  if (o != nullptr && o->struct_size < sizeof(gpubroker_alloc_options_t)) {
    return Fail(GPUBROKER_INVALID_ARGUMENT,
                "gpubroker_alloc_options_t.struct_size is wrong: use gpubroker_alloc_options_init");
  }
  if (o != nullptr && o->ndim > 0 && o->shape == nullptr) {
    return Fail(GPUBROKER_INVALID_ARGUMENT, "ndim > 0 but shape is NULL");
  }
  return Guard([&] {
    gpubroker::AllocateOptions options;
    if (o != nullptr) {
      if (o->device != nullptr) options.device = o->device;
      if (o->name != nullptr) options.name = o->name;
      options.keep = o->keep != 0;
      // Saturated, not wrapped: the daemon refuses a TTL over its limit by name.
      options.ttl = std::chrono::milliseconds(
          std::min<uint64_t>(o->ttl_ms, std::numeric_limits<int64_t>::max()));
      if (o->dtype != GPUBROKER_DTYPE_UNSPECIFIED) {
        gpubroker::TensorDesc t;
        t.dtype = static_cast<gpubroker::DType>(o->dtype);
        t.shape.assign(o->shape, o->shape + o->ndim);
        if (o->strides != nullptr) t.strides.assign(o->strides, o->strides + o->ndim);
        t.byte_offset = o->byte_offset;
        options.tensor = std::move(t);
      }
      for (uint32_t i = 0; i < o->n_share_with; ++i)
        options.share_with.emplace_back(o->share_with[i]);
    }
    *out = Wrap(client->client.allocate(size, options));
  });
}

gpubroker_status_t gpubroker_allocate_named(gpubroker_client_t* client, uint64_t size,
                                            const char* name, const gpubroker_alloc_options_t* o,
                                            gpubroker_buffer_t** out) {
  gpubroker_alloc_options_t options;
  if (o == nullptr) {
    gpubroker_alloc_options_init(&options);
  } else if (o->struct_size < sizeof(options)) {
    return gpubroker_allocate(client, size, o, out);  // refuses it, with the reason
  } else {
    options = *o;
  }
  options.name = name;
  return gpubroker_allocate(client, size, &options, out);
}

gpubroker_status_t gpubroker_open(gpubroker_client_t* client, const char* name_or_id,
                                  const gpubroker_open_options_t* o, gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && name_or_id != nullptr && out != nullptr);
  return Guard([&] {
    const auto options = ToOptions(o);
    gpubroker::BufferId id = 0;
    const bool by_id = gpubroker::detail::ParseBufferId(name_or_id, &id);
    if (Posted(o)) {
      *out = Wrap(by_id ? client->client.open_posted(id, options)
                        : client->client.open_posted(std::string_view(name_or_id), options),
                  true);
      return;
    }
    *out = by_id ? Wrap(client->client.open(id, options))
                 : Wrap(client->client.open(std::string_view(name_or_id), options));
  });
}

gpubroker_status_t gpubroker_open_id(gpubroker_client_t* client, uint64_t id,
                                     const gpubroker_open_options_t* o, gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  return Guard([&] {
    *out = Posted(o) ? Wrap(client->client.open_posted(id, ToOptions(o)), true)
                     : Wrap(client->client.open(id, ToOptions(o)));
  });
}

gpubroker_status_t gpubroker_free(gpubroker_client_t* client, const char* name_or_id) {
  GPUBROKER_CHECK_ARG(client != nullptr && name_or_id != nullptr);
  return Guard([&] { client->client.free(std::string_view(name_or_id)); });
}

gpubroker_status_t gpubroker_list_json(gpubroker_client_t* client, char** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  return Guard([&] { *out = CopyString(gpubroker::ToJson(client->client.list())); });
}

gpubroker_status_t gpubroker_status_json(gpubroker_client_t* client, char** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  return Guard([&] { *out = CopyString(gpubroker::ToJson(client->client.status())); });
}

void gpubroker_string_free(char* s) { std::free(s); }

gpubroker_status_t gpubroker_buffer_ticket(gpubroker_buffer_t* buffer, uint64_t ttl_ms, char** out,
                                           size_t* size) {
  GPUBROKER_CHECK_ARG(buffer != nullptr && out != nullptr && size != nullptr);
  GPUBROKER_CHECK_ARG(ttl_ms <= uint64_t{3600} * 1000);
  return Guard([&] {
    const std::string t = buffer->buffer().ticket(
        std::chrono::milliseconds(ttl_ms == 0 ? 60000 : static_cast<int64_t>(ttl_ms)));
    char* bytes = static_cast<char*>(std::malloc(t.size() + 1));
    if (bytes == nullptr) throw std::bad_alloc();
    std::memcpy(bytes, t.data(), t.size());
    bytes[t.size()] = '\0';
    *out = bytes;
    *size = t.size();
  });
}

gpubroker_status_t gpubroker_claim(gpubroker_client_t* client, const void* ticket, size_t size,
                                   int posted, gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && ticket != nullptr && out != nullptr);
  return Guard([&] {
    const std::string_view t(static_cast<const char*>(ticket), size);
    *out = Wrap(posted ? client->client.claim_posted(t) : client->client.claim(t));
  });
}

gpubroker_status_t gpubroker_ticket_socket_dir(const void* ticket, size_t size, char** out) {
  GPUBROKER_CHECK_ARG(ticket != nullptr && out != nullptr);
  return Guard([&] { *out = CopyString(gpubroker::detail::TicketSocketDir(ticket, size)); });
}

gpubroker_status_t gpubroker_buffer_settle(gpubroker_buffer_t* buffer) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer().settle(); });
}

gpubroker_status_t gpubroker_buffer_seal(gpubroker_buffer_t* buffer) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer().seal(); });
}

gpubroker_status_t gpubroker_buffer_publish(gpubroker_buffer_t* buffer) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer().publish(); });
}

gpubroker_status_t gpubroker_buffer_seal_on(gpubroker_buffer_t* buffer, void* stream) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer().seal(stream); });
}

gpubroker_status_t gpubroker_buffer_seal_posted(gpubroker_buffer_t* buffer, void* stream) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer().seal_posted(stream); });
}

gpubroker_status_t gpubroker_buffer_wait_ready(gpubroker_buffer_t* buffer, void* stream) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  if (const auto s = SettleClaim(*buffer); s != GPUBROKER_OK) return s;
  return Guard([&] { buffer->buffer().wait_ready(stream); });
}

gpubroker_status_t gpubroker_buffer_wait_sealed(gpubroker_buffer_t* buffer, int64_t timeout_ms) {
  return gpubroker_buffer_wait_sealed_awake(buffer, timeout_ms, 0);
}

gpubroker_status_t gpubroker_buffer_wait_sealed_awake(gpubroker_buffer_t* buffer,
                                                      int64_t timeout_ms, int64_t awake_us) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  if (const auto s = SettleClaim(*buffer); s != GPUBROKER_OK) return s;
  return Guard([&] {
    CheckNotForked(*buffer->held);
    buffer->buffer().wait_sealed(
        timeout_ms < 0 ? std::chrono::milliseconds(30000) : std::chrono::milliseconds(timeout_ms),
        std::chrono::microseconds(awake_us));
  });
}

gpubroker_status_t gpubroker_buffer_release(gpubroker_buffer_t* buffer) {
  if (buffer == nullptr) return GPUBROKER_OK;
  gpubroker_status_t status = GPUBROKER_OK;
  // With views alive, the last of them releases (and cannot report).
  if (buffer->held.use_count() == 1) status = Guard([&] { buffer->buffer().release(); });
  delete buffer;
  return status;
}

gpubroker_status_t gpubroker_buffer_release_on(gpubroker_buffer_t* buffer, void* stream) {
  if (buffer == nullptr) return GPUBROKER_OK;
  gpubroker_status_t status = GPUBROKER_OK;
  if (buffer->held.use_count() == 1) {
    status = Guard([&] { buffer->buffer().release_on(stream); });
    if (buffer->buffer().valid()) {
      // The stream was refused: released as gpubroker_buffer_release does,
      // reporting why the stream was not used.
      try {
        buffer->buffer().release();
      } catch (const std::exception&) {
      }
    }
  }
  delete buffer;  // with views alive, the last of them releases
  return status;
}

void* gpubroker_buffer_data(const gpubroker_buffer_t* b) {
  return b ? b->buffer().data() : nullptr;
}
uint64_t gpubroker_buffer_size(const gpubroker_buffer_t* b) { return b ? b->buffer().size() : 0; }
uint64_t gpubroker_buffer_id(const gpubroker_buffer_t* b) { return b ? b->buffer().id() : 0; }
const char* gpubroker_buffer_name(const gpubroker_buffer_t* b) {
  return b ? b->buffer().name().c_str() : "";
}
const char* gpubroker_buffer_device(const gpubroker_buffer_t* b) {
  return b ? b->buffer().device().c_str() : "";
}
int gpubroker_buffer_is_sealed(const gpubroker_buffer_t* b) {
  // A buffer this client made and has not published is unsealed; asking
  // the daemon would publish it.
  return b && b->buffer().is_published() &&
         b->buffer().info().state == gpubroker::BufferState::kSealed;
}
int gpubroker_buffer_is_owner(const gpubroker_buffer_t* b) { return b && b->buffer().is_owner(); }
int gpubroker_buffer_is_published(const gpubroker_buffer_t* b) {
  return b && b->buffer().is_published();
}
int32_t gpubroker_buffer_device_ordinal(const gpubroker_buffer_t* b) {
  return b ? b->buffer().device_ordinal() : -1;
}

gpubroker_status_t gpubroker_buffer_ready_stream(gpubroker_buffer_t* b, void** stream) {
  GPUBROKER_CHECK_ARG(b != nullptr && stream != nullptr);
  return Guard([&] { *stream = b->buffer().ready_stream(); });
}

gpubroker_status_t gpubroker_buffer_view(gpubroker_buffer_t* b, gpubroker_view_t** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  if (const auto s = SettleClaim(*b); s != GPUBROKER_OK) return s;
  return Guard([&] {
    CheckNotForked(*b->held);
    *out = new gpubroker_view{b->held};
  });
}

void* gpubroker_view_data(const gpubroker_view_t* v) {
  return v ? v->held->buffer.data() : nullptr;
}

void gpubroker_view_release(gpubroker_view_t* v) { delete v; }

gpubroker_status_t gpubroker_buffer_to_dlpack(gpubroker_buffer_t* b, uint32_t flags, void** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  if (const auto s = CheckDlpackFlags(flags); s != GPUBROKER_OK) return s;
  // A posted claim's or open's answer first: a refused one exports nothing.
  if (const auto s = SettleClaim(*b); s != GPUBROKER_OK) return s;
  return Guard([&] {
    CheckNotForked(*b->held);
    dl::Tensor* tensor = nullptr;
    if (flags & GPUBROKER_DLPACK_VERSIONED) {
      auto* m = NewExport<dl::ManagedTensorVersioned>(b->held, &tensor);
      m->version = {dl::kMajorVersion, dl::kMinorVersion};
      m->flags = (flags & GPUBROKER_DLPACK_READ_ONLY) ? dl::kFlagReadOnly : 0;
      *out = m;
    } else {
      *out = NewExport<dl::ManagedTensor>(b->held, &tensor);
    }
  });
}

gpubroker_status_t gpubroker_buffer_tensor(const gpubroker_buffer_t* b, int32_t* dtype,
                                           uint32_t* ndim, const int64_t** shape,
                                           const int64_t** strides, uint64_t* byte_offset) {
  GPUBROKER_CHECK_ARG(b != nullptr);
  if (const auto s = SettleClaim(*b); s != GPUBROKER_OK) return s;
  const auto& t = b->buffer().tensor();
  if (!t) return Fail(GPUBROKER_NOT_FOUND, "the buffer has no tensor descriptor");
  if (dtype) *dtype = static_cast<int32_t>(t->dtype);
  if (ndim) *ndim = static_cast<uint32_t>(t->shape.size());
  if (shape) *shape = t->shape.data();
  if (strides) *strides = t->strides.empty() ? b->held->strides.data() : t->strides.data();
  if (byte_offset) *byte_offset = t->byte_offset;
  return GPUBROKER_OK;
}

gpubroker_status_t gpubroker_buffer_info_json(const gpubroker_buffer_t* b, char** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  // A refused posted claim or hold is reported here, not read as a buffer.
  if (const auto s = SettleClaim(*b); s != GPUBROKER_OK) return s;
  return Guard([&] {
    b->held->buffer.settle();
    *out = CopyString(gpubroker::ToJson(b->buffer().info()));
  });
}

gpubroker_status_t gpubroker_buffer_get_facts(const gpubroker_buffer_t* b,
                                              gpubroker_buffer_facts_t* facts) {
  GPUBROKER_CHECK_ARG(b != nullptr && facts != nullptr);
  constexpr uint32_t kFirstVersion = offsetof(gpubroker_buffer_facts_t, strides) + sizeof(void*);
  if (facts->struct_size < kFirstVersion) {
    return Fail(GPUBROKER_INVALID_ARGUMENT,
                "gpubroker_buffer_facts_t.struct_size is too small: set it to the struct's size");
  }
  if (const auto s = SettleClaim(*b); s != GPUBROKER_OK) return s;
  const gpubroker::Buffer& buffer = b->buffer();
  gpubroker_buffer_facts_t f{};
  f.struct_size = static_cast<uint32_t>(std::min<size_t>(facts->struct_size, sizeof(f)));
  if (buffer.is_owner()) f.flags |= GPUBROKER_BUFFER_OWNER;
  // Facts read nothing from the daemon: a buffer this client made and has
  // not published has id 0 (gpubroker_buffer_id publishes it) and is unsealed.
  if (buffer.is_published()) {
    if (buffer.info().state == gpubroker::BufferState::kSealed) f.flags |= GPUBROKER_BUFFER_SEALED;
    f.id = buffer.info().id;
  }
  f.size = buffer.size();
  f.data = buffer.data();
  f.name = buffer.name().c_str();
  f.device = buffer.device().c_str();
  f.device_ordinal = buffer.device_ordinal();
  if (const auto& t = buffer.tensor()) {
    f.flags |= GPUBROKER_BUFFER_TENSOR;
    f.dtype = static_cast<int32_t>(t->dtype);
    f.ndim = static_cast<uint32_t>(t->shape.size());
    f.byte_offset = t->byte_offset;
    f.shape = t->shape.data();
    f.strides = t->strides.empty() ? b->held->strides.data() : t->strides.data();
  }
  std::memcpy(facts, &f, f.struct_size);
  return GPUBROKER_OK;
}

gpubroker_status_t gpubroker_buffer_to_dlpack_on(gpubroker_buffer_t* b, uint32_t flags,
                                                 void* stream, void** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  if (const auto s = CheckDlpackFlags(flags); s != GPUBROKER_OK) return s;
  if (const auto s = WaitIfSealed(*b, stream); s != GPUBROKER_OK) return s;
  return gpubroker_buffer_to_dlpack(b, flags, out);
}

gpubroker_status_t gpubroker_buffer_view_on(gpubroker_buffer_t* b, void* stream,
                                            gpubroker_view_t** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  if (const auto s = WaitIfSealed(*b, stream); s != GPUBROKER_OK) return s;
  return gpubroker_buffer_view(b, out);
}

gpubroker_status_t gpubroker_buffer_view_on_facts(gpubroker_buffer_t* b, void* stream,
                                                  gpubroker_buffer_facts_t* facts,
                                                  gpubroker_view_t** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  if (facts != nullptr) {
    if (const auto s = gpubroker_buffer_get_facts(b, facts); s != GPUBROKER_OK) return s;
  }
  return gpubroker_buffer_view_on(b, stream, out);
}

}  // extern "C"
