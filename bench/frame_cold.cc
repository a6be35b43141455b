// gpubroker-frame-cold: what session.sock's frames cost a process that has
// just woken: protobuf's, the flat answers' (common/wire/flat_answer.h), and
// the same facts in a plain struct.
//
// Every step of a hand-over runs in a process that slept a millisecond or
// more before it (docs/performance.md, "Seal + wait cut into hops"), and each
// costs several times what it costs in a warm loop. This program times the
// frames of a hand-over's critical path that way: each step after 1 ms
// asleep, and back to back, p50 over the iterations. The facts are those of a
// 64 MiB buffer of a tenant's GPU arena with a 2-D tensor, the Open answer
// the daemon sends to a consumer.
//
// It says how much of a cold hand-over is protobuf's encoding and parsing,
// what the flat answers take off each process's turn, and what a path with
// no messages at all could (docs/performance.md, "What the frames cost
// cold"). No daemon, no GPU: the code the daemon and the client run (the
// generated messages, the daemon's arena with its first block on the stack,
// EncodeFrame / EncodeFrameFor, the client's FrameDecoder).
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

#include "client/src/grant.h"
#include "common/wire/flat_answer.h"
#include "common/wire/frame.h"
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

// The same answer as the daemon's books hold it (its grant: owned strings
// and vectors), from which it writes the flat frame with no message.
struct Grant {
  std::string name = "handover.64MiB.17", uuid = kUuid, tenant = "default", backing = "cuda-arena";
  std::vector<int64_t> shape = {4096, 4096};
};

gpubroker::FlatAnswerFacts FactsOf(const Grant& g) {
  gpubroker::FlatAnswerFacts f;
  f.request_id = 42;
  f.has_buffer = f.has_tensor = f.has_import = true;
  f.id = 123456;
  f.name = g.name;
  f.size = f.reserved_size = f.mapped_size = 64 << 20;
  f.device_uuid = f.import_device_uuid = g.uuid;
  f.tenant = g.tenant;
  f.state = BUFFER_STATE_SEALED;
  f.dtype = DTYPE_FLOAT32;
  f.shape = g.shape;
  f.leases = 2;
  f.owner_session = 7;
  f.created_unix_ms = 1765000000000;
  f.backing = g.backing;
  f.client_made = true;
  f.import_kind = IMPORT_KIND_CUDA_ARENA;
  f.region_id = 3;
  f.offset = 1 << 26;
  f.fence_offset = 4096;
  f.fence_value = 99;
  f.fence_region_id = 2;
  return f;
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

// The same facts as the Open answer in a plain struct (strings inline with
// their lengths): what no message at all, on either side, would cost.
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
  char open_call[256], publish_call[512];
  size_t open_call_n = 0, publish_call_n = 0;
  std::string open_answer, flat_answer;             // frames, as the daemon sends them
  std::string publish_answer, flat_publish_answer;  // the producer's, protobuf and flat
  std::string flat_open_call, flat_publish;         // frames, as the client sends them flat
  {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    open_call_n = Encode(f, open_call);
    SessionFrame a;
    FillOpenAnswer(*a.mutable_reply());
    open_answer = gpubroker::EncodeFrame(a);
    SessionFrame pa;
    pa.mutable_reply()->set_request_id(41);
    *pa.mutable_reply()->mutable_publish()->mutable_buffer() = a.reply().open().buffer();
    publish_answer = gpubroker::EncodeFrame(pa);
    gpubroker::AppendFlatAnswerFrame(pa.reply(), &flat_publish_answer);
    flat_answer = gpubroker::EncodeFrameFor(a, gpubroker::FlatFrames::kAnswers);
    flat_open_call = gpubroker::EncodeFrameFor(f, gpubroker::FlatFrames::kCalls);
    SessionFrame p;
    FillPublish(*p.mutable_call());
    publish_call_n = Encode(p, publish_call);
    flat_publish = gpubroker::EncodeFrameFor(p, gpubroker::FlatFrames::kCalls);
  }
  FlatOpenAnswer flat_wire{};
  char scratch[1024];

  // Each of a hand-over's frames, built, encoded or parsed as the daemon and
  // the client do it.
  auto encode_open_call = [&] {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    g_sink = Encode(f, scratch);
  };
  auto parse_open_call = [&] {
    SessionFrame f;
    f.ParseFromArray(open_call, static_cast<int>(open_call_n));
    g_sink = f.call().open().ref().name().size();
  };
  auto encode_open_answer = [&](bool flat) {
    alignas(8) char first[4096];
    google::protobuf::ArenaOptions o;
    o.initial_block = first;
    o.initial_block_size = sizeof(first);
    google::protobuf::Arena arena(o);
    auto* f = google::protobuf::Arena::Create<SessionFrame>(&arena);
    FillOpenAnswer(*f->mutable_reply());
    // As the daemon sends it: the frame, length and all.
    g_sink = flat ? gpubroker::EncodeFrameFor(*f, gpubroker::FlatFrames::kAnswers).size()
                  : gpubroker::EncodeFrame(*f).size();
  };
  // The flat calls, as the client writes them and the daemon's frame decoder
  // reads them.
  auto encode_flat_open_call = [&] {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    g_sink = gpubroker::EncodeFrameFor(f, gpubroker::FlatFrames::kCalls).size();
  };
  std::string open_call_frame;  // the protobuf Open call as the client sends it
  {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    open_call_frame = gpubroker::EncodeFrame(f);
  }
  auto encode_open_call_frame = [&] {
    SessionFrame f;
    f.mutable_call()->set_request_id(42);
    f.mutable_call()->mutable_open()->mutable_ref()->set_name("handover.64MiB.17");
    g_sink = gpubroker::EncodeFrame(f).size();
  };
  // The daemon's decoder reads either kind, as it does.
  auto read_call = [&](const std::string& frame) {
    gpubroker::FrameDecoder d;
    d.AcceptFlatCalls();
    d.Append(frame);
    auto f = d.Next();
    g_sink = f.ok() && f->has_value() ? (**f).call().request_id() : 0;
  };
  auto parse_open_answer = [&](bool flat) {
    // As the client reads it: the frame decoder, length and all.
    gpubroker::FrameDecoder d;
    if (flat) d.AcceptFlatAnswers();
    d.Append(flat ? flat_answer : open_answer);
    auto f = d.Next();
    g_sink = f.ok() && f->has_value() ? (**f).reply().open().import().offset() : 0;
  };

  std::vector<Step> steps;
  steps.push_back({"consumer: build and encode its Open call", encode_open_call});
  steps.push_back({"daemon: parse the Open call", parse_open_call});
  steps.push_back(
      {"daemon: build and encode the Open's answer (arena)", [&] { encode_open_answer(false); }});
  steps.push_back({"consumer: parse the Open's answer", [&] { parse_open_answer(false); }});
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
  // A process's turn uses protobuf more than once, and its second use finds
  // the code that the first brought in: these are what a flat answer alone
  // would save.
  steps.push_back({"daemon's turn: parse the call, answer", [&] {
                     parse_open_call();
                     encode_open_answer(false);
                   }});
  steps.push_back({"  the same, the answer written flat", [&] {
                     parse_open_call();
                     encode_open_answer(true);
                   }});
  steps.push_back({"consumer's turn: encode the call, parse the answer", [&] {
                     encode_open_call();
                     parse_open_answer(false);
                   }});
  steps.push_back({"  the same, the answer read flat into the message", [&] {
                     encode_open_call();
                     parse_open_answer(true);
                   }});
  steps.push_back({"the Open call written flat (EncodeFrameFor)", encode_flat_open_call});
  steps.push_back({"the flat Open call read by the daemon's frame decoder",
                   [&] { read_call(flat_open_call); }});
  steps.push_back({"the Publish written flat", [&] {
                     SessionFrame f;
                     FillPublish(*f.mutable_call());
                     g_sink = gpubroker::EncodeFrameFor(f, gpubroker::FlatFrames::kCalls).size();
                   }});
  steps.push_back(
      {"the flat Publish read by the daemon's frame decoder", [&] { read_call(flat_publish); }});
  // The turns again, each frame through the daemon's and the client's own
  // frame code (EncodeFrame / EncodeFrameFor, FrameDecoder), the answer flat,
  // the call protobuf and then flat.
  steps.push_back({"daemon's turn (frame code), the call protobuf, the answer flat", [&] {
                     read_call(open_call_frame);
                     encode_open_answer(true);
                   }});
  steps.push_back({"  the same, the call flat", [&] {
                     read_call(flat_open_call);
                     encode_open_answer(true);
                   }});
  steps.push_back({"consumer's turn (frame code), the call protobuf, the answer flat", [&] {
                     encode_open_call_frame();
                     parse_open_answer(true);
                   }});
  steps.push_back({"  the same, the call flat", [&] {
                     encode_flat_open_call();
                     parse_open_answer(true);
                   }});
  const Grant grant;
  auto write_answer_from_grant = [&] {
    std::string out;
    gpubroker::AppendFlatAnswerFrame(FactsOf(grant), &out);
    g_sink = out.size();
  };
  steps.push_back({"the answer's flat frame written from the daemon's grant, no message",
                   write_answer_from_grant});
  steps.push_back({"daemon's turn (frame code), the call flat, the answer from the grant", [&] {
                     read_call(flat_open_call);
                     write_answer_from_grant();
                   }});
  // The daemon's side with no message either way: the call read in place
  // (FlatCallRead), as the session server serves an Open, a Publish or a
  // Release now, and the key it opens by made from it.
  auto read_call_in_place = [&](const std::string& frame) {
    gpubroker::FrameDecoder d;
    d.AcceptFlatCalls();
    d.Append(frame);
    auto body = d.NextBody();
    if (!body.ok() || !body->has_value()) return;
    gpubroker::FlatCallRead call;
    if (!gpubroker::DecodeFlatCall((*body)->bytes, &call).ok()) return;
    const std::string name(call.facts().name);  // the registry's key holds its name
    g_sink = call.facts().request_id + name.size();
  };
  steps.push_back({"the flat Open call read in place by the daemon (its facts)",
                   [&] { read_call_in_place(flat_open_call); }});
  steps.push_back({"the flat Publish read in place by the daemon (its facts)",
                   [&] { read_call_in_place(flat_publish); }});
  steps.push_back({"  the daemon's turn, the call read in place, the answer from the grant", [&] {
                     read_call_in_place(flat_open_call);
                     write_answer_from_grant();
                   }});
  // The consumer's half: the answer read as the client read it before (into
  // the message, then into its own description), and as it reads it now, in
  // place (the frame decoder's body checked, kept as the call's slot keeps
  // it, and read into the client's Grant, client/src/grant.h).
  auto read_answer_through_message = [&] {
    gpubroker::FrameDecoder d;
    d.AcceptFlatAnswers();
    d.Append(flat_answer);
    auto f = d.Next();
    if (!f.ok() || !f->has_value()) return;
    gpubroker::detail::Grant grant;
    grant.Take(std::move(*(**f).mutable_reply()->mutable_open()));
    g_sink = grant.import.offset + grant.info.name.size();
  };
  auto read_answer_in_place = [&] {
    gpubroker::FrameDecoder d;
    d.AcceptFlatAnswers();
    d.Append(flat_answer);
    auto body = d.NextBody();
    if (!body.ok() || !body->has_value()) return;
    gpubroker::FlatAnswerRead checked;
    if (!gpubroker::DecodeFlatAnswer((*body)->bytes, &checked).ok()) return;
    std::string kept((*body)->bytes);
    gpubroker::detail::Grant grant;
    if (!grant.TakeFlat(std::move(kept)).ok()) return;
    g_sink = grant.import.offset + grant.info.name.size();
  };
  // The consumer's Open call and the producer's Publish written straight
  // from their facts, as the client writes them now (no message).
  auto open_call_from_facts = [&] {
    gpubroker::FlatCallFacts call;
    call.kind = gpubroker::FlatCallFacts::Kind::kOpen;
    call.request_id = 42;
    call.by_name = true;
    call.name = "handover.64MiB.17";
    std::string out;
    gpubroker::AppendFlatCallFrame(call, &out);
    g_sink = out.size();
  };
  const int64_t publish_shape[] = {4096, 4096};
  auto publish_from_facts = [&] {
    gpubroker::FlatCallFacts call;
    call.kind = gpubroker::FlatCallFacts::Kind::kPublish;
    call.request_id = 41;
    call.seal = call.has_tensor = true;
    call.dtype = DTYPE_FLOAT32;
    call.shape = publish_shape;
    call.range_id = 5;
    call.offset = 1 << 26;
    call.reserved = call.size = 64 << 20;
    call.fence_offset = 4096;
    call.fence_value = 99;
    call.name = "handover.64MiB.17";
    std::string out;
    gpubroker::AppendFlatCallFrame(call, &out);
    g_sink = out.size();
  };
  steps.push_back(
      {"the Open call's flat frame written from its facts, no message", open_call_from_facts});
  steps.push_back(
      {"the Publish's flat frame written from its facts, no message", publish_from_facts});
  // The producer's half of a confirmed seal: the Publish's answer read as
  // the client read it before (protobuf, then its description) and as it
  // reads it now from a daemon that writes it flat (in place, a Grant).
  auto read_publish_answer = [&](const std::string& frame) {
    gpubroker::FrameDecoder d;
    d.AcceptFlatAnswers();
    d.Append(frame);
    auto body = d.NextBody();
    if (!body.ok() || !body->has_value()) return;
    gpubroker::detail::Grant grant;
    if ((*body)->flat) {
      if (!grant.TakeFlat(std::string((*body)->bytes)).ok()) return;
    } else {
      SessionFrame f;
      if (!gpubroker::FrameDecoder::Decode(**body, gpubroker::FlatFrames::kAnswers, &f).ok())
        return;
      grant.Take(f.reply().publish().buffer());
    }
    g_sink = grant.info.id + grant.info.name.size();
  };
  steps.push_back({"the Publish's answer read by the producer: protobuf, then its facts",
                   [&] { read_publish_answer(publish_answer); }});
  steps.push_back(
      {"  the same, flat and read in place", [&] { read_publish_answer(flat_publish_answer); }});
  steps.push_back({"the flat answer read into the message, then the client's facts",
                   read_answer_through_message});
  steps.push_back(
      {"the flat answer read in place into the client's facts (Grant)", read_answer_in_place});
  steps.push_back(
      {"consumer's turn (frame code), the call flat, the answer through the message", [&] {
         encode_flat_open_call();
         read_answer_through_message();
       }});
  steps.push_back({"  the same, the answer read in place", [&] {
                     encode_flat_open_call();
                     read_answer_in_place();
                   }});
  steps.push_back({"  the same, the call from its facts too (no message either way)", [&] {
                     open_call_from_facts();
                     read_answer_in_place();
                   }});
  steps.push_back({"the answer built on the arena, written flat (EncodeFrameFor)",
                   [&] { encode_open_answer(true); }});
  steps.push_back(
      {"the flat answer read by the client's frame decoder", [&] { parse_open_answer(true); }});
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
      open_call_n, open_answer.size() - gpubroker::kFrameHeaderBytes, publish_call_n,
      flat_answer.size() - gpubroker::kFrameHeaderBytes, sizeof(FlatOpenAnswer));
  double protobuf_asleep = 0, protobuf_warm = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const double a = Median(steps[i].asleep), w = Median(steps[i].warm);
    std::printf("  %-72s %8.2f %8.2f\n", steps[i].what, a, w);
    if (i < 6) {  // the six frames of a hand-over, each alone
      protobuf_asleep += a;
      protobuf_warm += w;
    }
    if (i == 5) {
      std::printf("  %-72s %8.2f %8.2f\n", "the six, each alone, together", protobuf_asleep,
                  protobuf_warm);
    }
  }
  return 0;
}
