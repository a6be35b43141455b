#include "common/wire/flat_answer.h"

#include <cstdint>

#include "common/strings.h"
#include "common/wire/flat_io.h"
#include "common/wire/tensor.h"

namespace gpubroker {
namespace {

// Layout 1, little-endian throughout:
//   u8 layout (1), u8 which (1: Reply.open, 2: Reply.claim, 3:
//   Reply.publish, which has no import), u8 shape
//   count, u8 strides count, u8 shared_with count, u8 flags (kFlag*), u16 0
//   u32 state, leases, dtype, import kind (the enums as their int32 values)
//   u64 request_id, id, size, reserved_size, owner_session, byte_offset,
//       expires_unix_ms, created_unix_ms, region_id, offset, mapped_size,
//       fence_offset, fence_value, fence_region_id, allocation_id
//   i64 shape[], strides[]
//   strings as u16 length + bytes: name, device_uuid, tenant, backing,
//       shared_with[], export_data, the import's device_uuid
constexpr uint8_t kLayout = 1;
constexpr uint8_t kFlagKeep = 1;
constexpr uint8_t kFlagClientMade = 2;
constexpr uint8_t kFlagBuffer = 4;  // the answer has a BufferInfo
constexpr uint8_t kFlagTensor = 8;  // ... with a TensorDescriptor
constexpr uint8_t kFlagImport = 16;
constexpr uint8_t kKnownFlags =
    kFlagKeep | kFlagClientMade | kFlagBuffer | kFlagTensor | kFlagImport;

using flat::IsUtf8;
using flat::kMaxCount;
using flat::kMaxString;
using flat::Reader;
using flat::Writer;

bool IsFlatAnswer(const v1::Reply& reply) {
  return reply.response_case() == v1::Reply::kOpen || reply.response_case() == v1::Reply::kClaim ||
         reply.response_case() == v1::Reply::kPublish;
}

}  // namespace

namespace {

// The facts of `reply` (an Open's, a Claim's or a Publish's), as views into it.
FlatAnswerFacts FactsOf(const v1::Reply& reply) {
  using Kind = FlatAnswerFacts::Kind;
  const bool publish = reply.response_case() == v1::Reply::kPublish;
  const v1::OpenResponse& a =
      reply.response_case() == v1::Reply::kClaim ? reply.claim() : reply.open();
  const v1::BufferInfo& b = publish ? reply.publish().buffer() : a.buffer();
  const v1::TensorDescriptor& t = b.tensor();
  const v1::ImportDescriptor& im = publish ? v1::ImportDescriptor::default_instance() : a.import();
  FlatAnswerFacts f;
  f.kind = publish                                      ? Kind::kPublish
           : reply.response_case() == v1::Reply::kClaim ? Kind::kClaim
                                                        : Kind::kOpen;
  f.request_id = reply.request_id();
  f.has_buffer = publish ? reply.publish().has_buffer() : a.has_buffer();
  f.has_tensor = b.has_tensor();
  f.has_import = !publish && a.has_import();
  f.id = b.id();
  f.size = b.size();
  f.reserved_size = b.reserved_size();
  f.owner_session = b.owner_session();
  f.expires_unix_ms = b.expires_unix_ms();
  f.created_unix_ms = b.created_unix_ms();
  f.state = b.state();
  f.leases = b.leases();
  f.keep = b.keep();
  f.client_made = b.client_made();
  f.name = b.name();
  f.device_uuid = b.device_uuid();
  f.tenant = b.tenant();
  f.backing = b.backing();
  f.shared_with.assign(b.shared_with().begin(), b.shared_with().end());
  TensorProtoToFacts(t, &f);
  f.import_kind = im.kind();
  f.region_id = im.region_id();
  f.offset = im.offset();
  f.mapped_size = im.mapped_size();
  f.fence_offset = im.fence_offset();
  f.fence_value = im.fence_value();
  f.fence_region_id = im.fence_region_id();
  f.allocation_id = im.allocation_id();
  f.export_data = im.export_data();
  f.import_device_uuid = im.device_uuid();
  return f;
}

bool Fits(const FlatAnswerFacts& f) {
  if (f.shape.size() > kMaxCount || f.strides.size() > kMaxCount ||
      f.shared_with.size() > kMaxCount) {
    return false;
  }
  for (std::string_view s :
       {f.name, f.device_uuid, f.tenant, f.backing, f.export_data, f.import_device_uuid}) {
    if (s.size() > kMaxString) return false;
  }
  for (std::string_view s : f.shared_with) {
    if (s.size() > kMaxString) return false;
  }
  return true;
}

}  // namespace

bool FitsFlatAnswer(const v1::Reply& reply) { return IsFlatAnswer(reply) && Fits(FactsOf(reply)); }

bool AppendFlatAnswer(const v1::Reply& reply, std::string* out) {
  return IsFlatAnswer(reply) && AppendFlatAnswer(FactsOf(reply), out);
}

bool AppendFlatAnswer(const FlatAnswerFacts& f, std::string* out) {
  // A Publish's answer has no import.
  if (!Fits(f) || (f.kind == FlatAnswerFacts::Kind::kPublish && f.has_import)) return false;
  Writer w(out);
  w.U8(kLayout);
  w.U8(static_cast<uint8_t>(f.kind));
  w.U8(static_cast<uint8_t>(f.shape.size()));
  w.U8(static_cast<uint8_t>(f.strides.size()));
  w.U8(static_cast<uint8_t>(f.shared_with.size()));
  w.U8((f.keep ? kFlagKeep : 0) | (f.client_made ? kFlagClientMade : 0) |
       (f.has_buffer ? kFlagBuffer : 0) | (f.has_tensor ? kFlagTensor : 0) |
       (f.has_import ? kFlagImport : 0));
  w.U8(0);
  w.U8(0);
  w.U32(static_cast<uint32_t>(f.state));
  w.U32(f.leases);
  w.U32(static_cast<uint32_t>(f.dtype));
  w.U32(static_cast<uint32_t>(f.import_kind));
  for (uint64_t v : {f.request_id, f.id, f.size, f.reserved_size, f.owner_session, f.byte_offset,
                     static_cast<uint64_t>(f.expires_unix_ms),
                     static_cast<uint64_t>(f.created_unix_ms), f.region_id, f.offset, f.mapped_size,
                     f.fence_offset, f.fence_value, f.fence_region_id, f.allocation_id}) {
    w.U64(v);
  }
  for (int64_t d : f.shape) w.U64(static_cast<uint64_t>(d));
  for (int64_t d : f.strides) w.U64(static_cast<uint64_t>(d));
  w.Str(f.name);
  w.Str(f.device_uuid);
  w.Str(f.tenant);
  w.Str(f.backing);
  for (std::string_view s : f.shared_with) w.Str(s);
  w.Str(f.export_data);
  w.Str(f.import_device_uuid);
  return true;
}

absl::Status DecodeFlatAnswer(std::string_view body, FlatAnswerRead* out) {
  FlatAnswerFacts& f = out->facts_;
  f = FlatAnswerFacts{};
  out->dims_.clear();
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
  using Kind = FlatAnswerFacts::Kind;
  const bool publish = which == static_cast<uint8_t>(Kind::kPublish);
  if (which < static_cast<uint8_t>(Kind::kOpen) || which > static_cast<uint8_t>(Kind::kPublish) ||
      (flags & ~kKnownFlags) != 0 || pad0 != 0 || pad1 != 0 || (publish && (flags & kFlagImport))) {
    return absl::InvalidArgumentError("flat answer with an unknown kind or flag");
  }
  f.kind = static_cast<Kind>(which);
  f.has_buffer = (flags & kFlagBuffer) != 0;
  f.has_tensor = (flags & kFlagTensor) != 0;
  f.has_import = (flags & kFlagImport) != 0;
  f.keep = (flags & kFlagKeep) != 0;
  f.client_made = (flags & kFlagClientMade) != 0;
  f.state = static_cast<int32_t>(r.U32());
  f.leases = r.U32();
  f.dtype = static_cast<int32_t>(r.U32());
  f.import_kind = static_cast<int32_t>(r.U32());
  f.request_id = r.U64();
  f.id = r.U64();
  f.size = r.U64();
  f.reserved_size = r.U64();
  f.owner_session = r.U64();
  f.byte_offset = r.U64();
  f.expires_unix_ms = static_cast<int64_t>(r.U64());
  f.created_unix_ms = static_cast<int64_t>(r.U64());
  f.region_id = r.U64();
  f.offset = r.U64();
  f.mapped_size = r.U64();
  f.fence_offset = r.U64();
  f.fence_value = r.U64();
  f.fence_region_id = r.U64();
  f.allocation_id = r.U64();
  for (int i = 0; i < n_shape + n_strides; ++i) out->dims_.push_back(static_cast<int64_t>(r.U64()));
  f.shape = std::span<const int64_t>(out->dims_.data(), n_shape);
  f.strides = std::span<const int64_t>(out->dims_.data() + n_shape, n_strides);
  f.name = r.View();
  f.device_uuid = r.View();
  f.tenant = r.View();
  f.backing = r.View();
  for (int i = 0; i < n_shared; ++i) f.shared_with.push_back(r.View());
  f.export_data = r.View();
  f.import_device_uuid = r.View();
  // What protobuf's parse would refuse of the message, so is refused here:
  // its `string` fields hold UTF-8 (export_data is `bytes`).
  bool utf8 = IsUtf8(f.name) && IsUtf8(f.device_uuid) && IsUtf8(f.tenant) && IsUtf8(f.backing) &&
              IsUtf8(f.import_device_uuid);
  for (std::string_view s : f.shared_with) utf8 = utf8 && IsUtf8(s);
  absl::Status refused;
  if (!r.done()) {
    refused =
        absl::InvalidArgumentError(StrCat("flat answer of ", body.size(), " bytes ",
                                          r.ok() ? "has bytes past its end" : "is truncated"));
  } else if (!utf8) {
    refused = absl::InvalidArgumentError("flat answer with a string that is not UTF-8");
  }
  if (!refused.ok()) {
    f = FlatAnswerFacts{};
    out->dims_.clear();
  }
  return refused;
}

absl::Status DecodeFlatAnswer(std::string_view body, v1::Reply* out) {
  out->Clear();
  FlatAnswerRead read;
  if (absl::Status st = DecodeFlatAnswer(body, &read); !st.ok()) return st;
  const FlatAnswerFacts& f = read.facts();
  out->set_request_id(f.request_id);
  using Kind = FlatAnswerFacts::Kind;
  if (f.kind == Kind::kPublish) {
    out->mutable_publish();
  }
  v1::OpenResponse* a = f.kind == Kind::kClaim  ? out->mutable_claim()
                        : f.kind == Kind::kOpen ? out->mutable_open()
                                                : nullptr;
  // A part the flags say is absent stays unset: its fields read as zero,
  // which is what the writer wrote for it (FactsOf reads a default message).
  if (f.has_buffer) {
    v1::BufferInfo* b =
        a != nullptr ? a->mutable_buffer() : out->mutable_publish()->mutable_buffer();
    b->set_id(f.id);
    b->set_size(f.size);
    b->set_reserved_size(f.reserved_size);
    b->set_owner_session(f.owner_session);
    b->set_expires_unix_ms(f.expires_unix_ms);
    b->set_created_unix_ms(f.created_unix_ms);
    b->set_state(static_cast<v1::BufferState>(f.state));
    b->set_leases(f.leases);
    b->set_keep(f.keep);
    b->set_client_made(f.client_made);
    b->set_name(f.name.data(), f.name.size());
    b->set_device_uuid(f.device_uuid.data(), f.device_uuid.size());
    b->set_tenant(f.tenant.data(), f.tenant.size());
    b->set_backing(f.backing.data(), f.backing.size());
    for (std::string_view s : f.shared_with) b->add_shared_with(s.data(), s.size());
    if (f.has_tensor) TensorToProto(f, b->mutable_tensor());
  }
  if (f.has_import && a != nullptr) {
    v1::ImportDescriptor* im = a->mutable_import();
    im->set_kind(static_cast<v1::ImportKind>(f.import_kind));
    im->set_region_id(f.region_id);
    im->set_offset(f.offset);
    im->set_mapped_size(f.mapped_size);
    im->set_fence_offset(f.fence_offset);
    im->set_fence_value(f.fence_value);
    im->set_fence_region_id(f.fence_region_id);
    im->set_allocation_id(f.allocation_id);
    im->set_export_data(f.export_data.data(), f.export_data.size());
    im->set_device_uuid(f.import_device_uuid.data(), f.import_device_uuid.size());
  }
  return absl::OkStatus();
}

}  // namespace gpubroker
