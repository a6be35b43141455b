#include "bench/batch_open.h"

#include <unistd.h>

#include <vector>

#include "common/strings.h"
#include "common/units.h"
#include "gpubroker/client.hpp"

namespace gpubroker::bench {
namespace {

// Opens every name and reads each buffer's first byte; releases outside the time.
double OpenAll(Client& consumer, const std::vector<std::string>& names, bool posted) {
  std::vector<Buffer> opened;
  opened.reserve(names.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (posted) {
    for (const std::string& name : names) opened.push_back(consumer.open_posted(name));
  } else {
    for (const std::string& name : names) opened.push_back(consumer.open(name));
  }
  for (const Buffer& b : opened) {
    if (b.data() == nullptr) throw std::runtime_error("a batch open found no memory");
  }
  return ElapsedUs(t0);
}

}  // namespace

void AddBatchOpenCases(const std::string& dir, uint64_t size, int count, int warmup, int iterations,
                       std::deque<Samples>& results) {
  auto producer = Client::connect(dir, {"bench-batch-producer"});
  auto consumer = Client::connect(dir, {"bench-batch-consumer"});
  std::vector<Buffer> made;
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    AllocateOptions o;
    o.name = StrCat("bench.batch.", ::getpid(), ".", i);
    made.push_back(producer.allocate(size, o));
    made.back().seal();
    names.push_back(o.name);
  }
  const std::string what = StrCat(count, " buffers of ", FormatBytes(size));
  Samples& posted = results.emplace_back();
  posted.name = StrCat("batch open: ", what, ", every open posted, then used");
  posted.baseline = "one by one";
  Samples& one_by_one = results.emplace_back();
  one_by_one.name = StrCat("  the same, one open after another");
  for (int i = 0; i < warmup + iterations; ++i) {
    const bool keep = i >= warmup;
    const bool posted_first = i % 2 == 0;  // each first in turn
    for (int k = 0; k < 2; ++k) {
      const bool post = (k == 0) == posted_first;
      const double us = OpenAll(consumer, names, post);
      if (keep) (post ? posted : one_by_one).us.push_back(us);
    }
  }
  posted.baseline_us = one_by_one.p50();
}

}  // namespace gpubroker::bench
