#include "daemon/service/broker_service.h"

#include <chrono>

#include "common/strings.h"
#include "common/token.h"
#include "common/version.h"
#include "daemon/service/convert.h"
#include "spdlog/spdlog.h"

namespace gpubroker {

BrokerService::BrokerService(Registry& registry, Metrics* metrics, DaemonFacts facts)
    : registry_(registry), metrics_(metrics), facts_(std::move(facts)) {}

absl::StatusOr<SessionView> BrokerService::Authenticate(const grpc::ServerContext& ctx) const {
  if (registry_.shutting_down()) return absl::UnavailableError("gpubrokerd is shutting down");
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        StrCat("no session token: connect to session.sock first and send the token in '",
               kTokenMetadataKey, "' metadata"));
  }
  auto token = TokenFromHex(std::string_view(it->second.data(), it->second.size()));
  if (!token) return absl::UnauthenticatedError("malformed session token (want 32 hex digits)");
  return registry_.Authenticate(*token);
}

grpc::Status BrokerService::Refuse(std::string_view call, const SessionView* s,
                                   const absl::Status& status) {
  uint64_t suppressed = 0;
  if (warn_limiter_.Allow(&suppressed)) {
    const std::string who = s != nullptr ? StrCat("session ", s->id, " (pid ", s->peer.pid,
                                                  " tenant '", s->tenant, "')")
                                         : std::string("an unauthenticated caller");
    const std::string more =
        suppressed > 0 ? StrCat(" (", suppressed, " similar messages suppressed)") : "";
    spdlog::warn("refused {} from {}: {}: {}{}", call, who, absl::StatusCodeToString(status.code()),
                 View(status.message()), more);
  }
  return ToGrpcStatus(status);
}

grpc::Status BrokerService::Allocate(grpc::ServerContext* ctx, const v1::AllocateRequest* req,
                                     v1::AllocateResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Allocate", nullptr, session.status());
  const auto start = std::chrono::steady_clock::now();
  auto grant = registry_.Allocate(session->id, FromProto(*req));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ != nullptr) metrics_->Allocation(Metrics::AllocationResult(grant.status()), seconds);
  if (!grant.ok()) return Refuse("Allocate", &*session, grant.status());
  ToProto(grant->buffer, resp->mutable_buffer());
  ToProto(grant->import, resp->mutable_import());
  return grpc::Status::OK;
}

grpc::Status BrokerService::Open(grpc::ServerContext* ctx, const v1::OpenRequest* req,
                                 v1::OpenResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Open", nullptr, session.status());
  auto key = FromProto(req->ref());
  if (!key.ok()) {
    if (metrics_ != nullptr) metrics_->Open("invalid");
    return Refuse("Open", &*session, key.status());
  }
  OpenParams params;
  params.wait = req->wait();
  params.allow_unsealed = req->allow_unsealed();
  const auto now = std::chrono::steady_clock::now();
  if (req->wait() && req->timeout_ms() > 0) {
    params.deadline = now + std::chrono::milliseconds(req->timeout_ms());
  }
  // The call's own deadline bounds the wait too.
  const auto call_deadline = ctx->deadline();
  if (call_deadline != std::chrono::system_clock::time_point::max()) {
    const auto left = call_deadline - std::chrono::system_clock::now();
    params.deadline =
        std::min(params.deadline,
                 now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left));
  }
  params.cancelled = [ctx] { return ctx->IsCancelled(); };
  auto grant = registry_.Open(session->id, *key, params);
  if (metrics_ != nullptr) metrics_->Open(Metrics::OpenResult(grant.status()));
  if (!grant.ok()) return Refuse("Open", &*session, grant.status());
  ToProto(grant->buffer, resp->mutable_buffer());
  ToProto(grant->import, resp->mutable_import());
  return grpc::Status::OK;
}

grpc::Status BrokerService::Seal(grpc::ServerContext* ctx, const v1::SealRequest* req,
                                 v1::SealResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Seal", nullptr, session.status());
  auto view = registry_.Seal(session->id, req->id());
  if (!view.ok()) return Refuse("Seal", &*session, view.status());
  ToProto(*view, resp->mutable_buffer());
  return grpc::Status::OK;
}

grpc::Status BrokerService::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* /*resp*/) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Release", nullptr, session.status());
  if (auto s = registry_.Release(session->id, req->id(), req->free()); !s.ok()) {
    return Refuse("Release", &*session, s);
  }
  return grpc::Status::OK;
}

grpc::Status BrokerService::Free(grpc::ServerContext* ctx, const v1::FreeRequest* req,
                                 v1::FreeResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Free", nullptr, session.status());
  auto key = FromProto(req->ref());
  if (!key.ok()) return Refuse("Free", &*session, key.status());
  auto view = registry_.Free(session->id, *key);
  if (!view.ok()) return Refuse("Free", &*session, view.status());
  ToProto(*view, resp->mutable_buffer());
  return grpc::Status::OK;
}

grpc::Status BrokerService::List(grpc::ServerContext* ctx, const v1::ListRequest* /*req*/,
                                 v1::ListResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("List", nullptr, session.status());
  for (const auto& v : registry_.List(session->id)) ToProto(v, resp->add_buffers());
  return grpc::Status::OK;
}

grpc::Status BrokerService::Status(grpc::ServerContext* ctx, const v1::StatusRequest* /*req*/,
                                   v1::StatusResponse* resp) {
  auto session = Authenticate(*ctx);
  if (!session.ok()) return Refuse("Status", nullptr, session.status());
  Backend& backend = registry_.backend();
  const RegistrySnapshot snap = registry_.Snapshot();
  resp->set_version(kVersion);
  resp->set_backend(std::string(backend.name()));
  const auto& devices = backend.devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceInfo& d = devices[i];
    const DeviceUsage u = backend.Usage(static_cast<int>(i));
    auto* out = resp->add_devices();
    out->set_uuid(d.uuid);
    out->set_name(d.name);
    out->set_backend(d.backend);
    out->set_ordinal(d.ordinal);
    out->set_total_bytes(d.total_bytes);
    out->set_capacity_bytes(u.capacity_bytes);
    out->set_reserved_bytes(u.reserved_bytes);
    out->set_used_bytes(u.used_bytes);
    out->set_free_bytes(u.free_bytes);
    out->set_compute_capability(d.compute_capability);
    uint32_t buffers = 0;
    for (const auto& c : snap.cells) {
      if (c.device == static_cast<int>(i)) buffers += c.buffers;
    }
    out->set_buffers(buffers);
  }
  for (const auto& t : snap.tenants) {
    auto* out = resp->add_tenants();
    out->set_name(t.name);
    out->set_quota_bytes(t.quota_bytes);
    out->set_used_bytes(t.used_bytes);
    out->set_buffers(t.buffers);
    out->set_sessions(t.sessions);
  }
  resp->set_sessions(snap.sessions);
  resp->set_buffers(snap.buffers);
  resp->set_metrics_address(facts_.metrics_address);
  resp->set_socket_dir(facts_.socket_dir);
  resp->set_started_unix_ms(facts_.started_unix_ms);
  auto* self = resp->mutable_self();
  self->set_session_id(session->id);
  self->set_tenant(session->tenant);
  self->set_pid(session->peer.pid);
  self->set_uid(session->peer.uid);
  self->set_gid(session->peer.gid);
  return grpc::Status::OK;
}

}  // namespace gpubroker
