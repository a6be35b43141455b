#include "common/wire/flat_call.h"

#include <cstdint>

#include "common/strings.h"
#include "common/wire/flat_io.h"
#include "common/wire/tensor.h"

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

void WriteCounters(const FlatCallFacts::Counters& c, Writer& w) {
  for (uint64_t v :
       {c.allocations, c.in_use_blocks, c.in_use_bytes, c.range_bytes, c.cache_hits,
        c.daemon_allocations, c.grpc_allocations, c.opens_arena, c.opens_cached, c.opens_import,
        c.opens_grpc, c.mapping_cache_misses, c.mapping_cache_evictions, c.mapping_cache_bytes}) {
    w.U64(v);
  }
}

absl::Status Refuse(std::string_view why) {
  return absl::InvalidArgumentError(StrCat("flat call: ", why));
}

}  // namespace

namespace {

// The facts of `call` (one that FitsFlatCall), as views into it.
FlatCallFacts FactsOf(const v1::Call& call) {
  FlatCallFacts f;
  f.request_id = call.request_id();
  f.has_counters = call.has_counters();
  if (f.has_counters) f.counters = CountersFromProto(call.counters());
  switch (call.request_case()) {
    case v1::Call::kOpen: {
      const v1::OpenRequest& o = call.open();
      f.kind = FlatCallFacts::Kind::kOpen;
      f.by_id = o.ref().ref_case() == v1::BufferRef::kId;
      f.by_name = o.ref().ref_case() == v1::BufferRef::kName;
      f.id = o.ref().id();
      f.name = o.ref().name();
      f.wait = o.wait();
      f.allow_unsealed = o.allow_unsealed();
      f.timeout_ms = o.timeout_ms();
      f.awake_us = o.awake_us();
      break;
    }
    case v1::Call::kPublish: {
      const v1::PublishRequest& p = call.publish();
      const v1::TensorDescriptor& t = p.tensor();
      f.kind = FlatCallFacts::Kind::kPublish;
      f.seal = p.seal();
      f.has_tensor = p.has_tensor();

      f.range_id = p.range_id();
      f.offset = p.offset();
      f.reserved = p.reserved();
      f.size = p.size();
      f.fence_offset = p.fence_offset();
      f.fence_value = p.fence_value();
      TensorProtoToFacts(t, &f);
      f.name = p.name();
      break;
    }
    case v1::Call::kRelease:
      f.kind = FlatCallFacts::Kind::kRelease;
      f.id = call.release().id();
      f.free = call.release().free();
      f.keep_mapping = call.release().keep_mapping();
      break;
    default:  // kClaim
      f.kind = FlatCallFacts::Kind::kClaim;
      f.secret = call.claim().secret();
      break;
  }
  return f;
}

// The calls the layout carries: an Open, a Publish, a Release or a Claim,
// but not an Open whose reference is present and names nothing, which the
// layout cannot tell from one with no reference (the daemon refuses both
// alike; it goes as protobuf, so that what is read is what was written).
bool Carried(const v1::Call& call) {
  switch (call.request_case()) {
    case v1::Call::kOpen:
      return !call.open().has_ref() || call.open().ref().ref_case() != v1::BufferRef::REF_NOT_SET;
    case v1::Call::kPublish:
    case v1::Call::kRelease:
    case v1::Call::kClaim:
      return true;
    default:
      return false;
  }
}

bool Fits(const FlatCallFacts& f) {
  return f.name.size() <= kMaxString && f.secret.size() <= kMaxString &&
         f.shape.size() <= kMaxCount && f.strides.size() <= kMaxCount;
}

}  // namespace

bool FitsFlatCall(const v1::Call& call) { return Carried(call) && Fits(FactsOf(call)); }

bool AppendFlatCall(const v1::Call& call, std::string* out) {
  return Carried(call) && AppendFlatCall(FactsOf(call), out);
}

bool AppendFlatCall(const FlatCallFacts& f, std::string* out) {
  if (!Fits(f)) return false;
  using Kind = FlatCallFacts::Kind;
  uint8_t flags = f.has_counters ? kFlagCounters : 0;
  // A Publish's tensor, when it has one; no other kind has dimensions.
  const bool dims = f.kind == Kind::kPublish && f.has_tensor;
  switch (f.kind) {
    case Kind::kOpen:
      flags |= (f.by_id ? kFlagById : 0) | (f.by_name ? kFlagByName : 0) |
               (f.wait ? kFlagWait : 0) | (f.allow_unsealed ? kFlagAllowUnsealed : 0);
      break;
    case Kind::kPublish:
      flags |= (f.seal ? kFlagSeal : 0) | (f.has_tensor ? kFlagTensor : 0);
      break;
    case Kind::kRelease:
      flags |= (f.free ? kFlagFree : 0) | (f.keep_mapping ? kFlagKeepMapping : 0);
      break;
    case Kind::kClaim:
      break;
    default:
      return false;
  }
  Writer w(out);
  w.U8(kLayout);
  w.U8(static_cast<uint8_t>(f.kind));
  w.U8(flags);
  w.U8(dims ? static_cast<uint8_t>(f.shape.size()) : 0);
  w.U8(dims ? static_cast<uint8_t>(f.strides.size()) : 0);
  w.U8(0);
  w.U8(0);
  w.U8(0);
  w.U64(f.request_id);
  if (f.has_counters) WriteCounters(f.counters, w);
  switch (f.kind) {
    case Kind::kOpen:
      // A part the flags say is absent is written as zero (one form per Call).
      w.U64(f.by_id ? f.id : 0);
      w.U64(f.timeout_ms);
      w.U64(f.awake_us);
      w.Str(f.by_name ? f.name : std::string_view());
      break;
    case Kind::kPublish:
      w.U32(f.has_tensor ? static_cast<uint32_t>(f.dtype) : 0);
      w.U32(0);
      for (uint64_t v : {f.range_id, f.offset, f.reserved, f.size, f.fence_offset, f.fence_value,
                         f.has_tensor ? f.byte_offset : 0}) {
        w.U64(v);
      }
      if (dims) {
        for (int64_t d : f.shape) w.U64(static_cast<uint64_t>(d));
        for (int64_t d : f.strides) w.U64(static_cast<uint64_t>(d));
      }
      w.Str(f.name);
      break;
    case Kind::kRelease:
      w.U64(f.id);
      break;
    default:
      w.Str(f.secret);
      break;
  }
  return true;
}

FlatCallFacts::Counters CountersFromProto(const v1::ClientCounters& c) {
  FlatCallFacts::Counters v;
  v.allocations = c.allocations();
  v.in_use_blocks = c.in_use_blocks();
  v.in_use_bytes = c.in_use_bytes();
  v.range_bytes = c.range_bytes();
  v.cache_hits = c.cache_hits();
  v.daemon_allocations = c.daemon_allocations();
  v.grpc_allocations = c.grpc_allocations();
  v.opens_arena = c.opens_arena();
  v.opens_cached = c.opens_cached();
  v.opens_import = c.opens_import();
  v.opens_grpc = c.opens_grpc();
  v.mapping_cache_misses = c.mapping_cache_misses();
  v.mapping_cache_evictions = c.mapping_cache_evictions();
  v.mapping_cache_bytes = c.mapping_cache_bytes();
  return v;
}

void CountersToProto(const FlatCallFacts::Counters& v, v1::ClientCounters* c) {
  c->set_allocations(v.allocations);
  c->set_in_use_blocks(v.in_use_blocks);
  c->set_in_use_bytes(v.in_use_bytes);
  c->set_range_bytes(v.range_bytes);
  c->set_cache_hits(v.cache_hits);
  c->set_daemon_allocations(v.daemon_allocations);
  c->set_grpc_allocations(v.grpc_allocations);
  c->set_opens_arena(v.opens_arena);
  c->set_opens_cached(v.opens_cached);
  c->set_opens_import(v.opens_import);
  c->set_opens_grpc(v.opens_grpc);
  c->set_mapping_cache_misses(v.mapping_cache_misses);
  c->set_mapping_cache_evictions(v.mapping_cache_evictions);
  c->set_mapping_cache_bytes(v.mapping_cache_bytes);
}

void ToCall(const FlatCallFacts& f, v1::Call* out) {
  out->Clear();
  out->set_request_id(f.request_id);
  if (f.has_counters) CountersToProto(f.counters, out->mutable_counters());
  switch (f.kind) {
    case FlatCallFacts::Kind::kOpen: {
      v1::OpenRequest* o = out->mutable_open();
      if (f.by_id) o->mutable_ref()->set_id(f.id);
      if (f.by_name) o->mutable_ref()->set_name(f.name.data(), f.name.size());
      o->set_wait(f.wait);
      o->set_allow_unsealed(f.allow_unsealed);
      o->set_timeout_ms(f.timeout_ms);
      o->set_awake_us(f.awake_us);
      break;
    }
    case FlatCallFacts::Kind::kPublish: {
      v1::PublishRequest* p = out->mutable_publish();
      p->set_range_id(f.range_id);
      p->set_offset(f.offset);
      p->set_reserved(f.reserved);
      p->set_size(f.size);
      p->set_name(f.name.data(), f.name.size());
      p->set_seal(f.seal);
      p->set_fence_offset(f.fence_offset);
      p->set_fence_value(f.fence_value);
      if (f.has_tensor) TensorToProto(f, p->mutable_tensor());
      break;
    }
    case FlatCallFacts::Kind::kRelease: {
      v1::ReleaseRequest* r = out->mutable_release();
      r->set_id(f.id);
      r->set_free(f.free);
      r->set_keep_mapping(f.keep_mapping);
      break;
    }
    case FlatCallFacts::Kind::kClaim:
      out->mutable_claim()->set_secret(f.secret.data(), f.secret.size());
      break;
  }
}

absl::Status DecodeFlatCall(std::string_view body, FlatCallRead* out) {
  FlatCallFacts& f = out->facts_;
  f = FlatCallFacts{};
  out->dims_.clear();
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
  f.kind = static_cast<FlatCallFacts::Kind>(which);
  f.request_id = r.U64();
  f.has_counters = (flags & kFlagCounters) != 0;
  if (f.has_counters) {
    FlatCallFacts::Counters& c = f.counters;
    for (uint64_t* v : {&c.allocations, &c.in_use_blocks, &c.in_use_bytes, &c.range_bytes,
                        &c.cache_hits, &c.daemon_allocations, &c.grpc_allocations, &c.opens_arena,
                        &c.opens_cached, &c.opens_import, &c.opens_grpc, &c.mapping_cache_misses,
                        &c.mapping_cache_evictions, &c.mapping_cache_bytes}) {
      *v = r.U64();
    }
  }
  bool consistent = true;  // no field the flags say is absent holds a value
  bool utf8 = true;        // the strings of `string` fields
  switch (which) {
    case kWhichOpen:
      f.id = r.U64();
      f.timeout_ms = r.U64();
      f.awake_us = r.U64();
      f.name = r.View();
      f.wait = (flags & kFlagWait) != 0;
      f.allow_unsealed = (flags & kFlagAllowUnsealed) != 0;
      f.by_id = (flags & kFlagById) != 0;
      f.by_name = (flags & kFlagByName) != 0;
      consistent =
          !(f.by_id && f.by_name) && (f.by_id || f.id == 0) && (f.by_name || f.name.empty());
      utf8 = IsUtf8(f.name);
      break;
    case kWhichPublish: {
      f.dtype = static_cast<int32_t>(r.U32());
      const uint32_t pad3 = r.U32();
      f.range_id = r.U64();
      f.offset = r.U64();
      f.reserved = r.U64();
      f.size = r.U64();
      f.fence_offset = r.U64();
      f.fence_value = r.U64();
      f.byte_offset = r.U64();
      for (int i = 0; i < n_shape + n_strides; ++i) {
        out->dims_.push_back(static_cast<int64_t>(r.U64()));
      }
      f.shape = std::span<const int64_t>(out->dims_.data(), n_shape);
      f.strides = std::span<const int64_t>(out->dims_.data() + n_shape, n_strides);
      f.name = r.View();
      f.seal = (flags & kFlagSeal) != 0;
      f.has_tensor = (flags & kFlagTensor) != 0;
      utf8 = IsUtf8(f.name);
      // A tensor said absent is written as zeros.
      consistent =
          pad3 == 0 &&
          (f.has_tensor || (f.dtype == 0 && f.byte_offset == 0 && n_shape == 0 && n_strides == 0));
      break;
    }
    case kWhichRelease:
      f.id = r.U64();
      f.free = (flags & kFlagFree) != 0;
      f.keep_mapping = (flags & kFlagKeepMapping) != 0;
      break;
    default:
      f.secret = r.View();
      break;
  }
  absl::Status refused;
  if (!r.done()) {
    refused =
        Refuse(StrCat(body.size(), " bytes ",
                      r.ok() ? "with bytes past the call's end" : "that end inside the call"));
  } else if (!consistent || !utf8) {
    refused = Refuse(utf8 ? "a field that its flags say is absent holds a value"
                          : "a name that is not UTF-8");
  }
  if (!refused.ok()) {
    f = FlatCallFacts{};
    out->dims_.clear();
  }
  return refused;
}

absl::Status DecodeFlatCall(std::string_view body, v1::Call* out) {
  out->Clear();
  FlatCallRead read;
  if (absl::Status st = DecodeFlatCall(body, &read); !st.ok()) return st;
  ToCall(read.facts(), out);
  return absl::OkStatus();
}

}  // namespace gpubroker
