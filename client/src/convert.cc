#include "client/src/client_impl.h"

namespace gpubroker::detail {
namespace {

BufferState FromProto(v1::BufferState s) {
  switch (s) {
    case v1::BUFFER_STATE_SEALED:
      return BufferState::kSealed;
    case v1::BUFFER_STATE_FREED:
      return BufferState::kFreed;
    default:
      return BufferState::kAllocated;
  }
}

}  // namespace

void ToProto(const TensorDesc& tensor, v1::TensorDescriptor* out) {
  out->set_dtype(static_cast<v1::DType>(tensor.dtype));
  for (int64_t d : tensor.shape) out->add_shape(d);
  for (int64_t s : tensor.strides) out->add_strides(s);
  out->set_byte_offset(tensor.byte_offset);
}

BufferInfo FromProto(const v1::BufferInfo& b) {
  BufferInfo info;
  info.id = b.id();
  info.name = b.name();
  info.size = b.size();
  info.reserved_size = b.reserved_size();
  info.device_uuid = b.device_uuid();
  info.tenant = b.tenant();
  info.state = FromProto(b.state());
  if (b.has_tensor()) {
    TensorDesc t;
    t.dtype = static_cast<DType>(b.tensor().dtype());
    t.shape.assign(b.tensor().shape().begin(), b.tensor().shape().end());
    t.strides.assign(b.tensor().strides().begin(), b.tensor().strides().end());
    t.byte_offset = b.tensor().byte_offset();
    info.tensor = std::move(t);
  }
  info.keep = b.keep();
  info.expires_unix_ms = b.expires_unix_ms();
  info.shared_with.assign(b.shared_with().begin(), b.shared_with().end());
  info.leases = b.leases();
  info.owner_session = b.owner_session();
  info.created_unix_ms = b.created_unix_ms();
  info.backing = b.backing();
  info.client_made = b.client_made();
  return info;
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
  return s;
}

}  // namespace gpubroker::detail
