#include "common/wire/flat_call.h"

#include <cstdint>

#include "common/strings.h"
#include "common/wire/flat_io.h"

namespace gpubroker {
namespace {

// The calls' layout 1, little-endian throughout:
//   u8 layout (0x41: the answers' layouts count from 1, the calls' from
//       0x41, so that neither decoder takes the other's frames),
//   u8 which (kWhich*), u8 flags (kFlag*), u8 shape count, u8 strides
//       count, u8 0, u16 0
//   u64 request_id
//   with kFlagCounters: the ClientCounters, 14 u64 in field-number order
//   Open:    u64 id, timeout_ms, awake_us; name (u16 length + bytes)
//   Publish: u32 dtype, u32 0; u64 range_id, offset, reserved, size,
//            fence_offset, fence_value, byte_offset; i64 shape[], strides[];
//            name
//   Release: u64 id
//   Claim:   secret (u16 length + bytes)
// A field the message does not hold is written as zero or empty, and read
// back only as that: each Call has one flat form.
constexpr uint8_t kLayout = 0x41;
constexpr uint8_t kWhichOpen = 1;
constexpr uint8_t kWhichPublish = 2;
constexpr uint8_t kWhichRelease = 3;
constexpr uint8_t kWhichClaim = 4;

constexpr uint8_t kFlagCounters = 1;  // every kind
// Open
constexpr uint8_t kFlagById = 2;
constexpr uint8_t kFlagByName = 4;
constexpr uint8_t kFlagWait = 8;
constexpr uint8_t kFlagAllowUnsealed = 16;
// Publish
constexpr uint8_t kFlagSeal = 2;
constexpr uint8_t kFlagTensor = 4;
// Release
constexpr uint8_t kFlagFree = 2;
constexpr uint8_t kFlagKeepMapping = 4;

constexpr uint8_t KnownFlags(uint8_t which) {
  switch (which) {
    case kWhichOpen:
      return kFlagCounters | kFlagById | kFlagByName | kFlagWait | kFlagAllowUnsealed;
    case kWhichPublish:
      return kFlagCounters | kFlagSeal | kFlagTensor;
    case kWhichRelease:
      return kFlagCounters | kFlagFree | kFlagKeepMapping;
    case kWhichClaim:
      return kFlagCounters;
    default:
      return 0;
  }
}

using flat::IsUtf8;
using flat::kMaxCount;
using flat::kMaxString;
using flat::Reader;
using flat::Writer;

void WriteCounters(const v1::ClientCounters& c, Writer& w) {
  for (uint64_t v : {c.allocations(), c.in_use_blocks(), c.in_use_bytes(), c.range_bytes(),
                     c.cache_hits(), c.daemon_allocations(), c.grpc_allocations(), c.opens_arena(),
                     c.opens_cached(), c.opens_import(), c.opens_grpc(), c.mapping_cache_misses(),
                     c.mapping_cache_evictions(), c.mapping_cache_bytes()}) {
    w.U64(v);
  }
}

void ReadCounters(Reader& r, v1::ClientCounters* c) {
  c->set_allocations(r.U64());
  c->set_in_use_blocks(r.U64());
  c->set_in_use_bytes(r.U64());
  c->set_range_bytes(r.U64());
  c->set_cache_hits(r.U64());
  c->set_daemon_allocations(r.U64());
  c->set_grpc_allocations(r.U64());
  c->set_opens_arena(r.U64());
  c->set_opens_cached(r.U64());
  c->set_opens_import(r.U64());
  c->set_opens_grpc(r.U64());
  c->set_mapping_cache_misses(r.U64());
  c->set_mapping_cache_evictions(r.U64());
  c->set_mapping_cache_bytes(r.U64());
}

absl::Status Refuse(std::string_view why) {
  return absl::InvalidArgumentError(StrCat("flat call: ", why));
}

}  // namespace

bool FitsFlatCall(const v1::Call& call) {
  switch (call.request_case()) {
    case v1::Call::kOpen:
      return call.open().ref().name().size() <= kMaxString;
    case v1::Call::kPublish: {
      const v1::PublishRequest& p = call.publish();
      return p.name().size() <= kMaxString &&
             p.tensor().shape_size() <= static_cast<int>(kMaxCount) &&
             p.tensor().strides_size() <= static_cast<int>(kMaxCount);
    }
    case v1::Call::kRelease:
      return true;
    case v1::Call::kClaim:
      return call.claim().secret().size() <= kMaxString;
    default:
      return false;
  }
}

bool AppendFlatCall(const v1::Call& call, std::string* out) {
  if (!FitsFlatCall(call)) return false;
  Writer w(out);
  uint8_t which = 0;
  uint8_t flags = call.has_counters() ? kFlagCounters : 0;
  int n_shape = 0, n_strides = 0;
  switch (call.request_case()) {
    case v1::Call::kOpen: {
      const v1::OpenRequest& o = call.open();
      which = kWhichOpen;
      flags |= (o.ref().ref_case() == v1::BufferRef::kId ? kFlagById : 0) |
               (o.ref().ref_case() == v1::BufferRef::kName ? kFlagByName : 0) |
               (o.wait() ? kFlagWait : 0) | (o.allow_unsealed() ? kFlagAllowUnsealed : 0);
      break;
    }
    case v1::Call::kPublish: {
      const v1::PublishRequest& p = call.publish();
      which = kWhichPublish;
      flags |= (p.seal() ? kFlagSeal : 0) | (p.has_tensor() ? kFlagTensor : 0);
      n_shape = p.tensor().shape_size();
      n_strides = p.tensor().strides_size();
      break;
    }
    case v1::Call::kRelease:
      which = kWhichRelease;
      flags |= (call.release().free() ? kFlagFree : 0) |
               (call.release().keep_mapping() ? kFlagKeepMapping : 0);
      break;
    default:  // kClaim (FitsFlatCall)
      which = kWhichClaim;
      break;
  }
  w.U8(kLayout);
  w.U8(which);
  w.U8(flags);
  w.U8(static_cast<uint8_t>(n_shape));
  w.U8(static_cast<uint8_t>(n_strides));
  w.U8(0);
  w.U8(0);
  w.U8(0);
  w.U64(call.request_id());
  if (call.has_counters()) WriteCounters(call.counters(), w);
  switch (which) {
    case kWhichOpen: {
      const v1::OpenRequest& o = call.open();
      w.U64(o.ref().id());
      w.U64(o.timeout_ms());
      w.U64(o.awake_us());
      w.Str(o.ref().name());
      break;
    }
    case kWhichPublish: {
      const v1::PublishRequest& p = call.publish();
      const v1::TensorDescriptor& t = p.tensor();
      w.U32(static_cast<uint32_t>(t.dtype()));
      w.U32(0);
      for (uint64_t v : {p.range_id(), p.offset(), p.reserved(), p.size(), p.fence_offset(),
                         p.fence_value(), t.byte_offset()}) {
        w.U64(v);
      }
      for (int64_t d : t.shape()) w.U64(static_cast<uint64_t>(d));
      for (int64_t d : t.strides()) w.U64(static_cast<uint64_t>(d));
      w.Str(p.name());
      break;
    }
    case kWhichRelease:
      w.U64(call.release().id());
      break;
    default:
      w.Str(call.claim().secret());
      break;
  }
  return true;
}

absl::Status DecodeFlatCall(std::string_view body, v1::Call* out) {
  out->Clear();
  Reader r(body);
  const uint8_t layout = r.U8();
  const uint8_t which = r.U8();
  const uint8_t flags = r.U8();
  const uint8_t n_shape = r.U8();
  const uint8_t n_strides = r.U8();
  const uint8_t pad0 = r.U8();
  const uint8_t pad1 = r.U8();
  const uint8_t pad2 = r.U8();
  if (!r.ok()) return Refuse("shorter than its header");
  if (layout != kLayout) {
    return Refuse(StrCat("layout ", layout, "; this daemon reads layout ", kLayout,
                         " (the calls' layout 1)"));
  }
  const uint8_t known = KnownFlags(which);
  if (known == 0) return Refuse(StrCat("unknown kind ", which));
  if ((flags & ~known) != 0 || (pad0 | pad1 | pad2) != 0) {
    return Refuse("an unknown flag, or padding that is not zero");
  }
  if (which != kWhichPublish && (n_shape | n_strides) != 0) {
    return Refuse("a shape in a call that has none");
  }
  out->set_request_id(r.U64());
  if (flags & kFlagCounters) ReadCounters(r, out->mutable_counters());
  bool consistent = true;  // no field the flags say is absent holds a value
  bool utf8 = true;        // the strings of `string` fields
  switch (which) {
    case kWhichOpen: {
      v1::OpenRequest* o = out->mutable_open();
      const uint64_t id = r.U64();
      o->set_timeout_ms(r.U64());
      o->set_awake_us(r.U64());
      std::string name;
      r.Str(&name);
      o->set_wait((flags & kFlagWait) != 0);
      o->set_allow_unsealed((flags & kFlagAllowUnsealed) != 0);
      const bool by_id = (flags & kFlagById) != 0, by_name = (flags & kFlagByName) != 0;
      consistent = !(by_id && by_name) && (by_id || id == 0) && (by_name || name.empty());
      utf8 = IsUtf8(name);
      if (by_id) o->mutable_ref()->set_id(id);
      if (by_name) o->mutable_ref()->set_name(std::move(name));
      break;
    }
    case kWhichPublish: {
      v1::PublishRequest* p = out->mutable_publish();
      v1::TensorDescriptor* t = p->mutable_tensor();
      t->set_dtype(static_cast<v1::DType>(static_cast<int32_t>(r.U32())));
      const uint32_t pad3 = r.U32();
      p->set_range_id(r.U64());
      p->set_offset(r.U64());
      p->set_reserved(r.U64());
      p->set_size(r.U64());
      p->set_fence_offset(r.U64());
      p->set_fence_value(r.U64());
      t->set_byte_offset(r.U64());
      for (int i = 0; i < n_shape; ++i) t->add_shape(static_cast<int64_t>(r.U64()));
      for (int i = 0; i < n_strides; ++i) t->add_strides(static_cast<int64_t>(r.U64()));
      r.Str(p->mutable_name());
      p->set_seal((flags & kFlagSeal) != 0);
      utf8 = IsUtf8(p->name());
      if ((flags & kFlagTensor) == 0) {
        consistent = t->ByteSizeLong() == 0;  // written as zeros
        p->clear_tensor();
      }
      consistent = consistent && pad3 == 0;
      break;
    }
    case kWhichRelease: {
      v1::ReleaseRequest* rel = out->mutable_release();
      rel->set_id(r.U64());
      rel->set_free((flags & kFlagFree) != 0);
      rel->set_keep_mapping((flags & kFlagKeepMapping) != 0);
      break;
    }
    default:
      r.Str(out->mutable_claim()->mutable_secret());
      break;
  }
  if (!r.done()) {
    out->Clear();
    return Refuse(StrCat(body.size(), " bytes ",
                         r.ok() ? "with bytes past the call's end" : "that end inside the call"));
  }
  if (!consistent || !utf8) {
    out->Clear();
    return Refuse(utf8 ? "a field that its flags say is absent holds a value"
                       : "a name that is not UTF-8");
  }
  return absl::OkStatus();
}

}  // namespace gpubroker
