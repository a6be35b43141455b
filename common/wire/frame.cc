#include "common/wire/frame.h"

#include "common/strings.h"
#include "common/wire/flat_answer.h"
#include "common/wire/flat_call.h"

namespace gpubroker {

namespace {

void PutLength(uint32_t n, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
}

// `out` from `start`: kFrameHeaderBytes of room, then a flat body. Writes
// the length with kFlatFrameBit; false for a body over kMaxFrameBytes.
bool SealFlatFrame(std::string* out, size_t start) {
  const size_t body = out->size() - start - kFrameHeaderBytes;
  if (body > kMaxFrameBytes) return false;
  PutLength(static_cast<uint32_t>(body) | kFlatFrameBit, out->data() + start);
  return true;
}

}  // namespace

std::string EncodeFrame(const v1::SessionFrame& frame) {
  // One pass: the body is serialized in place behind its length, with no
  // second buffer to copy it from.
  const size_t size = frame.ByteSizeLong();
  std::string out(kFrameHeaderBytes + size, '\0');
  PutLength(static_cast<uint32_t>(size), out.data());
  frame.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + kFrameHeaderBytes));
  return out;
}

std::string EncodeFrameFor(const v1::SessionFrame& frame, FlatFrames flat) {
  std::string out(kFrameHeaderBytes, '\0');
  const bool written =
      // A Publish's answer only where the peer said it reads one
      // (AppendFlatAnswerFrame of the Reply).
      (flat == FlatFrames::kAnswers && frame.has_reply() && !frame.reply().has_publish() &&
       AppendFlatAnswer(frame.reply(), &out)) ||
      (flat == FlatFrames::kCalls && frame.has_call() && AppendFlatCall(frame.call(), &out));
  if (!written || !SealFlatFrame(&out, 0)) return EncodeFrame(frame);
  return out;
}

namespace {

// Appends a flat frame whose body `append_body(out)` writes; nothing when
// it does not (or the body is too long).
template <typename AppendBody>
bool AppendFlatFrame(std::string* out, AppendBody append_body) {
  const size_t start = out->size();
  out->append(kFrameHeaderBytes, '\0');  // the length, once the body is known
  if (!append_body(out) || !SealFlatFrame(out, start)) {
    out->resize(start);
    return false;
  }
  return true;
}

}  // namespace

bool AppendFlatAnswerFrame(const FlatAnswerFacts& facts, std::string* out) {
  return AppendFlatFrame(out, [&](std::string* o) { return AppendFlatAnswer(facts, o); });
}

bool AppendFlatAnswerFrame(const v1::Reply& reply, std::string* out) {
  return AppendFlatFrame(out, [&](std::string* o) { return AppendFlatAnswer(reply, o); });
}

bool AppendFlatCallFrame(const FlatCallFacts& facts, std::string* out) {
  return AppendFlatFrame(out, [&](std::string* o) { return AppendFlatCall(facts, o); });
}

void FrameDecoder::Append(std::string_view bytes) {
  // Drop what has been decoded before growing, so a long-lived session does
  // not keep every frame it ever received.
  if (consumed_ > 0 && consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  } else if (consumed_ > kMaxFrameBytes) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<FrameDecoder::Body>> FrameDecoder::NextBody() {
  const size_t avail = buffered();
  if (avail < kFrameHeaderBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  uint32_t len = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                 (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  const bool flat = accept_flat_ != FlatFrames::kNone && (len & kFlatFrameBit) != 0;
  if (flat) len &= ~kFlatFrameBit;
  if (len > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        StrCat("frame of ", len, " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  if (avail < kFrameHeaderBytes + len) return std::nullopt;
  consumed_ += kFrameHeaderBytes + len;
  return Body{std::string_view(reinterpret_cast<const char*>(p) + kFrameHeaderBytes, len), flat};
}

absl::Status FrameDecoder::Decode(Body body, FlatFrames flat, v1::SessionFrame* out) {
  if (body.flat) {
    return flat == FlatFrames::kAnswers ? DecodeFlatAnswer(body.bytes, out->mutable_reply())
                                        : DecodeFlatCall(body.bytes, out->mutable_call());
  }
  if (!out->ParseFromArray(body.bytes.data(), static_cast<int>(body.bytes.size()))) {
    return absl::InvalidArgumentError(
        StrCat("frame of ", body.bytes.size(), " bytes does not parse"));
  }
  if (out->body_case() == v1::SessionFrame::BODY_NOT_SET) {
    return absl::InvalidArgumentError("frame carries no message");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::SessionFrame>> FrameDecoder::Next() {
  auto body = NextBody();
  if (!body.ok()) return body.status();
  if (!body->has_value()) return std::nullopt;
  v1::SessionFrame frame;
  if (absl::Status st = Decode(**body, accept_flat_, &frame); !st.ok()) return st;
  return frame;
}

}  // namespace gpubroker
