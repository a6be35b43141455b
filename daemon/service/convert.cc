#include "daemon/service/convert.h"

#include <limits>

#include "common/refusal.h"
#include "common/version.h"
#include "common/wire/tensor.h"

namespace gpubroker {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  const Refusal refusal = RefusalOf(status);
  if (refusal == Refusal::kNone) return grpc::Status(code, std::move(message));
  // The reason goes in the status details (grpc-status-details-bin), as
  // google.rpc.Status carries it, so that any gRPC client can read it.
  v1::RpcStatus details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(message);
  v1::ErrorInfo info;
  info.set_reason(static_cast<v1::RefusalReason>(refusal));
  details.add_details()->PackFrom(info);
  return grpc::Status(code, std::move(message), details.SerializeAsString());
}

void ToErrorFrame(const absl::Status& status, uint64_t request_id, v1::ErrorFrame* out) {
  out->set_request_id(request_id);
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
  out->set_reason(static_cast<v1::RefusalReason>(RefusalOf(status)));
}

namespace {

v1::BufferState ToProto(BufferState s) {
  switch (s) {
    case BufferState::kAllocated:
      return v1::BUFFER_STATE_ALLOCATED;
    case BufferState::kSealed:
      return v1::BUFFER_STATE_SEALED;
    case BufferState::kFreed:
      return v1::BUFFER_STATE_FREED;
  }
  return v1::BUFFER_STATE_UNSPECIFIED;
}

v1::FdKind ToProto(FdKind kind) {
  switch (kind) {
    case FdKind::kHostArena:
      return v1::FD_KIND_HOST_ARENA;
    case FdKind::kHostBuffer:
      return v1::FD_KIND_HOST_BUFFER;
    case FdKind::kCudaPool:
      return v1::FD_KIND_CUDA_POOL;
    case FdKind::kCudaVmm:
      return v1::FD_KIND_CUDA_VMM;
    case FdKind::kCudaFences:
      return v1::FD_KIND_CUDA_FENCES;
    case FdKind::kCudaSlab:
      return v1::FD_KIND_CUDA_SLAB;
  }
  return v1::FD_KIND_UNSPECIFIED;
}

v1::ImportKind ToProto(ImportKind k) {
  switch (k) {
    case ImportKind::kHostArena:
      return v1::IMPORT_KIND_HOST_ARENA;
    case ImportKind::kHostFd:
      return v1::IMPORT_KIND_HOST_FD;
    case ImportKind::kCudaPool:
      return v1::IMPORT_KIND_CUDA_POOL;
    case ImportKind::kCudaVmm:
      return v1::IMPORT_KIND_CUDA_VMM;
    case ImportKind::kCudaArena:
      return v1::IMPORT_KIND_CUDA_ARENA;
  }
  return v1::IMPORT_KIND_UNSPECIFIED;
}

}  // namespace

void ToProto(const BufferView& v, v1::BufferInfo* out) {
  out->set_id(v.id);
  out->set_name(v.name);
  out->set_size(v.size);
  out->set_reserved_size(v.reserved_size);
  out->set_device_uuid(v.device_uuid);
  out->set_tenant(v.tenant);
  out->set_state(ToProto(v.state));
  if (v.tensor) TensorToProto(*v.tensor, out->mutable_tensor());
  out->set_keep(v.keep);
  out->set_expires_unix_ms(v.expires_unix_ms);
  for (const auto& t : v.shared_with) out->add_shared_with(t);
  out->set_leases(v.leases);
  out->set_owner_session(v.owner_session);
  out->set_created_unix_ms(v.created_unix_ms);
  out->set_backing(v.backing);
  out->set_client_made(v.client_made);
}

void ToProto(const ImportInfo& info, v1::ImportDescriptor* out) {
  out->set_kind(ToProto(info.kind));
  out->set_region_id(info.region_id);
  out->set_offset(info.offset);
  out->set_mapped_size(info.mapped_size);
  out->set_export_data(info.export_data);
  out->set_fence_region_id(info.fence_region_id);
  out->set_allocation_id(info.allocation_id);
  out->set_fence_offset(info.fence_offset);
  out->set_fence_value(info.fence_value);
  out->set_device_uuid(info.device_uuid);
}

namespace {

void BufferToFacts(const BufferView& v, FlatAnswerFacts* f) {
  f->has_buffer = true;
  f->id = v.id;
  f->name = v.name;
  f->size = v.size;
  f->reserved_size = v.reserved_size;
  f->device_uuid = v.device_uuid;
  f->tenant = v.tenant;
  f->state = ToProto(v.state);
  TensorToFacts(v.tensor, f);
  f->keep = v.keep;
  f->expires_unix_ms = v.expires_unix_ms;
  f->shared_with.assign(v.shared_with.begin(), v.shared_with.end());
  f->leases = v.leases;
  f->owner_session = v.owner_session;
  f->created_unix_ms = v.created_unix_ms;
  f->backing = v.backing;
  f->client_made = v.client_made;
}

}  // namespace

FlatAnswerFacts ToFlatAnswer(const BufferGrant& grant, uint64_t request_id, bool claim) {
  const ImportInfo& im = grant.import;
  FlatAnswerFacts f;
  f.kind = claim ? FlatAnswerFacts::Kind::kClaim : FlatAnswerFacts::Kind::kOpen;
  f.request_id = request_id;
  BufferToFacts(grant.buffer, &f);
  f.has_import = true;
  f.import_kind = ToProto(im.kind);
  f.region_id = im.region_id;
  f.offset = im.offset;
  f.mapped_size = im.mapped_size;
  f.export_data = im.export_data;
  f.fence_region_id = im.fence_region_id;
  f.allocation_id = im.allocation_id;
  f.fence_offset = im.fence_offset;
  f.fence_value = im.fence_value;
  f.import_device_uuid = im.device_uuid;
  return f;
}

FlatAnswerFacts ToFlatPublishAnswer(const BufferView& buffer, uint64_t request_id) {
  FlatAnswerFacts f;
  f.kind = FlatAnswerFacts::Kind::kPublish;
  f.request_id = request_id;
  BufferToFacts(buffer, &f);
  return f;
}

void ToProto(const FdGrant& grant, const v1::FdRequest& request, v1::FdGrant* out) {
  out->set_request_id(request.request_id());
  out->set_kind(ToProto(grant.kind));
  if (request.target_case() == v1::FdRequest::kRegionId) out->set_region_id(request.region_id());
  if (request.target_case() == v1::FdRequest::kBufferId) out->set_buffer_id(request.buffer_id());
  out->set_size(grant.size);
  out->set_device_uuid(grant.device_uuid);
}

void ToProto(const NodeStatus& status, const DaemonFacts& facts, const SessionView* self,
             v1::StatusResponse* out) {
  out->set_version(kVersion);
  out->set_backend(status.backend);
  for (const NodeStatus::Device& d : status.devices) {
    auto* o = out->add_devices();
    o->set_uuid(d.info.uuid);
    o->set_name(d.info.name);
    o->set_backend(d.info.backend);
    o->set_ordinal(d.info.ordinal);
    o->set_total_bytes(d.info.total_bytes);
    o->set_capacity_bytes(d.usage.capacity_bytes);
    o->set_reserved_bytes(d.usage.reserved_bytes);
    o->set_used_bytes(d.usage.used_bytes);
    o->set_free_bytes(d.usage.free_bytes);
    o->set_kept_bytes(d.usage.kept_bytes);
    o->set_unmapping_bytes(d.usage.unmapping_bytes);
    o->set_compute_capability(d.info.compute_capability);
    o->set_buffers(d.buffers);
  }
  out->set_sessions(status.sessions);
  out->set_buffers(status.buffers);
  out->set_metrics_address(facts.metrics_address);
  out->set_socket_dir(facts.socket_dir);
  out->set_started_unix_ms(facts.started_unix_ms);
  if (self == nullptr) return;  // the node's totals only
  // Other tenants' names and holdings are theirs to know (and an admin's).
  out->set_all_tenants(self->admin);
  for (const NodeStatus::Tenant& t : status.tenants) {
    if (!self->admin && t.name != self->tenant) continue;
    auto* o = out->add_tenants();
    o->set_name(t.name);
    o->set_quota_bytes(t.quota_bytes);
    o->set_used_bytes(t.used_bytes);
    o->set_buffers(t.buffers);
    o->set_sessions(t.sessions);
    o->set_range_bytes(t.range_bytes);
    o->set_ranges(t.ranges);
  }
  auto* me = out->mutable_self();
  me->set_session_id(self->id);
  me->set_tenant(self->tenant);
  me->set_pid(self->peer.pid);
  me->set_uid(self->peer.uid);
  me->set_gid(self->peer.gid);
  me->set_admin(self->admin);
}

void ToWelcome(const SessionView& session, const Backend& backend, const WaitLimits& waits,
               v1::Welcome* out) {
  out->set_session_id(session.id);
  out->set_token(std::string(session.token.begin(), session.token.end()));
  out->set_tenant(session.tenant);
  out->set_daemon_version(kVersion);
  out->set_backend(std::string(backend.name()));
  out->set_protocol_version(kProtocolVersion);
  out->set_quick_allocation_limit(WireQuickAllocationLimit(backend));
  out->set_range_limit(backend.devices().empty() ? 0 : backend.RangeLimit(0));
  // A daemon that parks waiting Opens says so: a client then sends them here.
  out->set_max_waiting_opens(waits.max_per_session != 0 ? waits.max_per_session
                                                        : std::numeric_limits<uint32_t>::max());
}

uint64_t WireQuickAllocationLimit(const Backend& backend) {
  const uint64_t quick = backend.QuickAllocationLimit();
  return quick == UINT64_MAX ? 0 : quick;
}

AllocateParams FromProto(const v1::AllocateRequest& r) {
  AllocateParams p;
  p.size = r.size();
  p.device = r.device();
  p.name = r.name();
  if (r.has_tensor()) p.tensor = TensorFromProto<TensorDesc>(r.tensor());
  p.keep = r.keep();
  p.ttl_ms = r.ttl_ms();
  p.share_with.assign(r.share_with().begin(), r.share_with().end());
  return p;
}

absl::StatusOr<BufferKey> FromProto(const v1::BufferRef& ref) {
  switch (ref.ref_case()) {
    case v1::BufferRef::kId:
      if (ref.id() == 0) return absl::InvalidArgumentError("buffer id 0 is not an id");
      return BufferKey{ref.id(), {}};
    case v1::BufferRef::kName:
      return BufferKey{0, ref.name()};
    default:
      return absl::InvalidArgumentError("no buffer named: give an id or a name");
  }
}

absl::StatusOr<BufferKey> FromFlatRef(const FlatCallFacts& open) {
  if (open.by_id) {
    if (open.id == 0) return absl::InvalidArgumentError("buffer id 0 is not an id");
    return BufferKey{open.id, {}};
  }
  if (open.by_name) return BufferKey{0, std::string(open.name)};
  return absl::InvalidArgumentError("no buffer named: give an id or a name");
}

PublishParams FromFlatPublish(const FlatCallFacts& f) {
  PublishParams p;
  p.range = f.range_id;
  p.offset = f.offset;
  p.reserved = f.reserved;
  p.size = f.size;
  p.name = f.name;
  p.tensor = TensorFromFacts<TensorDesc>(f);
  p.seal = f.seal;
  p.fence_offset = f.fence_offset;
  p.fence_value = f.fence_value;
  return p;
}

ClientCounters FromFlat(const FlatCallFacts::Counters& c) {
  ClientCounters out;
  out.allocations = c.allocations;
  out.in_use_blocks = c.in_use_blocks;
  out.in_use_bytes = c.in_use_bytes;
  out.range_bytes = c.range_bytes;
  out.cache_hits = c.cache_hits;
  out.daemon_allocations = c.daemon_allocations;
  out.grpc_allocations = c.grpc_allocations;
  out.opens_arena = c.opens_arena;
  out.opens_cached = c.opens_cached;
  out.opens_import = c.opens_import;
  out.opens_grpc = c.opens_grpc;
  out.mapping_cache_misses = c.mapping_cache_misses;
  out.mapping_cache_evictions = c.mapping_cache_evictions;
  out.mapping_cache_bytes = c.mapping_cache_bytes;
  return out;
}

}  // namespace gpubroker
