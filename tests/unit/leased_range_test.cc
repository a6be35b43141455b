// A range lent to one session: carved (published) buffers keep their bytes
// past the range's end, everything else goes back at once, and every byte is
// given back exactly once, whichever goes first.
#include "daemon/backend/leased_range.h"

#include <map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpubroker {
namespace {

constexpr uint64_t kLength = 1 << 20;

// The arena's side: which spans came back, in order.
struct Returns {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  // Every byte of the range back exactly once.
  bool WholeOnce() const {
    std::map<uint64_t, uint64_t> sorted(spans.begin(), spans.end());
    if (sorted.size() != spans.size()) return false;
    uint64_t at = 0;
    for (const auto& [offset, size] : sorted) {
      if (offset != at) return false;
      at += size;
    }
    return at == kLength;
  }
};

std::unique_ptr<LeasedRange> Range(Returns& r, uint64_t granularity = LeasedRange::kAlignment) {
  ImportInfo info;
  info.kind = ImportKind::kCudaArena;
  info.region_id = 7;
  info.offset = 64 << 20;  // where the range sits in its slab
  info.mapped_size = kLength;
  info.device_uuid = "GPU-x";
  return std::make_unique<LeasedRange>(
      info, [&r](uint64_t offset, uint64_t size) { r.spans.emplace_back(offset, size); },
      granularity);
}

TEST(LeasedRange, WithNothingCarvedItAllGoesBackWithTheRange) {
  Returns r;
  Range(r).reset();
  EXPECT_EQ(r.spans, (std::vector<std::pair<uint64_t, uint64_t>>{{0, kLength}}));
}

TEST(LeasedRange, CarvedBuffersOutliveTheRangeAndReturnTheirOwnBytesLater) {
  Returns r;
  auto range = Range(r);
  auto a = range->Carve(4096, 8192);
  auto b = range->Carve(65536, 512, 0, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(range->carved_bytes(), 8192u + 512u);
  range.reset();
  // The gaps at once: [0,4096), [12288,65536), [66048, end).
  EXPECT_EQ(r.spans, (std::vector<std::pair<uint64_t, uint64_t>>{
                         {0, 4096}, {12288, 65536 - 12288}, {66048, kLength - 66048}}));
  a->reset();
  EXPECT_EQ(r.spans.back(), std::make_pair(uint64_t{4096}, uint64_t{8192}));
  b->reset();
  EXPECT_TRUE(r.WholeOnce());
}

TEST(LeasedRange, ABufferThatGoesWhileTheRangeLivesGivesItsBytesToTheRange) {
  Returns r;
  auto range = Range(r);
  auto a = range->Carve(0, 4096);
  ASSERT_TRUE(a.ok());
  a->reset();
  EXPECT_TRUE(r.spans.empty());
  EXPECT_EQ(range->carved_bytes(), 0u);
  // The same bytes may be published again once the first buffer has gone.
  auto again = range->Carve(0, 4096);
  ASSERT_TRUE(again.ok());
  again->reset();
  range.reset();
  EXPECT_TRUE(r.WholeOnce());
}

TEST(LeasedRange, BuffersSharingAPageKeepItTogetherPastTheRange) {
  Returns r;
  auto range = Range(r, 4096);
  auto a = range->Carve(512, 1024);   // page 0
  auto b = range->Carve(3584, 1024);  // pages 0 and 1
  auto c = range->Carve(16384, 512);  // page 4
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  range.reset();
  // Only whole pages no buffer touches go back: [8192, 16384) and [20480, end).
  EXPECT_EQ(r.spans,
            (std::vector<std::pair<uint64_t, uint64_t>>{{8192, 8192}, {20480, kLength - 20480}}));
  a->reset();
  EXPECT_EQ(r.spans.size(), 2u) << "pages 0-1 still hold b";
  b->reset();
  EXPECT_EQ(r.spans.back(), std::make_pair(uint64_t{0}, uint64_t{8192}));
  c->reset();
  EXPECT_TRUE(r.WholeOnce());
}

TEST(LeasedRange, ACarvedBufferIsWhereTheClientSaysWithItsFence) {
  Returns r;
  auto range = Range(r);
  auto a = range->Carve(8192, 4096 + 512, 4096, 0xfeed);
  ASSERT_TRUE(a.ok());
  const ImportInfo& info = (*a)->import_info();
  EXPECT_EQ(info.kind, ImportKind::kCudaArena);
  EXPECT_EQ(info.region_id, 7u);
  EXPECT_EQ(info.offset, (64u << 20) + 8192);
  EXPECT_EQ(info.mapped_size, 4096u + 512);
  EXPECT_EQ(info.fence_region_id, 0u);  // the word is in the buffer itself
  EXPECT_EQ(info.fence_offset, 4096u);
  EXPECT_EQ(info.fence_value, 0xfeedu);
  EXPECT_EQ((*a)->reserved_size(), 4096u + 512);
}

TEST(LeasedRange, BadSpansAreRefusedAndChangeNothing) {
  Returns r;
  auto range = Range(r);
  auto a = range->Carve(4096, 4096);
  ASSERT_TRUE(a.ok());
  for (auto [offset, size] :
       std::vector<std::pair<uint64_t, uint64_t>>{{0, 0},                    // empty
                                                  {100, 512},                // unaligned
                                                  {kLength - 512, 1024},     // past the end
                                                  {kLength + 512, 512},      // outside
                                                  {0, 4608},                 // overlaps a's start
                                                  {7680, 1024},              // overlaps a's end
                                                  {4096, 4096},              // a again
                                                  {0, UINT64_MAX - 100}}) {  // wraps
    auto bad = range->Carve(offset, size);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << offset << "+" << size;
  }
  EXPECT_EQ(range->Carve(16384, 512, 512, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // the fence word past the buffer
  EXPECT_EQ(range->Carve(16384, 512, 3, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // an unaligned fence word
  EXPECT_EQ(range->carved_bytes(), 4096u);
  a->reset();
  range.reset();
  EXPECT_TRUE(r.WholeOnce());
}

}  // namespace
}  // namespace gpubroker
