#pragma once

// What the tests of the flat layouts (common/wire/flat_answer.h,
// common/wire/flat_call.h) share: every field of a message filled, and a
// stream of frames decoded in two reads cut at every byte.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/wire/frame.h"
#include "gtest/gtest.h"

namespace gpubroker::testing_util {

// Sets every field of `m`, nested messages included, to a value that is not
// its default and differs from field to field: whatever the messages gain,
// the round trip below sees it.
inline void FillEveryField(google::protobuf::Message* m, int seed) {
  const auto* d = m->GetDescriptor();
  const auto* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    const int v = seed * 100 + f->number();
    const int copies = f->is_repeated() ? 3 : 1;
    for (int k = 0; k < copies; ++k) {
      const int x = v + k;
      switch (f->cpp_type()) {
        case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(m, f, -x) : r->SetInt32(m, f, -x);
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(m, f, -(int64_t{x} << 33))
                           : r->SetInt64(m, f, -(int64_t{x} << 33));
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
          f->is_repeated() ? r->AddUInt32(m, f, 0x80000000u + x)
                           : r->SetUInt32(m, f, 0x80000000u + x);
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(m, f, (uint64_t{1} << 63) + x)
                           : r->SetUInt64(m, f, (uint64_t{1} << 63) + x);
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
          f->is_repeated() ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_ENUM:
          // A value past the enum's names, which proto3 keeps as it is.
          f->is_repeated() ? r->AddEnumValue(m, f, 1000 + x) : r->SetEnumValue(m, f, 1000 + x);
          break;
        case google::protobuf::FieldDescriptor::CPPTYPE_STRING: {
          std::string s = "field " + std::to_string(x);
          s.push_back('\0');  // bytes, not C strings
          s += std::string(static_cast<size_t>(f->number()), 'x');
          f->is_repeated() ? r->AddString(m, f, s) : r->SetString(m, f, s);
          break;
        }
        case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE:
          FillEveryField(f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f), x);
          break;
        default:
          FAIL() << "a field type this test does not fill: " << f->full_name();
      }
    }
  }
}

// Decodes `stream` with a decoder reading `flat` frames, in two reads cut
// at every byte in turn, and expects `frames` each time.
inline void ExpectDecodedAtEveryCut(const std::string& stream, FlatFrames flat,
                                    const std::vector<v1::SessionFrame>& frames) {
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameDecoder d;
    d.AcceptFlat(flat);
    std::vector<v1::SessionFrame> got;
    for (std::string_view part :
         {std::string_view(stream).substr(0, cut), std::string_view(stream).substr(cut)}) {
      d.Append(part);
      for (;;) {
        auto f = d.Next();
        ASSERT_TRUE(f.ok()) << f.status();
        if (!f->has_value()) break;
        got.push_back(std::move(**f));
      }
    }
    ASSERT_EQ(got.size(), frames.size()) << "cut at " << cut;
    for (size_t i = 0; i < frames.size(); ++i) {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got[i], frames[i]))
          << "frame " << i << ", cut at " << cut;
    }
  }
}

}  // namespace gpubroker::testing_util
