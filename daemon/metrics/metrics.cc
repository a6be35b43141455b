#include "daemon/metrics/metrics.h"

#include "common/version.h"
#include "daemon/core/registry.h"
#include "prometheus/metric_family.h"

namespace gpubroker {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Metrics::StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(Sampler sampler) : sampler_(std::move(sampler)) {}

  std::vector<MetricFamily> Collect() const override {
    const MetricsSample s = sampler_();
    std::vector<MetricFamily> out;
    auto gauge = [&](const char* name, const char* help) -> MetricFamily& {
      out.push_back(MetricFamily{name, help, MetricType::Gauge, {}});
      return out.back();
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
    auto& connections = gauge("gpubroker_connections", "Client connections open now, by socket.");
    add(connections, {{"socket", "session"}}, static_cast<double>(s.session_connections));
    add(connections, {{"socket", "grpc"}}, static_cast<double>(s.grpc_connections));
    if (s.open_descriptors >= 0) {
      add(gauge("gpubroker_open_descriptors", "Descriptors the daemon holds open now."), {},
          static_cast<double>(s.open_descriptors));
    }
    add(gauge("gpubroker_descriptor_limit", "The daemon's limit on open descriptors."), {},
        static_cast<double>(s.descriptor_limit));
    add(gauge("gpubroker_client_descriptors",
              "Descriptors held for clients: connections and buffers with a descriptor of "
              "their own."),
        {}, static_cast<double>(s.client_descriptors));

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
      add(capacity, {{"device", d.uuid}}, static_cast<double>(d.capacity_bytes));
      add(reserved, {{"device", d.uuid}}, static_cast<double>(d.reserved_bytes));
      add(used, {{"device", d.uuid}}, static_cast<double>(d.used_bytes));
      add(free, {{"device", d.uuid}}, static_cast<double>(d.free_bytes));
    }
    auto& quota = gauge("gpubroker_tenant_quota_bytes", "Byte quota per tenant (0: unlimited).");
    for (const auto& t : s.tenants) {
      add(quota, {{"tenant", t.name}}, static_cast<double>(t.quota_bytes));
    }
    return out;
  }

 private:
  Sampler sampler_;
};

Metrics::Metrics(Sampler sampler)
    : registry_(std::make_shared<prometheus::Registry>()),
      state_(std::make_shared<StateCollector>(std::move(sampler))),
      allocations_(prometheus::BuildCounter()
                       .Name("gpubroker_allocations_total")
                       .Help("Allocate calls by result.")
                       .Register(*registry_)),
      opens_(prometheus::BuildCounter()
                 .Name("gpubroker_opens_total")
                 .Help("Open calls by result.")
                 .Register(*registry_)),
      sessions_total_(prometheus::BuildCounter()
                          .Name("gpubroker_sessions_total")
                          .Help("Ended sessions by how they ended: closed (said goodbye) or died.")
                          .Register(*registry_)),
      reclaimed_(prometheus::BuildCounter()
                     .Name("gpubroker_reclaimed_bytes_total")
                     .Help("Bytes given back because a session ended or a TTL passed.")
                     .Register(*registry_)
                     .Add({})),
      allocation_seconds_(
          prometheus::BuildHistogram()
              .Name("gpubroker_allocation_duration_seconds")
              .Help("Time the daemon spends in an Allocate call.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5,
                                                               5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                                               2.5e-3, 5e-3, 1e-2, 0.1, 1})),
      sessions_started_(prometheus::BuildCounter()
                            .Name("gpubroker_sessions_started_total")
                            .Help("Sessions opened since the daemon started.")
                            .Register(*registry_)
                            .Add({})) {
  alloc_ok_ = &allocations_.Add({{"result", "ok"}});
  alloc_quota_ = &allocations_.Add({{"result", "quota"}});
  alloc_oom_ = &allocations_.Add({{"result", "out_of_memory"}});
  alloc_invalid_ = &allocations_.Add({{"result", "invalid"}});
  alloc_limit_ = &allocations_.Add({{"result", "limit"}});
  auto& refused = prometheus::BuildCounter()
                      .Name("gpubroker_connections_refused_total")
                      .Help(
                          "Connections turned away at accept, by socket and reason: uid_limit "
                          "(the uid holds as many as it may) or descriptors (the daemon is at "
                          "its descriptor budget or limit).")
                      .Register(*registry_);
  for (int socket = 0; socket < 2; ++socket) {
    for (int why = 0; why < 2; ++why) {
      refused_[socket][why] = &refused.Add({{"socket", socket == 0 ? "session" : "grpc"},
                                            {"reason", why == 0 ? "uid_limit" : "descriptors"}});
    }
  }
  sessions_closed_ = &sessions_total_.Add({{"end", "closed"}});
  sessions_died_ = &sessions_total_.Add({{"end", "died"}});
  for (const char* r : {"ok", "not_found", "not_sealed", "timeout", "invalid", "unavailable"}) {
    open_results_.emplace_back(r, &opens_.Add({{"result", r}}));
  }
}

std::vector<std::shared_ptr<prometheus::Collectable>> Metrics::collectables() const {
  return {registry_, state_};
}

std::string_view Metrics::AllocationResult(const absl::Status& status) {
  if (status.ok()) return "ok";
  const std::string reason = RefusalReason(status);
  if (reason == "quota") return "quota";
  if (reason == "out_of_memory") return "out_of_memory";
  if (reason == "limit") return "limit";
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
    case absl::StatusCode::kCancelled:
      return "timeout";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    default:
      return "invalid";
  }
}

void Metrics::Allocation(std::string_view result, double seconds) {
  if (result == "ok") {
    alloc_ok_->Increment();
    allocation_seconds_.Observe(seconds);
  } else if (result == "quota") {
    alloc_quota_->Increment();
  } else if (result == "out_of_memory") {
    alloc_oom_->Increment();
  } else if (result == "limit") {
    alloc_limit_->Increment();
  } else {
    alloc_invalid_->Increment();
  }
}

void Metrics::Open(std::string_view result) {
  for (auto& [label, counter] : open_results_) {
    if (label == result) {
      counter->Increment();
      return;
    }
  }
  opens_.Add({{"result", std::string(result)}}).Increment();
}

void Metrics::Reclaimed(uint64_t bytes) { reclaimed_.Increment(static_cast<double>(bytes)); }

void Metrics::SessionEnded(bool clean) { (clean ? sessions_closed_ : sessions_died_)->Increment(); }

void Metrics::SessionStarted() { sessions_started_.Increment(); }

void Metrics::ConnectionRefused(Socket socket, Refusal why) {
  refused_[socket == Socket::kSession ? 0 : 1][why == Refusal::kUidLimit ? 0 : 1]->Increment();
}

}  // namespace gpubroker
