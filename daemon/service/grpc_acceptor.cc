#include "daemon/service/grpc_acceptor.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"
#include "spdlog/spdlog.h"

namespace gpubroker {
namespace {

constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
constexpr uint64_t kListenerTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;

}  // namespace

GrpcAcceptor::GrpcAcceptor(DescriptorBudget& descriptors, ReserveDescriptor& reserve,
                           Metrics& metrics, Options options)
    : descriptors_(descriptors),
      reserve_(reserve),
      metrics_(metrics),
      per_uid_(options.max_connections_per_uid) {}

GrpcAcceptor::~GrpcAcceptor() { Stop(); }

absl::Status GrpcAcceptor::Start(UniqueFd listener, grpc::Server* server) {
  server_ = server;
  listener_ = std::move(listener);
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_ || !wake_) {
    return absl::InternalError(StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  for (auto [fd, tag] : {std::pair{listener_.get(), kListenerTag}, {wake_.get(), kWakeTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(StrCat("epoll_ctl: ", std::strerror(errno)));
    }
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void GrpcAcceptor::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  thread_.join();
  listener_.reset();
  watched_.clear();
}

std::optional<PeerCredentials> GrpcAcceptor::PeerOf(std::string_view peer) const {
  int fd = -1;
  if (!peer.starts_with("fd:") || !ParseInt(peer.substr(3), &fd)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second.first;
}

void GrpcAcceptor::Warn(const std::string& message) {
  uint64_t suppressed = 0;
  if (!warn_limiter_.Allow(&suppressed)) return;
  if (suppressed > 0) {
    spdlog::warn("{} ({} similar messages suppressed)", message, suppressed);
  } else {
    spdlog::warn("{}", message);
  }
}

void GrpcAcceptor::Loop() {
  epoll_event events[64];
  while (!stopping_) {
    int timeout_ms = -1;
    if (!listening_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          resume_accepting_ - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    const int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("gpubroker.sock: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_.get(), &count, sizeof(count));
      } else if (tag == kListenerTag) {
        AcceptAll();
      } else {
        Ended(static_cast<int>(tag));
      }
    }
    if (!listening_ && std::chrono::steady_clock::now() >= resume_accepting_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenerTag;
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev) == 0) listening_ = true;
    }
  }
}

void GrpcAcceptor::AcceptAll() {
  const AcceptEnd end = AcceptBatch(
      listener_.get(), 64, [this](UniqueFd fd) { Admit(std::move(fd)); },
      [this](int err) { Warn(StrCat("gpubroker.sock: accept: ", std::strerror(err))); });
  if (end == AcceptEnd::kOutOfDescriptors) OutOfDescriptors();
}

void GrpcAcceptor::OutOfDescriptors() {
  const int err = errno;
  // A gRPC client learns nothing from a frame of ours; closing at once makes
  // its call fail fast (UNAVAILABLE) instead of waiting in the listen queue.
  reserve_.Shed(listener_.get(), [](int) {});
  metrics_.ConnectionRefused(Metrics::Socket::kGrpc, Metrics::TurnedAway::kDescriptors);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  listening_ = false;
  resume_accepting_ = std::chrono::steady_clock::now() + kAcceptBackoff;
  Warn(StrCat("gpubroker.sock: accept: ", std::strerror(err), " (", CountOpenDescriptors(),
              " descriptors open); turning connections away for ", kAcceptBackoff.count(), " ms"));
}

void GrpcAcceptor::Admit(UniqueFd fd) {
  auto peer = GetPeerCredentials(fd.get());
  if (!peer.ok()) {
    Warn(StrCat("gpubroker.sock: ", peer.status().message()));
    return;
  }
  if (!per_uid_.TryAdmit(peer->uid)) {
    metrics_.ConnectionRefused(Metrics::Socket::kGrpc, Metrics::TurnedAway::kUidLimit);
    Warn(StrCat("gpubroker.sock: closing a connection of pid ", peer->pid, " uid ", peer->uid,
                ": the uid holds ", per_uid_.max_per_uid(),
                " connections, the limit (max_grpc_connections_per_uid)"));
    return;
  }
  // Two descriptors: gRPC's and the duplicate watched here.
  if (!descriptors_.TryCharge(2)) {
    per_uid_.Release(peer->uid);
    metrics_.ConnectionRefused(Metrics::Socket::kGrpc, Metrics::TurnedAway::kDescriptors);
    Warn(StrCat("gpubroker.sock: closing a connection of pid ", peer->pid, " uid ", peer->uid,
                ": gpubrokerd holds ", descriptors_.in_use(), " of the ", descriptors_.limit(),
                " descriptors it may hold for clients"));
    return;
  }
  auto watch = DupFd(fd.get());
  epoll_event ev{};
  ev.events = EPOLLRDHUP;  // hang-up only (EPOLLHUP and EPOLLERR always come); never read
  if (watch.ok()) {
    ev.data.u64 = static_cast<uint64_t>(watch->get());
  }
  if (!watch.ok() || ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, watch->get(), &ev) != 0) {
    Warn(StrCat("gpubroker.sock: cannot watch a connection: ", std::strerror(errno)));
    per_uid_.Release(peer->uid);
    descriptors_.Release(2);
    return;
  }
  const int grpc_fd = fd.release();  // gRPC owns it from here
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = next_generation_++;
    peers_[grpc_fd] = {*peer, generation};
  }
  const int dup_fd = watch->get();
  watched_.emplace(dup_fd, std::pair{std::move(*watch), Handed{*peer, grpc_fd, generation}});
  grpc::AddInsecureChannelFromFd(server_, grpc_fd);
}

void GrpcAcceptor::Ended(int dup_fd) {
  auto it = watched_.find(dup_fd);
  if (it == watched_.end()) return;
  const Handed& h = it->second.second;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, dup_fd, nullptr);
  {
    // gRPC may not have closed its descriptor yet, or its number may have
    // gone to a newer connection already; then that one's entry stays.
    absl::MutexLock lock(&mu_);
    auto p = peers_.find(h.grpc_fd);
    if (p != peers_.end() && p->second.second == h.generation) peers_.erase(p);
  }
  per_uid_.Release(h.peer.uid);
  descriptors_.Release(2);
  watched_.erase(it);
}

}  // namespace gpubroker
