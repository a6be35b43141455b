#include "daemon/service/convert.h"

#include "common/refusal.h"

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

void ToProto(const TensorDesc& tensor, v1::TensorDescriptor* out) {
  out->set_dtype(static_cast<v1::DType>(tensor.dtype));
  for (int64_t d : tensor.shape) out->add_shape(d);
  for (int64_t s : tensor.strides) out->add_strides(s);
  out->set_byte_offset(tensor.byte_offset);
}

TensorDesc FromProto(const v1::TensorDescriptor& tensor) {
  TensorDesc t;
  t.dtype = static_cast<int>(tensor.dtype());
  t.shape.assign(tensor.shape().begin(), tensor.shape().end());
  t.strides.assign(tensor.strides().begin(), tensor.strides().end());
  t.byte_offset = tensor.byte_offset();
  return t;
}

void ToProto(const BufferView& v, v1::BufferInfo* out) {
  out->set_id(v.id);
  out->set_name(v.name);
  out->set_size(v.size);
  out->set_reserved_size(v.reserved_size);
  out->set_device_uuid(v.device_uuid);
  out->set_tenant(v.tenant);
  out->set_state(ToProto(v.state));
  if (v.tensor) {
    ToProto(*v.tensor, out->mutable_tensor());
  }
  out->set_keep(v.keep);
  out->set_expires_unix_ms(v.expires_unix_ms);
  for (const auto& t : v.shared_with) out->add_shared_with(t);
  out->set_leases(v.leases);
  out->set_owner_session(v.owner_session);
  out->set_created_unix_ms(v.created_unix_ms);
  out->set_backing(v.backing);
}

void ToProto(const ImportInfo& info, v1::ImportDescriptor* out) {
  out->set_kind(ToProto(info.kind));
  out->set_pool_id(info.pool_id);
  out->set_offset(info.offset);
  out->set_mapped_size(info.mapped_size);
  out->set_export_data(info.export_data);
  out->set_fence_pool_id(info.fence_pool_id);
  out->set_fence_offset(info.fence_offset);
  out->set_fence_value(info.fence_value);
  out->set_device_uuid(info.device_uuid);
}

AllocateParams FromProto(const v1::AllocateRequest& r) {
  AllocateParams p;
  p.size = r.size();
  p.device = r.device();
  p.name = r.name();
  if (r.has_tensor()) p.tensor = FromProto(r.tensor());
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

}  // namespace gpubroker
