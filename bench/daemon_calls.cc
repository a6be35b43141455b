#include "bench/daemon_calls.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/http_get.h"
#include "common/strings.h"

namespace gpubroker::bench {
namespace {

constexpr const char* kFamily = "gpubroker_session_call_duration_seconds";
constexpr const char* kTurns = "gpubroker_session_turns_total{thread=\"";
constexpr const char* kPolled = "gpubroker_session_busy_poll_seconds_total ";
constexpr const char* kWindow = "gpubroker_session_busy_poll_window_seconds ";
// The daemon reports its thread's turns when the thread goes to sleep and at
// each 0.1 s sweep; one that polls through a whole case (a long
// --busy-poll-us) has reported none of them until the next sweep.
constexpr auto kTurnsLag = std::chrono::milliseconds(120);

}  // namespace

DaemonCalls::DaemonCalls(std::string metrics_address) : address_(std::move(metrics_address)) {}

DaemonCalls::Reading DaemonCalls::Read() const {
  Reading out;
  if (address_.empty()) return out;
  std::this_thread::sleep_for(kTurnsLag);
  out.at = std::chrono::steady_clock::now();
  std::istringstream in(HttpGet(address_, "/metrics"));
  const std::string sum = StrCat(kFamily, "_sum{call=\"");
  const std::string count = StrCat(kFamily, "_count{call=\"");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kTurns, 0) == 0) {
      const size_t space = line.rfind(' ');
      if (space == std::string::npos) continue;
      const bool asleep = line.compare(std::strlen(kTurns), 6, "asleep") == 0;
      (asleep ? out.turns_asleep : out.turns_polling) =
          std::strtod(line.c_str() + space + 1, nullptr);
      continue;
    }
    if (line.rfind(kPolled, 0) == 0) {
      out.polled_seconds = std::strtod(line.c_str() + std::strlen(kPolled), nullptr);
      continue;
    }
    if (line.rfind(kWindow, 0) == 0) {
      out.window_seconds = std::strtod(line.c_str() + std::strlen(kWindow), nullptr);
      continue;
    }
    const bool is_sum = line.rfind(sum, 0) == 0;
    if (!is_sum && line.rfind(count, 0) != 0) continue;
    const size_t from = is_sum ? sum.size() : count.size();
    const size_t quote = line.find('"', from);
    const size_t space = line.rfind(' ');
    if (quote == std::string::npos || space == std::string::npos) continue;
    const double value = std::strtod(line.c_str() + space + 1, nullptr);
    Total& t = out.calls[line.substr(from, quote - from)];
    (is_sum ? t.seconds : t.count) = value;
  }
  return out;
}

void DaemonCalls::Mark() { marked_ = Read(); }

std::string DaemonCalls::AddRows(std::deque<Samples>& results, const std::string& prefix) const {
  const Reading now = Read();
  for (const auto& [call, total] : now.calls) {
    Total before;
    if (auto it = marked_.calls.find(call); it != marked_.calls.end()) before = it->second;
    const double n = total.count - before.count;
    if (n <= 0) continue;
    Samples& s = results.emplace_back();
    s.name = StrCat(prefix, call, " (mean of ", static_cast<uint64_t>(n), ")");
    s.us.push_back((total.seconds - before.seconds) / n * 1e6);
  }
  const double asleep = now.turns_asleep - marked_.turns_asleep;
  const double all = asleep + now.turns_polling - marked_.turns_polling;
  if (all <= 0) return "";
  const double wall = std::chrono::duration<double>(now.at - marked_.at).count();
  char cost[128];
  std::snprintf(cost, sizeof(cost),
                "; the daemon polled idle %.2f s of %.2f s, its busy poll's window now %.0f us",
                now.polled_seconds - marked_.polled_seconds, wall, now.window_seconds * 1e6);
  return StrCat(static_cast<uint64_t>(asleep), " of ", static_cast<uint64_t>(all), cost);
}

}  // namespace gpubroker::bench
