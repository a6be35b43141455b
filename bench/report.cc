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
    nlohmann::json r = {
        {"name", s.name}, {"p50_us", s.p50()}, {"p99_us", s.p99()}, {"n", s.us.size()}};
    if (s.baseline_us > 0) {
      r["baseline"] = s.baseline;
      r["baseline_p50_us"] = s.baseline_us;
      r["ratio_p50"] = s.p50() / s.baseline_us;
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
  std::printf("%-64s %10s %10s   %-38s %8s\n", "case", "p50 us", "p99 us", "baseline (p50 us)",
              "ratio");
  for (const auto& s : results) {
    std::string base = "-";
    std::string ratio = "-";
    if (s.baseline_us > 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s (%.1f)", s.baseline.c_str(), s.baseline_us);
      base = buf;
      std::snprintf(buf, sizeof(buf), "%.2fx", s.p50() / s.baseline_us);
      ratio = buf;
    }
    std::printf("%-64s %10.1f %10.1f   %-38s %8s\n", s.name.c_str(), s.p50(), s.p99(), base.c_str(),
                ratio.c_str());
  }
}

}  // namespace gpubroker::bench
