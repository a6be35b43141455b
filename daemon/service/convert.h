#pragma once

#include "absl/status/status.h"
#include "daemon/backend/backend.h"
#include "daemon/core/registry.h"
#include "gpubroker/v1/broker.pb.h"
#include "gpubroker/v1/session.pb.h"
#include "grpcpp/support/status.h"

namespace gpubroker {

/// The one place where an internal status becomes a gRPC status (their codes
/// are the same numbers); a refusal's reason travels in its details.
grpc::Status ToGrpcStatus(const absl::Status& status);
/// The same for session.sock: an ErrorFrame answering `request_id`.
void ToErrorFrame(const absl::Status& status, uint64_t request_id, v1::ErrorFrame* out);

void ToProto(const BufferView& view, v1::BufferInfo* out);
void ToProto(const ImportInfo& info, v1::ImportDescriptor* out);
void ToProto(const TensorDesc& tensor, v1::TensorDescriptor* out);
TensorDesc FromProto(const v1::TensorDescriptor& tensor);
AllocateParams FromProto(const v1::AllocateRequest& request);
/// INVALID_ARGUMENT when the reference names neither an id nor a name.
absl::StatusOr<BufferKey> FromProto(const v1::BufferRef& ref);

}  // namespace gpubroker
