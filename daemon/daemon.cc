// Over 500 lines on purpose: the daemon's wiring, the one place where every
// part is built, connected and stopped in order (backend, registry, both
// sockets, metrics, health, signals, reload).
#include "daemon/daemon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/paths.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/units.h"
#include "common/unix_socket.h"
#include "common/version.h"
#include "daemon/core/node_status.h"
#include "daemon/core/registry.h"
#include "daemon/create_backend.h"
#include "daemon/logging.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/broker_service.h"
#include "daemon/service/grpc_acceptor.h"
#include "daemon/service/tcp_health.h"
#include "daemon/session/session_server.h"
#include "daemon/systemd.h"
#include "daemon/util/descriptors.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/exposer.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

constexpr mode_t kSocketMode = 0660;

absl::Status Errno(std::string_view what) {
  return absl::FailedPreconditionError(StrCat(what, ": ", std::strerror(errno)));
}

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return Errno(StrCat("cannot create ", partial));
      }
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<gid_t> LookupGroup(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* result = nullptr;
  if (::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &result) != 0 || result == nullptr) {
    return absl::InvalidArgumentError(StrCat("unknown group '", name, "'"));
  }
  return g.gr_gid;
}

absl::Status SetSocketOwner(const std::string& path, const std::string& group) {
  if (::chmod(path.c_str(), kSocketMode) != 0) return Errno(StrCat("chmod ", path));
  if (group.empty()) return absl::OkStatus();
  GPUBROKER_ASSIGN_OR_RETURN(auto gid, LookupGroup(group));
  if (::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
    return Errno(StrCat("chown ", path));
  }
  return absl::OkStatus();
}

// civetweb's stop waits for its listener's poll to time out (up to 2 s);
// connecting to the port wakes it at once.
void StopExposer(std::unique_ptr<prometheus::Exposer>& exposer, const std::string& bound) {
  if (!exposer) return;
  const auto colon = bound.rfind(':');
  std::string host = bound.substr(0, colon);
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = 0;
  ParseInt(std::string_view(bound).substr(colon + 1), &port);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ipv4 = ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1;
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (ipv4 && !stopped) {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      (void)::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  exposer.reset();
  stopped = true;
  waker.join();
}

// Loading gRPC's reflection library registers its plugin with every server
// that is built; this option takes it out again unless --grpc-reflection asks
// for it.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(p.get()) != nullptr;
    });
  }
};

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  session_path_ = StrCat(options_.socket_dir, "/", kSessionSocketName);
  grpc_path_ = StrCat(options_.socket_dir, "/", kGrpcSocketName);
  lock_path_ = StrCat(options_.socket_dir, "/", kLockFileName);
}

Daemon::~Daemon() { Shutdown(); }

absl::Status Daemon::PrepareSocketDir() {
  GPUBROKER_RETURN_IF_ERROR(MakeDirs(options_.socket_dir));
  // The lock, not the socket files, says whether a daemon is alive: it is
  // released by the kernel however the holder dies, so a stale socket file
  // never blocks a new daemon.
  lock_fd_.reset(::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock_fd_) return Errno(StrCat("cannot open ", lock_path_));
  if (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    [[maybe_unused]] ssize_t n = ::pread(lock_fd_.get(), pid, sizeof(pid) - 1, 0);
    std::string holder(pid);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    lock_fd_.reset();
    return absl::FailedPreconditionError(StrCat("another gpubrokerd",
                                                holder.empty() ? "" : StrCat(" (pid ", holder, ")"),
                                                " is serving ", options_.socket_dir));
  }
  const std::string pid = StrCat(::getpid(), "\n");
  if (::ftruncate(lock_fd_.get(), 0) != 0 ||
      ::pwrite(lock_fd_.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Errno(StrCat("cannot write ", lock_path_));
  }
  for (const std::string& path : {session_path_, grpc_path_}) {
    if (::unlink(path.c_str()) == 0) {
      spdlog::info("removed stale socket {}", path);
    } else if (errno != ENOENT) {
      return Errno(StrCat("cannot remove stale ", path));
    }
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartMetrics() {
  if (options_.metrics_address.empty()) return absl::OkStatus();
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(options_.metrics_address);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        StrCat("cannot serve metrics on ", options_.metrics_address, ": ", e.what(),
               " (is another process, a second gpubrokerd, listening there? --metrics-address "
               "HOST:PORT picks another: port 0 any free one, an empty address none)"));
  }
  for (const auto& c : metrics_->collectables()) exposer_->RegisterCollectable(c);
  const auto ports = exposer_->GetListeningPorts();
  const std::string host = options_.metrics_address.substr(0, options_.metrics_address.rfind(':'));
  metrics_bound_ = ports.empty() ? options_.metrics_address : StrCat(host, ":", ports[0]);
  return absl::OkStatus();
}

absl::Status Daemon::StartGrpc() {
  DaemonFacts facts;
  facts.socket_dir = options_.socket_dir;
  facts.metrics_address = metrics_bound_;
  facts.started_unix_ms = absl::ToUnixMillis(absl::Now());
  service_ = std::make_unique<BrokerService>(
      *calls_, *status_, facts, [this](std::string_view peer) -> std::optional<PeerCredentials> {
        // Calls arrive only on connections the acceptor handed to gRPC.
        return grpc_acceptor_ ? grpc_acceptor_->PeerOf(peer) : std::nullopt;
      });
  service_->set_catch_up(
      [this](std::function<void()> then) { sessions_->AfterCatchUp(std::move(then)); });

  grpc::EnableDefaultHealthCheckService(true);
  // Reflection lists the services and hands out their descriptors: what a
  // generic tool (grpcurl) needs to call the broker without proto/. It shows
  // the schema only; every Broker call still needs a token.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options_.grpc_reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  // No listening port: the acceptor takes gpubroker.sock's connections and
  // hands them to the server (see GrpcAcceptor for why).
  builder.RegisterService(service_.get());
  grpc::ResourceQuota quota("gpubrokerd");
  // Waiting Opens hold no thread (the callback API); the synchronous calls
  // are short, so this bounds the threads a flood of them can make.
  quota.SetMaxThreads(256);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (!server_) return absl::FailedPreconditionError("cannot start the gRPC server");
  SetServing(false);
  GPUBROKER_ASSIGN_OR_RETURN(auto listener, ListenUnix(grpc_path_, kSocketMode));
  GPUBROKER_RETURN_IF_ERROR(SetSocketOwner(grpc_path_, options_.socket_group));
  GrpcAcceptor::Options acceptor_options;
  acceptor_options.max_connections_per_uid = options_.max_grpc_connections_per_uid;
  grpc_acceptor_ =
      std::make_unique<GrpcAcceptor>(*descriptors_, *reserve_, *metrics_, acceptor_options);
  return grpc_acceptor_->Start(std::move(listener), server_.get());
}

absl::Status Daemon::StartHealth() {
  if (options_.health_address.empty()) return absl::OkStatus();
  auto health = TcpHealthServer::Start(options_.health_address);
  if (!health.ok()) return health.status();
  health_ = std::move(*health);
  health_bound_ = health_->address();
  return absl::OkStatus();
}

absl::Status Daemon::Start() {
  // Every client connection and every shared buffer costs a descriptor.
  const DescriptorLimit limit = RaiseDescriptorLimit();
  if (limit.soft != limit.was) {
    spdlog::info("descriptor limit raised from {} to {}", limit.was, limit.soft);
  }
  descriptors_ = std::make_unique<DescriptorBudget>(DescriptorBudget::LimitFor(limit.soft));
  reserve_ = std::make_unique<ReserveDescriptor>();
  GPUBROKER_RETURN_IF_ERROR(PrepareSocketDir());

  GPUBROKER_ASSIGN_OR_RETURN(auto choice, CreateBackend(options_));
  backend_ = std::move(choice.backend);
  backend_why_ = choice.why;

  GPUBROKER_ASSIGN_OR_RETURN(auto tenants, Check(options_));
  TenantLimits limits;
  limits.max_buffers_per_tenant = options_.max_buffers_per_tenant;
  limits.max_descriptors_per_tenant = options_.max_descriptors_per_tenant;
  limits.descriptors = descriptors_.get();
  WaitLimits waits;
  waits.max_per_session = options_.max_waiters_per_session;
  waits.max_per_tenant = options_.max_waiters_per_tenant;
  waits.default_timeout = std::chrono::milliseconds(options_.wait_timeout_ms);
  registry_ =
      std::make_unique<Registry>(*backend_, std::move(tenants), Registry::Clock(), limits, waits);

  status_ =
      std::make_unique<NodeStatusCollector>(*registry_, *backend_, [this](NodeStatus::Process& p) {
        // Read at scrape and Status time only, once every part is up.
        p.session_connections = sessions_ ? sessions_->connections() : 0;
        p.grpc_connections = grpc_acceptor_ ? grpc_acceptor_->connections() : 0;
        p.client_descriptors = descriptors_->in_use();
      });
  metrics_ = std::make_unique<Metrics>(*status_);
  GPUBROKER_RETURN_IF_ERROR(StartMetrics());

  GPUBROKER_ASSIGN_OR_RETURN(auto listener, ListenUnix(session_path_, kSocketMode));
  GPUBROKER_RETURN_IF_ERROR(SetSocketOwner(session_path_, options_.socket_group));
  SessionServer::Options session_options;
  session_options.hello_timeout = std::chrono::milliseconds(options_.hello_timeout_ms);
  session_options.max_sessions_per_uid = options_.max_sessions_per_uid;
  session_options.busy_poll = std::chrono::microseconds(options_.busy_poll_us);
  session_options.busy_poll_max = std::chrono::microseconds(options_.busy_poll_max_us);
  session_options.max_wait_awake = std::chrono::microseconds(options_.max_wait_awake_us);
  calls_ = std::make_unique<BrokerCalls>(*registry_, *metrics_);
  sessions_ = std::make_unique<SessionServer>(*calls_, *descriptors_, *reserve_, session_options);

  GPUBROKER_RETURN_IF_ERROR(StartGrpc());
  GPUBROKER_RETURN_IF_ERROR(StartHealth());
  GPUBROKER_RETURN_IF_ERROR(sessions_->Start(std::move(listener)));
  reaper_ = std::thread([this] { ReapExpired(); });
  started_ = true;
  SetServing(true);

  std::vector<std::string> devices;
  for (const auto& d : backend_->devices()) {
    devices.push_back(
        StrCat(d.uuid, " \"", d.name, "\" ", FormatBytes(d.capacity_bytes), " of ",
               FormatBytes(d.total_bytes),
               d.compute_capability.empty() ? "" : StrCat(" cc ", d.compute_capability)));
  }
  std::printf("gpubrokerd %s: backend %s (%s), devices [%s], sockets %s, %smetrics %s\n", kVersion,
              std::string(backend_->name()).c_str(), backend_why_.c_str(),
              absl::StrJoin(devices, "; ").c_str(), options_.socket_dir.c_str(),
              health_bound_.empty() ? "" : StrCat("health ", health_bound_, ", ").c_str(),
              metrics_bound_.empty() ? "off" : metrics_bound_.c_str());
  std::fflush(stdout);
  systemd::NotifyReady(StatusText());
  if (std::getenv("NOTIFY_SOCKET") != nullptr) {
    notifier_ = std::thread([this] { NotifyServiceManager(); });
  }
  return absl::OkStatus();
}

absl::StatusOr<TenantDirectory> Daemon::Check(const DaemonOptions& options) {
  if (!options.socket_group.empty()) {
    if (auto gid = LookupGroup(options.socket_group); !gid.ok()) {
      return absl::InvalidArgumentError(StrCat("socket_group: ", gid.status().message()));
    }
  }
  std::optional<gid_t> admin_gid;
  if (!options.admin_group.empty()) {
    gid_t gid = 0;
    if (ParseInt(options.admin_group, &gid)) {
      admin_gid = gid;
    } else if (auto found = LookupGroup(options.admin_group); found.ok()) {
      admin_gid = *found;
    } else {
      return absl::InvalidArgumentError(StrCat("admin_group: ", found.status().message()));
    }
  }
  // The directory refuses tenant names that are reserved (uid-<n>) at start
  // and on every reload alike.
  auto tenants = TenantDirectory::Create(options.tenants, options.default_quota_bytes, admin_gid);
  if (!tenants.ok())
    return absl::InvalidArgumentError(StrCat("tenants: ", tenants.status().message()));
  return tenants;
}

namespace {

std::string QuotaText(uint64_t bytes) { return bytes == 0 ? "unlimited" : FormatBytes(bytes); }

// What a reload changes about the tenants, one phrase per difference.
std::vector<std::string> TenantChanges(const TenantDirectory& before,
                                       const TenantDirectory& after) {
  std::vector<std::string> out;
  auto find = [](const TenantDirectory& d, const std::string& name) -> const TenantSpec* {
    for (const auto& t : d.configured()) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  for (const auto& t : after.configured()) {
    const TenantSpec* old = find(before, t.name);
    if (old == nullptr) {
      out.push_back(StrCat("tenant '", t.name, "' added (quota ", QuotaText(t.quota_bytes), ")"));
      continue;
    }
    if (old->quota_bytes != t.quota_bytes) {
      out.push_back(StrCat("tenant '", t.name, "' quota ", QuotaText(old->quota_bytes), " -> ",
                           QuotaText(t.quota_bytes)));
    }
    if (old->uids != t.uids || old->gids != t.gids) {
      out.push_back(StrCat("tenant '", t.name, "' members changed (for new sessions)"));
    }
  }
  for (const auto& t : before.configured()) {
    if (find(after, t.name) == nullptr) {
      out.push_back(StrCat("tenant '", t.name, "' removed (its sessions and buffers stay)"));
    }
  }
  if (before.default_quota_bytes() != after.default_quota_bytes()) {
    out.push_back(StrCat("default quota ", QuotaText(before.default_quota_bytes()), " -> ",
                         QuotaText(after.default_quota_bytes())));
  }
  return out;
}

// Options that a reload applies; any other change waits for a restart.
bool Reloadable(const std::string& flag) {
  return flag == "config" || flag == "log-level" || flag == "default-quota" ||
         flag == "admin-group";
}

}  // namespace

absl::Status Daemon::Reload(const DaemonOptions& options) {
  if (!started_ || stopped_) return absl::FailedPreconditionError("not serving");
  systemd::NotifyReloading();
  auto tenants = Check(options);
  if (!tenants.ok()) {
    spdlog::error("reload refused, the running configuration stays: {}",
                  std::string(tenants.status().message()));
    systemd::NotifyReady(StatusText());
    return tenants.status();
  }
  std::vector<std::string> changes = TenantChanges(*registry_->tenants(), *tenants);
  std::vector<std::string> need_restart;
  auto keys = options_.given;
  keys.insert(options.given.begin(), options.given.end());
  for (const auto& [flag, unused] : keys) {
    if (Reloadable(flag)) continue;
    auto before = options_.given.find(flag);
    auto after = options.given.find(flag);
    const bool same = before != options_.given.end() && after != options.given.end() &&
                      before->second == after->second;
    if (!same) need_restart.push_back(flag);
  }
  if (options.log_level != options_.log_level) {
    changes.push_back(StrCat("log level ", options_.log_level, " -> ", options.log_level));
    SetLogLevel(options.log_level);
  }
  registry_->ReplaceTenants(std::move(*tenants));
  options_.tenants = options.tenants;
  options_.default_quota_bytes = options.default_quota_bytes;
  options_.log_level = options.log_level;
  options_.admin_group = options.admin_group;
  for (const char* flag : {"config", "log-level", "default-quota", "admin-group"}) {
    if (auto it = options.given.find(flag); it != options.given.end()) {
      options_.given[flag] = it->second;
    } else {
      options_.given.erase(flag);
    }
  }
  const NodeStatus now = status_->Collect();
  spdlog::info("reloaded {}: {}; {} sessions kept",
               options.config_file.empty() ? "the configuration" : options.config_file,
               changes.empty() ? "no change" : absl::StrJoin(changes, ", "), now.sessions);
  if (!need_restart.empty()) {
    spdlog::warn("reload: --{} changed; that takes effect at the next restart",
                 absl::StrJoin(need_restart, ", --"));
  }
  systemd::NotifyReady(StatusText());
  return absl::OkStatus();
}

std::string Daemon::StatusText() const {
  const NodeStatus now = status_->Collect();
  uint64_t used = 0, capacity = 0;
  for (const auto& d : now.devices) {
    used += d.usage.used_bytes;
    capacity += d.usage.capacity_bytes;
  }
  return StrCat(now.sessions, " sessions, ", now.buffers, " buffers, ", FormatBytes(used), " of ",
                FormatBytes(capacity), " lent on ", now.devices.size(), " ", now.backend,
                " devices");
}

void Daemon::NotifyServiceManager() {
  const auto watchdog = systemd::WatchdogInterval();
  // Ping at half the interval the manager allows; refresh the status line
  // every few seconds either way.
  auto period = std::chrono::microseconds(std::chrono::seconds(5));
  if (watchdog.count() > 0) period = std::min(period, watchdog / 2);
  std::string last;
  while (!stop_notifier_.HasBeenNotified()) {
    std::string status = StatusText();  // takes the registry's lock
    if (watchdog.count() > 0) systemd::NotifyWatchdog();
    if (status != last) systemd::NotifyStatus(status);
    last = std::move(status);
    stop_notifier_.WaitForNotificationWithTimeout(absl::FromChrono(period));
  }
}

void Daemon::SetServing(bool serving) {
  if (server_) {
    auto* health = server_->GetHealthCheckService();
    health->SetServingStatus("", serving);
    health->SetServingStatus(v1::Broker::service_full_name(), serving);
  }
  if (health_) health_->SetServing(serving);
}

void Daemon::ReapExpired() {
  // The registry's timer: TTLs and the deadlines of parked Opens. It sleeps
  // until the earliest of them, and the registry wakes it when an earlier one
  // is set; once a second at least, so that a clock step is caught up.
  while (registry_->AwaitTimers(absl::Seconds(1))) {
    registry_->ExpireWaits(std::chrono::steady_clock::now());
    const ExpiryReport r = registry_->ExpireDue(absl::ToUnixMillis(absl::Now()));
    if (r.tickets_expired > 0) {
      spdlog::info("tickets: {} expired unclaimed; their leases dropped", r.tickets_expired);
    }
    if (r.buffers_expired > 0) {
      spdlog::info("reclaim: TTL passed for {} buffers, {} returned ({} bytes)", r.buffers_expired,
                   FormatBytes(r.reclaimed_bytes), r.reclaimed_bytes);
    }
  }
}

void Daemon::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (started_) {
    systemd::NotifyStopping();
    spdlog::info("shutting down");
  }
  if (notifier_.joinable()) {
    stop_notifier_.Notify();
    notifier_.join();
  }
  if (server_) SetServing(false);
  if (registry_) registry_->BeginShutdown();
  if (sessions_) sessions_->Stop();
  spdlog::debug("sessions ended");
  if (grpc_acceptor_) grpc_acceptor_->Stop();
  // In-flight calls already answer UNAVAILABLE (the registry is shutting down);
  // the grace period only has to let those answers out.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  if (health_) health_->Shutdown();
  spdlog::debug("gRPC server stopped");
  if (reaper_.joinable()) {
    registry_->StopTimers();
    reaper_.join();
  }
  if (registry_) {
    const uint64_t bytes = registry_->ReleaseAll();
    if (bytes > 0) spdlog::info("released {} at shutdown", FormatBytes(bytes));
  }
  StopExposer(exposer_, metrics_bound_);
  spdlog::debug("metrics stopped");
  server_.reset();
  grpc_acceptor_.reset();
  health_.reset();
  service_.reset();
  sessions_.reset();
  calls_.reset();
  if (lock_fd_) {
    ::unlink(session_path_.c_str());
    ::unlink(grpc_path_.c_str());
    ::unlink(lock_path_.c_str());
    lock_fd_.reset();
  }
  if (started_) spdlog::info("stopped");
}

}  // namespace gpubroker
