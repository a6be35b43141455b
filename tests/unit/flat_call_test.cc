// The flat layout of the calls of a hand-over's path (common/wire/flat_call.h):
// every field of the messages it carries survives it, a field added to them
// later fails here until the layout carries it, and bytes that are not
// exactly one call that protobuf could have carried are refused (the daemon
// reads them from untrusted clients).
#include "common/wire/flat_call.h"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "common/wire/frame.h"
#include "gtest/gtest.h"
#include "tests/unit/flat_layout_test_util.h"

namespace gpubroker {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing_util::ExpectDecodedAtEveryCut;
using testing_util::FillEveryField;

// Every field of the call and of its counters set, the request being `which`.
v1::Call EveryFieldCall(v1::Call::RequestCase which) {
  v1::Call call;
  call.set_request_id(0xfedcba9876543210ull);
  FillEveryField(call.mutable_counters(), 3);
  switch (which) {
    case v1::Call::kOpen:
      FillEveryField(call.mutable_open(), 5);
      break;
    case v1::Call::kPublish:
      FillEveryField(call.mutable_publish(), 6);
      break;
    case v1::Call::kRelease:
      FillEveryField(call.mutable_release(), 7);
      break;
    default:
      FillEveryField(call.mutable_claim(), 8);
      break;
  }
  return call;
}

constexpr v1::Call::RequestCase kCarried[] = {v1::Call::kOpen, v1::Call::kPublish,
                                              v1::Call::kRelease, v1::Call::kClaim};

v1::Call RoundTrip(const v1::Call& call) {
  EXPECT_TRUE(FitsFlatCall(call));
  std::string bytes;
  AppendFlatCall(call, &bytes);
  v1::Call back;
  const absl::Status st = DecodeFlatCall(bytes, &back);
  EXPECT_TRUE(st.ok()) << st;
  return back;
}

TEST(FlatCall, CarriesEveryFieldOfEachCallItCarries) {
  for (auto which : kCarried) {
    const v1::Call call = EveryFieldCall(which);
    std::string diff;
    MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(call, RoundTrip(call)))
        << "a field the flat layout does not carry (add it to common/wire/flat_call.cc): " << diff;
  }
}

// The client writes its calls from their facts, with no message
// (FlatCallFacts): the bytes are those of the Call the facts say (ToCall,
// which a daemon that reads protobuf only gets), and the daemon reads that
// Call back from them, every field set, for each kind, and with the parts
// the facts say are absent left out whatever their fields hold.
TEST(FlatCall, FactsWriteTheBytesOfTheCallTheySay) {
  const int64_t shape[] = {-3, 4096, 7};
  const int64_t strides[] = {8192, 2, -1};
  std::vector<FlatCallFacts> all;
  for (auto kind : {FlatCallFacts::Kind::kOpen, FlatCallFacts::Kind::kPublish,
                    FlatCallFacts::Kind::kRelease, FlatCallFacts::Kind::kClaim}) {
    FlatCallFacts f;
    f.kind = kind;
    f.request_id = 0x8000000000000001ull + static_cast<uint64_t>(kind);
    f.has_counters = true;
    uint64_t v = 1;
    for (uint64_t* c :
         {&f.counters.allocations, &f.counters.in_use_blocks, &f.counters.in_use_bytes,
          &f.counters.range_bytes, &f.counters.cache_hits, &f.counters.daemon_allocations,
          &f.counters.grpc_allocations, &f.counters.opens_arena, &f.counters.opens_cached,
          &f.counters.opens_import, &f.counters.opens_grpc, &f.counters.mapping_cache_misses,
          &f.counters.mapping_cache_evictions, &f.counters.mapping_cache_bytes}) {
      *c = (v++ << 40) + 3;
    }
    switch (kind) {
      case FlatCallFacts::Kind::kOpen:
        f.by_name = true;
        f.name = "frames.\xc3\xa9t\xc3\xa9";
        f.wait = f.allow_unsealed = true;
        f.timeout_ms = 30000;
        f.awake_us = 250;
        break;
      case FlatCallFacts::Kind::kPublish:
        f.seal = f.has_tensor = true;
        f.dtype = 12;
        f.range_id = 5;
        f.offset = uint64_t{1} << 40;
        f.reserved = 1 << 21;
        f.size = (1 << 21) - 3;
        f.fence_offset = 4096;
        f.fence_value = uint64_t{1} << 63;
        f.byte_offset = 64;
        f.shape = shape;
        f.strides = strides;
        f.name = "kv.layer.17";
        break;
      case FlatCallFacts::Kind::kRelease:
        f.id = 0xffffffffffffffffull;
        f.free = f.keep_mapping = true;
        break;
      case FlatCallFacts::Kind::kClaim:
        f.secret = std::string_view(
            "s\0e\xff"
            "cret",
            8);
        break;
    }
    all.push_back(f);
  }
  // Parts said absent, their fields set anyway.
  FlatCallFacts by_id = all[0];
  by_id.by_name = false;
  by_id.by_id = true;
  by_id.id = 77;
  all.push_back(by_id);
  FlatCallFacts no_tensor = all[1];
  no_tensor.has_tensor = false;
  no_tensor.has_counters = false;
  all.push_back(no_tensor);
  for (const FlatCallFacts& f : all) {
    SCOPED_TRACE(static_cast<int>(f.kind));
    std::string bytes;
    ASSERT_TRUE(AppendFlatCall(f, &bytes));
    v1::Call said;
    ToCall(f, &said);
    std::string from_message;
    ASSERT_TRUE(AppendFlatCall(said, &from_message));
    EXPECT_EQ(bytes, from_message);
    v1::Call read;
    ASSERT_TRUE(DecodeFlatCall(bytes, &read).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(read, said)) << read.DebugString() << said.DebugString();
    // And the frame, as the client sends it.
    std::string frame;
    ASSERT_TRUE(AppendFlatCallFrame(f, &frame));
    v1::SessionFrame wrapped;
    *wrapped.mutable_call() = said;
    EXPECT_EQ(frame, EncodeFrameFor(wrapped, FlatFrames::kCalls));
  }
  FlatCallFacts too_long = all[0];
  const std::string name(70000, 'n');
  too_long.name = name;
  std::string out = "kept";
  EXPECT_FALSE(AppendFlatCallFrame(too_long, &out));
  EXPECT_EQ(out, "kept");
}

// The daemon reads a call in place (FlatCallRead) and serves the calls of
// a hand-over from it: what it reads writes back as the very same bytes,
// the strings viewing the body, for every field of each kind.
TEST(FlatCall, ReadInPlaceGivesBackEveryFieldAsWritten) {
  for (auto which : kCarried) {
    SCOPED_TRACE(static_cast<int>(which));
    std::string bytes;
    ASSERT_TRUE(AppendFlatCall(EveryFieldCall(which), &bytes));
    FlatCallRead read;
    ASSERT_TRUE(DecodeFlatCall(bytes, &read).ok());
    EXPECT_EQ(read.facts().request_id, 0xfedcba9876543210ull);
    std::string again;
    ASSERT_TRUE(AppendFlatCall(read.facts(), &again));
    EXPECT_EQ(again, bytes);
    for (std::string_view s : {read.facts().name, read.facts().secret}) {
      if (s.empty()) continue;
      EXPECT_TRUE(s.data() >= bytes.data() && s.data() + s.size() <= bytes.data() + bytes.size());
    }
    // A refused call leaves no facts behind.
    EXPECT_FALSE(DecodeFlatCall(bytes.substr(0, bytes.size() - 1), &read).ok());
    EXPECT_EQ(read.facts().request_id, 0u);
  }
}

TEST(FlatCall, KeepsWhichPartsArePresent) {
  std::vector<v1::Call> calls;
  v1::Call c;
  c.set_request_id(1);
  c.mutable_open();  // no reference at all: the daemon's to refuse
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_id(0);  // by id, and the id is 0
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_name("");  // by name, and the name is empty
  calls.push_back(c);
  c.mutable_open()->mutable_ref()->set_id(77);
  c.mutable_open()->set_wait(true);
  calls.push_back(c);
  c.Clear();
  c.mutable_publish()->set_offset(512);  // no tensor
  calls.push_back(c);
  c.mutable_publish()->mutable_tensor();  // a tensor, every field zero
  calls.push_back(c);
  c.mutable_counters();  // counters, every field zero
  calls.push_back(c);
  c.Clear();
  c.mutable_release();
  calls.push_back(c);
  c.Clear();
  c.mutable_claim();
  calls.push_back(c);
  for (const v1::Call& call : calls) {
    EXPECT_TRUE(MessageDifferencer::Equals(call, RoundTrip(call))) << call.DebugString();
  }
  // A reference present that names nothing reads like none at all: that
  // Open is not written flat, so that a frame reads as it was written.
  v1::SessionFrame empty_ref;
  empty_ref.mutable_call()->mutable_open()->mutable_ref();
  EXPECT_FALSE(FitsFlatCall(empty_ref.call()));
  EXPECT_EQ(EncodeFrameFor(empty_ref, FlatFrames::kCalls), EncodeFrame(empty_ref));
}

TEST(FlatCall, RefusesBytesThatAreNotExactlyOneCall) {
  for (auto which : kCarried) {
    std::string bytes;
    AppendFlatCall(EveryFieldCall(which), &bytes);
    v1::Call out;
    ASSERT_TRUE(DecodeFlatCall(bytes, &out).ok());
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_EQ(DecodeFlatCall(std::string_view(bytes).substr(0, n), &out).code(),
                absl::StatusCode::kInvalidArgument)
          << "truncated to " << n << " bytes";
      EXPECT_EQ(out.request_case(), v1::Call::REQUEST_NOT_SET) << "a refused call leaves nothing";
    }
    EXPECT_EQ(DecodeFlatCall(bytes + "x", &out).code(), absl::StatusCode::kInvalidArgument);
    for (size_t at : {0, 1, 2, 5, 6, 7}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(0xff);  // the layout, the kind, the flags, the padding
      EXPECT_EQ(DecodeFlatCall(bad, &out).code(), absl::StatusCode::kInvalidArgument)
          << "byte " << at << " of call kind " << which;
    }
  }
}

// Each Call has one flat form: a field that the flags say is absent must
// read as zero, so that what the daemon reads is what the bytes say.
TEST(FlatCall, RefusesValuesInFieldsItsFlagsSayAreAbsent) {
  v1::Call open;
  open.mutable_open()->mutable_ref()->set_id(9);
  std::string bytes;
  AppendFlatCall(open, &bytes);
  std::string both = bytes;
  both[2] = static_cast<char>(both[2] | 4);  // by id and by name at once
  v1::Call out;
  EXPECT_FALSE(DecodeFlatCall(both, &out).ok());
  std::string none = bytes;
  none[2] = static_cast<char>(none[2] & ~2);  // by nothing, yet an id
  EXPECT_FALSE(DecodeFlatCall(none, &out).ok());

  v1::Call release;
  release.mutable_release()->set_id(3);
  bytes.clear();
  AppendFlatCall(release, &bytes);
  bytes[3] = 1;  // a shape count in a call that has none
  EXPECT_FALSE(DecodeFlatCall(bytes, &out).ok());

  v1::Call publish;
  publish.mutable_publish()->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
  bytes.clear();
  AppendFlatCall(publish, &bytes);
  bytes[2] = static_cast<char>(bytes[2] & ~4);  // no tensor, yet a dtype
  EXPECT_FALSE(DecodeFlatCall(bytes, &out).ok());
}

TEST(FlatCall, RefusesANameThatProtobufWouldNotParse) {
  google::protobuf::LogSilencer quiet;  // protobuf's own complaints about these names
  for (std::string name : {std::string("\xff"), std::string("a\xc0\x80"),  // overlong NUL
                           std::string("\xed\xa0\x80"),                    // a surrogate
                           std::string("\xf4\x90\x80\x80"),                // past U+10FFFF
                           std::string("abc\xe2\x82")}) {                  // cut short
    v1::Call open;
    open.mutable_open()->mutable_ref()->set_name(name);
    v1::Call publish;
    publish.mutable_publish()->set_name(name);
    for (const v1::Call* call : {&open, &publish}) {
      std::string bytes;
      AppendFlatCall(*call, &bytes);
      v1::Call out;
      EXPECT_EQ(DecodeFlatCall(bytes, &out).code(), absl::StatusCode::kInvalidArgument);
      v1::SessionFrame frame;
      *frame.mutable_call() = *call;
      v1::SessionFrame parsed;
      EXPECT_FALSE(parsed.ParseFromString(frame.SerializePartialAsString()))
          << "protobuf parses it: the flat decoder should too";
    }
  }
  v1::Call ok;
  ok.mutable_open()->mutable_ref()->set_name("caf\xc3\xa9.\xf0\x9f\x98\x80");  // é, an emoji
  EXPECT_TRUE(MessageDifferencer::Equals(ok, RoundTrip(ok)));
  // A claim's secret is bytes: anything goes.
  v1::Call claim;
  claim.mutable_claim()->set_secret(std::string("\xff\x00\xc0\x80", 4));
  EXPECT_TRUE(MessageDifferencer::Equals(claim, RoundTrip(claim)));
}

TEST(FlatCall, OnlyTheCallsOfTheHandOverThatFitAreWrittenFlat) {
  v1::Call allocate;
  allocate.mutable_allocate()->set_size(1);
  EXPECT_FALSE(FitsFlatCall(allocate));
  v1::Call report;  // counters only
  report.mutable_counters()->set_allocations(1);
  EXPECT_FALSE(FitsFlatCall(report));
  v1::Call wide;
  for (int i = 0; i < 256; ++i) wide.mutable_publish()->mutable_tensor()->add_shape(1);
  EXPECT_FALSE(FitsFlatCall(wide));
  v1::Call long_name;
  long_name.mutable_open()->mutable_ref()->set_name(std::string(70000, 'n'));
  EXPECT_FALSE(FitsFlatCall(long_name));
}

TEST(FlatFrames, CallsTravelFlatOnlyToADecoderThatReadsThem) {
  v1::SessionFrame open;
  *open.mutable_call() = EveryFieldCall(v1::Call::kOpen);
  v1::SessionFrame publish;
  *publish.mutable_call() = EveryFieldCall(v1::Call::kPublish);
  v1::SessionFrame allocate;
  allocate.mutable_call()->set_request_id(5);
  allocate.mutable_call()->mutable_allocate()->set_size(4096);
  v1::SessionFrame hello;
  hello.mutable_hello()->set_client_name("c");
  const std::string stream =
      EncodeFrameFor(hello, FlatFrames::kCalls) + EncodeFrameFor(open, FlatFrames::kCalls) +
      EncodeFrameFor(allocate, FlatFrames::kCalls) + EncodeFrameFor(publish, FlatFrames::kCalls);
  EXPECT_EQ(EncodeFrameFor(allocate, FlatFrames::kCalls), EncodeFrame(allocate));
  EXPECT_EQ(EncodeFrameFor(hello, FlatFrames::kCalls), EncodeFrame(hello));
  EXPECT_NE(EncodeFrameFor(open, FlatFrames::kCalls), EncodeFrame(open));
  // A peer that reads flat answers gets calls as protobuf (and the reverse).
  EXPECT_EQ(EncodeFrameFor(open, FlatFrames::kAnswers), EncodeFrame(open));

  ExpectDecodedAtEveryCut(stream, FlatFrames::kCalls, {hello, open, allocate, publish});

  // A decoder that does not read flat calls (an older daemon's, a client's)
  // refuses one.
  for (FlatFrames kind : {FlatFrames::kNone, FlatFrames::kAnswers}) {
    FrameDecoder other;
    other.AcceptFlat(kind);
    other.Append(EncodeFrameFor(open, FlatFrames::kCalls));
    EXPECT_EQ(other.Next().status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace gpubroker
