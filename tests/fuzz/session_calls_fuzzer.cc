// libFuzzer target for what the daemon does with the frames of session.sock:
// arbitrary bytes are cut into frames, and every Call among them is served by
// the daemon's own BrokerCalls over a real registry and host backend, for
// three sessions of three tenants (chosen by the call's request id, so that
// ids repeat, collide and arrive in any order). Where the first byte has its
// top bit set, flat calls are read too, and an Open that does not wait, a
// Publish and a Release among them are served from their facts, as the
// session server serves them (the rest as the Call the facts say). The fields the hardening
// added are all reachable: Opens that wait (parked, with any timeout_ms),
// names with a tenant prefix, share_with lists, huge TTLs, region requests.
//
// Whatever the input, nothing may crash, and:
// - every refusal is a status the daemon documents, and RESOURCE_EXHAUSTED
//   always carries a reason (quota, out of memory or a limit);
// - every parked Open is answered exactly once, at the latest when its
//   session ends;
// - once the sessions end, no buffer, no byte and no wait is left.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "common/refusal.h"
#include "common/wire/frame.h"
#include "daemon/backend/host_backend.h"
#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/calls.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace {

using gpubroker::BrokerCalls;
using gpubroker::SessionView;

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

// With GPUBROKER_FUZZ_TRACE set, each outcome is printed (to read a reproducer).
const bool kTrace = std::getenv("GPUBROKER_FUZZ_TRACE") != nullptr;

// The codes the broker answers with; anything else is a bug.
void CheckRefusal(const absl::Status& s) {
  if (kTrace) std::fprintf(stderr, "  -> %s\n", s.ToString().c_str());
  switch (s.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnavailable:
      return;
    case absl::StatusCode::kResourceExhausted:
      if (gpubroker::RefusalOf(s) == gpubroker::Refusal::kNone) {
        Broken("RESOURCE_EXHAUSTED without a reason");
      }
      return;
    default:
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      Broken("a status the broker does not answer with");
  }
}

// One daemon's core: the parts BrokerCalls needs, made anew for each input.
struct Core {
  gpubroker::HostBackend backend{8 << 20};
  std::unique_ptr<gpubroker::Registry> registry;
  std::unique_ptr<gpubroker::NodeStatusCollector> status;
  std::unique_ptr<gpubroker::Metrics> metrics;
  std::unique_ptr<BrokerCalls> calls;

  Core() {
    auto tenants = gpubroker::TenantDirectory::Create(
        {{"blue", {1001}, {}, 1 << 20}, {"green", {1002}, {}, 0}}, 2 << 20);
    if (!tenants.ok()) Broken("tenant directory");
    gpubroker::TenantLimits limits;
    limits.max_buffers_per_tenant = 24;
    limits.max_descriptors_per_tenant = 6;
    gpubroker::WaitLimits waits;
    waits.max_per_session = 4;
    waits.max_per_tenant = 6;
    waits.default_timeout = std::chrono::milliseconds(50);
    registry = std::make_unique<gpubroker::Registry>(backend, std::move(*tenants),
                                                     gpubroker::Registry::Clock(), limits, waits);
    status = std::make_unique<gpubroker::NodeStatusCollector>(*registry, backend);
    metrics = std::make_unique<gpubroker::Metrics>(*status);
    calls = std::make_unique<BrokerCalls>(*registry, *metrics);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  return 0;
}

// Serves a flat call from its facts where the session server does (an Open
// that does not wait, a Publish, a Release); false for the others.
bool ServeFlat(Core& core, const SessionView& s, const gpubroker::FlatCallFacts& call) {
  using Kind = gpubroker::FlatCallFacts::Kind;
  if (call.has_counters) core.calls->RecordCounters(s, call.counters);
  switch (call.kind) {
    case Kind::kOpen: {
      if (call.wait) return false;
      gpubroker::BufferGrant grant;
      gpubroker::WaitId parked = 0;
      auto now = core.calls->OpenAsyncGrant(
          s, call, std::chrono::steady_clock::time_point::max(), &grant,
          [](absl::StatusOr<gpubroker::BufferGrant>) {
            Broken("an Open that did not wait parked");
          },
          &parked);
      if (!now.has_value()) Broken("an Open that did not wait parked");
      CheckRefusal(*now);
      return true;
    }
    case Kind::kPublish: {
      gpubroker::BufferGrant grant;
      CheckRefusal(core.calls->Publish(s, call, &grant));
      return true;
    }
    case Kind::kRelease:
      CheckRefusal(core.calls->Release(s, call));
      return true;
    default:
      return false;
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  const bool flat_calls = (data[0] & 0x80) != 0;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);

  Core core;
  std::vector<SessionView> sessions;
  for (uid_t uid : {1001u, 1002u, 1003u}) {
    auto s = core.registry->OpenSession(
        gpubroker::PeerCredentials{static_cast<pid_t>(uid), uid, uid, {}}, "fuzz");
    if (!s.ok()) Broken("OpenSession");
    sessions.push_back(*s);
  }
  // Parked Opens by wait id: how many answers each got.
  auto answers = std::make_shared<std::map<gpubroker::WaitId, int>>();
  std::map<gpubroker::WaitId, size_t> parked_by;  // the session index it was parked for

  gpubroker::FrameDecoder decoder;
  if (flat_calls) decoder.AcceptFlatCalls();
  bool failed = false;
  while (!stream.empty() && !failed) {
    const size_t n = std::min(chunk, stream.size());
    decoder.Append(stream.substr(0, n));
    stream.remove_prefix(n);
    for (;;) {
      auto body = decoder.NextBody();
      if (!body.ok()) {
        failed = true;  // the daemon drops such a connection
        break;
      }
      if (!body->has_value()) break;
      gpubroker::v1::SessionFrame f;
      if ((*body)->flat) {
        gpubroker::FlatCallRead read;
        if (!gpubroker::DecodeFlatCall((*body)->bytes, &read).ok()) {
          failed = true;
          break;
        }
        const gpubroker::FlatCallFacts& call = read.facts();
        if (kTrace) std::fprintf(stderr, "flat call %d\n", static_cast<int>(call.kind));
        if (ServeFlat(core, sessions[call.request_id % sessions.size()], call)) continue;
        gpubroker::ToCall(call, f.mutable_call());
      } else if (!gpubroker::FrameDecoder::Decode(**body, gpubroker::FlatFrames::kCalls, &f).ok()) {
        failed = true;
        break;
      }
      if (f.has_fd_request()) {
        const size_t who = f.fd_request().request_id() % sessions.size();
        if (f.fd_request().has_region_id()) {
          auto grant = core.registry->ExportRegionFd(sessions[who].id, f.fd_request().region_id());
          CheckRefusal(grant.status());
        }
        continue;
      }
      if (f.has_goodbye()) {  // a session ends and its process comes back
        const size_t who = f.goodbye().reason().size() % sessions.size();
        core.registry->EndSession(sessions[who].id, gpubroker::SessionEnd::kClosed);
        for (const auto& [id, where] : parked_by) {
          if (where == who && (*answers)[id] != 1) Broken("a wait outlived its session");
        }
        auto s = core.registry->OpenSession(sessions[who].peer, "fuzz");
        if (!s.ok()) Broken("OpenSession after an end");
        sessions[who] = *s;
        continue;
      }
      if (!f.has_call()) continue;
      const gpubroker::v1::Call& call = f.call();
      const size_t who = call.request_id() % sessions.size();
      const SessionView& s = sessions[who];
      if (kTrace) {
        std::fprintf(stderr, "session %zu (%s): %s\n", who, s.tenant.c_str(),
                     call.ShortDebugString().c_str());
      }
      switch (call.request_case()) {
        case gpubroker::v1::Call::kAllocate: {
          gpubroker::v1::AllocateRequest req = call.allocate();
          req.set_keep(false);  // so that ending the sessions must give everything back
          gpubroker::v1::AllocateResponse resp;
          // As the C++ client routes them: shares through gRPC, the rest on
          // session.sock; and every other id's through gRPC too.
          const bool grpc = req.share_with_size() > 0 || (call.request_id() / 3) % 2 == 1;
          CheckRefusal(grpc ? core.calls->Allocate(s, req, &resp)
                            : core.calls->QuickAllocate(s, req, &resp));
          break;
        }
        case gpubroker::v1::Call::kOpen: {
          gpubroker::v1::OpenResponse resp;
          if (!call.open().wait()) {
            CheckRefusal(core.calls->Open(s, call.open(), &resp));
            break;
          }
          // The answer comes after OpenAsync returns (or never, if it answers now).
          auto parked = std::make_shared<gpubroker::WaitId>(0);
          auto done = [answers, parked](absl::Status status, gpubroker::v1::OpenResponse) {
            CheckRefusal(status);
            (*answers)[*parked]++;
          };
          auto now =
              core.calls->OpenAsync(s, call.open(), std::chrono::steady_clock::time_point::max(),
                                    &resp, done, parked.get());
          if (now.has_value()) {
            CheckRefusal(*now);
          } else {
            if (*parked == 0 || parked_by.count(*parked) > 0) {
              Broken("a wait without an id of its own");
            }
            parked_by[*parked] = who;
            (*answers)[*parked] += 0;
          }
          break;
        }
        case gpubroker::v1::Call::kSeal: {
          gpubroker::v1::SealResponse resp;
          CheckRefusal(core.calls->Seal(s, call.seal(), &resp));
          break;
        }
        case gpubroker::v1::Call::kRelease:
          CheckRefusal(core.calls->Release(s, call.release()));
          break;
        default:
          break;
      }
    }
  }

  for (const SessionView& s : sessions) {
    core.registry->EndSession(s.id, gpubroker::SessionEnd::kDied);
  }
  core.registry->ExpireWaits(std::chrono::steady_clock::now() + std::chrono::hours(1));
  core.registry->ExpireDue(INT64_MAX);
  for (const auto& [id, count] : *answers) {
    if (count != 1) Broken("a parked Open not answered exactly once");
  }
  const gpubroker::NodeStatus end = core.status->Collect();
  if (end.buffers != 0) Broken("buffers left once every session ended");
  if (end.waiting_opens != 0) Broken("waits left once every session ended");
  if (end.sessions != 0) Broken("sessions left");
  for (const auto& t : end.tenants) {
    if (t.used_bytes != 0) Broken("a tenant still charged once every session ended");
  }
  for (const auto& d : end.devices) {
    if (d.usage.used_bytes != 0) Broken("backend bytes in use once every session ended");
  }
  return 0;
}
