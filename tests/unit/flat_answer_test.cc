// The flat layout of Open and Claim answers (common/wire/flat_answer.h): every
// field of the messages it carries survives it, a field added to them later
// fails here until the layout carries it, and bytes that are not exactly
// one answer are refused.
#include "common/wire/flat_answer.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "common/wire/frame.h"
#include "daemon/core/registry.h"
#include "daemon/service/convert.h"
#include "gtest/gtest.h"
#include "tests/unit/flat_layout_test_util.h"

namespace gpubroker {
namespace {

using google::protobuf::util::MessageDifferencer;
using testing_util::ExpectDecodedAtEveryCut;
using testing_util::FillEveryField;

v1::Reply EveryFieldAnswer(bool claim) {
  v1::Reply reply;
  reply.set_request_id(0xfedcba9876543210ull);
  FillEveryField(claim ? reply.mutable_claim() : reply.mutable_open(), 7);
  return reply;
}

v1::Reply RoundTrip(const v1::Reply& reply) {
  EXPECT_TRUE(FitsFlatAnswer(reply));
  std::string bytes;
  AppendFlatAnswer(reply, &bytes);
  v1::Reply back;
  const absl::Status st = DecodeFlatAnswer(bytes, &back);
  EXPECT_TRUE(st.ok()) << st;
  return back;
}

TEST(FlatAnswer, CarriesEveryFieldOfAnOpenAndOfAClaim) {
  for (bool claim : {false, true}) {
    const v1::Reply reply = EveryFieldAnswer(claim);
    std::string diff;
    MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(reply, RoundTrip(reply)))
        << "a field the flat layout does not carry (add it to common/wire/flat_answer.cc): "
        << diff;
  }
}

// A Publish's answer (for a client that says flat_publish_answers): its
// buffer, every field of it, and no import; one that claims an import is
// refused.
TEST(FlatAnswer, CarriesEveryFieldOfAPublishAndNoImport) {
  v1::Reply reply;
  reply.set_request_id(0x0123456789abcdefull);
  FillEveryField(reply.mutable_publish(), 9);
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(reply, RoundTrip(reply))) << diff;
  v1::Reply bare;
  bare.mutable_publish();  // no buffer
  EXPECT_TRUE(MessageDifferencer::Equals(bare, RoundTrip(bare)));

  std::string bytes;
  ASSERT_TRUE(AppendFlatAnswer(reply, &bytes));
  FlatAnswerRead read;
  ASSERT_TRUE(DecodeFlatAnswer(bytes, &read).ok());
  EXPECT_EQ(read.facts().kind, FlatAnswerFacts::Kind::kPublish);
  EXPECT_FALSE(read.facts().has_import);
  FlatAnswerFacts with_import = read.facts();
  with_import.has_import = true;
  std::string out;
  EXPECT_FALSE(AppendFlatAnswer(with_import, &out));
  EXPECT_TRUE(out.empty());
  std::string bad = bytes;
  bad[5] = static_cast<char>(bad[5] | 16);  // the import's flag
  EXPECT_EQ(DecodeFlatAnswer(bad, &read).code(), absl::StatusCode::kInvalidArgument);
  bad = bytes;
  bad[1] = 4;  // no such answer
  EXPECT_EQ(DecodeFlatAnswer(bad, &read).code(), absl::StatusCode::kInvalidArgument);

  // EncodeFrameFor writes it flat to nobody: only AppendFlatAnswerFrame
  // does, for a session that said it reads it.
  v1::SessionFrame frame;
  *frame.mutable_reply() = reply;
  EXPECT_EQ(EncodeFrameFor(frame, FlatFrames::kAnswers), EncodeFrame(frame));
  std::string flat_frame;
  ASSERT_TRUE(AppendFlatAnswerFrame(reply, &flat_frame));
  ExpectDecodedAtEveryCut(flat_frame, FlatFrames::kAnswers, {frame});
}

TEST(FlatAnswer, KeepsWhichPartsArePresent) {
  v1::Reply reply;
  reply.set_request_id(3);
  reply.mutable_open()->mutable_buffer()->set_id(9);  // no tensor, no import
  EXPECT_TRUE(MessageDifferencer::Equals(reply, RoundTrip(reply)));
  reply.mutable_open()->clear_buffer();
  reply.mutable_open()->mutable_import()->set_offset(4096);
  EXPECT_TRUE(MessageDifferencer::Equals(reply, RoundTrip(reply)));
  reply.mutable_open()->mutable_buffer()->mutable_tensor();  // present, every field zero
  EXPECT_TRUE(MessageDifferencer::Equals(reply, RoundTrip(reply)));
  v1::Reply empty_claim;
  empty_claim.mutable_claim();
  EXPECT_TRUE(MessageDifferencer::Equals(empty_claim, RoundTrip(empty_claim)));
}

TEST(FlatAnswer, RefusesBytesThatAreNotExactlyOneAnswer) {
  std::string bytes;
  AppendFlatAnswer(EveryFieldAnswer(false), &bytes);
  v1::Reply out;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeFlatAnswer(std::string_view(bytes).substr(0, n), &out).code(),
              absl::StatusCode::kInvalidArgument)
        << "truncated to " << n << " bytes";
  }
  EXPECT_EQ(DecodeFlatAnswer(bytes + "x", &out).code(), absl::StatusCode::kInvalidArgument);
  for (size_t at : {size_t{0}, size_t{1}, size_t{5}, size_t{6}, size_t{7}}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(0xff);  // the layout, the kind, the flags, the padding
    EXPECT_EQ(DecodeFlatAnswer(bad, &out).code(), absl::StatusCode::kInvalidArgument)
        << "byte " << at;
  }
  // A string that is not UTF-8, which protobuf's parse of the message
  // would refuse too.
  v1::Reply not_utf8 = EveryFieldAnswer(false);
  not_utf8.mutable_open()->mutable_buffer()->set_tenant("t\xc3");
  std::string not_utf8_bytes;
  ASSERT_TRUE(AppendFlatAnswer(not_utf8, &not_utf8_bytes));
  EXPECT_EQ(DecodeFlatAnswer(not_utf8_bytes, &out).code(), absl::StatusCode::kInvalidArgument);
  // A string whose length runs past the end.
  std::string bad = bytes;
  bad.resize(bad.size() - 1);
  EXPECT_FALSE(DecodeFlatAnswer(bad, &out).ok());
  EXPECT_TRUE(DecodeFlatAnswer(bytes, &out).ok());
}

// The client reads an answer in place (FlatAnswerRead), with no message:
// what it reads writes back as the very same bytes, every field included,
// and it refuses what the message reader refuses.
TEST(FlatAnswer, ReadInPlaceGivesBackEveryFieldAsWritten) {
  for (bool claim : {false, true}) {
    std::string bytes;
    ASSERT_TRUE(AppendFlatAnswer(EveryFieldAnswer(claim), &bytes));
    FlatAnswerRead read;
    ASSERT_TRUE(DecodeFlatAnswer(bytes, &read).ok());
    EXPECT_EQ(read.facts().kind,
              claim ? FlatAnswerFacts::Kind::kClaim : FlatAnswerFacts::Kind::kOpen);
    EXPECT_EQ(read.facts().request_id, 0xfedcba9876543210ull);
    std::string again;
    ASSERT_TRUE(AppendFlatAnswer(read.facts(), &again));
    EXPECT_EQ(again, bytes) << (claim ? "claim" : "open");
    // The strings are views into the bytes read, not copies.
    const auto inside = [&](std::string_view s) {
      return s.data() >= bytes.data() && s.data() + s.size() <= bytes.data() + bytes.size();
    };
    EXPECT_TRUE(inside(read.facts().name) && inside(read.facts().export_data) &&
                inside(read.facts().import_device_uuid));
  }
  FlatAnswerRead read;
  std::string bytes;
  AppendFlatAnswer(EveryFieldAnswer(false), &bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeFlatAnswer(std::string_view(bytes).substr(0, n), &read).code(),
              absl::StatusCode::kInvalidArgument)
        << "truncated to " << n << " bytes";
    EXPECT_EQ(read.facts().id, 0u) << "a refused answer leaves no facts behind";
  }
  EXPECT_EQ(DecodeFlatAnswer(bytes + "x", &read).code(), absl::StatusCode::kInvalidArgument);
  for (size_t at : {size_t{0}, size_t{1}, size_t{5}, size_t{6}, size_t{7}}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(0xff);
    EXPECT_EQ(DecodeFlatAnswer(bad, &read).code(), absl::StatusCode::kInvalidArgument)
        << "byte " << at;
  }
}

// NextBody hands out each frame's body undecoded, flat or not, in order;
// Decode then reads it as Next would.
TEST(FlatFrames, BodiesComeOutUndecodedAndDecodeAsNextWould) {
  v1::SessionFrame open;
  *open.mutable_reply() = EveryFieldAnswer(true);
  v1::SessionFrame other;
  other.mutable_reply()->set_request_id(5);
  other.mutable_reply()->mutable_release();
  FrameDecoder d;
  d.AcceptFlatAnswers();
  d.Append(EncodeFrameFor(open, FlatFrames::kAnswers) +
           EncodeFrameFor(other, FlatFrames::kAnswers));
  auto first = d.NextBody();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_TRUE((*first)->flat);
  FlatAnswerRead read;
  ASSERT_TRUE(DecodeFlatAnswer((*first)->bytes, &read).ok());
  EXPECT_EQ(read.facts().kind, FlatAnswerFacts::Kind::kClaim);
  v1::SessionFrame decoded;
  ASSERT_TRUE(FrameDecoder::Decode(**first, FlatFrames::kAnswers, &decoded).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(decoded, open));
  auto second = d.NextBody();
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_FALSE((*second)->flat);
  decoded.Clear();
  ASSERT_TRUE(FrameDecoder::Decode(**second, FlatFrames::kAnswers, &decoded).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(decoded, other));
  auto none = d.NextBody();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // A body that carries no message is refused, as Next refuses it.
  EXPECT_EQ(
      FrameDecoder::Decode({std::string_view(), false}, FlatFrames::kAnswers, &decoded).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(FlatAnswer, OnlyOpensAndClaimsThatFitAreWrittenFlat) {
  v1::Reply seal;
  seal.mutable_seal()->mutable_buffer()->set_id(1);
  EXPECT_FALSE(FitsFlatAnswer(seal));
  v1::Reply wide;
  for (int i = 0; i < 256; ++i)
    wide.mutable_open()->mutable_buffer()->mutable_tensor()->add_shape(1);
  EXPECT_FALSE(FitsFlatAnswer(wide));
  v1::Reply long_name;
  long_name.mutable_open()->mutable_buffer()->set_name(std::string(70000, 'n'));
  EXPECT_FALSE(FitsFlatAnswer(long_name));
}

TEST(FlatFrames, TravelOnlyToADecoderThatAskedAndOnlyForAnswers) {
  v1::SessionFrame open;
  *open.mutable_reply() = EveryFieldAnswer(false);
  v1::SessionFrame other;
  other.mutable_reply()->set_request_id(5);
  other.mutable_reply()->mutable_release();
  v1::SessionFrame wide;
  for (int i = 0; i < 300; ++i) {
    wide.mutable_reply()->mutable_open()->mutable_buffer()->mutable_tensor()->add_shape(i);
  }
  const std::string stream = EncodeFrameFor(open, FlatFrames::kAnswers) +
                             EncodeFrameFor(other, FlatFrames::kAnswers) +
                             EncodeFrameFor(wide, FlatFrames::kAnswers);
  // Not an Open, and an Open that does not fit: protobuf.
  EXPECT_EQ(EncodeFrameFor(other, FlatFrames::kAnswers), EncodeFrame(other));
  EXPECT_EQ(EncodeFrameFor(wide, FlatFrames::kAnswers), EncodeFrame(wide));
  EXPECT_NE(EncodeFrameFor(open, FlatFrames::kAnswers), EncodeFrame(open));

  // Split at every byte, as reads cut it.
  ExpectDecodedAtEveryCut(stream, FlatFrames::kAnswers, {open, other, wide});

  // A decoder that did not ask (an older client's) refuses it.
  FrameDecoder plain;
  plain.Append(EncodeFrameFor(open, FlatFrames::kAnswers));
  EXPECT_EQ(plain.Next().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpubroker

namespace gpubroker {
namespace {

// The daemon writes its flat answers from its grant (ToFlatAnswer), not
// from the message: the bytes must be those the message would give, for
// every field of the grant.
BufferGrant EveryFieldGrant(bool tensor) {
  BufferGrant g;
  BufferView& v = g.buffer;
  v.id = 11;
  v.name = "grant.every";
  v.size = 12;
  v.reserved_size = 13;
  v.device_uuid = "GPU-14";
  v.device = 15;
  v.tenant = "tenant16";
  v.state = BufferState::kSealed;
  if (tensor) v.tensor = TensorDesc{17, {18, 19}, {20, 21}, 22};
  v.keep = true;
  v.expires_unix_ms = -23;
  v.shared_with = {"t24", "t25"};
  v.leases = 26;
  v.owner_session = 27;
  v.created_unix_ms = 28;
  v.backing = "cuda-arena";
  v.client_made = true;
  ImportInfo& im = g.import;
  im.kind = ImportKind::kCudaVmm;
  im.region_id = 29;
  im.offset = 30;
  im.mapped_size = 31;
  im.export_data = std::string("export\0data", 11);
  im.device_uuid = "GPU-32";
  im.fence_region_id = 33;
  im.fence_offset = 34;
  im.fence_value = 35;
  im.allocation_id = 36;
  return g;
}

TEST(FlatAnswer, TheDaemonWritesFromItsGrantWhatTheMessageWouldSay) {
  for (bool tensor : {true, false}) {
    for (bool claim : {false, true}) {
      SCOPED_TRACE(testing::Message() << "tensor " << tensor << ", claim " << claim);
      const BufferGrant g = EveryFieldGrant(tensor);
      v1::Reply reply;
      reply.set_request_id(37);
      v1::OpenResponse* a = claim ? reply.mutable_claim() : reply.mutable_open();
      ToProto(g.buffer, a->mutable_buffer());
      ToProto(g.import, a->mutable_import());
      std::string from_message, from_grant;
      ASSERT_TRUE(AppendFlatAnswer(reply, &from_message));
      ASSERT_TRUE(AppendFlatAnswer(ToFlatAnswer(g, 37, claim), &from_grant));
      EXPECT_EQ(from_grant, from_message);
      // And as whole frames, which the client reads back into that message.
      v1::SessionFrame frame;
      *frame.mutable_reply() = reply;
      std::string whole = "prefix";
      ASSERT_TRUE(AppendFlatAnswerFrame(ToFlatAnswer(g, 37, claim), &whole));
      EXPECT_EQ(whole, "prefix" + EncodeFrameFor(frame, FlatFrames::kAnswers));
    }
  }
  // A Publish's answer: the buffer alone.
  for (bool tensor : {true, false}) {
    SCOPED_TRACE(testing::Message() << "publish, tensor " << tensor);
    const BufferGrant g = EveryFieldGrant(tensor);
    v1::SessionFrame frame;
    frame.mutable_reply()->set_request_id(38);
    ToProto(g.buffer, frame.mutable_reply()->mutable_publish()->mutable_buffer());
    std::string from_message, from_grant;
    ASSERT_TRUE(AppendFlatAnswerFrame(frame.reply(), &from_message));
    ASSERT_TRUE(AppendFlatAnswerFrame(ToFlatPublishAnswer(g.buffer, 38), &from_grant));
    EXPECT_EQ(from_grant, from_message);
  }
  // A grant the layout cannot carry writes nothing.
  BufferGrant wide = EveryFieldGrant(true);
  wide.buffer.tensor->shape.assign(256, 1);
  std::string out = "kept";
  EXPECT_FALSE(AppendFlatAnswerFrame(ToFlatAnswer(wide, 1, false), &out));
  EXPECT_EQ(out, "kept");
}

}  // namespace
}  // namespace gpubroker
