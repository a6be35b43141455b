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
