// The C ABI: each entry point catches every exception at the boundary and
// turns it into a status code plus a thread-local message.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "client/src/client_impl.h"
#include "gpubroker/client.hpp"
#include "gpubroker/gpubroker.h"

struct gpubroker_client {
  gpubroker::Client client;
};

struct gpubroker_buffer {
  gpubroker::Buffer buffer;
  std::vector<int64_t> strides;  // filled in when the producer gave none
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
  }
  return options;
}

gpubroker_buffer_t* Wrap(gpubroker::Buffer buffer) {
  auto* out = new gpubroker_buffer{std::move(buffer), {}};
  if (const auto& t = out->buffer.tensor(); t && t->strides.empty() && !t->shape.empty()) {
    out->strides.resize(t->shape.size());
    int64_t stride = 1;
    for (size_t i = t->shape.size(); i-- > 0;) {
      out->strides[i] = stride;
      stride *= t->shape[i];
    }
  }
  return out;
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

const char* gpubroker_last_error(void) { return last_error.c_str(); }

gpubroker_reason_t gpubroker_last_error_reason(void) { return last_reason; }

const char* gpubroker_status_name(gpubroker_status_t status) {
  return gpubroker::ErrorCodeName(static_cast<gpubroker::ErrorCode>(status));
}

const char* gpubroker_version(void) { return gpubroker::ClientVersion(); }

gpubroker_status_t gpubroker_connect(const char* socket_dir, gpubroker_client_t** out) {
  GPUBROKER_CHECK_ARG(out != nullptr);
  return Guard([&] {
    auto client = gpubroker::Client::connect(socket_dir != nullptr ? socket_dir : "",
                                             gpubroker::ConnectOptions{"c"});
    *out = new gpubroker_client{std::move(client)};
  });
}

void gpubroker_disconnect(gpubroker_client_t* client) { delete client; }

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

gpubroker_status_t gpubroker_open(gpubroker_client_t* client, const char* name_or_id,
                                  const gpubroker_open_options_t* o, gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && name_or_id != nullptr && out != nullptr);
  return Guard([&] {
    const auto options = ToOptions(o);
    gpubroker::BufferId id = 0;
    *out = gpubroker::detail::ParseBufferId(name_or_id, &id)
               ? Wrap(client->client.open(id, options))
               : Wrap(client->client.open(std::string_view(name_or_id), options));
  });
}

gpubroker_status_t gpubroker_open_id(gpubroker_client_t* client, uint64_t id,
                                     const gpubroker_open_options_t* o, gpubroker_buffer_t** out) {
  GPUBROKER_CHECK_ARG(client != nullptr && out != nullptr);
  return Guard([&] { *out = Wrap(client->client.open(id, ToOptions(o))); });
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

gpubroker_status_t gpubroker_buffer_seal(gpubroker_buffer_t* buffer) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer.seal(); });
}

gpubroker_status_t gpubroker_buffer_seal_on(gpubroker_buffer_t* buffer, void* stream) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer.seal(stream); });
}

gpubroker_status_t gpubroker_buffer_wait_ready(gpubroker_buffer_t* buffer, void* stream) {
  GPUBROKER_CHECK_ARG(buffer != nullptr);
  return Guard([&] { buffer->buffer.wait_ready(stream); });
}

gpubroker_status_t gpubroker_buffer_release(gpubroker_buffer_t* buffer) {
  if (buffer == nullptr) return GPUBROKER_OK;
  gpubroker_status_t status = Guard([&] { buffer->buffer.release(); });
  delete buffer;
  return status;
}

void* gpubroker_buffer_data(const gpubroker_buffer_t* b) { return b ? b->buffer.data() : nullptr; }
uint64_t gpubroker_buffer_size(const gpubroker_buffer_t* b) { return b ? b->buffer.size() : 0; }
uint64_t gpubroker_buffer_id(const gpubroker_buffer_t* b) { return b ? b->buffer.id() : 0; }
const char* gpubroker_buffer_name(const gpubroker_buffer_t* b) {
  return b ? b->buffer.name().c_str() : "";
}
const char* gpubroker_buffer_device(const gpubroker_buffer_t* b) {
  return b ? b->buffer.device().c_str() : "";
}
int gpubroker_buffer_is_sealed(const gpubroker_buffer_t* b) {
  return b && b->buffer.info().state == gpubroker::BufferState::kSealed;
}
int gpubroker_buffer_is_owner(const gpubroker_buffer_t* b) { return b && b->buffer.is_owner(); }

gpubroker_status_t gpubroker_buffer_tensor(const gpubroker_buffer_t* b, int32_t* dtype,
                                           uint32_t* ndim, const int64_t** shape,
                                           const int64_t** strides, uint64_t* byte_offset) {
  GPUBROKER_CHECK_ARG(b != nullptr);
  const auto& t = b->buffer.tensor();
  if (!t) return Fail(GPUBROKER_NOT_FOUND, "the buffer has no tensor descriptor");
  if (dtype) *dtype = static_cast<int32_t>(t->dtype);
  if (ndim) *ndim = static_cast<uint32_t>(t->shape.size());
  if (shape) *shape = t->shape.data();
  if (strides) *strides = t->strides.empty() ? b->strides.data() : t->strides.data();
  if (byte_offset) *byte_offset = t->byte_offset;
  return GPUBROKER_OK;
}

gpubroker_status_t gpubroker_buffer_info_json(const gpubroker_buffer_t* b, char** out) {
  GPUBROKER_CHECK_ARG(b != nullptr && out != nullptr);
  return Guard([&] { *out = CopyString(gpubroker::ToJson(b->buffer.info())); });
}

}  // extern "C"
