// gpubroker-frame-cold: what session.sock's protobuf frames cost a process
// that has just woken, against the same facts in a flat struct.
//
// Every step of a hand-over runs in a process that slept a millisecond or
// more before it (docs/performance.md, "Seal + wait cut into hops"), and each
// costs several times what it costs in a warm loop. This program times the
// frames of a hand-over's critical path that way: each step after 1 ms
// asleep, and back to back, p50 over the iterations. The facts are those of a
// 64 MiB buffer of a tenant's GPU arena with a 2-D tensor, the Open answer
// the daemon sends to a consumer.
//
// It answers one question before anyone rewrites the wire: how much of a
// cold hand-over is protobuf's encoding and parsing, and so how much a flat
// frame for the hot calls could take off. No daemon, no GPU: the same code
// the daemon and the client run (the generated messages, the daemon's arena
// with its first block on the stack, the client's parse on the heap).
#include <google/protobuf/arena.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gpubroker/v1/session.pb.h"

namespace {

using namespace gpubroker::v1;  // NOLINT: a benchmark of these messages alone

volatile uint64_t g_sink;

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr const char* kUuid = "GPU-8a3c2f1e-1234-5678-9abc-def012345678";

// The daemon's answer to an Open of a sealed 64 MiB arena buffer.
void FillOpenAnswer(Reply& reply) {
  reply.set_request_id(42);
  OpenResponse* open = reply.mutable_open();
  BufferInfo* b = open->mutable_buffer();
  b->set_id(123456);
  b->set_name("handover.64MiB.17");
  b->set_size(64 << 20);
  b->set_reserved_size(64 << 20);
  b->set_device_uuid(kUuid);
  b->set_tenant("default");
  b->set_state(BUFFER_STATE_SEALED);
  TensorDescriptor* t = b->mutable_tensor();
  t->set_dtype(DTYPE_FLOAT32);
  t->add_shape(4096);
  t->add_shape(4096);
  b->set_leases(2);
  b->set_owner_session(7);
  b->set_created_unix_ms(1765000000000);
  b->set_backing("cuda-arena");
  b->set_client_made(true);
  ImportDescriptor* im = open->mutable_import();
  im->set_kind(IMPORT_KIND_CUDA_ARENA);
  im->set_region_id(3);
  im->set_offset(1 << 26);
  im->set_mapped_size(64 << 20);
  im->set_device_uuid(kUuid);
  im->set_fence_offset(4096);
  im->set_fence_value(99);
  im->set_fence_region_id(2);
}

// The producer's seal of a block it made: PublishRequest with a tensor.
void FillPublish(Call& call) {
  call.set_request_id(41);
  PublishRequest* p = call.mutable_publish();
  p->set_range_id(5);
  p->set_offset(1 << 26);
  p->set_reserved(64 << 20);
  p->set_size(64 << 20);
  p->set_name("handover.64MiB.17");
  TensorDescriptor* t = p->mutable_tensor();
  t->set_dtype(DTYPE_FLOAT32);
  t->add_shape(4096);
  t->add_shape(4096);
  p->set_seal(true);
  p->set_fence_offset(4096);
  p->set_fence_value(99);
}

// The same facts as the Open answer, as a fixed layout: what a flat frame
// would carry (strings inline with their lengths).
struct FlatOpenAnswer {
  uint64_t request_id, id, size, reserved_size, owner_session, region_id, offset, mapped_size;
  uint64_t fence_offset, fence_value, fence_region_id;
  int64_t created_unix_ms, shape[8], strides[8];
  uint32_t state, dtype, ndim, leases, kind, flags;
  uint16_t name_len, tenant_len;
  char name[256], tenant[64], uuid[40];
};

// Encodes `frame` the way both sides write one: its size, then its bytes.
size_t Encode(const SessionFrame& frame, char* out) {
  const size_t n = frame.ByteSizeLong();
  frame.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out));
  return n;
}

// The Open answer's message written and read in a flat layout (fixed
// 8-byte fields, strings as a 2-byte length and their bytes): what a flat
// frame would cost where both sides keep the messages they use today.
class FlatWriter {
 public:
  explicit FlatWriter(char* out) : p_(out) {}
  void U64(uint64_t v) {
    std::memcpy(p_, &v, 8);
    p_ += 8;
  }
  void Str(const std::string& s) {
    const uint16_t n = static_cast<uint16_t>(s.size());
    std::memcpy(p_, &n, 2);
    std::memcpy(p_ + 2, s.data(), n);
    p_ += 2 + n;
  }
  char* end() const { return p_; }

 private:
  char* p_;
};

class FlatReader {
 public:
  explicit FlatReader(const char* in) : p_(in) {}
  uint64_t U64() {
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  void Str(std::string* s) {
    uint16_t n;
    std::memcpy(&n, p_, 2);
    s->assign(p_ + 2, n);
    p_ += 2 + n;
  }

 private:
  const char* p_;
};

size_t EncodeFlat(const Reply& r, char* out) {
  FlatWriter w(out);
  const BufferInfo& b = r.open().buffer();
  const ImportDescriptor& im = r.open().import();
  for (uint64_t v :
       {r.request_id(), b.id(), b.size(), b.reserved_size(), static_cast<uint64_t>(b.state()),
        uint64_t{b.leases()}, b.owner_session(), static_cast<uint64_t>(b.created_unix_ms()),
        uint64_t{b.client_made()}, static_cast<uint64_t>(b.tensor().dtype()),
        static_cast<uint64_t>(b.tensor().shape_size())}) {
    w.U64(v);
  }
  for (int64_t d : b.tensor().shape()) w.U64(static_cast<uint64_t>(d));
  w.Str(b.name());
  w.Str(b.device_uuid());
  w.Str(b.tenant());
  w.Str(b.backing());
  for (uint64_t v :
       {static_cast<uint64_t>(im.kind()), im.region_id(), im.offset(), im.mapped_size(),
        im.fence_offset(), im.fence_value(), im.fence_region_id(), im.allocation_id()}) {
    w.U64(v);
  }
  w.Str(im.device_uuid());
  return static_cast<size_t>(w.end() - out);
}

void DecodeFlat(const char* in, Reply* r) {
  FlatReader d(in);
  r->set_request_id(d.U64());
  BufferInfo* b = r->mutable_open()->mutable_buffer();
  b->set_id(d.U64());
  b->set_size(d.U64());
  b->set_reserved_size(d.U64());
  b->set_state(static_cast<BufferState>(d.U64()));
  b->set_leases(static_cast<uint32_t>(d.U64()));
  b->set_owner_session(d.U64());
  b->set_created_unix_ms(static_cast<int64_t>(d.U64()));
  b->set_client_made(d.U64() != 0);
  TensorDescriptor* t = b->mutable_tensor();
  t->set_dtype(static_cast<DType>(d.U64()));
  for (uint64_t i = 0, n = d.U64(); i < n; ++i) t->add_shape(static_cast<int64_t>(d.U64()));
  d.Str(b->mutable_name());
  d.Str(b->mutable_device_uuid());
  d.Str(b->mutable_tenant());
  d.Str(b->mutable_backing());
  ImportDescriptor* im = r->mutable_open()->mutable_import();
  im->set_kind(static_cast<ImportKind>(d.U64()));
  im->set_region_id(d.U64());
  im->set_offset(d.U64());
  im->set_mapped_size(d.U64());
  im->set_fence_offset(d.U64());
  im->set_fence_value(d.U64());
  im->set_fence_region_id(d.U64());
  im->set_allocation_id(d.U64());
  d.Str(im->mutable_device_uuid());
}

struct Step {
  const char* what;
  std::function<void()> run;
  std::vector<double> asleep, warm;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 300;
  const auto idle = std::chrono::milliseconds(argc > 2 ? std::atoi(argv[2]) : 1);

  // The bytes each parse step reads, made once.
  char open_call[256], open_answer[1024], publish_call[512], flat_answer[1024];
  size_t open_call_n = 0, open_answer_n = 0, publish_call_n = 0, flat_answer_n = 0;
  {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    open_call_n = Encode(f, open_call);
    SessionFrame a;
    FillOpenAnswer(*a.mutable_reply());
    open_answer_n = Encode(a, open_answer);
    flat_answer_n = EncodeFlat(a.reply(), flat_answer);
    SessionFrame p;
    FillPublish(*p.mutable_call());
    publish_call_n = Encode(p, publish_call);
  }
  FlatOpenAnswer flat_wire{};
  char scratch[1024];

  std::vector<Step> steps;
  steps.push_back({"consumer: build and encode its Open call", [&] {
                     SessionFrame f;
                     f.mutable_call()->set_request_id(42);
                     f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
                     g_sink = Encode(f, scratch);
                   }});
  steps.push_back({"daemon: parse the Open call", [&] {
                     SessionFrame f;
                     f.ParseFromArray(open_call, static_cast<int>(open_call_n));
                     g_sink = f.call().open().ref().name().size();
                   }});
  steps.push_back({"daemon: build and encode the Open's answer (arena)", [&] {
                     alignas(8) char first[4096];
                     google::protobuf::ArenaOptions o;
                     o.initial_block = first;
                     o.initial_block_size = sizeof(first);
                     google::protobuf::Arena arena(o);
                     auto* f = google::protobuf::Arena::Create<SessionFrame>(&arena);
                     FillOpenAnswer(*f->mutable_reply());
                     g_sink = Encode(*f, scratch);
                   }});
  steps.push_back({"consumer: parse the Open's answer", [&] {
                     SessionFrame f;
                     f.ParseFromArray(open_answer, static_cast<int>(open_answer_n));
                     g_sink = f.reply().open().import().offset();
                   }});
  steps.push_back({"producer: build and encode its Publish (seal)", [&] {
                     SessionFrame f;
                     FillPublish(*f.mutable_call());
                     g_sink = Encode(f, scratch);
                   }});
  steps.push_back({"daemon: parse the Publish", [&] {
                     SessionFrame f;
                     f.ParseFromArray(publish_call, static_cast<int>(publish_call_n));
                     g_sink = f.call().publish().offset();
                   }});
  steps.push_back({"the answer flat: built on the arena, written flat", [&] {
                     alignas(8) char first[4096];
                     google::protobuf::ArenaOptions o;
                     o.initial_block = first;
                     o.initial_block_size = sizeof(first);
                     google::protobuf::Arena arena(o);
                     auto* r = google::protobuf::Arena::Create<Reply>(&arena);
                     FillOpenAnswer(*r);
                     g_sink = EncodeFlat(*r, scratch);
                   }});
  steps.push_back({"the answer flat: read into the message", [&] {
                     Reply r;
                     DecodeFlat(flat_answer, &r);
                     g_sink = r.open().import().offset();
                   }});
  steps.push_back({"flat: write the Open answer's facts", [&] {
                     FlatOpenAnswer a{};
                     a.request_id = 42;
                     a.id = 123456;
                     a.size = a.reserved_size = a.mapped_size = 64 << 20;
                     a.owner_session = 7;
                     a.created_unix_ms = 1765000000000;
                     a.state = BUFFER_STATE_SEALED;
                     a.dtype = DTYPE_FLOAT32;
                     a.ndim = 2;
                     a.shape[0] = a.shape[1] = 4096;
                     a.leases = 2;
                     a.kind = IMPORT_KIND_CUDA_ARENA;
                     a.region_id = 3;
                     a.offset = 1 << 26;
                     a.fence_offset = 4096;
                     a.fence_value = 99;
                     a.fence_region_id = 2;
                     a.name_len = 17;
                     std::memcpy(a.name, "handover.64MiB.17", 17);
                     a.tenant_len = 7;
                     std::memcpy(a.tenant, "default", 7);
                     std::memcpy(a.uuid, kUuid, 40);
                     std::memcpy(&flat_wire, &a, sizeof(a));
                   }});
  steps.push_back({"flat: read them (the name into a std::string)", [&] {
                     FlatOpenAnswer a;
                     std::memcpy(&a, &flat_wire, sizeof(a));
                     const std::string name(a.name, std::min<size_t>(a.name_len, sizeof(a.name)));
                     g_sink = a.offset + name.size();
                   }});

  for (int i = 0; i < iterations; ++i) {
    for (Step& s : steps) {
      std::this_thread::sleep_for(idle);
      double t0 = NowUs();
      s.run();
      s.asleep.push_back(NowUs() - t0);
      // Then again at once: the same step warm.
      t0 = NowUs();
      s.run();
      s.warm.push_back(NowUs() - t0);
    }
  }
  std::printf(
      "session.sock frames, p50 us of %d: each step after %lld ms asleep, and right after itself\n",
      iterations, static_cast<long long>(idle.count()));
  std::printf(
      "(the Open call %zu bytes, its answer %zu, the Publish %zu; the answer flat %zu, its facts "
      "as a struct %zu)\n",
      open_call_n, open_answer_n, publish_call_n, flat_answer_n, sizeof(FlatOpenAnswer));
  double proto_asleep = 0, proto_warm = 0;
  for (const Step& s : steps) {
    const double a = Median(s.asleep), w = Median(s.warm);
    std::printf("  %-58s %8.2f %8.2f\n", s.what, a, w);
    if (std::strncmp(s.what, "flat", 4) != 0 && std::strncmp(s.what, "the answer flat", 15) != 0) {
      proto_asleep += a;
      proto_warm += w;
    }
  }
  std::printf("  %-58s %8.2f %8.2f\n", "the six protobuf steps together", proto_asleep, proto_warm);
  return 0;
}
