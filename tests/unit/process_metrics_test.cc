#include "daemon/metrics/process_metrics.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace gpubroker {
namespace {

// A real line's shape (proc(5)), with a command name that holds what would
// break a naive split: spaces, parentheses and a digit run.
constexpr const char* kStat =
    "4242 (gpu broker) (2) S 1 4242 4242 0 -1 4194560 1234 0 5 0 "
    "150 75 0 0 20 0 17 0 98765 1099511627776 5120 18446744073709551615 1 1 0 0 0 0 0 4096 "
    "0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

TEST(ProcStat, ReadsTheFieldsAfterTheLastParenthesis) {
  auto s = ParseProcStat(kStat);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->utime_ticks, 150u);
  EXPECT_EQ(s->stime_ticks, 75u);
  EXPECT_EQ(s->num_threads, 17u);
  EXPECT_EQ(s->start_ticks, 98765u);
  EXPECT_EQ(s->vsize_bytes, uint64_t{1} << 40);
  EXPECT_EQ(s->rss_pages, 5120u);
}

TEST(ProcStat, RefusesTruncatedAndNamelessLines) {
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2 3").ok());
  EXPECT_FALSE(
      ParseProcStat("4242 x S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21").ok());
  EXPECT_FALSE(ParseProcStat("").ok());
}

TEST(ProcStat, BootTimeComesFromTheBtimeLine) {
  auto t = ParseBootTime("cpu  1 2 3\nintr 5\nctxt 9\nbtime 1700000000\nprocesses 77\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 1700000000u);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").ok());
}

TEST(ProcessSample, OfThisProcessIsPlausible) {
  auto s = ReadSelfProcessSample();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->resident_bytes, 0u);
  EXPECT_GE(s->virtual_bytes, s->resident_bytes);
  EXPECT_GE(s->open_fds, 3u);  // stdin, stdout, stderr
  EXPECT_GE(s->threads, 1u);
  EXPECT_GT(s->start_time_seconds, 1.5e9);
  EXPECT_LE(s->start_time_seconds, static_cast<double>(::time(nullptr)) + 1);
}

TEST(ProcessFamilies, AnUnlimitedLimitHasNoSeries) {
  ProcessSample s;
  s.max_fds = 1024;
  auto names = [](const std::vector<prometheus::MetricFamily>& fs) {
    std::vector<std::string> out;
    for (const auto& f : fs) out.push_back(f.name);
    return out;
  };
  const auto with = names(ProcessFamilies(s));
  EXPECT_NE(std::find(with.begin(), with.end(), "process_max_fds"), with.end());
  EXPECT_EQ(std::find(with.begin(), with.end(), "process_virtual_memory_max_bytes"), with.end());
  s.max_fds.reset();
  const auto without = names(ProcessFamilies(s));
  EXPECT_EQ(std::find(without.begin(), without.end(), "process_max_fds"), without.end());
  for (const auto& f : ProcessFamilies(s)) {
    if (f.name == "process_cpu_seconds_total") {
      EXPECT_EQ(f.type, prometheus::MetricType::Counter);
    } else {
      EXPECT_EQ(f.type, prometheus::MetricType::Gauge) << f.name;
    }
  }
}

}  // namespace
}  // namespace gpubroker
