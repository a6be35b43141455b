// libFuzzer target for the session-frame decoder: arbitrary bytes, arriving
// in arbitrary pieces, must never crash it, and whatever it accepts must
// survive a round trip through the encoder. A quarter of the inputs go to a
// decoder that reads flat answers too (a client's), whose round trip writes
// Opens and Claims flat, and a quarter to one that reads flat calls (the
// daemon's), whose round trip writes the calls of a hand-over's path flat.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/refusal.h"
#include "common/wire/frame.h"
#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Malformed strings are the point here; protobuf's complaints are noise.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks how the stream is cut into reads, and which flat
  // frames are read: none, answers (0x40) or calls (0x80).
  const size_t chunk = 1 + data[0] % 64;
  const auto kind = (data[0] & 0x40) != 0   ? gpubroker::FlatFrames::kAnswers
                    : (data[0] & 0x80) != 0 ? gpubroker::FlatFrames::kCalls
                                            : gpubroker::FlatFrames::kNone;
  const bool flat = kind != gpubroker::FlatFrames::kNone;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  gpubroker::FrameDecoder decoder;
  decoder.AcceptFlat(kind);
  bool failed = false;
  while (!stream.empty() && !failed) {
    const size_t n = std::min(chunk, stream.size());
    decoder.Append(stream.substr(0, n));
    stream.remove_prefix(n);
    for (;;) {
      auto frame = decoder.Next();
      if (!frame.ok()) {
        failed = true;
        break;
      }
      if (!frame->has_value()) break;
      // The flat layout carries the fields this build knows: what a
      // protobuf frame held beyond them does not travel flat.
      if (flat) (*frame)->DiscardUnknownFields();
      gpubroker::FrameDecoder again;
      again.AcceptFlat(kind);
      again.Append(gpubroker::EncodeFrameFor(**frame, kind));
      auto copy = again.Next();
      if (!copy.ok() || !copy->has_value() ||
          (*copy)->SerializeAsString() != (*frame)->SerializeAsString()) {
        std::abort();
      }
      // Whatever reason an ErrorFrame claims, the daemon's status keeps it
      // only when it is one that exists.
      if ((*frame)->has_error()) {
        const int reason = (*frame)->error().reason();
        const auto kept = gpubroker::RefusalOf(
            gpubroker::WithRefusal(absl::ResourceExhaustedError((*frame)->error().message()),
                                   static_cast<gpubroker::Refusal>(reason)));
        const bool known = reason >= 1 && reason <= 3;
        if (static_cast<int>(kept) != (known ? reason : 0)) std::abort();
      }
    }
  }
  return 0;
}
