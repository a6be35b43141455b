// gpubroker-adversary: a client that does what a careless or hostile local
// user may do, for the adversarial tests. It is started as any uid (setpriv),
// reads one command per line on stdin and answers one line on stdout:
// "ok key=value ... [| first refusal]" or "err CODE message".
//
//   sessions N                open N raw sessions (Hello) and hold them
//   grpc N                    open N raw connections to gpubroker.sock and hold them
//   drop                      close every raw connection held
//   alloc N SIZE [share=T1,T2] [keep] [name=PREFIX]
//                             N allocations through the client library, held
//   release                   drop every buffer held
//   keep-in-arena             a session that keeps one byte in its tenant's arena (a buffer
//                             that outlives it) and leaves
//   pipeline NAME N           N Opens of NAME on one raw session, sent before reading any answer
//   fdflood N                 N requests for the session's pool descriptor, sent before reading
//   status                    Status through the client library, as JSON
//   list                      List through the client library, as JSON
//   token                     a raw session's token (hex); the session is held
//   grpc-token HEX            List over gRPC with someone's token: ok, or its status code
//   grpc-waits N NAME         N gRPC Opens of NAME with wait, no deadline and no timeout,
//                             sent at once over a few channels of one raw session; held
//   grpc-waits-done           how many of those have been answered, and how
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/paths.h"
#include "common/refusal.h"
#include "common/strings.h"
#include "common/token.h"
#include "common/unix_socket.h"
#include "gpubroker/client.hpp"
#include "gpubroker/v1/broker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/raw_session.h"

namespace {

using namespace std::chrono_literals;
using gpubroker::StrCat;
using gpubroker::testing::RawSession;

std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::map<std::string, std::string> Options(const std::vector<std::string>& w, size_t from) {
  std::map<std::string, std::string> out;
  for (size_t i = from; i < w.size(); ++i) {
    const auto eq = w[i].find('=');
    out[w[i].substr(0, eq)] = eq == std::string::npos ? "" : w[i].substr(eq + 1);
  }
  return out;
}

// One gRPC Open in flight, answered on one of gRPC's threads.
struct PendingOpen {
  grpc::ClientContext ctx;
  gpubroker::v1::OpenRequest req;
  gpubroker::v1::OpenResponse resp;
};

struct Waits {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<gpubroker::v1::Broker::Stub>> stubs;
  std::vector<std::unique_ptr<PendingOpen>> pending;
  std::mutex mu;
  std::map<std::string, int> answers;  // by status code name
  std::string first_error;
};

struct State {
  std::string dir;
  std::vector<RawSession> sessions;
  std::vector<gpubroker::UniqueFd> grpc;
  std::optional<gpubroker::Client> client;
  std::vector<gpubroker::Buffer> buffers;
  std::unique_ptr<Waits> waits;
};

// The HTTP/2 connection preface and an empty SETTINGS frame: enough for gRPC
// to take the connection as a client's.
const std::string kHttp2Hello = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                                std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);

std::string Sessions(State& st, int n) {
  int welcomed = 0, refused = 0, silent = 0;
  std::string first;
  for (int i = 0; i < n; ++i) {
    auto s = RawSession::Connect(st.dir);
    if (!s.ok()) {
      ++refused;
      if (first.empty()) first = std::string(s.status().message());
      continue;
    }
    const absl::Status hello = s->Hello(2s);
    if (hello.ok()) {
      ++welcomed;
      st.sessions.push_back(std::move(*s));
    } else if (hello.code() == absl::StatusCode::kDeadlineExceeded) {
      ++silent;
      st.sessions.push_back(std::move(*s));  // still waiting in the daemon's queue
    } else {
      ++refused;
      if (first.empty()) {
        first = StrCat(absl::StatusCodeToString(hello.code()), "/",
                       gpubroker::RefusalName(gpubroker::RefusalOf(hello)), " ", hello.message());
      }
    }
  }
  return StrCat("ok welcomed=", welcomed, " refused=", refused, " silent=", silent, " | ", first);
}

std::string Grpc(State& st, int n) {
  int failed = 0;
  std::vector<gpubroker::UniqueFd> opened;
  for (int i = 0; i < n; ++i) {
    auto fd = gpubroker::ConnectUnix(StrCat(st.dir, "/", gpubroker::kGrpcSocketName));
    if (!fd.ok() || !gpubroker::SendAll(fd->get(), kHttp2Hello).ok()) {
      ++failed;
      continue;
    }
    opened.push_back(std::move(*fd));
  }
  // A connection that the daemon turned away reads EOF (or a reset) soon.
  std::this_thread::sleep_for(300ms);
  int open = 0, closed = 0;
  char buf[4096];
  for (auto& fd : opened) {
    bool gone = false;
    for (;;) {
      const ssize_t r = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) continue;  // gRPC's SETTINGS
      gone = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    if (gone) {
      ++closed;
    } else {
      ++open;
      st.grpc.push_back(std::move(fd));
    }
  }
  return StrCat("ok open=", open, " closed=", closed, " failed=", failed);
}

std::string Alloc(State& st, const std::vector<std::string>& w) {
  if (!st.client) st.client = gpubroker::Client::connect(st.dir, {"adversary"});
  const int n = std::stoi(w.at(1));
  const uint64_t size = std::stoull(w.at(2));
  auto opts = Options(w, 3);
  int ok = 0, refused = 0;
  std::string first;
  for (int i = 0; i < n; ++i) {
    gpubroker::AllocateOptions ao;
    if (opts.count("share")) {
      std::istringstream list(opts["share"]);
      for (std::string t; std::getline(list, t, ',');) ao.share_with.push_back(t);
    }
    ao.keep = opts.count("keep") > 0;
    if (opts.count("name")) ao.name = StrCat(opts["name"], ".", i);
    try {
      // Published at once: a buffer the client made in its ranges is in the
      // daemon's books (and under its caps) from its publication on.
      gpubroker::Buffer b = st.client->allocate(size, ao);
      b.publish();
      st.buffers.push_back(std::move(b));
      ++ok;
    } catch (const gpubroker::Error& e) {
      ++refused;
      if (first.empty()) {
        first = StrCat(gpubroker::ErrorCodeName(e.code()), "/",
                       gpubroker::RefusalReasonName(e.reason()), " ", e.message());
      }
    }
  }
  return StrCat("ok ok=", ok, " refused=", refused, " | ", first);
}

std::string Pipeline(State& st, const std::string& name, int n) {
  auto s = RawSession::Connect(st.dir);
  if (!s.ok()) return StrCat("err UNAVAILABLE ", s.status().message());
  if (auto h = s->Hello(); !h.ok()) return StrCat("err UNAVAILABLE ", h.message());
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    gpubroker::v1::SessionFrame f;
    f.mutable_call()->set_request_id(1000 + i);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name(name);
    f.mutable_call()->mutable_open()->set_allow_unsealed(true);
    bytes += gpubroker::EncodeFrame(f);
  }
  if (auto sent = gpubroker::SendAll(s->fd(), bytes); !sent.ok()) {
    return StrCat("err UNAVAILABLE ", sent.message());
  }
  int replies = 0, errors = 0;
  bool in_order = true;
  for (int i = 0; i < n; ++i) {
    auto f = s->Read(10s);
    if (!f.ok() || !f->has_value()) break;
    const uint64_t id = (*f)->has_reply() ? (*f)->reply().request_id() : (*f)->error().request_id();
    if (id != static_cast<uint64_t>(1000 + i)) in_order = false;
    ((*f)->has_reply() ? replies : errors)++;
  }
  // Still a session: one more call is answered.
  gpubroker::v1::Call call;
  call.mutable_open()->mutable_ref()->set_name(name);
  call.mutable_open()->set_allow_unsealed(true);
  const bool alive = s->Call(call, 5s).ok();
  st.sessions.push_back(std::move(*s));
  return StrCat("ok replies=", replies, " errors=", errors, " inorder=", in_order ? 1 : 0,
                " alive=", alive ? 1 : 0);
}

std::string FdFlood(State& st, int n) {
  auto s = RawSession::Connect(st.dir);
  if (!s.ok()) return StrCat("err UNAVAILABLE ", s.status().message());
  if (auto h = s->Hello(); !h.ok()) return StrCat("err UNAVAILABLE ", h.message());
  gpubroker::v1::Call call;
  call.mutable_allocate()->set_size(4096);
  auto allocated = s->Call(call);
  if (!allocated.ok()) return StrCat("err INTERNAL ", allocated.status().message());
  const uint64_t pool = allocated->allocate().import().region_id();
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    gpubroker::v1::SessionFrame f;
    f.mutable_fd_request()->set_request_id(5000 + i);
    f.mutable_fd_request()->set_region_id(pool);
    bytes += gpubroker::EncodeFrame(f);
  }
  if (auto sent = gpubroker::SendAll(s->fd(), bytes); !sent.ok()) {
    return StrCat("err UNAVAILABLE ", sent.message());
  }
  int grants = 0;
  size_t fds = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<gpubroker::UniqueFd> got;
    auto f = s->Read(10s, &got);
    if (!f.ok() || !f->has_value()) break;
    if ((*f)->has_fd_grant() && (*f)->fd_grant().request_id() == static_cast<uint64_t>(5000 + i)) {
      ++grants;
    }
    fds += got.size();  // closed at once: this process has its own limit
  }
  st.sessions.push_back(std::move(*s));
  return StrCat("ok grants=", grants, " fds=", fds);
}

std::string GrpcWaits(State& st, int n, const std::string& name) {
  auto s = RawSession::Connect(st.dir);
  if (!s.ok()) return StrCat("err UNAVAILABLE ", s.status().message());
  if (auto h = s->Hello(); !h.ok()) return StrCat("err UNAVAILABLE ", h.message());
  const std::string token = s->token_hex();
  st.sessions.push_back(std::move(*s));
  if (!st.waits) st.waits = std::make_unique<Waits>();
  Waits& w = *st.waits;
  constexpr int kChannels = 4;
  for (int i = 0; i < kChannels; ++i) {
    // Each its own connection (a channel argument that differs keeps gRPC from sharing one).
    grpc::ChannelArguments args;
    args.SetInt("gpubroker.adversary.channel", i);
    w.channels.push_back(
        grpc::CreateCustomChannel(StrCat("unix:", st.dir, "/", gpubroker::kGrpcSocketName),
                                  grpc::InsecureChannelCredentials(), args));
    w.stubs.push_back(gpubroker::v1::Broker::NewStub(w.channels.back()));
  }
  for (int i = 0; i < n; ++i) {
    auto p = std::make_unique<PendingOpen>();
    p->ctx.AddMetadata(gpubroker::kTokenMetadataKey, token);  // and no deadline
    p->req.mutable_ref()->set_name(name);
    p->req.set_wait(true);
    PendingOpen* raw = p.get();
    w.pending.push_back(std::move(p));
    w.stubs[i % kChannels]->async()->Open(
        &raw->ctx, &raw->req, &raw->resp, [&w](grpc::Status status) {
          std::lock_guard lock(w.mu);
          const std::string code =
              gpubroker::ErrorCodeName(static_cast<gpubroker::ErrorCode>(status.error_code()));
          w.answers[code]++;
          if (!status.ok() && w.first_error.empty()) {
            w.first_error = status.error_message();
          }
        });
  }
  std::this_thread::sleep_for(1s);  // refusals, if any, come within this
  std::lock_guard lock(w.mu);
  int answered = 0;
  for (const auto& [code, count] : w.answers) answered += count;
  return StrCat("ok sent=", n, " answered=", answered, " | ", w.first_error);
}

std::string GrpcWaitsDone(State& st) {
  if (!st.waits) return "ok answered=0";
  std::lock_guard lock(st.waits->mu);
  int answered = 0;
  std::string codes;
  for (const auto& [code, count] : st.waits->answers) {
    answered += count;
    codes += StrCat(" ", code, "=", count);
  }
  return StrCat("ok answered=", answered, codes, " | ", st.waits->first_error);
}

std::string Run(State& st, const std::string& line) {
  const auto w = Words(line);
  if (w.empty()) return "err INVALID_ARGUMENT empty command";
  const std::string& cmd = w[0];
  if (cmd == "sessions") return Sessions(st, std::stoi(w.at(1)));
  if (cmd == "grpc") return Grpc(st, std::stoi(w.at(1)));
  if (cmd == "drop") {
    st.sessions.clear();
    st.grpc.clear();
    return "ok";
  }
  if (cmd == "alloc") return Alloc(st, w);
  if (cmd == "release") {
    st.buffers.clear();
    return "ok";
  }
  if (cmd == "keep-in-arena") {
    auto client = gpubroker::Client::connect(st.dir, {"adversary"});
    gpubroker::AllocateOptions keep;
    keep.keep = true;
    client.allocate(1, keep).release();
    return "ok";
  }
  if (cmd == "pipeline") return Pipeline(st, w.at(1), std::stoi(w.at(2)));
  if (cmd == "fdflood") return FdFlood(st, std::stoi(w.at(1)));
  if (cmd == "status" || cmd == "list") {
    if (!st.client) st.client = gpubroker::Client::connect(st.dir, {"adversary"});
    return "ok " + (cmd == "status" ? gpubroker::ToJson(st.client->status())
                                    : gpubroker::ToJson(st.client->list()));
  }
  if (cmd == "token") {
    auto s = RawSession::Connect(st.dir);
    if (!s.ok()) return StrCat("err UNAVAILABLE ", s.status().message());
    if (auto h = s->Hello(); !h.ok()) return StrCat("err UNAVAILABLE ", h.message());
    const std::string hex = s->token_hex();
    st.sessions.push_back(std::move(*s));
    return "ok " + hex;
  }
  if (cmd == "grpc-waits") return GrpcWaits(st, std::stoi(w.at(1)), w.at(2));
  if (cmd == "grpc-waits-done") return GrpcWaitsDone(st);
  if (cmd == "grpc-token") {
    auto stub = gpubroker::v1::Broker::NewStub(
        grpc::CreateChannel(StrCat("unix:", st.dir, "/", gpubroker::kGrpcSocketName),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata(gpubroker::kTokenMetadataKey, w.at(1));
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    gpubroker::v1::ListResponse resp;
    const grpc::Status s = stub->List(&ctx, gpubroker::v1::ListRequest(), &resp);
    if (s.ok()) return StrCat("ok buffers=", resp.buffers_size());
    return StrCat("err ",
                  gpubroker::ErrorCodeName(static_cast<gpubroker::ErrorCode>(s.error_code())), " ",
                  s.error_message());
  }
  return "err INVALID_ARGUMENT unknown command " + cmd;
}

}  // namespace

int main(int argc, char** argv) {
  State st;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--socket-dir") st.dir = argv[++i];
  }
  if (st.dir.empty()) {
    std::cerr << "usage: gpubroker-adversary --socket-dir DIR\n";
    return 2;
  }
  std::cout << "ok ready " << ::getpid() << " uid " << ::getuid() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "exit") {
      std::cout << "ok" << std::endl;
      break;
    }
    std::string reply;
    try {
      reply = Run(st, line);
    } catch (const gpubroker::Error& e) {
      reply = StrCat("err ", gpubroker::ErrorCodeName(e.code()), " ", e.message());
    } catch (const std::exception& e) {
      reply = StrCat("err INVALID_ARGUMENT ", e.what());
    }
    std::cout << reply << std::endl;
  }
  st.buffers.clear();
  return 0;
}
