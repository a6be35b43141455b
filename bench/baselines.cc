#include "bench/baselines.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "bench/echo.grpc.pb.h"
#include "common/unix_socket.h"
#include "grpcpp/grpcpp.h"

namespace gpubroker::bench {

Child::~Child() {
  const bool had_channel = channel.get() >= 0;
  channel.reset();  // EOF ends the socketpair servers
  if (pid <= 0) return;
  // Let such a server end on its own, as a process that exits does (its
  // atexit work done: a timeline's records written), before it is stopped.
  for (int i = 0; had_channel && i < 2000; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

int SpawnSelf(const std::vector<std::string>& args, int child_fd) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(self.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (child_fd >= 0) {
      int flags = ::fcntl(child_fd, F_GETFD);
      ::fcntl(child_fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

namespace {

class EchoService final : public Echo::Service {
  grpc::Status Echo(grpc::ServerContext*, const EchoMessage* req, EchoMessage* resp) override {
    resp->set_payload(req->payload());
    return grpc::Status::OK;
  }
};

}  // namespace

int ServeEcho(const std::string& path) {
  EchoService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server) return 1;
  server->Wait();
  return 0;
}

Child StartEchoServer(const std::string& path) {
  Child child;
  child.pid = SpawnSelf({"--serve-echo", path}, -1);
  for (int i = 0; i < 500 && !std::filesystem::exists(path); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return child;
}

struct EchoClient::Impl {
  std::unique_ptr<Echo::Stub> stub;
  EchoMessage request;
  EchoMessage response;
};

EchoClient::EchoClient(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->stub =
      Echo::NewStub(grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  impl_->request.set_payload(std::string(64, 'x'));  // about the size of a broker request
}

EchoClient::~EchoClient() = default;

double EchoClient::Run() {
  grpc::ClientContext ctx;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = impl_->stub->Echo(&ctx, impl_->request, &impl_->response);
  const double us = ElapsedUs(t0);
  if (!st.ok()) throw std::runtime_error("echo failed: " + st.error_message());
  return us;
}

Child StartHandoverPeer() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  Child child;
  child.pid = SpawnSelf({"--serve-handover", std::to_string(sv[1])}, sv[1]);
  ::close(sv[1]);
  child.channel.reset(sv[0]);
  return child;
}

int ServeHandover(int fd) {
  for (;;) {
    uint64_t size = 0;
    std::vector<UniqueFd> fds;
    auto got = RecvSome(fd, reinterpret_cast<char*>(&size), sizeof(size), &fds);
    if (!got.ok() || got->eof || fds.empty()) return 0;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
    if (p == MAP_FAILED) return 1;
    static_cast<volatile char*>(p)[0] = 1;  // touch: the mapping is real
    ::munmap(p, size);
    fds.clear();
    const char ack = 1;
    if (::write(fd, &ack, 1) != 1) return 1;
  }
}

double RunHandover(Child& peer, uint64_t size) {
  const auto t0 = std::chrono::steady_clock::now();
  UniqueFd fd(::memfd_create("bench", MFD_CLOEXEC));
  if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    throw std::runtime_error("memfd failed");
  }
  auto sent =
      SendAll(peer.channel.get(),
              std::string_view(reinterpret_cast<const char*>(&size), sizeof(size)), fd.get());
  char ack = 0;
  if (!sent.ok() || ::read(peer.channel.get(), &ack, 1) != 1) {
    throw std::runtime_error("hand-over peer is gone");
  }
  return ElapsedUs(t0);
}

}  // namespace gpubroker::bench
