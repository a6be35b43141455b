#include <algorithm>

#include "client/src/client_impl.h"
#include "common/wire/tensor.h"

namespace gpubroker::detail {
v1::BufferRef ToRef(BufferId id, std::string_view name) {
  v1::BufferRef ref;
  if (id != 0) {
    ref.set_id(id);
  } else {
    ref.set_name(std::string(name));
  }
  return ref;
}

v1::AllocateRequest ToAllocateRequest(uint64_t size, const AllocateOptions& options) {
  if (options.ttl.count() < 0) ThrowError(ErrorCode::kInvalidArgument, "ttl must not be negative");
  v1::AllocateRequest req;
  req.set_size(size);
  req.set_device(options.device);
  req.set_name(options.name);
  if (options.tensor) TensorToProto(*options.tensor, req.mutable_tensor());
  req.set_keep(options.keep);
  req.set_ttl_ms(static_cast<uint64_t>(options.ttl.count()));
  for (const auto& t : options.share_with) req.add_share_with(t);
  return req;
}

namespace {

// How long the daemon keeps polling for a waiting Open: the longer of the
// wait's own `awake` (this thread polls too) and `daemon_awake`.
std::chrono::microseconds DaemonAwake(const OpenOptions& options) {
  return std::max(options.awake, options.daemon_awake);
}

}  // namespace

v1::OpenRequest ToOpenRequest(BufferId id, std::string_view name, const OpenOptions& options) {
  v1::OpenRequest req;
  *req.mutable_ref() = ToRef(id, name);
  req.set_wait(options.wait);
  req.set_timeout_ms(static_cast<uint64_t>(options.timeout.count()));
  req.set_allow_unsealed(options.allow_unsealed);
  if (const auto awake = DaemonAwake(options); options.wait && awake.count() > 0) {
    req.set_awake_us(static_cast<uint64_t>(awake.count()));
  }
  return req;
}

v1::BufferInfo ToProto(const BufferInfo& info) {
  v1::BufferInfo b;
  b.set_id(info.id);
  b.set_name(info.name);
  b.set_size(info.size);
  b.set_reserved_size(info.reserved_size);
  b.set_device_uuid(info.device_uuid);
  b.set_tenant(info.tenant);
  b.set_state(info.state == BufferState::kSealed  ? v1::BUFFER_STATE_SEALED
              : info.state == BufferState::kFreed ? v1::BUFFER_STATE_FREED
                                                  : v1::BUFFER_STATE_ALLOCATED);
  if (info.tensor) TensorToProto(*info.tensor, b.mutable_tensor());
  b.set_keep(info.keep);
  b.set_expires_unix_ms(info.expires_unix_ms);
  for (const auto& t : info.shared_with) b.add_shared_with(t);
  b.set_leases(info.leases);
  b.set_owner_session(info.owner_session);
  b.set_created_unix_ms(info.created_unix_ms);
  b.set_backing(info.backing);
  b.set_client_made(info.client_made);
  return b;
}

FlatCallFacts OpenCall(BufferId id, std::string_view name, const OpenOptions& options) {
  // As ToOpenRequest says it: by id when there is one, else by name.
  FlatCallFacts call;
  call.kind = FlatCallFacts::Kind::kOpen;
  call.by_id = id != 0;
  call.by_name = id == 0;
  call.id = id;
  call.name = call.by_name ? name : std::string_view();
  call.wait = options.wait;
  call.timeout_ms = static_cast<uint64_t>(options.timeout.count());
  call.allow_unsealed = options.allow_unsealed;
  if (const auto awake = DaemonAwake(options); options.wait && awake.count() > 0) {
    call.awake_us = static_cast<uint64_t>(awake.count());
  }
  return call;
}

FlatCallFacts ReleaseCall(BufferId id, bool free, bool keep_mapping) {
  FlatCallFacts call;
  call.kind = FlatCallFacts::Kind::kRelease;
  call.id = id;
  call.free = free;
  call.keep_mapping = keep_mapping;
  return call;
}

BrokerStatus FromProto(const v1::StatusResponse& r) {
  BrokerStatus s;
  s.version = r.version();
  s.backend = r.backend();
  for (const auto& d : r.devices()) {
    s.devices.push_back({d.uuid(), d.name(), d.backend(), d.ordinal(), d.total_bytes(),
                         d.capacity_bytes(), d.reserved_bytes(), d.used_bytes(), d.free_bytes(),
                         d.buffers(), d.compute_capability()});
  }
  for (const auto& t : r.tenants()) {
    s.tenants.push_back({t.name(), t.quota_bytes(), t.used_bytes(), t.buffers(), t.sessions(),
                         t.range_bytes(), t.ranges()});
  }
  s.sessions = r.sessions();
  s.buffers = r.buffers();
  s.metrics_address = r.metrics_address();
  s.socket_dir = r.socket_dir();
  s.started_unix_ms = r.started_unix_ms();
  s.self_session_id = r.self().session_id();
  s.self_tenant = r.self().tenant();
  s.self_admin = r.self().admin();
  s.all_tenants = r.all_tenants();
  return s;
}

}  // namespace gpubroker::detail
