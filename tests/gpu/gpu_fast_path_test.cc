// The fast path (docs/fast-path.md) on real GPU memory, across real
// processes: buffers a client makes in ranges of its tenant's arena slabs
// and their books after SIGKILL, publish and seal in one frame answering an
// Open parked in the daemon, recycled VMM allocations mapped from both
// clients' caches, and the daemon's request to unmap before memory a client
// keeps mapped goes to another tenant. The host backend's versions are in
// tests/integration (mapping_cache_test.cc, wait_test.cc, reclaim_test.cc).
// Every test skips, saying why, where no GPU is usable.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda/cuda_util.h"
#include "gpubroker/client.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gpu/gpu_test_util.h"
#include "tests/integration/harness.h"

namespace gpubroker::testing {
namespace {

using namespace std::chrono_literals;
constexpr int64_t kMiB = int64_t{1} << 20;

int64_t DeviceUsed(Helper& h) { return Status(h)["devices"][0]["used_bytes"].get<int64_t>(); }
std::string Uuid(Helper& h) { return Status(h)["devices"][0]["uuid"].get<std::string>(); }

// Buffers under the VMM threshold are made by the client in ranges of its
// tenant's arena slabs, with no call per buffer; the ranges are charged to
// the tenant whole. A SIGKILLed owner's ranges all come back, but for the
// published block another process still reads, which comes back when that
// reader lets go.
TEST(GpuFastPath, ArenaRangesOfAKilledClientReturnButForWhatAReaderHolds) {
  SKIP_WITHOUT_GPU();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Helper observer(daemon.socket_dir());
  const int64_t base = DeviceUsed(observer);
  const std::string uuid = Uuid(observer);

  auto owner = std::make_unique<Helper>(daemon.socket_dir());
  for (int i = 0; i < 16; ++i) owner->Ok("alloc b" + std::to_string(i) + " 1048576");
  owner->Ok("alloc p 65536 name=fast.killed");
  owner->Ok("fill p 5");
  owner->Ok("seal p");
  EXPECT_EQ(owner->Stat("client_made"), 17) << "every buffer was made in the client's ranges";
  EXPECT_EQ(owner->Stat("daemon_session"), 0);
  EXPECT_EQ(owner->Stat("daemon_grpc"), 0);
  EXPECT_EQ(owner->Stat("publishes"), 1) << "publish and seal: one frame";
  const int64_t range_bytes = owner->Stat("range_bytes");
  ASSERT_GE(range_bytes, 17 * kMiB);
  EXPECT_EQ(DeviceUsed(observer), base + range_bytes) << "ranges are charged whole, when leased";

  Helper reader(daemon.socket_dir());
  reader.Ok("open r fast.killed");
  EXPECT_EQ(reader.Send("check r 5 stream"), "ok");
  owner->Kill9();
  owner.reset();
  ASSERT_TRUE(Eventually([&] { return DeviceUsed(observer) < base + range_bytes; }, 10s))
      << daemon.log();
  const int64_t held = DeviceUsed(observer) - base;
  EXPECT_GT(held, 0) << "the block the reader holds stays";
  EXPECT_LT(held, 2 * kMiB) << "and only that block";
  EXPECT_EQ(reader.Send("check r 5 stream"), "ok") << "a reader never has memory pulled away";
  reader.Ok("release r");
  EXPECT_TRUE(Eventually([&] { return DeviceUsed(observer) == base; }, 10s)) << daemon.log();
  EXPECT_EQ(daemon.Metric("gpubroker_pool_used_bytes{device=\"" + uuid + "\"}"),
            static_cast<double>(base));
  EXPECT_GE(daemon.Metric("gpubroker_reclaimed_bytes_total{cause=\"died\"}"),
            static_cast<double>(range_bytes - held));
}

// A consumer that waits for a name is parked in the daemon; the producer's
// publish-and-seal of a client-made buffer (one frame on session.sock)
// answers it from the session thread, and the consumer's stream reads what
// the producer's stream wrote, behind the ready fence in the block.
TEST(GpuFastPath, PublishAndSealInOneFrameAnswersAnOpenParkedInTheDaemon) {
  SKIP_WITHOUT_GPU();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Helper consumer(daemon.socket_dir());
  Helper producer(daemon.socket_dir());
  consumer.Post("open v fast.frame wait=20000");
  ASSERT_TRUE(Eventually([&] { return daemon.Metric("gpubroker_waiting_opens") == 1; }))
      << daemon.log();

  producer.Ok("alloc p 4194304 name=fast.frame");
  producer.Ok("fill p 9");
  producer.Ok("seal p");
  EXPECT_EQ(consumer.Reply(20s).rfind("ok ", 0), 0u) << daemon.log();
  EXPECT_EQ(consumer.Send("check v 9 stream"), "ok");
  EXPECT_EQ(producer.Stat("client_made"), 1);
  EXPECT_EQ(producer.Stat("publishes"), 1);
  EXPECT_EQ(producer.Stat("daemon_session") + producer.Stat("daemon_grpc"), 0)
      << "no Allocate and no Seal call: the publication was the only frame";
  EXPECT_EQ(consumer.Stat("maps_imported"), 1) << "the slab was imported once, at the open";
  EXPECT_EQ(consumer.Stat("maps_mapped"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_waiting_opens"), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_connections{socket=\"grpc\"}"), 0)
      << "the wait, the publication and the open all went over session.sock";
}

// A seal on the GPU that finds the daemon asleep wakes it ahead of its
// frame (an Ahead), so that the daemon's wake-up overlaps the fence's
// record, even with nobody waiting for the buffer; with the earlier rule
// (GPUBROKER_SEAL_AHEAD=sleepers) it does not.
TEST(GpuFastPath, ASealOnTheGpuWakesASleepingDaemonAhead) {
  SKIP_WITHOUT_GPU();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  const std::string aheads = "gpubroker_session_aheads_total";
  Helper producer(daemon.socket_dir());
  Helper earlier({"/usr/bin/env", "GPUBROKER_SEAL_AHEAD=sleepers",
                  BinDir() + "/gpubroker-test-helper", "--socket-dir", daemon.socket_dir()});
  for (int i = 0; i < 3; ++i) {
    for (Helper* h : {&producer, &earlier}) {
      const std::string p = "p" + std::to_string(i);
      const std::string name = "ahead.gpu." + std::to_string(i) + (h == &producer ? "" : ".old");
      h->Ok("alloc " + p + " 4194304 name=" + name);
      h->Ok("fill " + p + " 3");
      std::this_thread::sleep_for(50ms);  // far past the daemon's busy poll: it sleeps
      h->Ok("seal " + p);
    }
  }
  EXPECT_EQ(daemon.Metric(aheads), 3) << "one per seal of the producer, none of the other's";
  Helper consumer(daemon.socket_dir());
  consumer.Ok("open v ahead.gpu.2");
  EXPECT_EQ(consumer.Send("check v 3 stream"), "ok");
}

// A VMM allocation freed by its tenant is kept for the tenant's next buffer
// of the size: that one is answered on session.sock, and both clients find
// its mapping in their caches (the same addresses, no import).
TEST(GpuFastPath, ARecycledVmmAllocationIsMappedFromBothClientsCaches) {
  SKIP_WITHOUT_GPU();
  Daemon daemon({"--backend", "cuda", "--vmm-threshold", "32MiB"});
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir());
  Helper b(daemon.socket_dir());
  const std::string uuid = Uuid(a);
  const std::string kept = "gpubroker_pool_kept_bytes{device=\"" + uuid + "\"}";

  a.Ok("alloc x 67108864 name=kv");
  EXPECT_EQ(a.Ok("info x").find("backing=cuda-vmm"), 0u);
  // What the allocation holds: the buffer, its fence word, rounded to the granularity.
  const uint64_t reserved = std::stoull(Fields(a.Ok("info x"))["reserved"]);
  EXPECT_GT(reserved, 64 * kMiB);
  EXPECT_EQ(a.Stat("daemon_grpc"), 1) << "cold: a new VMM allocation goes through gRPC";
  EXPECT_EQ(a.Stat("maps_imported"), 1);
  a.Ok("fill x 7");
  a.Ok("seal x");
  b.Ok("open y kv");
  EXPECT_EQ(b.Send("check y 7 stream"), "ok");
  EXPECT_EQ(b.Stat("maps_imported"), 1);
  const std::string where_a = a.Ok("addr x");
  const std::string where_b = b.Ok("addr y");
  b.Ok("release y");
  a.Ok("release x");
  EXPECT_EQ(a.Stat("cache_entries"), 1);
  EXPECT_EQ(b.Stat("cache_entries"), 1);
  EXPECT_TRUE(Eventually([&] { return daemon.Metric(kept) == static_cast<double>(reserved); }))
      << daemon.Metric(kept) << " kept; " << daemon.log();

  a.Ok("alloc x 67108864 name=kv");
  EXPECT_EQ(a.Stat("daemon_session"), 1) << "a kept allocation is answered on session.sock";
  EXPECT_EQ(a.Stat("daemon_grpc"), 1);
  EXPECT_EQ(a.Stat("cache_hits"), 1);
  EXPECT_EQ(a.Stat("maps_imported"), 1);
  EXPECT_EQ(a.Ok("addr x"), where_a);
  a.Ok("fill x 11");
  a.Ok("seal x");
  b.Ok("open y kv");
  EXPECT_EQ(b.Stat("maps_cached"), 1);
  EXPECT_EQ(b.Stat("maps_imported"), 1);
  EXPECT_EQ(b.Ok("addr y"), where_b);
  EXPECT_EQ(b.Send("check y 11 stream"), "ok") << "b reads what a wrote into the recycled memory";
  EXPECT_EQ(daemon.Metric(kept), 0);
  a.Ok("alloc m 4096 publish");  // carries a's counters to the daemon
  b.Ok("alloc m 4096 publish");
  EXPECT_TRUE(Eventually([&] {
    return daemon.Metric("gpubroker_client_mapping_cache_lookups_total{result=\"hit\"}") == 2;
  }));
  EXPECT_EQ(daemon.Metric("gpubroker_client_maps_total{path=\"cached\"}"), 2);
}

// Memory that a client keeps mapped is another tenant's only after the
// daemon asked that client to unmap it and it did (between its calls, on its
// own): eviction before lending across tenants.
TEST(GpuFastPath, KeptMemoryGoesToAnotherTenantOnlyAfterItsHolderUnmapped) {
  SKIP_WITHOUT_GPU();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run helpers as other users";
  Daemon daemon({"--backend", "cuda", "--vmm-threshold", "32MiB", "--pool-bytes", "256MiB"});
  ASSERT_TRUE(daemon.ok());
  Helper a(daemon.socket_dir(), 60031);
  const std::string uuid = Uuid(a);
  const std::string kept = "gpubroker_pool_kept_bytes{device=\"" + uuid + "\"}";
  a.Ok("alloc x 167772160");  // 160 MiB, and its fence word: 162 MiB
  const uint64_t reserved = std::stoull(Fields(a.Ok("info x"))["reserved"]);
  a.Ok("fill x 3");
  a.Ok("release x");
  ASSERT_EQ(a.Stat("cache_entries"), 1);
  ASSERT_TRUE(Eventually([&] { return daemon.Metric(kept) == static_cast<double>(reserved); }))
      << daemon.Metric(kept) << " kept; " << daemon.log();

  // 192 MiB for another tenant fits only once a's kept 162 MiB are gone.
  Helper b(daemon.socket_dir(), 60032);
  b.Ok("alloc y 201326592", 30s);
  EXPECT_EQ(daemon.Metric("gpubroker_unmap_requests_total"), 1);
  EXPECT_EQ(daemon.Metric(kept), 0);
  EXPECT_EQ(daemon.Metric("gpubroker_pool_unmapping_bytes{device=\"" + uuid + "\"}"), 0);
  EXPECT_EQ(a.Stat("cache_entries"), 0) << "a unmapped before b got the memory";
  EXPECT_EQ(a.Stat("cache_evictions"), 1);
  b.Ok("fill y 4");
  EXPECT_EQ(b.Send("check y 4"), "ok");
}

// A stream held behind a gate word in device memory (cuStreamWaitValue64)
// until Open(): what is queued on it waits, so that a test can watch the
// client while work that uses a buffer is still to come. Open() runs at the
// latest when the guard from OpenAtExit() goes, which a test declares after
// its buffers: their destructors may wait for the device.
class HeldStream {
 public:
  explicit HeldStream(const cuda::DriverApi& api) : api_(api) {
    ok_ = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaStreamCreateWithFlags(&opener_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaMalloc(&gate_, 8) == cudaSuccess && cudaMemset(gate_, 0, 8) == cudaSuccess &&
          cudaDeviceSynchronize() == cudaSuccess &&
          api_.cuStreamWaitValue64(reinterpret_cast<CUstream>(stream_), word(), 1,
                                   CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS;
  }
  ~HeldStream() {
    Open();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaStreamDestroy(opener_);
    cudaFree(gate_);
  }
  bool ok() const { return ok_; }
  cudaStream_t get() const { return stream_; }
  void Open() {
    if (opened_ || !ok_) return;
    opened_ = true;
    EXPECT_EQ(api_.cuStreamWriteValue64(reinterpret_cast<CUstream>(opener_), word(), 1,
                                        CU_STREAM_WRITE_VALUE_DEFAULT),
              CUDA_SUCCESS);
    EXPECT_EQ(cudaStreamSynchronize(opener_), cudaSuccess);
  }
  struct Guard {
    HeldStream* held;
    ~Guard() { held->Open(); }
  };
  Guard OpenAtExit() { return Guard{this}; }

 private:
  CUdeviceptr word() const { return reinterpret_cast<CUdeviceptr>(gate_); }
  const cuda::DriverApi& api_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t opener_ = nullptr;
  void* gate_ = nullptr;
  bool ok_ = false;
  bool opened_ = false;
};

// Page-locked host memory: a device-to-host cudaMemcpyAsync into pageable
// memory returns only once the copy is done, so a test that holds the copy
// behind a gate and then opens the gate would wait for itself.
class PinnedHost {
 public:
  explicit PinnedHost(size_t bytes) : bytes_(bytes) {
    if (cudaMallocHost(&data_, bytes) == cudaSuccess) std::memset(data_, 0, bytes);
  }
  ~PinnedHost() { cudaFreeHost(data_); }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  bool ok() const { return data_ != nullptr; }
  unsigned char* data() const { return static_cast<unsigned char*>(data_); }
  unsigned char front() const { return data()[0]; }
  unsigned char back() const { return data()[bytes_ - 1]; }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

// Runs `release` on another thread; false (after opening the gate, so that
// it can finish) when it did not return within 10 s: it waited for the device.
bool ReturnsWithoutWaiting(HeldStream& held, const std::function<void()>& release) {
  auto done = std::async(std::launch::async, release);
  if (done.wait_for(10s) == std::future_status::ready) {
    done.get();
    return true;
  }
  held.Open();
  done.wait();
  return false;
}

// Buffer::release_on: the releasing thread does not wait for the stream's
// work, and until that work is done the memory stays the client's: no new
// buffer gets it, the owner's free has not happened, its name still opens.
// The next allocate after the work is done gives both buffers back.
TEST(GpuFastPath, AReleaseOnAStreamGivesTheMemoryBackOnceItsWorkIsDone) {
  SKIP_WITHOUT_GPU();
  auto api_or = cuda::DriverApi::Get();
  ASSERT_TRUE(api_or.ok()) << api_or.status().ToString();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Client client = Client::connect(daemon.socket_dir());
  cuda::ScopedDevice on(0);
  ASSERT_TRUE(on.status().ok());
  HeldStream held(**api_or);
  ASSERT_TRUE(held.ok());
  cudaStream_t stream = held.get();

  // A published buffer, written and sealed on the held stream, and one
  // this client made and never published.
  Buffer shared = client.allocate(kMiB, {.name = "stream.release"});
  ASSERT_EQ(cudaMemsetAsync(shared.data(), 7, kMiB, stream), cudaSuccess);
  shared.seal(stream);
  Buffer local = client.allocate(kMiB);
  ASSERT_EQ(cudaMemsetAsync(local.data(), 1, kMiB, stream), cudaSuccess);
  void* const shared_ptr = shared.data();
  void* const local_ptr = local.data();

  ASSERT_TRUE(ReturnsWithoutWaiting(held, [&] {
    shared.release_on(stream);
    local.release_on(stream);
  })) << "release_on waited for the stream's work";
  Buffer next;
  auto open_at_exit = held.OpenAtExit();
  EXPECT_FALSE(shared.valid());
  EXPECT_FALSE(local.valid());
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the stream's work is still held";
  EXPECT_EQ(client.stats().pending_releases, 2u);

  next = client.allocate(kMiB);
  EXPECT_NE(next.data(), shared_ptr) << "memory in use by the stream served a new buffer";
  EXPECT_NE(next.data(), local_ptr) << "memory in use by the stream served a new buffer";
  EXPECT_EQ(client.stats().pending_releases, 2u);
  Helper reader(daemon.socket_dir());
  reader.Ok("open r stream.release");  // not freed yet: the owner's release waits

  held.Open();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  next.release();
  Buffer after = client.allocate(kMiB);  // gives back the releases whose work is done
  EXPECT_EQ(client.stats().pending_releases, 0u);
  EXPECT_EQ(reader.Ok("peek r 0"), "7") << "the reader sees what the held stream wrote";
  EXPECT_EQ(reader.Ok("peek r 1048575"), "7");
  Helper late(daemon.socket_dir());
  EXPECT_EQ(late.Send("open x stream.release").rfind("err NOT_FOUND", 0), 0u)
      << "the owner's deferred release freed the buffer";
  reader.Ok("release r");
  after.release();
}

// release() of a small buffer this client made and never published does not
// synchronize the device each time: its block waits, out of the allocator,
// for one synchronize shared by a batch of such releases. While work queued
// before the release may still write the block, the call returns and no new
// buffer gets the block; trim synchronizes and gives the blocks back, and
// the 64th release of a batch does too.
TEST(GpuFastPath, AReleasedBlockServesNoBufferUntilTheDeviceSynchronizes) {
  SKIP_WITHOUT_GPU();
  auto api_or = cuda::DriverApi::Get();
  ASSERT_TRUE(api_or.ok()) << api_or.status().ToString();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Client client = Client::connect(daemon.socket_dir());
  cuda::ScopedDevice on(0);
  ASSERT_TRUE(on.status().ok());
  HeldStream held(**api_or);
  ASSERT_TRUE(held.ok());

  Buffer written = client.allocate(4096);
  ASSERT_EQ(cudaMemsetAsync(written.data(), 3, 4096, held.get()), cudaSuccess);
  void* const written_ptr = written.data();
  ASSERT_TRUE(ReturnsWithoutWaiting(held, [&] { written.release(); }))
      << "release() waited for the device";
  std::vector<Buffer> next;
  auto open_at_exit = held.OpenAtExit();
  EXPECT_EQ(client.stats().unsynced_releases, 1u);
  EXPECT_EQ(client.stats().in_use_blocks, 1u) << "the block is still in use";
  for (int i = 0; i < 8; ++i) {
    next.push_back(client.allocate(4096));
    EXPECT_NE(next.back().data(), written_ptr) << "a block the device may still write was reused";
  }
  EXPECT_EQ(cudaStreamQuery(held.get()), cudaErrorNotReady) << "the stream's work is still held";

  held.Open();
  ASSERT_EQ(cudaStreamSynchronize(held.get()), cudaSuccess);
  next.clear();  // eight more releases, still below the batch
  EXPECT_EQ(client.stats().unsynced_releases, 9u);
  client.trim();
  EXPECT_EQ(client.stats().unsynced_releases, 0u);
  EXPECT_EQ(client.stats().in_use_blocks, 0u);

  for (int i = 0; i < 64; ++i) next.push_back(client.allocate(4096));
  for (int i = 0; i < 63; ++i) next[i].release();
  EXPECT_EQ(client.stats().unsynced_releases, 63u);
  next[63].release();  // the batch is full: one synchronize for all of it
  EXPECT_EQ(client.stats().unsynced_releases, 0u);
  EXPECT_EQ(client.stats().in_use_blocks, 0u);
}

// Buffer::seal_posted on a stream whose work is held: the call returns, an
// Open from another session that comes after it finds the buffer sealed at
// once, and the reader's stream still waits for the producer's writes.
TEST(GpuFastPath, APostedSealIsFoundAtOnceAndItsFenceStillOrdersTheReader) {
  SKIP_WITHOUT_GPU();
  auto api_or = cuda::DriverApi::Get();
  ASSERT_TRUE(api_or.ok()) << api_or.status().ToString();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Client producer = Client::connect(daemon.socket_dir());
  Client consumer = Client::connect(daemon.socket_dir());
  cuda::ScopedDevice on(0);
  ASSERT_TRUE(on.status().ok());
  HeldStream held(**api_or);
  ASSERT_TRUE(held.ok());
  auto open_at_exit = held.OpenAtExit();
  cudaStream_t reader_stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader_stream, cudaStreamNonBlocking), cudaSuccess);

  Buffer shared = producer.allocate(kMiB, {.name = "posted.gpu"});
  ASSERT_EQ(cudaMemsetAsync(shared.data(), 5, kMiB, held.get()), cudaSuccess);
  ASSERT_TRUE(ReturnsWithoutWaiting(held, [&] { shared.seal_posted(held.get()); }))
      << "seal_posted waited for the stream's work";

  OpenOptions o;
  o.stream = reader_stream;  // waits on the fence, behind the held memset
  Buffer seen = consumer.open("posted.gpu", o);
  EXPECT_EQ(seen.info().state, BufferState::kSealed);
  PinnedHost host(kMiB);  // pageable memory would make the copy wait on the host
  ASSERT_TRUE(host.ok());
  ASSERT_EQ(cudaMemcpyAsync(host.data(), seen.data(), kMiB, cudaMemcpyDeviceToHost, reader_stream),
            cudaSuccess);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(cudaStreamQuery(reader_stream), cudaErrorNotReady)
      << "the reader's copy ran before the producer's held memset";
  held.Open();
  ASSERT_EQ(cudaStreamSynchronize(reader_stream), cudaSuccess);
  EXPECT_EQ(host.front(), 5);
  EXPECT_EQ(host.back(), 5);
  EXPECT_NE(shared.id(), 0u);
  EXPECT_EQ(producer.stats().publishes, 1u);
  seen.release();
  shared.release();
  cudaStreamDestroy(reader_stream);
}

// A ticket on the GPU: the producer seals (posted) behind a held stream,
// makes a ticket and lets go of its handle; the consumer's posted claim is
// taken in by wait_ready, whose stream still waits for the held memset, and
// the bytes are the producer's.
TEST(GpuFastPath, AClaimedTicketsFenceOrdersTheReaderAfterTheProducerLetGo) {
  SKIP_WITHOUT_GPU();
  auto api_or = cuda::DriverApi::Get();
  ASSERT_TRUE(api_or.ok()) << api_or.status().ToString();
  Daemon daemon({"--backend", "cuda", "--small-buffers", "arena"});
  ASSERT_TRUE(daemon.ok());
  Client producer = Client::connect(daemon.socket_dir());
  Client consumer = Client::connect(daemon.socket_dir());
  cuda::ScopedDevice on(0);
  ASSERT_TRUE(on.status().ok());
  HeldStream held(**api_or);
  ASSERT_TRUE(held.ok());
  auto open_at_exit = held.OpenAtExit();
  cudaStream_t reader_stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader_stream, cudaStreamNonBlocking), cudaSuccess);

  Buffer shared = producer.allocate(kMiB);
  ASSERT_EQ(cudaMemsetAsync(shared.data(), 9, kMiB, held.get()), cudaSuccess);
  std::string ticket;
  ASSERT_TRUE(ReturnsWithoutWaiting(held, [&] {
    shared.seal_posted(held.get());
    ticket = shared.ticket();
  })) << "seal_posted or ticket waited for the stream's work";
  shared.release_on(held.get());  // the ticket keeps the buffer

  Buffer seen = consumer.claim_posted(ticket);
  seen.wait_ready(reader_stream);  // the claim's answer is taken here
  EXPECT_EQ(seen.info().state, BufferState::kSealed);
  PinnedHost host(kMiB);  // pageable memory would make the copy wait on the host
  ASSERT_TRUE(host.ok());
  ASSERT_EQ(cudaMemcpyAsync(host.data(), seen.data(), kMiB, cudaMemcpyDeviceToHost, reader_stream),
            cudaSuccess);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(cudaStreamQuery(reader_stream), cudaErrorNotReady)
      << "the reader's copy ran before the producer's held memset";
  held.Open();
  ASSERT_EQ(cudaStreamSynchronize(reader_stream), cudaSuccess);
  EXPECT_EQ(host.front(), 9);
  EXPECT_EQ(host.back(), 9);
  seen.release();
  producer.trim();
  cudaStreamDestroy(reader_stream);
}

}  // namespace
}  // namespace gpubroker::testing
