// What the C ABI gives bindings (Python's among them) beyond the C++ API:
// views and DLPack exports that hold a buffer past its handle, the device
// ordinal, and handles that a forked child cannot use.
//
// Over 500 lines on purpose: one suite for what the C ABI adds, case by case.
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "client/src/dlpack_abi.h"
#include "gpubroker/gpubroker.h"
#include "gpubroker/v1/session.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

namespace dl = gpubroker::dlpack;

// A C ABI client on the test's daemon, disconnected at the end.
class CClient {
 public:
  explicit CClient(const std::string& dir) {
    EXPECT_EQ(gpubroker_connect(dir.c_str(), &c_), GPUBROKER_OK) << gpubroker_last_error();
  }
  ~CClient() { gpubroker_disconnect(c_); }
  gpubroker_client_t* get() const { return c_; }

  nlohmann::json Json(gpubroker_status_t (*call)(gpubroker_client_t*, char**)) const {
    char* out = nullptr;
    if (call(c_, &out) != GPUBROKER_OK) {
      ADD_FAILURE() << gpubroker_last_error();
      return {};
    }
    auto j = nlohmann::json::parse(out);
    gpubroker_string_free(out);
    return j;
  }
  nlohmann::json Status() const { return Json(gpubroker_status_json); }
  nlohmann::json Stats() const {
    char* out = nullptr;
    EXPECT_EQ(gpubroker_client_stats_json(c_, &out), GPUBROKER_OK) << gpubroker_last_error();
    auto j = nlohmann::json::parse(out);
    gpubroker_string_free(out);
    return j;
  }
  /// Bytes of this client's own buffers (carved from its ranges), live now.
  uint64_t InUseBytes() const { return Stats()["books"]["in_use_bytes"]; }
  /// Gives back what this client holds empty; then the node holds nothing of it.
  void Trim() const { EXPECT_EQ(gpubroker_trim(c_), GPUBROKER_OK) << gpubroker_last_error(); }
  nlohmann::json List() const { return Json(gpubroker_list_json); }
  uint64_t UsedBytes() const { return Status()["devices"][0]["used_bytes"]; }

  gpubroker_buffer_t* Allocate(uint64_t size, const char* name, gpubroker_dtype_t dtype,
                               std::vector<int64_t> shape, std::vector<int64_t> strides = {},
                               uint64_t byte_offset = 0) const {
    gpubroker_alloc_options_t o;
    gpubroker_alloc_options_init(&o);
    o.name = name;
    o.dtype = dtype;
    o.ndim = static_cast<uint32_t>(shape.size());
    o.shape = shape.data();
    o.strides = strides.empty() ? nullptr : strides.data();
    o.byte_offset = byte_offset;
    gpubroker_buffer_t* b = nullptr;
    EXPECT_EQ(gpubroker_allocate(c_, size, &o, &b), GPUBROKER_OK) << gpubroker_last_error();
    return b;
  }

 private:
  gpubroker_client_t* c_ = nullptr;
};

TEST(CAbi, ViewKeepsMappingAndLeaseAfterReleaseUntilItGoes) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.view", GPUBROKER_DTYPE_UINT8, {4096});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(gpubroker_buffer_publish(b), GPUBROKER_OK) << gpubroker_last_error();
  auto* data = static_cast<uint8_t*>(gpubroker_buffer_data(b));
  std::memset(data, 0x5a, 4096);
  gpubroker_view_t* view = nullptr;
  ASSERT_EQ(gpubroker_buffer_view(b, &view), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_view_data(view), data);

  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  // The owner's release frees an unkept buffer, but not while a view holds it.
  EXPECT_EQ(client.List().size(), 1u);
  EXPECT_EQ(client.InUseBytes(), 4096u);
  EXPECT_EQ(data[4095], 0x5a);  // still mapped
  data[0] = 1;

  gpubroker_view_release(view);
  EXPECT_TRUE(client.List().empty());
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();
  EXPECT_EQ(client.UsedBytes(), 0u);
  gpubroker_view_release(nullptr);
}

TEST(CAbi, ReleaseOnAStreamReleasesAtOnceOnTheHostAndLikeReleaseUnderAView) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  // The host has no stream work to wait for: the buffer goes now.
  gpubroker_buffer_t* b = client.Allocate(4096, "c.release_on", GPUBROKER_DTYPE_UINT8, {4096});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(gpubroker_buffer_publish(b), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(client.List().size(), 1u);
  EXPECT_EQ(gpubroker_buffer_release_on(b, nullptr), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_TRUE(client.List().empty());
  EXPECT_EQ(client.InUseBytes(), 0u);
  EXPECT_EQ(client.Stats()["books"]["pending_releases"], 0u);

  // With a view alive the view's end releases, as for gpubroker_buffer_release.
  b = client.Allocate(4096, "c.release_on.view", GPUBROKER_DTYPE_UINT8, {4096});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(gpubroker_buffer_publish(b), GPUBROKER_OK) << gpubroker_last_error();
  gpubroker_view_t* view = nullptr;
  ASSERT_EQ(gpubroker_buffer_view(b, &view), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_release_on(b, nullptr), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(client.List().size(), 1u) << "released under a live view";
  gpubroker_view_release(view);
  EXPECT_TRUE(client.List().empty());
  client.Trim();
  EXPECT_EQ(client.UsedBytes(), 0u);
  EXPECT_EQ(gpubroker_buffer_release_on(nullptr, nullptr), GPUBROKER_OK);
}

TEST(CAbi, DlpackExportDescribesTheTensorAndHoldsTheBufferUntilItsDeleter) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.dlpack", GPUBROKER_DTYPE_FLOAT32, {4, 8});
  ASSERT_NE(b, nullptr);
  EXPECT_NE(gpubroker_buffer_id(b), 0u) << "an id publishes the buffer";
  EXPECT_EQ(gpubroker_buffer_device_ordinal(b), -1) << "host memory has no CUDA ordinal";

  void* out = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack(b, GPUBROKER_DLPACK_VERSIONED, &out), GPUBROKER_OK)
      << gpubroker_last_error();
  auto* v = static_cast<dl::ManagedTensorVersioned*>(out);
  EXPECT_EQ(v->version.major, 1u);
  EXPECT_EQ(v->flags, 0u);
  const dl::Tensor& t = v->dl_tensor;
  EXPECT_EQ(t.data, gpubroker_buffer_data(b));
  EXPECT_EQ(t.device.device_type, dl::kCPU);
  EXPECT_EQ(t.device.device_id, 0);
  EXPECT_EQ(t.dtype.code, dl::kFloat);
  EXPECT_EQ(t.dtype.bits, 32);
  EXPECT_EQ(t.dtype.lanes, 1);
  ASSERT_EQ(t.ndim, 2);
  EXPECT_EQ(t.shape[0], 4);
  EXPECT_EQ(t.shape[1], 8);
  EXPECT_EQ(t.strides[0], 8);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.byte_offset, 0u);

  void* legacy = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack(b, 0, &legacy), GPUBROKER_OK);
  auto* m = static_cast<dl::ManagedTensor*>(legacy);
  EXPECT_EQ(m->dl_tensor.data, gpubroker_buffer_data(b));
  EXPECT_EQ(m->dl_tensor.ndim, 2);

  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_EQ(client.List().size(), 1u);
  v->deleter(v);
  EXPECT_EQ(client.List().size(), 1u) << "the legacy export still holds it";
  static_cast<float*>(m->dl_tensor.data)[31] = 2.5f;  // still mapped
  m->deleter(m);
  EXPECT_TRUE(client.List().empty());
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();
  EXPECT_EQ(client.UsedBytes(), 0u);
}

TEST(CAbi, DlpackCarriesStridesOffsetsAndEveryDtype) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  struct Case {
    gpubroker_dtype_t dtype;
    uint8_t code, bits;
  };
  const Case cases[] = {
      {GPUBROKER_DTYPE_BOOL, dl::kBool, 8},           {GPUBROKER_DTYPE_INT8, dl::kInt, 8},
      {GPUBROKER_DTYPE_UINT16, dl::kUInt, 16},        {GPUBROKER_DTYPE_INT64, dl::kInt, 64},
      {GPUBROKER_DTYPE_FLOAT16, dl::kFloat, 16},      {GPUBROKER_DTYPE_BFLOAT16, dl::kBfloat, 16},
      {GPUBROKER_DTYPE_FLOAT64, dl::kFloat, 64},      {GPUBROKER_DTYPE_COMPLEX64, dl::kComplex, 64},
      {GPUBROKER_DTYPE_COMPLEX128, dl::kComplex, 128}};
  for (const Case& c : cases) {
    // A transposed 3x4 view (column-major strides) 64 bytes into the buffer.
    gpubroker_buffer_t* b = client.Allocate(4096, nullptr, c.dtype, {3, 4}, {1, 3}, 64);
    ASSERT_NE(b, nullptr);
    void* out = nullptr;
    ASSERT_EQ(gpubroker_buffer_to_dlpack(b, GPUBROKER_DLPACK_VERSIONED, &out), GPUBROKER_OK);
    auto* v = static_cast<dl::ManagedTensorVersioned*>(out);
    EXPECT_EQ(v->dl_tensor.dtype.code, c.code) << c.dtype;
    EXPECT_EQ(v->dl_tensor.dtype.bits, c.bits) << c.dtype;
    EXPECT_EQ(v->dl_tensor.data, static_cast<char*>(gpubroker_buffer_data(b)) + 64);
    EXPECT_EQ(v->dl_tensor.byte_offset, 0u);
    EXPECT_EQ(v->dl_tensor.strides[0], 1);
    EXPECT_EQ(v->dl_tensor.strides[1], 3);
    v->deleter(v);
    gpubroker_buffer_release(b);
  }

  // No descriptor: the bytes.
  gpubroker_buffer_t* raw = nullptr;
  ASSERT_EQ(gpubroker_allocate(client.get(), 1000, nullptr, &raw), GPUBROKER_OK);
  void* out = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack(raw, GPUBROKER_DLPACK_VERSIONED | GPUBROKER_DLPACK_READ_ONLY,
                                       &out),
            GPUBROKER_OK);
  auto* v = static_cast<dl::ManagedTensorVersioned*>(out);
  EXPECT_EQ(v->flags, dl::kFlagReadOnly);
  EXPECT_EQ(v->dl_tensor.dtype.code, dl::kUInt);
  EXPECT_EQ(v->dl_tensor.dtype.bits, 8);
  ASSERT_EQ(v->dl_tensor.ndim, 1);
  EXPECT_EQ(v->dl_tensor.shape[0], 1000);
  v->deleter(v);
  EXPECT_EQ(gpubroker_buffer_to_dlpack(raw, 1u << 7, &out), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_to_dlpack(raw, GPUBROKER_DLPACK_READ_ONLY, &out),
            GPUBROKER_INVALID_ARGUMENT);
  void* stream = &out;
  EXPECT_EQ(gpubroker_buffer_ready_stream(raw, &stream), GPUBROKER_OK);
  EXPECT_EQ(stream, nullptr) << "host memory has no stream";
  gpubroker_buffer_release(raw);
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();
  EXPECT_EQ(client.UsedBytes(), 0u);
}

// gpubroker_buffer_seal_posted: the reader opens it at once; a refusal is
// returned by the handle's next call that needs the answer.
TEST(CAbi, APostedSealOpensAtOnceAndItsRefusalComesAtTheNextCall) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* a = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 512, "c.posted", nullptr, &a), GPUBROKER_OK)
      << gpubroker_last_error();
  ASSERT_EQ(gpubroker_buffer_seal_posted(a, nullptr), GPUBROKER_OK) << gpubroker_last_error();
  gpubroker_buffer_t* opened = nullptr;
  ASSERT_EQ(gpubroker_open(reader.get(), "c.posted", nullptr, &opened), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_id(opened), gpubroker_buffer_id(a));
  EXPECT_TRUE(gpubroker_buffer_is_sealed(a));
  gpubroker_buffer_release(opened);

  gpubroker_buffer_t* b = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 512, "c.posted", nullptr, &b), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_seal_posted(b, nullptr), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_ALREADY_EXISTS);
  EXPECT_NE(std::strstr(gpubroker_last_error(), "c.posted"), nullptr) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_seal_posted(nullptr, nullptr), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_release(a), GPUBROKER_OK);
}

// Tickets through the C ABI: bytes with NULs in them, the socket directory
// read back, a posted claim whose refusal comes from the first call that
// needs its memory, and nothing handed out then.
TEST(CAbi, ATicketIsClaimedOnceAndARefusedPostedClaimReturnsItsRefusal) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* a = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 4096, "c.ticket", nullptr, &a), GPUBROKER_OK);
  static_cast<char*>(gpubroker_buffer_data(a))[9] = 42;
  ASSERT_EQ(gpubroker_buffer_seal_posted(a, nullptr), GPUBROKER_OK);
  char* ticket = nullptr;
  size_t size = 0;
  ASSERT_EQ(gpubroker_buffer_ticket(a, 0, &ticket, &size), GPUBROKER_OK) << gpubroker_last_error();
  ASSERT_GT(size, 16u);
  char* dir = nullptr;
  ASSERT_EQ(gpubroker_ticket_socket_dir(ticket, size, &dir), GPUBROKER_OK);
  EXPECT_EQ(std::string(dir), daemon.socket_dir());
  gpubroker_string_free(dir);
  EXPECT_EQ(gpubroker_ticket_socket_dir("nope", 4, &dir), GPUBROKER_INVALID_ARGUMENT);

  gpubroker_buffer_t* claimed = nullptr;
  ASSERT_EQ(gpubroker_claim(reader.get(), ticket, size, 1, &claimed), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_size(claimed), 4096u);
  gpubroker_view_t* view = nullptr;
  ASSERT_EQ(gpubroker_buffer_view(claimed, &view), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(static_cast<char*>(gpubroker_view_data(view))[9], 42);
  gpubroker_view_release(view);
  EXPECT_EQ(gpubroker_buffer_id(claimed), gpubroker_buffer_id(a));

  gpubroker_buffer_t* again = nullptr;
  EXPECT_EQ(gpubroker_claim(reader.get(), ticket, size, 0, &again), GPUBROKER_NOT_FOUND);
  ASSERT_EQ(gpubroker_claim(reader.get(), ticket, size, 1, &again), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_view(again, &view), GPUBROKER_NOT_FOUND);
  EXPECT_EQ(gpubroker_buffer_release(again), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_claim(reader.get(), "not a ticket", 12, 0, &again),
            GPUBROKER_INVALID_ARGUMENT);
  gpubroker_string_free(ticket);
  EXPECT_EQ(gpubroker_buffer_release(claimed), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(a), GPUBROKER_OK);
}

// A posted open through the C ABI: the handle learns the buffer's layout
// (contiguous strides filled in) with the answer; a refusal comes from the
// first call that needs it; a caller built before `posted` existed opens
// as it always did.
TEST(CAbi, APostedOpenLearnsItsLayoutWithItsAnswerAndReturnsItsRefusal) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* a = client.Allocate(4096, "c.open.posted", GPUBROKER_DTYPE_INT16, {3, 5});
  ASSERT_NE(a, nullptr);
  static_cast<char*>(gpubroker_buffer_data(a))[9] = 42;
  ASSERT_EQ(gpubroker_buffer_seal_posted(a, nullptr), GPUBROKER_OK);

  gpubroker_open_options_t o;
  gpubroker_open_options_init(&o);
  o.posted = 1;
  gpubroker_buffer_t* opened = nullptr;
  ASSERT_EQ(gpubroker_open(reader.get(), "c.open.posted", &o, &opened), GPUBROKER_OK)
      << gpubroker_last_error();
  gpubroker_buffer_facts_t f;
  f.struct_size = sizeof(f);
  ASSERT_EQ(gpubroker_buffer_get_facts(opened, &f), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(f.size, 4096u);
  EXPECT_EQ(f.flags, unsigned{GPUBROKER_BUFFER_SEALED | GPUBROKER_BUFFER_TENSOR});
  ASSERT_EQ(f.ndim, 2u);
  ASSERT_NE(f.strides, nullptr);
  EXPECT_EQ(f.strides[0], 5) << "C-contiguous strides filled in after the answer";
  EXPECT_EQ(f.strides[1], 1);
  EXPECT_EQ(static_cast<char*>(f.data)[9], 42);
  EXPECT_EQ(gpubroker_buffer_id(opened), gpubroker_buffer_id(a));
  EXPECT_EQ(gpubroker_buffer_release(opened), GPUBROKER_OK);

  // By id, exported through DLPack before anything else is asked.
  ASSERT_EQ(gpubroker_open_id(reader.get(), gpubroker_buffer_id(a), &o, &opened), GPUBROKER_OK);
  void* managed = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack(opened, 0, &managed), GPUBROKER_OK)
      << gpubroker_last_error();
  auto* m = static_cast<dl::ManagedTensor*>(managed);
  ASSERT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.strides[0], 5);
  EXPECT_EQ(static_cast<char*>(m->dl_tensor.data)[9], 42);
  m->deleter(m);
  EXPECT_EQ(gpubroker_buffer_release(opened), GPUBROKER_OK);

  // The facts and a view on a stream in one call, the answer taken in by it.
  ASSERT_EQ(gpubroker_open(reader.get(), "c.open.posted", &o, &opened), GPUBROKER_OK);
  gpubroker_buffer_facts_t both;
  both.struct_size = sizeof(both);
  gpubroker_view_t* view = nullptr;
  ASSERT_EQ(gpubroker_buffer_view_on_facts(opened, nullptr, &both, &view), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(both.size, 4096u);
  ASSERT_EQ(both.ndim, 2u);
  EXPECT_EQ(both.strides[0], 5);
  EXPECT_EQ(gpubroker_view_data(view), both.data);
  EXPECT_EQ(static_cast<char*>(gpubroker_view_data(view))[9], 42);
  EXPECT_EQ(gpubroker_buffer_release(opened), GPUBROKER_OK);
  EXPECT_EQ(static_cast<char*>(gpubroker_view_data(view))[9], 42) << "the view holds it";
  gpubroker_view_release(view);
  view = nullptr;

  // Refused: nothing handed out, the refusal from the calls that need the answer.
  ASSERT_EQ(gpubroker_open(reader.get(), "c.open.absent", &o, &opened), GPUBROKER_OK);
  both.size = 0;
  EXPECT_EQ(gpubroker_buffer_view_on_facts(opened, nullptr, &both, &view), GPUBROKER_NOT_FOUND);
  EXPECT_EQ(view, nullptr);
  EXPECT_EQ(both.size, 0u) << "no facts of a refused open";
  EXPECT_EQ(gpubroker_buffer_release(opened), GPUBROKER_OK);
  ASSERT_EQ(gpubroker_open(reader.get(), "c.open.absent", &o, &opened), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_view(opened, &view), GPUBROKER_NOT_FOUND);
  EXPECT_EQ(gpubroker_buffer_to_dlpack(opened, 0, &managed), GPUBROKER_FAILED_PRECONDITION);
  EXPECT_EQ(gpubroker_buffer_get_facts(opened, &f), GPUBROKER_FAILED_PRECONDITION);
  EXPECT_EQ(gpubroker_buffer_data(opened), nullptr);
  EXPECT_EQ(gpubroker_buffer_release(opened), GPUBROKER_OK);

  o.wait = 1;
  EXPECT_EQ(gpubroker_open(reader.get(), "c.open.posted", &o, &opened), GPUBROKER_INVALID_ARGUMENT);
  // Options of the first version (no `posted`): an open that waits for its answer.
  o.wait = 0;
  o.struct_size = offsetof(gpubroker_open_options_t, posted);
  ASSERT_EQ(gpubroker_open(reader.get(), "c.open.absent", &o, &opened), GPUBROKER_NOT_FOUND);
  EXPECT_EQ(gpubroker_buffer_release(a), GPUBROKER_OK);
}

// daemon_awake_us: the daemon polls while the wait is parked, the caller
// sleeping; refused as awake_us is. A caller built before the field (its
// struct_size ends before it) is not read there.
TEST(CAbi, AWaitCanKeepOnlyTheDaemonAwake) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* refused = nullptr;
  gpubroker_open_options_t no_wait;
  gpubroker_open_options_init(&no_wait);
  no_wait.daemon_awake_us = 1000;
  EXPECT_EQ(gpubroker_open(reader.get(), "c.daemon.awake", &no_wait, &refused),
            GPUBROKER_INVALID_ARGUMENT);
  gpubroker_open_options_t negative;
  gpubroker_open_options_init(&negative);
  negative.wait = 1;
  negative.daemon_awake_us = -1;
  EXPECT_EQ(gpubroker_open(reader.get(), "c.daemon.awake", &negative, &refused),
            GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(refused, nullptr);

  gpubroker_open_options_t o;
  gpubroker_open_options_init(&o);
  o.wait = 1;
  o.daemon_awake_us = 1000000;
  gpubroker_buffer_t* b = nullptr;
  gpubroker_status_t opened = GPUBROKER_INTERNAL;
  std::thread waiter([&] { opened = gpubroker_open(reader.get(), "c.daemon.awake", &o, &b); });
  ASSERT_TRUE(
      Eventually([&] { return daemon.Metric("gpubroker_session_awake_waits_total") >= 1; }));
  gpubroker_buffer_t* a = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 4096, "c.daemon.awake", nullptr, &a),
            GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_seal(a), GPUBROKER_OK) << gpubroker_last_error();
  waiter.join();
  ASSERT_EQ(opened, GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_is_sealed(b), 1);
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);

  // An older caller's options: the field past its struct_size is not read.
  gpubroker_open_options_t older;
  gpubroker_open_options_init(&older);
  older.struct_size = offsetof(gpubroker_open_options_t, daemon_awake_us);
  older.wait = 1;
  older.daemon_awake_us = -1;  // would be refused if it were read
  ASSERT_EQ(gpubroker_open(reader.get(), "c.daemon.awake", &older, &b), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(a), GPUBROKER_OK);
  EXPECT_EQ(daemon.Metric("gpubroker_session_awake_waits_total"), 1);
}

// gpubroker_buffer_wait_sealed: a handle opened before the seal reads sealed
// once the producer seals, so that the calls that order a stream wait.
TEST(CAbi, AWaitForTheSealOnTheHostMakesTheHandleReadSealed) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* a = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 4096, "c.ask.first", nullptr, &a), GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_publish(a), GPUBROKER_OK) << gpubroker_last_error();
  gpubroker_open_options_t o;
  gpubroker_open_options_init(&o);
  o.wait = 1;
  o.allow_unsealed = 1;
  gpubroker_buffer_t* b = nullptr;
  ASSERT_EQ(gpubroker_open(reader.get(), "c.ask.first", &o, &b), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_is_sealed(b), 0);
  EXPECT_EQ(gpubroker_buffer_wait_sealed(b, 20), GPUBROKER_DEADLINE_EXCEEDED);
  EXPECT_EQ(gpubroker_buffer_wait_sealed_awake(b, 20, 1000), GPUBROKER_DEADLINE_EXCEEDED)
      << "kept awake, and still bounded by its timeout";
  EXPECT_EQ(gpubroker_buffer_wait_sealed_awake(b, 20, -1), GPUBROKER_INVALID_ARGUMENT);
  // awake_us shapes a wait: an open that does not wait is refused it.
  gpubroker_open_options_t no_wait;
  gpubroker_open_options_init(&no_wait);
  no_wait.allow_unsealed = 1;
  no_wait.awake_us = 1000;
  gpubroker_buffer_t* refused = nullptr;
  EXPECT_EQ(gpubroker_open(reader.get(), "c.ask.first", &no_wait, &refused),
            GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(refused, nullptr);
  gpubroker_open_options_t negative;
  gpubroker_open_options_init(&negative);
  negative.wait = 1;
  negative.allow_unsealed = 1;
  negative.awake_us = -1;
  EXPECT_EQ(gpubroker_open(reader.get(), "c.ask.first", &negative, &refused),
            GPUBROKER_INVALID_ARGUMENT)
      << "a negative awake is refused here as by gpubroker_buffer_wait_sealed_awake";
  EXPECT_EQ(refused, nullptr);
  ASSERT_EQ(gpubroker_buffer_seal(a), GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_wait_sealed(b, -1), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_is_sealed(b), 1);
  EXPECT_EQ(gpubroker_buffer_wait_sealed(a, -1), GPUBROKER_OK) << "sealed: nothing to wait for";
  gpubroker_buffer_t* own = nullptr;
  ASSERT_EQ(gpubroker_allocate(reader.get(), 64, nullptr, &own), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_wait_sealed(own, 0), GPUBROKER_FAILED_PRECONDITION);
  EXPECT_EQ(gpubroker_buffer_wait_sealed(nullptr, 0), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_release(own), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_release(a), GPUBROKER_OK);
}

// The socket directory is read from a ticket field by field, without
// parsing the buffer's description: it must read what a parse reads (the
// last of a repeated field, past fields it does not know) and refuse what a
// parse refuses (no secret, cut short, a directory that is not UTF-8).
TEST(CAbi, ATicketsSocketDirectoryIsReadAsAParseReadsIt) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* a = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 4096, "c.ticket.dir", nullptr, &a),
            GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_seal(a), GPUBROKER_OK);
  char* raw = nullptr;
  size_t size = 0;
  ASSERT_EQ(gpubroker_buffer_ticket(a, 0, &raw, &size), GPUBROKER_OK) << gpubroker_last_error();
  const std::string ticket(raw, size);
  gpubroker_string_free(raw);
  v1::Ticket parsed;
  ASSERT_TRUE(parsed.ParseFromString(ticket));
  ASSERT_EQ(parsed.socket_dir(), daemon.socket_dir());

  auto dir_of = [](const std::string& bytes, std::string* dir) {
    char* out = nullptr;
    const gpubroker_status_t s = gpubroker_ticket_socket_dir(bytes.data(), bytes.size(), &out);
    if (s == GPUBROKER_OK) {
      *dir = out;
      gpubroker_string_free(out);
    }
    return s;
  };
  std::string dir;
  ASSERT_EQ(dir_of(ticket, &dir), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(dir, daemon.socket_dir());

  // Fields it does not know, of every wire type a ticket may carry:
  // field 99 a varint, 100 eight bytes, 101 bytes, 102 four bytes.
  const std::string unknown = std::string("\x98\x06\x01", 3) + "\xa1\x06" + std::string(8, '\x07') +
                              "\xaa\x06\x03xyz" + "\xb5\x06" + std::string(4, '\x09');
  ASSERT_TRUE(parsed.ParseFromString(ticket + unknown)) << "a parse reads past them";
  ASSERT_EQ(dir_of(ticket + unknown, &dir), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(dir, daemon.socket_dir());

  // A second directory: the last one counts, as in a parse.
  const std::string again = ticket + "\x12\x06/other";
  ASSERT_TRUE(parsed.ParseFromString(again));
  ASSERT_EQ(dir_of(again, &dir), GPUBROKER_OK);
  EXPECT_EQ(dir, parsed.socket_dir());
  EXPECT_EQ(dir, "/other");

  // A directory that is not ASCII but is UTF-8 is read; one that is not
  // UTF-8 is refused, as a parse refuses it.
  const std::string accented = ticket + "\x12\x0b/tmp/gb-\xc3\xa9\x31";
  ASSERT_TRUE(parsed.ParseFromString(accented));
  ASSERT_EQ(dir_of(accented, &dir), GPUBROKER_OK);
  EXPECT_EQ(dir, "/tmp/gb-\xc3\xa9\x31");
  const std::string not_utf8 = ticket + "\x12\x04/\xff\xfe/";
  EXPECT_EQ(dir_of(not_utf8, &dir), GPUBROKER_INVALID_ARGUMENT);

  v1::Ticket no_secret;
  ASSERT_TRUE(no_secret.ParseFromString(ticket));
  no_secret.clear_secret();
  EXPECT_EQ(dir_of(no_secret.SerializeAsString(), &dir), GPUBROKER_INVALID_ARGUMENT);
  for (size_t cut : {size_t{1}, size_t{5}, ticket.size() / 2}) {
    EXPECT_EQ(dir_of(ticket.substr(0, ticket.size() - cut), &dir), GPUBROKER_INVALID_ARGUMENT)
        << "cut " << cut << " bytes short";
  }
  EXPECT_EQ(dir_of(std::string(), &dir), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(dir_of(ticket + std::string(1, '\0'), &dir), GPUBROKER_INVALID_ARGUMENT)
      << "a tag of 0 is no field";
  gpubroker_buffer_release(a);
}

TEST(CAbi, FactsSayInOneCallWhatEveryGetterSays) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.facts", GPUBROKER_DTYPE_INT16, {3, 5}, {}, 8);
  ASSERT_NE(b, nullptr);

  gpubroker_buffer_facts_t f;
  std::memset(&f, 0xab, sizeof(f));
  f.struct_size = sizeof(f);
  ASSERT_EQ(gpubroker_buffer_get_facts(b, &f), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(f.struct_size, sizeof(f));
  EXPECT_EQ(f.flags, unsigned{GPUBROKER_BUFFER_OWNER | GPUBROKER_BUFFER_TENSOR});
  EXPECT_EQ(f.id, 0u) << "a buffer this client made has no id until it is published";
  EXPECT_EQ(f.size, 4096u);
  EXPECT_EQ(f.data, gpubroker_buffer_data(b));
  EXPECT_STREQ(f.name, "c.facts");
  EXPECT_EQ(f.name, gpubroker_buffer_name(b)) << "the handle's own string, not a copy";
  EXPECT_STREQ(f.device, gpubroker_buffer_device(b));
  EXPECT_EQ(f.device_ordinal, -1);
  EXPECT_EQ(f.dtype, GPUBROKER_DTYPE_INT16);
  ASSERT_EQ(f.ndim, 2u);
  EXPECT_EQ(f.reserved, 0u);
  EXPECT_EQ(f.byte_offset, 8u);
  EXPECT_EQ(f.shape[0], 3);
  EXPECT_EQ(f.shape[1], 5);
  EXPECT_EQ(f.strides[0], 5) << "C-contiguous strides filled in";
  EXPECT_EQ(f.strides[1], 1);
  int32_t dtype = 0;
  uint32_t ndim = 0;
  const int64_t* shape = nullptr;
  const int64_t* strides = nullptr;
  uint64_t offset = 0;
  ASSERT_EQ(gpubroker_buffer_tensor(b, &dtype, &ndim, &shape, &strides, &offset), GPUBROKER_OK);
  EXPECT_EQ(f.shape, shape);
  EXPECT_EQ(f.strides, strides);

  // Asking for its id publishes it; the pointers handed out before stay valid.
  const uint64_t id = gpubroker_buffer_id(b);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(f.shape[1], 5) << "still the handle's own shape";
  EXPECT_STREQ(f.name, "c.facts");
  ASSERT_EQ(gpubroker_buffer_get_facts(b, &f), GPUBROKER_OK);
  EXPECT_EQ(f.id, id);
  EXPECT_EQ(f.shape, shape) << "the same storage as before the publication";

  ASSERT_EQ(gpubroker_buffer_seal(b), GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_get_facts(b, &f), GPUBROKER_OK);
  EXPECT_EQ(f.flags,
            unsigned{GPUBROKER_BUFFER_OWNER | GPUBROKER_BUFFER_TENSOR | GPUBROKER_BUFFER_SEALED});

  // An opener's handle: no owner; no descriptor: no tensor, no shape.
  gpubroker_buffer_t* raw = nullptr;
  gpubroker_alloc_options_t o;
  gpubroker_alloc_options_init(&o);
  o.name = "c.facts.raw";
  ASSERT_EQ(gpubroker_allocate(client.get(), 100, &o, &raw), GPUBROKER_OK);
  ASSERT_EQ(gpubroker_buffer_seal(raw), GPUBROKER_OK);
  CClient reader(daemon.socket_dir());
  gpubroker_buffer_t* opened = nullptr;
  ASSERT_EQ(gpubroker_open(reader.get(), "c.facts.raw", nullptr, &opened), GPUBROKER_OK)
      << gpubroker_last_error();
  ASSERT_EQ(gpubroker_buffer_get_facts(opened, &f), GPUBROKER_OK);
  EXPECT_EQ(f.flags, unsigned{GPUBROKER_BUFFER_SEALED});
  EXPECT_EQ(f.id, gpubroker_buffer_id(raw));
  EXPECT_EQ(f.size, 100u);
  EXPECT_EQ(f.data, gpubroker_buffer_data(opened));
  EXPECT_EQ(f.dtype, GPUBROKER_DTYPE_UNSPECIFIED);
  EXPECT_EQ(f.ndim, 0u);
  EXPECT_EQ(f.shape, nullptr);
  EXPECT_EQ(f.strides, nullptr);
  EXPECT_EQ(f.byte_offset, 0u);

  // A caller built against a later header (a larger struct) gets what this
  // library knows, the rest untouched; one built against none is refused.
  struct Later {
    gpubroker_buffer_facts_t facts;
    uint64_t appended;
  } later;
  std::memset(&later, 0xab, sizeof(later));
  later.facts.struct_size = sizeof(later);
  ASSERT_EQ(gpubroker_buffer_get_facts(opened, &later.facts), GPUBROKER_OK);
  EXPECT_EQ(later.facts.struct_size, sizeof(gpubroker_buffer_facts_t));
  EXPECT_EQ(later.facts.size, 100u);
  EXPECT_EQ(later.appended, 0xababababababababull);
  f.struct_size = 8;
  EXPECT_EQ(gpubroker_buffer_get_facts(opened, &f), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gpubroker_last_error(), "struct_size"), nullptr) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_get_facts(nullptr, &f), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_get_facts(opened, nullptr), GPUBROKER_INVALID_ARGUMENT);

  gpubroker_buffer_release(opened);
  gpubroker_buffer_release(raw);
  gpubroker_buffer_release(b);
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();  // the empty ranges this client keeps
  EXPECT_EQ(client.UsedBytes(), 0u);
}

TEST(CAbi, PreparedOptionsServeEveryBufferOfTheirKindWithTheNameBeside) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  const int64_t shape[] = {16, 4};
  gpubroker_alloc_options_t kind;
  gpubroker_alloc_options_init(&kind);
  kind.name = "ignored";
  kind.dtype = GPUBROKER_DTYPE_FLOAT64;
  kind.ndim = 2;
  kind.shape = shape;
  const gpubroker_alloc_options_t before = kind;

  gpubroker_buffer_t* a = nullptr;
  gpubroker_buffer_t* b = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 512, "c.named.a", &kind, &a), GPUBROKER_OK)
      << gpubroker_last_error();
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 512, "c.named.b", &kind, &b), GPUBROKER_OK)
      << gpubroker_last_error();
  EXPECT_EQ(std::memcmp(&kind, &before, sizeof(kind)), 0) << "the options are only read";
  for (auto [buffer, name] : {std::pair{a, "c.named.a"}, std::pair{b, "c.named.b"}}) {
    gpubroker_buffer_facts_t f;
    f.struct_size = sizeof(f);
    ASSERT_EQ(gpubroker_buffer_get_facts(buffer, &f), GPUBROKER_OK);
    EXPECT_STREQ(f.name, name);
    EXPECT_EQ(f.dtype, GPUBROKER_DTYPE_FLOAT64);
    ASSERT_EQ(f.ndim, 2u);
    EXPECT_EQ(f.shape[0], 16);
  }
  EXPECT_TRUE(client.List().empty()) << "made by this client, not yet published";
  ASSERT_EQ(gpubroker_buffer_publish(a), GPUBROKER_OK) << gpubroker_last_error();
  ASSERT_EQ(gpubroker_buffer_publish(b), GPUBROKER_OK) << gpubroker_last_error();
  const auto listed = client.List();
  ASSERT_EQ(listed.size(), 2u);
  for (const auto& j : listed) {
    EXPECT_NE(j["name"], "ignored");
    EXPECT_EQ(j["tensor"]["dtype"], "float64") << j.dump();
  }

  // A name is claimed at publication: a taken one is refused there.
  gpubroker_buffer_t* c = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 512, "c.named.a", &kind, &c), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_publish(c), GPUBROKER_ALREADY_EXISTS);
  gpubroker_buffer_release(c);
  c = nullptr;
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 64, nullptr, nullptr, &c), GPUBROKER_OK);
  EXPECT_STREQ(gpubroker_buffer_name(c), "") << "no name: unnamed";
  gpubroker_buffer_release(c);
  ASSERT_EQ(gpubroker_allocate_named(client.get(), 64, "c.named.c", nullptr, &c), GPUBROKER_OK);
  EXPECT_STREQ(gpubroker_buffer_name(c), "c.named.c");
  gpubroker_buffer_release(c);
  kind.struct_size = 4;
  EXPECT_EQ(gpubroker_allocate_named(client.get(), 64, "c.named.d", &kind, &c),
            GPUBROKER_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gpubroker_last_error(), "struct_size"), nullptr) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_allocate_named(nullptr, 64, "c.named.d", nullptr, &c),
            GPUBROKER_INVALID_ARGUMENT);
  gpubroker_buffer_release(a);
  gpubroker_buffer_release(b);
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();  // the empty ranges this client keeps
  EXPECT_EQ(client.UsedBytes(), 0u);
}

TEST(CAbi, DlpackExportOnAStreamIsTheExportAndRefusesWhatItRefuses) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.dlpack.on", GPUBROKER_DTYPE_FLOAT32, {4, 8});
  ASSERT_NE(b, nullptr);
  // Unsealed (nothing to wait for) and sealed alike; host memory waits for nothing.
  for (int sealed = 0; sealed < 2; ++sealed) {
    if (sealed) {
      ASSERT_EQ(gpubroker_buffer_seal(b), GPUBROKER_OK);
    }
    void* out = nullptr;
    ASSERT_EQ(gpubroker_buffer_to_dlpack_on(b, GPUBROKER_DLPACK_VERSIONED, nullptr, &out),
              GPUBROKER_OK)
        << gpubroker_last_error();
    auto* v = static_cast<dl::ManagedTensorVersioned*>(out);
    EXPECT_EQ(v->version.major, 1u);
    EXPECT_EQ(v->dl_tensor.data, gpubroker_buffer_data(b));
    EXPECT_EQ(v->dl_tensor.device.device_type, dl::kCPU);
    ASSERT_EQ(v->dl_tensor.ndim, 2);
    EXPECT_EQ(v->dl_tensor.shape[1], 8);
    EXPECT_EQ(v->dl_tensor.strides[0], 8);
    v->deleter(v);
  }
  void* legacy = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack_on(b, 0, nullptr, &legacy), GPUBROKER_OK);
  // The export holds the buffer past its handle, as gpubroker_buffer_to_dlpack's does.
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_EQ(client.List().size(), 1u);
  auto* m = static_cast<dl::ManagedTensor*>(legacy);
  static_cast<float*>(m->dl_tensor.data)[31] = 1.5f;  // still mapped
  m->deleter(m);
  EXPECT_TRUE(client.List().empty());

  gpubroker_buffer_t* raw = nullptr;
  ASSERT_EQ(gpubroker_allocate(client.get(), 64, nullptr, &raw), GPUBROKER_OK);
  void* out = &legacy;
  EXPECT_EQ(gpubroker_buffer_to_dlpack_on(raw, 1u << 7, nullptr, &out), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_to_dlpack_on(raw, GPUBROKER_DLPACK_READ_ONLY, nullptr, &out),
            GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(out, &legacy) << "nothing is exported on failure";
  EXPECT_EQ(gpubroker_buffer_to_dlpack_on(raw, 0, nullptr, nullptr), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(gpubroker_buffer_to_dlpack_on(nullptr, 0, nullptr, &out), GPUBROKER_INVALID_ARGUMENT);
  gpubroker_buffer_release(raw);
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();  // the empty ranges this client keeps
  EXPECT_EQ(client.UsedBytes(), 0u);
}

TEST(CAbi, ViewOnAStreamIsTheViewAndRefusesWhatItRefuses) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.view.on", GPUBROKER_DTYPE_UINT8, {4096});
  ASSERT_NE(b, nullptr);
  auto* data = static_cast<uint8_t*>(gpubroker_buffer_data(b));
  // Unsealed (nothing to wait for) and sealed alike; host memory waits for nothing.
  gpubroker_view_t* views[2] = {nullptr, nullptr};
  for (int sealed = 0; sealed < 2; ++sealed) {
    if (sealed) {
      ASSERT_EQ(gpubroker_buffer_seal(b), GPUBROKER_OK);
    }
    ASSERT_EQ(gpubroker_buffer_view_on(b, nullptr, &views[sealed]), GPUBROKER_OK)
        << gpubroker_last_error();
    EXPECT_EQ(gpubroker_view_data(views[sealed]), data);
  }
  std::memset(data, 0x3c, 4096);
  // Each view holds the buffer past its handle, as gpubroker_buffer_view's does.
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_EQ(client.List().size(), 1u);
  gpubroker_view_release(views[0]);
  EXPECT_EQ(client.List().size(), 1u) << "the second view still holds it";
  EXPECT_EQ(static_cast<uint8_t*>(gpubroker_view_data(views[1]))[4095], 0x3c);  // still mapped
  gpubroker_view_release(views[1]);
  EXPECT_TRUE(client.List().empty());

  gpubroker_buffer_t* raw = nullptr;
  ASSERT_EQ(gpubroker_allocate(client.get(), 64, nullptr, &raw), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_view_on(raw, nullptr, nullptr), GPUBROKER_INVALID_ARGUMENT);
  gpubroker_view_t* none = nullptr;
  EXPECT_EQ(gpubroker_buffer_view_on(nullptr, nullptr, &none), GPUBROKER_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr) << "no view is made on failure";
  gpubroker_buffer_release(raw);
  EXPECT_EQ(client.InUseBytes(), 0u);
  client.Trim();  // the empty ranges this client keeps
  EXPECT_EQ(client.UsedBytes(), 0u);
}

// The child checks what it can and cannot do and exits with the number of
// failed checks; the parent then checks that its session is untouched.
int ChildAfterFork(gpubroker_client_t* parents, gpubroker_buffer_t* parents_buffer,
                   const std::string& dir) {
  int failed = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "child: %s (last error: %s)\n", what, gpubroker_last_error());
      ++failed;
    }
  };
  expect(gpubroker_client_check(parents) == GPUBROKER_FAILED_PRECONDITION, "client_check");
  gpubroker_buffer_t* b = nullptr;
  expect(gpubroker_allocate(parents, 4096, nullptr, &b) == GPUBROKER_FAILED_PRECONDITION,
         "allocate refused");
  expect(std::strstr(gpubroker_last_error(), "fork()") != nullptr, "the message names fork()");
  char* json = nullptr;
  expect(gpubroker_list_json(parents, &json) == GPUBROKER_FAILED_PRECONDITION, "list refused");
  expect(gpubroker_buffer_seal(parents_buffer) == GPUBROKER_FAILED_PRECONDITION, "seal refused");
  gpubroker_view_t* view = nullptr;
  expect(gpubroker_buffer_view(parents_buffer, &view) == GPUBROKER_FAILED_PRECONDITION,
         "view refused");
  expect(gpubroker_buffer_view_on(parents_buffer, nullptr, &view) == GPUBROKER_FAILED_PRECONDITION,
         "view on a stream refused");
  void* exported = nullptr;
  expect(gpubroker_buffer_to_dlpack_on(parents_buffer, 0, nullptr, &exported) ==
             GPUBROKER_FAILED_PRECONDITION,
         "export on a stream refused");
  gpubroker_buffer_facts_t facts;
  facts.struct_size = sizeof(facts);
  expect(gpubroker_buffer_get_facts(parents_buffer, &facts) == GPUBROKER_OK &&
             std::strcmp(facts.name, "c.fork") == 0,
         "facts readable (they make no call)");
  // Releasing and disconnecting here must leave the parent's session alone.
  gpubroker_buffer_release(parents_buffer);
  gpubroker_disconnect(parents);

  gpubroker_client_t* own = nullptr;
  expect(gpubroker_connect(dir.c_str(), &own) == GPUBROKER_OK, "connect anew");
  if (own != nullptr) {
    expect(gpubroker_allocate(own, 4096, nullptr, &b) == GPUBROKER_OK, "allocate on its own");
    expect(gpubroker_status_json(own, &json) == GPUBROKER_OK, "status on its own (gRPC)");
    gpubroker_string_free(json);
    gpubroker_buffer_release(b);
    gpubroker_disconnect(own);
  }
  return failed;
}

// What a binding asks of a buffer this client made before its seal (its
// state, a DLPack export or a view on a stream) reads nothing from the
// daemon: the buffer stays unpublished until the seal publishes and seals it
// in one frame.
TEST(CAbi, ExportsBeforeTheSealDoNotPublishAClientMadeBuffer) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  CClient client(daemon.socket_dir());
  gpubroker_buffer_t* b = client.Allocate(4096, "c.not.yet", GPUBROKER_DTYPE_UINT8, {4096});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(gpubroker_buffer_is_published(b), 0) << "a client-made buffer starts unpublished";
  EXPECT_EQ(gpubroker_buffer_is_sealed(b), 0);
  void* out = nullptr;
  ASSERT_EQ(gpubroker_buffer_to_dlpack_on(b, GPUBROKER_DLPACK_VERSIONED, nullptr, &out),
            GPUBROKER_OK)
      << gpubroker_last_error();
  gpubroker_view_t* view = nullptr;
  ASSERT_EQ(gpubroker_buffer_view_on(b, nullptr, &view), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_is_published(b), 0) << "nothing above needed the daemon";
  EXPECT_TRUE(client.List().empty());
  ASSERT_EQ(gpubroker_buffer_seal(b), GPUBROKER_OK);
  EXPECT_EQ(gpubroker_buffer_is_published(b), 1);
  EXPECT_EQ(gpubroker_buffer_is_sealed(b), 1);
  EXPECT_EQ(client.List().size(), 1u);
  static_cast<dl::ManagedTensorVersioned*>(out)->deleter(
      static_cast<dl::ManagedTensorVersioned*>(out));
  gpubroker_view_release(view);
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_TRUE(client.List().empty());
}

TEST(CAbi, ConnectWithNamesTheClientAndTakesItsSpin) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  gpubroker_connect_options_t o;
  gpubroker_connect_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(o));
  EXPECT_EQ(o.spin_us, -1);  // the default
  o.client_name = "c-tool";
  o.spin_us = 0;  // every call blocks at once
  gpubroker_client_t* c = nullptr;
  ASSERT_EQ(gpubroker_connect_with(daemon.socket_dir().c_str(), &o, &c), GPUBROKER_OK)
      << gpubroker_last_error();
  gpubroker_buffer_t* b = nullptr;
  ASSERT_EQ(gpubroker_allocate(c, 4096, nullptr, &b), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_seal_on(b, nullptr), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_NE(gpubroker_buffer_id(b), 0u);
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  gpubroker_disconnect(c);
  EXPECT_NE(daemon.log().find("client 'c-tool'"), std::string::npos) << daemon.log();

  o.struct_size = 4;  // a caller that did not initialize the options
  c = nullptr;
  EXPECT_EQ(gpubroker_connect_with(daemon.socket_dir().c_str(), &o, &c),
            GPUBROKER_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpubroker_last_error()).find("gpubroker_connect_options_init"),
            std::string::npos);
  EXPECT_EQ(c, nullptr);
}

TEST(CAbi, ForkedChildCannotUseTheParentsHandlesAndLeavesTheSessionAlone) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ok());
  auto* parent = new CClient(daemon.socket_dir());
  gpubroker_buffer_t* b = parent->Allocate(8192, "c.fork", GPUBROKER_DTYPE_UINT8, {8192});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(gpubroker_buffer_publish(b), GPUBROKER_OK) << gpubroker_last_error();
  const uint64_t session = gpubroker_client_session_id(parent->get());
  EXPECT_NE(session, 0u);
  EXPECT_STRNE(gpubroker_client_tenant(parent->get()), "");
  parent->Status();  // the gRPC connection is up before the fork

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(ChildAfterFork(parent->get(), b, daemon.socket_dir()));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks in the child (its stderr says which)";

  EXPECT_EQ(gpubroker_client_check(parent->get()), GPUBROKER_OK);
  const auto buffers = parent->List();
  ASSERT_EQ(buffers.size(), 1u) << "the child's release freed the parent's buffer";
  EXPECT_EQ(buffers[0]["name"], "c.fork");
  EXPECT_EQ(buffers[0]["leases"], 1);
  EXPECT_EQ(parent->Status()["self"]["session_id"], session);
  EXPECT_TRUE(Eventually([&] { return parent->Status()["sessions"] == 1; }))
      << "the child's own session should end, the parent's not";
  EXPECT_EQ(gpubroker_buffer_seal(b), GPUBROKER_OK) << gpubroker_last_error();
  EXPECT_EQ(gpubroker_buffer_release(b), GPUBROKER_OK);
  EXPECT_TRUE(parent->List().empty());
  delete parent;
}

}  // namespace
}  // namespace gpubroker::testing
