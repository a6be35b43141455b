#include "daemon/metrics/metrics.h"

#include <deque>
#include <iterator>

#include "common/refusal.h"
#include "common/version.h"
#include "daemon/metrics/process_metrics.h"
#include "prometheus/metric_family.h"

namespace gpubroker {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Metrics::StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(const NodeStatusCollector& status) : status_(status) {}

  std::vector<MetricFamily> Collect() const override {
    const NodeStatus s = status_.Collect();
    // A deque: the references that gauge() hands out stay valid as families
    // are added (a vector's would dangle once it grows).
    std::deque<MetricFamily> families;
    auto gauge = [&](const char* name, const char* help) -> MetricFamily& {
      families.push_back(MetricFamily{name, help, MetricType::Gauge, {}});
      return families.back();
    };
    auto add = [](MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
      ClientMetric m;
      m.label = std::move(labels);
      m.gauge.value = value;
      f.metric.push_back(std::move(m));
    };

    add(gauge("gpubroker_build_info", "Version of the running gpubrokerd (always 1)."),
        {{"version", kVersion}}, 1);
    add(gauge("gpubroker_sessions", "Client sessions open now."), {}, s.sessions);
    add(gauge("gpubroker_waiting_opens",
              "Opens parked until their buffer appears or is sealed (no thread waits for them)."),
        {}, s.waiting_opens);
    auto& connections = gauge("gpubroker_connections", "Client connections open now, by socket.");
    add(connections, {{"socket", "session"}}, static_cast<double>(s.process.session_connections));
    add(connections, {{"socket", "grpc"}}, static_cast<double>(s.process.grpc_connections));
    // The daemon's open descriptors and their limit are process_open_fds and
    // process_max_fds; this is the part of them that clients make it hold.
    add(gauge("gpubroker_client_descriptors",
              "Descriptors held for clients: connections and buffers with a descriptor of "
              "their own."),
        {}, static_cast<double>(s.process.client_descriptors));

    auto& buffers = gauge("gpubroker_buffers", "Buffers holding memory, by device and tenant.");
    auto& bytes =
        gauge("gpubroker_allocated_bytes", "Bytes held by buffers, by device and tenant.");
    for (const auto& c : s.cells) {
      add(buffers, {{"device", c.device_uuid}, {"tenant", c.tenant}}, c.buffers);
      add(bytes, {{"device", c.device_uuid}, {"tenant", c.tenant}}, static_cast<double>(c.bytes));
    }
    auto& capacity =
        gauge("gpubroker_pool_capacity_bytes", "Bytes the broker may lend per device.");
    auto& reserved = gauge("gpubroker_pool_reserved_bytes",
                           "Bytes taken from the device by the broker's pools.");
    auto& used = gauge("gpubroker_pool_used_bytes", "Bytes held by live buffers per device.");
    auto& free = gauge("gpubroker_device_free_bytes",
                       "Free memory of the device as the driver or kernel reports it.");
    for (const auto& d : s.devices) {
      const std::string& uuid = d.info.uuid;
      add(capacity, {{"device", uuid}}, static_cast<double>(d.usage.capacity_bytes));
      add(reserved, {{"device", uuid}}, static_cast<double>(d.usage.reserved_bytes));
      add(used, {{"device", uuid}}, static_cast<double>(d.usage.used_bytes));
      add(free, {{"device", uuid}}, static_cast<double>(d.usage.free_bytes));
    }
    families.push_back(MetricFamily{
        "gpubroker_zeroed_bytes_total",
        "Bytes the daemon wrote zeros over before lending them to a tenant (GPU memory new "
        "from the driver or last another tenant's), by device.",
        MetricType::Counter,
        {}});
    MetricFamily& zeroed = families.back();
    for (const auto& d : s.devices) {
      ClientMetric m;
      m.label = {{"device", d.info.uuid}};
      m.counter.value = static_cast<double>(d.usage.zeroed_bytes);
      zeroed.metric.push_back(std::move(m));
    }
    // An unlimited quota has no series: usage / quota then matches nothing,
    // where a 0 would make every ratio +Inf and fire every quota alert.
    auto& quota = gauge("gpubroker_tenant_quota_bytes",
                        "Byte quota per tenant; a tenant without a quota has no series.");
    auto& tenant_used =
        gauge("gpubroker_tenant_used_bytes", "Bytes a tenant holds, as counted against its quota.");
    auto& tenant_sessions = gauge("gpubroker_tenant_sessions", "Sessions open now, by tenant.");
    for (const auto& t : s.tenants) {
      if (t.quota_bytes != 0) add(quota, {{"tenant", t.name}}, static_cast<double>(t.quota_bytes));
      add(tenant_used, {{"tenant", t.name}}, static_cast<double>(t.used_bytes));
      add(tenant_sessions, {{"tenant", t.name}}, t.sessions);
    }

    // Counters kept with the books (NodeStatus::Totals): read in this same
    // snapshot, a session's end and what it gave back appear together.
    auto counter = [&](const char* name, const char* help) -> MetricFamily& {
      families.push_back(MetricFamily{name, help, MetricType::Counter, {}});
      return families.back();
    };
    auto count = [](MetricFamily& f, std::vector<ClientMetric::Label> labels, uint64_t value) {
      ClientMetric m;
      m.label = std::move(labels);
      m.counter.value = static_cast<double>(value);
      f.metric.push_back(std::move(m));
    };
    const NodeStatus::Totals& n = s.totals;
    count(counter("gpubroker_sessions_started_total", "Sessions opened since the daemon started."),
          {}, n.sessions_started);
    // Not "gpubroker_sessions_total": to OpenMetrics that counter is the
    // family "gpubroker_sessions", the gauge's name.
    auto& ended = counter("gpubroker_sessions_ended_total",
                          "Ended sessions by how they ended: closed (said goodbye) or died.");
    count(ended, {{"end", "closed"}}, n.sessions_closed);
    count(ended, {{"end", "died"}}, n.sessions_died);
    auto& reclaimed = counter("gpubroker_reclaimed_bytes_total",
                              "Bytes given back without a Free, by cause: the owner's session "
                              "died or closed with them, or their TTL passed.");
    count(reclaimed, {{"cause", "died"}}, n.reclaimed_died);
    count(reclaimed, {{"cause", "closed"}}, n.reclaimed_closed);
    count(reclaimed, {{"cause", "ttl"}}, n.reclaimed_ttl);
    auto& tickets = counter("gpubroker_tickets_total",
                            "Tickets by event: held (a lease kept for a claimer), claimed (the "
                            "lease moved to the claimer's session), expired (unclaimed; its lease "
                            "dropped). Held less the other two are outstanding.");
    count(tickets, {{"event", "held"}}, n.tickets_held);
    count(tickets, {{"event", "claimed"}}, n.tickets_claimed);
    count(tickets, {{"event", "expired"}}, n.tickets_expired);

    auto& ranges = gauge("gpubroker_tenant_range_bytes",
                         "Bytes of the ranges that a tenant's clients lease (charged to it).");
    auto& in_use = gauge("gpubroker_client_in_use_bytes",
                         "Bytes of the buffers that a tenant's clients made in their ranges, as "
                         "of their last calls.");
    auto& mapped = gauge("gpubroker_client_mapped_bytes",
                         "Bytes of freed buffers' memory that a tenant's clients keep mapped in "
                         "their mapping caches, as of their last calls.");
    for (const auto& t : s.tenants) {
      add(ranges, {{"tenant", t.name}}, static_cast<double>(t.range_bytes));
      add(in_use, {{"tenant", t.name}}, static_cast<double>(t.clients.in_use_bytes));
      add(mapped, {{"tenant", t.name}}, static_cast<double>(t.clients.mapping_cache_bytes));
    }
    auto& kept = gauge("gpubroker_pool_kept_bytes",
                       "Bytes of freed allocations kept for their tenant's next buffer of the "
                       "same size (part of the reserved bytes).");
    auto& unmapping = gauge("gpubroker_pool_unmapping_bytes",
                            "Bytes of freed allocations that wait for clients to unmap them "
                            "before they are freed (part of the kept bytes).");
    for (const auto& d : s.devices) {
      add(kept, {{"device", d.info.uuid}}, static_cast<double>(d.usage.kept_bytes));
      add(unmapping, {{"device", d.info.uuid}}, static_cast<double>(d.usage.unmapping_bytes));
    }
    return {std::make_move_iterator(families.begin()), std::make_move_iterator(families.end())};
  }

 private:
  const NodeStatusCollector& status_;
};

Metrics::Metrics(const NodeStatusCollector& status)
    : registry_(std::make_shared<prometheus::Registry>()),
      state_(std::make_shared<StateCollector>(status)),
      process_(std::make_shared<ProcessCollector>()),
      allocations_(prometheus::BuildCounter()
                       .Name("gpubroker_allocations_total")
                       .Help("Allocate calls by result.")
                       .Register(*registry_)),
      opens_(prometheus::BuildCounter()
                 .Name("gpubroker_opens_total")
                 .Help("Open calls by result.")
                 .Register(*registry_)),
      allocation_seconds_(
          prometheus::BuildHistogram()
              .Name("gpubroker_allocation_duration_seconds")
              .Help("Time the daemon spends in an Allocate call.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5,
                                                               5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                                               2.5e-3, 5e-3, 1e-2, 0.1, 1})),
      client_allocations_(
          prometheus::BuildCounter()
              .Name("gpubroker_client_allocations_total")
              .Help("Buffers allocated by clients, by path: made by the client in its ranges "
                    "(client), by the daemon on session.sock (session) or through gRPC (grpc); "
                    "as the clients report them with their calls.")
              .Register(*registry_)),
      client_maps_(prometheus::BuildCounter()
                       .Name("gpubroker_client_maps_total")
                       .Help("Buffers that clients mapped, by path: memory mapped already "
                             "(mapped), a kept mapping (cached) or a new import (imported); as "
                             "the clients report them.")
                       .Register(*registry_)),
      cache_lookups_(prometheus::BuildCounter()
                         .Name("gpubroker_client_mapping_cache_lookups_total")
                         .Help("Maps of buffers with memory of their own (cuda-vmm, host-fd) by "
                               "whether the client's mapping cache had the memory mapped (hit) "
                               "or it was imported (miss); as the clients report them.")
                         .Register(*registry_)),
      cache_hits_(cache_lookups_.Add({{"result", "hit"}})),
      cache_misses_(cache_lookups_.Add({{"result", "miss"}})),
      cache_evictions_(prometheus::BuildCounter()
                           .Name("gpubroker_client_mapping_cache_evictions_total")
                           .Help("Mappings that clients' caches unmapped: to make room, on the "
                                 "daemon's request, or on an explicit evict.")
                           .Register(*registry_)
                           .Add({})),
      unmap_requests_(prometheus::BuildCounter()
                          .Name("gpubroker_unmap_requests_total")
                          .Help("Allocations that clients were asked to unmap before the daemon "
                                "frees their memory (to make room on the device).")
                          .Register(*registry_)
                          .Add({})) {
  auto& looked_ahead = prometheus::BuildCounter()
                           .Name("gpubroker_session_open_lookaheads_total")
                           .Help(
                               "Opens on session.sock that would have been refused (the name "
                               "unknown, the buffer not sealed) and made the daemon serve the "
                               "frames other sessions had already sent first, as posted seals "
                               "need; result: found (served after that) or refused.")
                           .Register(*registry_);
  looked_ahead_[0] = &looked_ahead.Add({{"result", "refused"}});
  looked_ahead_[1] = &looked_ahead.Add({{"result", "found"}});
  awake_waits_ = &prometheus::BuildCounter()
                      .Name("gpubroker_session_awake_waits_total")
                      .Help(
                          "Opens parked on session.sock until their buffer is sealed that "
                          "asked to wait awake (OpenRequest.awake_us): the session thread "
                          "polls instead of sleeping while they wait, up to "
                          "--max-wait-awake-us.")
                      .Register(*registry_)
                      .Add({});
  awake_seconds_ = &prometheus::BuildCounter()
                        .Name("gpubroker_session_awake_seconds_total")
                        .Help(
                            "Seconds session.sock's thread spent polling instead of sleeping "
                            "for Opens that wait awake (beyond --busy-poll-us after a frame): "
                            "the CPU those waits cost the daemon.")
                        .Register(*registry_)
                        .Add({});
  auto& turns = prometheus::BuildCounter()
                    .Name("gpubroker_session_turns_total")
                    .Help(
                        "Turns of session.sock's thread that served client frames, by whether "
                        "the thread was asleep when they came (each such turn paid a "
                        "wake-up) or polling (--busy-poll-us after a frame, or an Open "
                        "waiting awake).")
                    .Register(*registry_);
  session_turns_[0] = &turns.Add({{"thread", "asleep"}});
  session_turns_[1] = &turns.Add({{"thread", "polling"}});
  busy_polled_seconds_ =
      &prometheus::BuildCounter()
           .Name("gpubroker_session_busy_poll_seconds_total")
           .Help(
               "Seconds session.sock's thread spent polling for the next frame after serving "
               "one (its busy poll) and found none: the CPU the busy poll costs the daemon.")
           .Register(*registry_)
           .Add({});
  busy_poll_window_ =
      &prometheus::BuildGauge()
           .Name("gpubroker_session_busy_poll_window_seconds")
           .Help(
               "How long session.sock's thread polls for the next frame after serving one: "
               "--busy-poll-us, grown up to --busy-poll-max-us while frames keep coming soon "
               "after the window ran out, halved back when they come after longer.")
           .Register(*registry_)
           .Add({});
  aheads_ = &prometheus::BuildCounter()
                 .Name("gpubroker_session_aheads_total")
                 .Help(
                     "Ahead frames on session.sock: a producer's client, finding the daemon "
                     "asleep on its tenant's wake board, woke session.sock's thread as a seal "
                     "began, so that the seal's frame found it polling.")
                 .Register(*registry_)
                 .Add({});
  by_client_ = &client_allocations_.Add({{"path", "client"}});
  by_session_ = &client_allocations_.Add({{"path", "session"}});
  by_grpc_ = &client_allocations_.Add({{"path", "grpc"}});
  maps_mapped_ = &client_maps_.Add({{"path", "mapped"}});
  maps_imported_ = &client_maps_.Add({{"path", "imported"}});
  maps_cached_ = &client_maps_.Add({{"path", "cached"}});
  auto& turned_away = prometheus::BuildCounter()
                          .Name("gpubroker_connections_refused_total")
                          .Help(
                              "Connections turned away at accept, by socket and reason: "
                              "uid_limit (the uid holds as many as it may) or descriptors (the "
                              "daemon is at its descriptor budget or limit).")
                          .Register(*registry_);
  for (int socket = 0; socket < 2; ++socket) {
    for (int why = 0; why < 2; ++why) {
      turned_away_[socket][why] =
          &turned_away.Add({{"socket", socket == 0 ? "session" : "grpc"},
                            {"reason", why == 0 ? "uid_limit" : "descriptors"}});
    }
  }
  auto& session_calls = prometheus::BuildHistogram()
                            .Name("gpubroker_session_call_duration_seconds")
                            .Help(
                                "Time session.sock's thread spends serving one frame, by call "
                                "(the daemon's own work, not the round trip).")
                            .Register(*registry_);
  static constexpr const char* kSessionCallNames[kSessionCalls] = {
      "allocate",     "open",       "publish", "seal",  "release", "lease_range",
      "return_range", "fd_request", "hold",    "claim", "other"};
  for (int i = 0; i < kSessionCalls; ++i) {
    session_calls_[i] = &session_calls.Add(
        {{"call", kSessionCallNames[i]}},
        prometheus::Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4,
                                                2.5e-4, 5e-4, 1e-3, 1e-2, 0.1});
  }
  // Every label exists from the start, so that rates and alerts see zeros.
  for (const char* r : {"ok", "quota", "out_of_memory", "limit", "invalid", "unavailable"}) {
    allocation_results_.emplace_back(r, &allocations_.Add({{"result", r}}));
  }
  for (const char* r : {"ok", "not_found", "not_sealed", "timeout", "cancelled", "limit", "invalid",
                        "unavailable"}) {
    open_results_.emplace_back(r, &opens_.Add({{"result", r}}));
  }
}

std::vector<std::shared_ptr<prometheus::Collectable>> Metrics::collectables() const {
  return {registry_, state_, process_};
}

std::string_view Metrics::AllocationResult(const absl::Status& status) {
  if (status.ok()) return "ok";
  if (const Refusal refusal = RefusalOf(status); refusal != Refusal::kNone) {
    return RefusalName(refusal);
  }
  if (status.code() == absl::StatusCode::kUnavailable) return "unavailable";
  return "invalid";
}

std::string_view Metrics::OpenResult(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return "ok";
    case absl::StatusCode::kNotFound:
      return "not_found";
    case absl::StatusCode::kFailedPrecondition:
      return "not_sealed";
    case absl::StatusCode::kDeadlineExceeded:
      return "timeout";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kResourceExhausted:
      return "limit";  // a wait over the waiters' caps
    default:
      return "invalid";
  }
}

namespace {

prometheus::Counter& Find(std::vector<std::pair<std::string, prometheus::Counter*>>& counters,
                          std::string_view label, prometheus::Family<prometheus::Counter>& family) {
  for (auto& [name, counter] : counters) {
    if (name == label) return *counter;
  }
  return family.Add({{"result", std::string(label)}});
}

}  // namespace

void Metrics::Allocation(std::string_view result, double seconds) {
  Find(allocation_results_, result, allocations_).Increment();
  if (result == "ok") allocation_seconds_.Observe(seconds);
}

void Metrics::SessionCallServed(SessionCall call, double seconds) {
  session_calls_[static_cast<int>(call)]->Observe(seconds);
}

void Metrics::ClientReported(const ClientCounters& d) {
  // Every frame reports; most report no change: a counter is touched (a
  // cache line of its own, cold between a hand-over's calls) only to grow.
  auto add = [](prometheus::Counter& c, uint64_t v) {
    if (v != 0) c.Increment(static_cast<double>(v));
  };
  if (d.allocations != 0) {
    Find(allocation_results_, "ok", allocations_).Increment(static_cast<double>(d.allocations));
  }
  add(*by_client_, d.allocations);
  add(*by_session_, d.daemon_allocations);
  add(*by_grpc_, d.grpc_allocations);
  add(*maps_mapped_, d.opens_arena);
  add(*maps_imported_, d.opens_import);
  add(*maps_cached_, d.opens_cached);
  add(cache_hits_, d.opens_cached);
  add(cache_misses_, d.mapping_cache_misses);
  add(cache_evictions_, d.mapping_cache_evictions);
}

void Metrics::UnmapRequested(uint64_t allocations) {
  unmap_requests_.Increment(static_cast<double>(allocations));
}

void Metrics::OpenLookedAhead(bool found) { looked_ahead_[found ? 1 : 0]->Increment(); }

void Metrics::WaitAwakeAsked() { awake_waits_->Increment(); }

void Metrics::WaitedAwake(double seconds) { awake_seconds_->Increment(seconds); }

void Metrics::AheadTaken() { aheads_->Increment(); }

void Metrics::SessionTurns(uint64_t asleep, uint64_t polling) {
  if (asleep != 0) session_turns_[0]->Increment(static_cast<double>(asleep));
  if (polling != 0) session_turns_[1]->Increment(static_cast<double>(polling));
}

void Metrics::BusyPolled(double seconds, std::chrono::nanoseconds window) {
  if (seconds > 0) busy_polled_seconds_->Increment(seconds);
  busy_poll_window_->Set(std::chrono::duration<double>(window).count());
}

void Metrics::Open(std::string_view result) { Find(open_results_, result, opens_).Increment(); }

void Metrics::ConnectionRefused(Socket socket, TurnedAway why) {
  turned_away_[socket == Socket::kSession ? 0 : 1][why == TurnedAway::kUidLimit ? 0 : 1]
      ->Increment();
}

}  // namespace gpubroker
