#include "daemon/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace gpubroker {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::UnavailableError(StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<uint64_t> Limit(int resource) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(r.rlim_cur);
}

absl::StatusOr<uint64_t> CountOpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::UnavailableError(StrCat("cannot list /proc/self/fd: ", std::strerror(errno)));
  }
  uint64_t n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

MetricFamily One(const char* name, const char* help, MetricType type, double value) {
  ClientMetric m;
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return MetricFamily{name, help, type, {m}};
}

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(std::string_view text) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) {
    return absl::InvalidArgumentError("no ')' after the command name");
  }
  std::vector<std::string_view> fields;  // fields[0] is field 3 of proc(5), the state
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty()) {
    const size_t start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const size_t end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  auto field = [&](size_t number, auto* out) {
    return number - 3 < fields.size() && ParseInt(fields[number - 3], out);
  };
  ProcStat s;
  int64_t rss = 0;
  if (!field(14, &s.utime_ticks) || !field(15, &s.stime_ticks) || !field(20, &s.num_threads) ||
      !field(22, &s.start_ticks) || !field(23, &s.vsize_bytes) || !field(24, &rss)) {
    return absl::InvalidArgumentError(StrCat("a /proc stat line of ", fields.size() + 2,
                                             " fields lacks one of utime, stime, num_threads, "
                                             "starttime, vsize, rss"));
  }
  s.rss_pages = rss > 0 ? static_cast<uint64_t>(rss) : 0;
  return s;
}

absl::StatusOr<uint64_t> ParseBootTime(std::string_view proc_stat) {
  size_t pos = 0;
  while (pos < proc_stat.size()) {
    size_t end = proc_stat.find('\n', pos);
    if (end == std::string_view::npos) end = proc_stat.size();
    const std::string_view line = proc_stat.substr(pos, end - pos);
    if (line.starts_with("btime ")) {
      uint64_t t = 0;
      if (ParseInt(Trim(line.substr(6)), &t)) return t;
      break;
    }
    pos = end + 1;
  }
  return absl::InvalidArgumentError("/proc/stat has no btime line");
}

absl::StatusOr<ProcessSample> ReadSelfProcessSample() {
  auto stat_text = ReadFile("/proc/self/stat");
  if (!stat_text.ok()) return stat_text.status();
  auto stat = ParseProcStat(*stat_text);
  if (!stat.ok()) return stat.status();
  // The boot time does not change while we run: read it once.
  static const absl::StatusOr<uint64_t> boot = []() -> absl::StatusOr<uint64_t> {
    auto text = ReadFile("/proc/stat");
    if (!text.ok()) return text.status();
    return ParseBootTime(*text);
  }();
  if (!boot.ok()) return boot.status();
  auto fds = CountOpenFds();
  if (!fds.ok()) return fds.status();

  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  ProcessSample s;
  s.cpu_seconds = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks;
  s.resident_bytes = stat->rss_pages * page;
  s.virtual_bytes = stat->vsize_bytes;
  s.virtual_max_bytes = Limit(RLIMIT_AS);
  s.open_fds = *fds;
  s.max_fds = Limit(RLIMIT_NOFILE);
  s.start_time_seconds =
      static_cast<double>(*boot) + static_cast<double>(stat->start_ticks) / ticks;
  s.threads = stat->num_threads;
  return s;
}

std::vector<MetricFamily> ProcessFamilies(const ProcessSample& s) {
  std::vector<MetricFamily> out;
  out.push_back(One("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                    MetricType::Counter, s.cpu_seconds));
  out.push_back(One("process_resident_memory_bytes", "Resident memory size in bytes.",
                    MetricType::Gauge, static_cast<double>(s.resident_bytes)));
  out.push_back(One("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                    MetricType::Gauge, static_cast<double>(s.virtual_bytes)));
  if (s.virtual_max_bytes) {
    out.push_back(One("process_virtual_memory_max_bytes",
                      "Maximum amount of virtual memory available in bytes.", MetricType::Gauge,
                      static_cast<double>(*s.virtual_max_bytes)));
  }
  out.push_back(One("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
                    static_cast<double>(s.open_fds)));
  if (s.max_fds) {
    out.push_back(One("process_max_fds", "Maximum number of open file descriptors.",
                      MetricType::Gauge, static_cast<double>(*s.max_fds)));
  }
  out.push_back(One("process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
                    s.start_time_seconds));
  out.push_back(One("process_threads", "Number of OS threads in the process.", MetricType::Gauge,
                    static_cast<double>(s.threads)));
  return out;
}

std::vector<MetricFamily> ProcessCollector::Collect() const {
  auto sample = ReadSelfProcessSample();
  // A scrape still serves the broker's own metrics when /proc cannot be read
  // (a hardened mount); the process families are then absent, not zero.
  if (!sample.ok()) return {};
  return ProcessFamilies(*sample);
}

}  // namespace gpubroker
