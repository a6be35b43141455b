#include "bench/report.h"

#include <sys/utsname.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

namespace gpubroker::bench {

void Report(const std::string& title, const std::vector<Samples>& results, bool json,
            nlohmann::json facts, const std::string& json_out) {
  utsname u{};
  ::uname(&u);
  facts["host"] = {{"kernel", u.release}, {"cpus", std::thread::hardware_concurrency()}};
  facts["title"] = title;
  for (const auto& s : results) {
    if (s.us.empty() && s.per_second == 0) continue;  // a case this run did not take
    nlohmann::json r = {
        {"name", s.name}, {"p50_us", s.p50()}, {"p99_us", s.p99()}, {"n", s.us.size()}};
    if (s.baseline_us > 0) {
      r["baseline"] = s.baseline;
      r["baseline_p50_us"] = s.baseline_us;
      r["ratio_p50"] = s.p50() / s.baseline_us;
    }
    if (!s.series.empty()) {
      r["series"] = s.series;
      r["size_bytes"] = s.size_bytes;
    }
    if (s.per_second > 0) {
      r["per_second"] = s.per_second;
      r["processes"] = s.processes;
      if (s.baseline_per_second > 0) {
        r["baseline"] = s.baseline;
        r["baseline_per_second"] = s.baseline_per_second;
        r["ratio_rate"] = s.per_second / s.baseline_per_second;
      }
    }
    facts["results"].push_back(r);
  }
  if (!json_out.empty()) std::ofstream(json_out) << facts.dump(2) << "\n";
  if (json) {
    std::cout << facts.dump(2) << "\n";
    return;
  }
  std::printf("%s, %u cpus, kernel %s\n\n", title.c_str(), std::thread::hardware_concurrency(),
              u.release);
  std::printf("%-72s %10s %10s %11s   %-40s %8s\n", "case", "p50 us", "p99 us", "per second",
              "baseline", "ratio");
  for (const auto& s : results) {
    if (s.us.empty() && s.per_second == 0) continue;
    std::string base = "-";
    std::string ratio = "-";
    std::string rate = "-";
    char buf[128];
    if (s.per_second > 0) {
      std::snprintf(buf, sizeof(buf), "%.0f", s.per_second);
      rate = buf;
    }
    if (s.per_second > 0 && s.baseline_per_second > 0) {
      std::snprintf(buf, sizeof(buf), "%s (%.0f/s)", s.baseline.c_str(), s.baseline_per_second);
      base = buf;
      std::snprintf(buf, sizeof(buf), "%.2fx", s.per_second / s.baseline_per_second);
      ratio = buf;
    } else if (s.baseline_us > 0) {
      std::snprintf(buf, sizeof(buf), "%s (%.1f)", s.baseline.c_str(), s.baseline_us);
      base = buf;
      std::snprintf(buf, sizeof(buf), "%.2fx", s.p50() / s.baseline_us);
      ratio = buf;
    }
    std::printf("%-72s %10.1f %10.1f %11s   %-40s %8s\n", s.name.c_str(), s.p50(), s.p99(),
                rate.c_str(), base.c_str(), ratio.c_str());
  }
}

}  // namespace gpubroker::bench
