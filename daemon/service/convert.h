#pragma once

#include "absl/status/status.h"
#include "common/wire/flat_answer.h"
#include "common/wire/flat_call.h"
#include "daemon/backend/backend.h"
#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "gpubroker/v1/broker.pb.h"
#include "gpubroker/v1/session.pb.h"
#include "grpcpp/support/status.h"

namespace gpubroker {

/// Facts about the running daemon that Status reports.
struct DaemonFacts {
  std::string socket_dir;
  std::string metrics_address;  // as bound (the real port), empty when off
  int64_t started_unix_ms = 0;
};

/// The one place where an internal status becomes a gRPC status (their codes
/// are the same numbers); a refusal's reason travels in its details.
grpc::Status ToGrpcStatus(const absl::Status& status);
/// The same for session.sock: an ErrorFrame answering `request_id`.
void ToErrorFrame(const absl::Status& status, uint64_t request_id, v1::ErrorFrame* out);

void ToProto(const BufferView& view, v1::BufferInfo* out);
void ToProto(const ImportInfo& info, v1::ImportDescriptor* out);
/// A grant as the answers that carry one (Allocate, Open, Claim) say it.
template <typename Response>
void ToProto(const BufferGrant& grant, Response* out) {
  ToProto(grant.buffer, out->mutable_buffer());
  ToProto(grant.import, out->mutable_import());
}
/// An Open's (or, with `claim`, a Claim's) answer to `request_id` as the flat
/// layout writes it, read straight from `grant`: what ToProto of its buffer
/// and import says, field for field, without a message in between. Views
/// into `grant`, which must outlive the result.
FlatAnswerFacts ToFlatAnswer(const BufferGrant& grant, uint64_t request_id, bool claim);
/// A Publish's answer to `request_id` (the buffer, no import) as the flat
/// layout writes it, read straight from `buffer`, which must outlive it.
FlatAnswerFacts ToFlatPublishAnswer(const BufferView& buffer, uint64_t request_id);
/// What travels with a descriptor, answering `request`.
void ToProto(const FdGrant& grant, const v1::FdRequest& request, v1::FdGrant* out);
/// The node's state, and who asks, as the Status call answers it.
void ToProto(const NodeStatus& status, const DaemonFacts& facts, const SessionView* self,
             v1::StatusResponse* out);
/// The answer to Hello: the session, the daemon, and where the quick calls end.
void ToWelcome(const SessionView& session, const Backend& backend, const WaitLimits& waits,
               v1::Welcome* out);
/// Welcome.quick_allocation_limit: the backend's limit, 0 for none.
uint64_t WireQuickAllocationLimit(const Backend& backend);
AllocateParams FromProto(const v1::AllocateRequest& request);
/// INVALID_ARGUMENT when the reference names neither an id nor a name.
absl::StatusOr<BufferKey> FromProto(const v1::BufferRef& ref);
/// The same of a flat Open's reference (what FromProto says of the
/// BufferRef that ToCall makes of it).
absl::StatusOr<BufferKey> FromFlatRef(const FlatCallFacts& open);
/// A flat Publish's params, as BrokerCalls::Publish reads the message's.
PublishParams FromFlatPublish(const FlatCallFacts& publish);
ClientCounters FromFlat(const FlatCallFacts::Counters& counters);

}  // namespace gpubroker
