#include "common/wire/frame.h"

#include "common/strings.h"
#include "common/wire/flat_answer.h"

namespace gpubroker {

namespace {

void PutLength(uint32_t n, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
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

std::string EncodeFrameFor(const v1::SessionFrame& frame, bool flat_answers) {
  if (!flat_answers || !frame.has_reply() || !FitsFlatAnswer(frame.reply())) {
    return EncodeFrame(frame);
  }
  std::string out(kFrameHeaderBytes, '\0');
  AppendFlatAnswer(frame.reply(), &out);
  const size_t body = out.size() - kFrameHeaderBytes;
  if (body > kMaxFrameBytes) return EncodeFrame(frame);
  PutLength(static_cast<uint32_t>(body) | kFlatFrameBit, out.data());
  return out;
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

absl::StatusOr<std::optional<v1::SessionFrame>> FrameDecoder::Next() {
  const size_t avail = buffered();
  if (avail < kFrameHeaderBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  uint32_t len = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                 (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  const bool flat = accept_flat_ && (len & kFlatFrameBit) != 0;
  if (flat) len &= ~kFlatFrameBit;
  if (len > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        StrCat("frame of ", len, " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  if (avail < kFrameHeaderBytes + len) return std::nullopt;
  v1::SessionFrame frame;
  if (flat) {
    if (absl::Status st = DecodeFlatAnswer(
            std::string_view(reinterpret_cast<const char*>(p) + kFrameHeaderBytes, len),
            frame.mutable_reply());
        !st.ok()) {
      return st;
    }
  } else if (!frame.ParseFromArray(p + kFrameHeaderBytes, static_cast<int>(len))) {
    return absl::InvalidArgumentError(StrCat("frame of ", len, " bytes does not parse"));
  }
  if (frame.body_case() == v1::SessionFrame::BODY_NOT_SET) {
    return absl::InvalidArgumentError("frame carries no message");
  }
  consumed_ += kFrameHeaderBytes + len;
  return frame;
}

}  // namespace gpubroker
