#include "bench/daemon_calls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "common/strings.h"
#include "common/unique_fd.h"

namespace gpubroker::bench {
namespace {

constexpr const char* kFamily = "gpubroker_session_call_duration_seconds";

// GET /metrics over HTTP/1.0; empty when the daemon does not answer.
std::string Fetch(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(address.substr(colon + 1).c_str())));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) return "";
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "";
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  if (::write(fd.get(), req.data(), req.size()) != static_cast<ssize_t>(req.size())) return "";
  std::string response;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;) response.append(buf, n);
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace

DaemonCalls::DaemonCalls(std::string metrics_address) : address_(std::move(metrics_address)) {}

std::map<std::string, DaemonCalls::Total> DaemonCalls::Read() const {
  std::map<std::string, Total> out;
  if (address_.empty()) return out;
  std::istringstream in(Fetch(address_));
  const std::string sum = StrCat(kFamily, "_sum{call=\"");
  const std::string count = StrCat(kFamily, "_count{call=\"");
  for (std::string line; std::getline(in, line);) {
    const bool is_sum = line.rfind(sum, 0) == 0;
    if (!is_sum && line.rfind(count, 0) != 0) continue;
    const size_t from = is_sum ? sum.size() : count.size();
    const size_t quote = line.find('"', from);
    const size_t space = line.rfind(' ');
    if (quote == std::string::npos || space == std::string::npos) continue;
    const double value = std::strtod(line.c_str() + space + 1, nullptr);
    Total& t = out[line.substr(from, quote - from)];
    (is_sum ? t.seconds : t.count) = value;
  }
  return out;
}

void DaemonCalls::Mark() { marked_ = Read(); }

void DaemonCalls::AddRows(std::deque<Samples>& results, const std::string& prefix) const {
  for (const auto& [call, now] : Read()) {
    Total before;
    if (auto it = marked_.find(call); it != marked_.end()) before = it->second;
    const double n = now.count - before.count;
    if (n <= 0) continue;
    Samples& s = results.emplace_back();
    s.name = StrCat(prefix, call, " (mean of ", static_cast<uint64_t>(n), ")");
    s.us.push_back((now.seconds - before.seconds) / n * 1e6);
  }
}

}  // namespace gpubroker::bench
