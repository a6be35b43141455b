#include "common/wire/flat_answer.h"

#include <cstdint>

#include "common/strings.h"
#include "common/wire/flat_io.h"

namespace gpubroker {
namespace {

// Layout 1, little-endian throughout:
//   u8 layout (1), u8 which (1: Reply.open, 2: Reply.claim), u8 shape
//   count, u8 strides count, u8 shared_with count, u8 flags (kFlag*), u16 0
//   u32 state, leases, dtype, import kind (the enums as their int32 values)
//   u64 request_id, id, size, reserved_size, owner_session, byte_offset,
//       expires_unix_ms, created_unix_ms, region_id, offset, mapped_size,
//       fence_offset, fence_value, fence_region_id, allocation_id
//   i64 shape[], strides[]
//   strings as u16 length + bytes: name, device_uuid, tenant, backing,
//       shared_with[], export_data, the import's device_uuid
constexpr uint8_t kLayout = 1;
constexpr uint8_t kWhichOpen = 1;
constexpr uint8_t kWhichClaim = 2;
constexpr uint8_t kFlagKeep = 1;
constexpr uint8_t kFlagClientMade = 2;
constexpr uint8_t kFlagBuffer = 4;  // the answer has a BufferInfo
constexpr uint8_t kFlagTensor = 8;  // ... with a TensorDescriptor
constexpr uint8_t kFlagImport = 16;
constexpr uint8_t kKnownFlags =
    kFlagKeep | kFlagClientMade | kFlagBuffer | kFlagTensor | kFlagImport;

using flat::kMaxCount;
using flat::kMaxString;
using flat::Reader;
using flat::Writer;

const v1::OpenResponse& AnswerOf(const v1::Reply& reply) {
  return reply.response_case() == v1::Reply::kClaim ? reply.claim() : reply.open();
}

}  // namespace

bool FitsFlatAnswer(const v1::Reply& reply) {
  if (reply.response_case() != v1::Reply::kOpen && reply.response_case() != v1::Reply::kClaim) {
    return false;
  }
  const v1::OpenResponse& a = AnswerOf(reply);
  const v1::BufferInfo& b = a.buffer();
  const v1::ImportDescriptor& im = a.import();
  if (b.tensor().shape_size() > static_cast<int>(kMaxCount) ||
      b.tensor().strides_size() > static_cast<int>(kMaxCount) ||
      b.shared_with_size() > static_cast<int>(kMaxCount)) {
    return false;
  }
  for (const std::string* s : {&b.name(), &b.device_uuid(), &b.tenant(), &b.backing(),
                               &im.export_data(), &im.device_uuid()}) {
    if (s->size() > kMaxString) return false;
  }
  for (const std::string& s : b.shared_with()) {
    if (s.size() > kMaxString) return false;
  }
  return true;
}

void AppendFlatAnswer(const v1::Reply& reply, std::string* out) {
  const v1::OpenResponse& a = AnswerOf(reply);
  const v1::BufferInfo& b = a.buffer();
  const v1::TensorDescriptor& t = b.tensor();
  const v1::ImportDescriptor& im = a.import();
  Writer w(out);
  w.U8(kLayout);
  w.U8(reply.response_case() == v1::Reply::kClaim ? kWhichClaim : kWhichOpen);
  w.U8(static_cast<uint8_t>(t.shape_size()));
  w.U8(static_cast<uint8_t>(t.strides_size()));
  w.U8(static_cast<uint8_t>(b.shared_with_size()));
  w.U8((b.keep() ? kFlagKeep : 0) | (b.client_made() ? kFlagClientMade : 0) |
       (a.has_buffer() ? kFlagBuffer : 0) | (b.has_tensor() ? kFlagTensor : 0) |
       (a.has_import() ? kFlagImport : 0));
  w.U8(0);
  w.U8(0);
  w.U32(static_cast<uint32_t>(b.state()));
  w.U32(b.leases());
  w.U32(static_cast<uint32_t>(t.dtype()));
  w.U32(static_cast<uint32_t>(im.kind()));
  for (uint64_t v :
       {reply.request_id(), b.id(), b.size(), b.reserved_size(), b.owner_session(), t.byte_offset(),
        static_cast<uint64_t>(b.expires_unix_ms()), static_cast<uint64_t>(b.created_unix_ms()),
        im.region_id(), im.offset(), im.mapped_size(), im.fence_offset(), im.fence_value(),
        im.fence_region_id(), im.allocation_id()}) {
    w.U64(v);
  }
  for (int64_t d : t.shape()) w.U64(static_cast<uint64_t>(d));
  for (int64_t d : t.strides()) w.U64(static_cast<uint64_t>(d));
  w.Str(b.name());
  w.Str(b.device_uuid());
  w.Str(b.tenant());
  w.Str(b.backing());
  for (const std::string& s : b.shared_with()) w.Str(s);
  w.Str(im.export_data());
  w.Str(im.device_uuid());
}

absl::Status DecodeFlatAnswer(std::string_view body, v1::Reply* out) {
  out->Clear();
  Reader r(body);
  const uint8_t layout = r.U8();
  const uint8_t which = r.U8();
  const uint8_t n_shape = r.U8();
  const uint8_t n_strides = r.U8();
  const uint8_t n_shared = r.U8();
  const uint8_t flags = r.U8();
  const uint8_t pad0 = r.U8();
  const uint8_t pad1 = r.U8();
  if (!r.ok()) return absl::InvalidArgumentError("flat answer shorter than its header");
  if (layout != kLayout) {
    return absl::InvalidArgumentError(
        StrCat("flat answer of layout ", layout, "; this client reads layout ", kLayout));
  }
  if ((which != kWhichOpen && which != kWhichClaim) || (flags & ~kKnownFlags) != 0 || pad0 != 0 ||
      pad1 != 0) {
    return absl::InvalidArgumentError("flat answer with an unknown kind or flag");
  }
  v1::OpenResponse* a = which == kWhichClaim ? out->mutable_claim() : out->mutable_open();
  // Written into the message in the order the layout gives them; a message
  // part the flags say is absent is cleared at the end (its fields zero).
  v1::BufferInfo* b = a->mutable_buffer();
  v1::TensorDescriptor* t = b->mutable_tensor();
  v1::ImportDescriptor* im = a->mutable_import();
  b->set_state(static_cast<v1::BufferState>(static_cast<int32_t>(r.U32())));
  b->set_leases(r.U32());
  t->set_dtype(static_cast<v1::DType>(static_cast<int32_t>(r.U32())));
  im->set_kind(static_cast<v1::ImportKind>(static_cast<int32_t>(r.U32())));
  out->set_request_id(r.U64());
  b->set_id(r.U64());
  b->set_size(r.U64());
  b->set_reserved_size(r.U64());
  b->set_owner_session(r.U64());
  t->set_byte_offset(r.U64());
  b->set_expires_unix_ms(static_cast<int64_t>(r.U64()));
  b->set_created_unix_ms(static_cast<int64_t>(r.U64()));
  im->set_region_id(r.U64());
  im->set_offset(r.U64());
  im->set_mapped_size(r.U64());
  im->set_fence_offset(r.U64());
  im->set_fence_value(r.U64());
  im->set_fence_region_id(r.U64());
  im->set_allocation_id(r.U64());
  for (int i = 0; i < n_shape; ++i) t->add_shape(static_cast<int64_t>(r.U64()));
  for (int i = 0; i < n_strides; ++i) t->add_strides(static_cast<int64_t>(r.U64()));
  r.Str(b->mutable_name());
  r.Str(b->mutable_device_uuid());
  r.Str(b->mutable_tenant());
  r.Str(b->mutable_backing());
  for (int i = 0; i < n_shared; ++i) r.Str(b->add_shared_with());
  r.Str(im->mutable_export_data());
  r.Str(im->mutable_device_uuid());
  b->set_keep((flags & kFlagKeep) != 0);
  b->set_client_made((flags & kFlagClientMade) != 0);
  if (!r.done()) {
    out->Clear();
    return absl::InvalidArgumentError(StrCat("flat answer of ", body.size(), " bytes ",
                                             r.ok() ? "has bytes past its end" : "is truncated"));
  }
  if ((flags & kFlagTensor) == 0) b->clear_tensor();
  if ((flags & kFlagBuffer) == 0) a->clear_buffer();
  if ((flags & kFlagImport) == 0) a->clear_import();
  return absl::OkStatus();
}

}  // namespace gpubroker
