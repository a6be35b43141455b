#include "tests/adversarial/adversary.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace gpubroker::testing {

Adversary::Adversary(const std::string& socket_dir, int uid, const std::vector<gid_t>& groups) {
  std::vector<std::string> argv = {BinDir() + "/gpubroker-adversary", "--socket-dir", socket_dir};
  if (uid >= 0) argv = AsUser(static_cast<uid_t>(uid), argv, groups);
  process_ = Process::Spawn(argv);
  auto line = process_.ReadLine(std::chrono::seconds(20));
  ok_ = line && line->rfind("ok ready", 0) == 0;
  EXPECT_TRUE(ok_) << "adversary did not start: " << line.value_or("(nothing)");
}

Adversary::~Adversary() {
  process_.WriteLine("exit");
  process_.CloseStdin();
  if (process_.Wait(std::chrono::seconds(20)) == -1) process_.Signal(SIGKILL);
}

std::string Adversary::Send(const std::string& command, std::chrono::milliseconds timeout) {
  process_.WriteLine(command);
  return process_.ReadLine(timeout).value_or("");
}

std::map<std::string, std::string> Fields(const std::string& reply) {
  std::map<std::string, std::string> out;
  std::string head = reply;
  if (auto bar = reply.find(" | "); bar != std::string::npos) {
    out["|"] = reply.substr(bar + 3);
    head = reply.substr(0, bar);
  }
  std::istringstream in(head);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

long Field(const std::string& reply, const std::string& key) {
  auto f = Fields(reply);
  auto it = f.find(key);
  return it == f.end() ? -1 : std::stol(it->second);
}

int RunCli(const std::string& socket_dir, std::vector<std::string> args, std::string* output) {
  const std::string err = socket_dir + "/cli.stderr";
  std::filesystem::remove(err);
  args.insert(args.begin(), {BinDir() + "/gpubroker", "--socket-dir", socket_dir});
  Process p = Process::Spawn(args, err);
  p.CloseStdin();
  output->clear();
  while (auto line = p.ReadLine(std::chrono::seconds(20))) *output += *line + "\n";
  const int code = p.Wait(std::chrono::seconds(20));
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  *output += s.str();
  return code;
}

std::unique_ptr<v1::Broker::Stub> BrokerStub(const std::string& socket_dir) {
  return v1::Broker::NewStub(grpc::CreateChannel("unix:" + socket_dir + "/gpubroker.sock",
                                                 grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> CallContext(const std::string& token_hex,
                                                 std::chrono::milliseconds deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("gpubroker-token", token_hex);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

bool CanSwitchUsers() { return IsRoot() && std::filesystem::exists("/usr/bin/setpriv"); }

}  // namespace gpubroker::testing
