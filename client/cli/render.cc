#include "client/cli/render.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <sstream>

#include "common/strings.h"
#include "common/units.h"

namespace gpubroker::cli {
namespace {

std::string Duration(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return StrCat(s, "s");
  if (s < 7200) return StrCat(s / 60, "m");
  if (s < 172800) return StrCat(s / 3600, "h");
  return StrCat(s / 86400, "d");
}

std::string Tensor(const std::optional<TensorDesc>& t) {
  if (!t) return "-";
  std::string out = StrCat(DTypeName(t->dtype), "[");
  for (size_t i = 0; i < t->shape.size(); ++i) StrAppend(&out, i ? "," : "", t->shape[i]);
  return out + "]";
}

// "[#######-------------]  35%"; empty when there is nothing to measure against.
std::string Bar(uint64_t part, uint64_t whole) {
  if (whole == 0) return "";
  constexpr int kWidth = 20;
  const double share = std::min(1.0, static_cast<double>(part) / static_cast<double>(whole));
  const int filled = static_cast<int>(share * kWidth + 0.5);
  const int percent = static_cast<int>(share * 100 + 0.5);
  return StrCat("[", std::string(filled, '#'), std::string(kWidth - filled, '-'), "] ",
                std::string(percent < 10    ? 2
                            : percent < 100 ? 1
                                            : 0,
                            ' '),
                percent, "%");
}

std::string Quota(uint64_t quota) { return quota ? FormatBytes(quota) : "unlimited"; }

}  // namespace

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

void PrintStatus(std::ostream& out, const BrokerStatus& s) {
  out << "gpubrokerd " << s.version << ", backend " << s.backend << ", up "
      << Duration(NowMs() - s.started_unix_ms) << ", " << s.sessions << " sessions, " << s.buffers
      << " buffers\n"
      << "sockets " << s.socket_dir << ", metrics "
      << (s.metrics_address.empty() ? "off" : s.metrics_address) << "\n"
      << "this session: " << s.self_session_id << ", tenant " << s.self_tenant << "\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"DEVICE", "NAME", "CAPACITY", "RESERVED", "USED", "FREE", "BUFFERS"}};
  for (const auto& d : s.devices) {
    rows.push_back({StrCat(d.ordinal, " ", d.uuid), d.name, FormatBytes(d.capacity_bytes),
                    FormatBytes(d.reserved_bytes), FormatBytes(d.used_bytes),
                    FormatBytes(d.free_bytes), StrCat(d.buffers)});
  }
  PrintTable(out, rows);
  out << "\n";
  rows = {{"TENANT", "QUOTA", "USED", "BUFFERS", "SESSIONS"}};
  for (const auto& t : s.tenants) {
    rows.push_back({t.name, Quota(t.quota_bytes), FormatBytes(t.used_bytes), StrCat(t.buffers),
                    StrCat(t.sessions)});
  }
  PrintTable(out, rows);
  if (!s.all_tenants) {
    out << "(this tenant only: root and the daemon's admin group see every tenant)\n";
  }
}

void PrintBuffers(std::ostream& out, const std::vector<BufferInfo>& buffers) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "SIZE", "DEVICE", "BACKING",
                                                 "TENANT", "STATE", "LEASES", "KEEP", "TTL",
                                                 "TENSOR"}};
  const int64_t now = NowMs();
  for (const auto& b : buffers) {
    rows.push_back(
        {StrCat(b.id), b.name.empty() ? "-" : b.name, FormatBytes(b.size), b.device_uuid,
         b.backing.empty() ? "-" : b.backing, b.tenant, std::string(BufferStateName(b.state)),
         StrCat(b.leases), b.keep ? "yes" : "no",
         b.expires_unix_ms ? Duration(std::max<int64_t>(0, b.expires_unix_ms - now)) : "-",
         Tensor(b.tensor)});
  }
  PrintTable(out, rows);
}

std::string TopFrame(const BrokerStatus& s, std::vector<BufferInfo> buffers, size_t max_buffers) {
  std::ostringstream out;
  const std::time_t now = std::time(nullptr);
  char clock[32];
  std::strftime(clock, sizeof(clock), "%H:%M:%S", std::localtime(&now));
  out << "gpubrokerd " << s.version << "  backend " << s.backend << "  up "
      << Duration(NowMs() - s.started_unix_ms) << "  sessions " << s.sessions << "  buffers "
      << s.buffers << "  " << clock << "\n\n";

  std::vector<std::vector<std::string>> rows = {
      {"DEVICE", "NAME", "USED", "RESERVED", "CAPACITY", "FREE", "BUFFERS", "USED/CAPACITY"}};
  for (const auto& d : s.devices) {
    rows.push_back({StrCat(d.ordinal, " ", d.uuid), d.name, FormatBytes(d.used_bytes),
                    FormatBytes(d.reserved_bytes), FormatBytes(d.capacity_bytes),
                    FormatBytes(d.free_bytes), StrCat(d.buffers),
                    Bar(d.used_bytes, d.capacity_bytes)});
  }
  PrintTable(out, rows);
  out << "\n";

  rows = {{"TENANT", "USED", "QUOTA", "BUFFERS", "SESSIONS", "USED/QUOTA"}};
  for (const auto& t : s.tenants) {
    rows.push_back({t.name, FormatBytes(t.used_bytes), Quota(t.quota_bytes), StrCat(t.buffers),
                    StrCat(t.sessions), Bar(t.used_bytes, t.quota_bytes)});
  }
  PrintTable(out, rows);
  if (!s.all_tenants) out << "(this tenant only)\n";
  out << "\n";

  std::sort(buffers.begin(), buffers.end(), [](const BufferInfo& a, const BufferInfo& b) {
    return a.size != b.size ? a.size > b.size : a.id < b.id;
  });
  const size_t shown = std::min(buffers.size(), max_buffers);
  out << "LARGEST BUFFERS (" << shown << " of " << buffers.size() << " visible)\n";
  rows = {{"ID", "NAME", "SIZE", "DEVICE", "TENANT", "STATE", "LEASES", "AGE"}};
  const int64_t now_ms = NowMs();
  for (size_t i = 0; i < shown; ++i) {
    const BufferInfo& b = buffers[i];
    rows.push_back({StrCat(b.id), b.name.empty() ? "-" : b.name, FormatBytes(b.size), b.device_uuid,
                    b.tenant, std::string(BufferStateName(b.state)), StrCat(b.leases),
                    Duration(std::max<int64_t>(0, now_ms - b.created_unix_ms))});
  }
  PrintTable(out, rows);
  return out.str();
}

}  // namespace gpubroker::cli
