#include "tests/integration/helper_memory.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#ifdef GPUBROKER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <thread>

#include "common/cuda/cuda_util.h"
#endif

namespace gpubroker::testing {

bool IsDevice(const Buffer& b) { return b.device().rfind("GPU-", 0) == 0; }

namespace {

uint8_t* Host(Buffer& b) { return static_cast<uint8_t*>(b.data()); }

#ifdef GPUBROKER_HAVE_CUDA
constexpr uint64_t kChunk = 64 << 20;  // a multiple of the pattern's period

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

int DeviceOf(const Buffer& b) {
  auto ordinal = cuda::OrdinalOf(b.device());
  if (!ordinal.ok()) throw std::runtime_error(std::string(ordinal.status().message()));
  Check(cudaSetDevice(*ordinal), "cudaSetDevice");
  return *ordinal;
}

// A pinned chunk of the pattern of one seed (kept: queued copies may still
// read it), and a pinned chunk to read into.
struct Staging {
  uint8_t* pattern = nullptr;
  uint8_t* scratch = nullptr;
};

Staging Stage(uint64_t seed) {
  static std::map<uint64_t, uint8_t*> patterns;
  static uint8_t* scratch = nullptr;
  if (scratch == nullptr)
    Check(cudaMallocHost(reinterpret_cast<void**>(&scratch), kChunk), "cudaMallocHost");
  uint8_t*& pattern = patterns[seed];
  if (pattern == nullptr) {
    Check(cudaMallocHost(reinterpret_cast<void**>(&pattern), kChunk), "cudaMallocHost");
    for (uint64_t i = 0; i < kChunk; ++i) pattern[i] = PatternByte(i, seed);
  }
  return {pattern, scratch};
}

std::vector<cudaStream_t>& Streams() {
  static std::vector<cudaStream_t> streams;
  return streams;
}

void HostDelay(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
}
#endif

}  // namespace

std::string GpuProblem() {
#ifdef GPUBROKER_HAVE_CUDA
  auto count = cuda::DeviceCount();
  return count.ok() ? "" : std::string(count.status().message());
#else
  return "this build has no CUDA support";
#endif
}

void Fill(Buffer& b, uint64_t seed, uint64_t length) {
  if (!IsDevice(b)) {
    for (uint64_t i = 0; i < length; ++i) Host(b)[i] = PatternByte(i, seed);
    return;
  }
#ifdef GPUBROKER_HAVE_CUDA
  DeviceOf(b);
  auto* dst = static_cast<uint8_t*>(b.data());
  if (length < kChunk) {  // small: no pinned staging (churn uses a new seed per buffer)
    std::vector<uint8_t> pattern(length);
    for (uint64_t i = 0; i < length; ++i) pattern[i] = PatternByte(i, seed);
    Check(cudaMemcpy(dst, pattern.data(), length, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    // A copy from pageable memory may return before it lands: the helper's
    // commands are complete when they answer.
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return;
  }
  Staging s = Stage(seed);
  for (uint64_t off = 0; off < length; off += kChunk) {
    Check(cudaMemcpy(dst + off, s.pattern, std::min(kChunk, length - off), cudaMemcpyHostToDevice),
          "cudaMemcpy H2D");
  }
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

int64_t Check(Buffer& b, uint64_t seed, uint64_t length, bool stream_wait) {
  if (!IsDevice(b)) {
    for (uint64_t i = 0; i < length; ++i) {
      if (Host(b)[i] != PatternByte(i, seed)) return static_cast<int64_t>(i);
    }
    return -1;
  }
#ifdef GPUBROKER_HAVE_CUDA
  DeviceOf(b);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (stream_wait) b.wait_ready(stream);
  const auto* src = static_cast<const uint8_t*>(b.data());
  if (length < kChunk) {
    std::vector<uint8_t> got(length);
    Check(cudaMemcpyAsync(got.data(), src, length, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync D2H");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cudaStreamDestroy(stream);
    for (uint64_t i = 0; i < length; ++i) {
      if (got[i] != PatternByte(i, seed)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  Staging s = Stage(seed);
  int64_t bad = -1;
  for (uint64_t off = 0; off < length && bad < 0; off += kChunk) {
    const uint64_t n = std::min(kChunk, length - off);
    Check(cudaMemcpyAsync(s.scratch, src + off, n, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync D2H");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (std::memcmp(s.scratch, s.pattern, n) != 0) {
      for (uint64_t i = 0; i < n; ++i) {
        if (s.scratch[i] != s.pattern[i]) {
          bad = static_cast<int64_t>(off + i);
          break;
        }
      }
    }
  }
  cudaStreamDestroy(stream);
  return bad;
#else
  return 0;
#endif
}

int64_t FirstNonZero(Buffer& b, uint64_t length) {
  if (!IsDevice(b)) {
    for (uint64_t i = 0; i < length; ++i) {
      if (Host(b)[i] != 0) return static_cast<int64_t>(i);
    }
    return -1;
  }
#ifdef GPUBROKER_HAVE_CUDA
  DeviceOf(b);
  std::vector<uint8_t> got(std::min(kChunk, length));
  const auto* src = static_cast<const uint8_t*>(b.data());
  for (uint64_t off = 0; off < length; off += kChunk) {
    const uint64_t n = std::min(kChunk, length - off);
    Check(cudaMemcpy(got.data(), src + off, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    for (uint64_t i = 0; i < n; ++i) {
      if (got[i] != 0) return static_cast<int64_t>(off + i);
    }
  }
  return -1;
#else
  return 0;
#endif
}

void Poke(Buffer& b, uint64_t offset, uint8_t value) {
  if (!IsDevice(b)) {
    Host(b)[offset] = value;
    return;
  }
#ifdef GPUBROKER_HAVE_CUDA
  DeviceOf(b);
  Check(cudaMemcpy(static_cast<uint8_t*>(b.data()) + offset, &value, 1, cudaMemcpyHostToDevice),
        "cudaMemcpy poke");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

uint8_t Peek(Buffer& b, uint64_t offset) {
  if (!IsDevice(b)) return *static_cast<volatile uint8_t*>(Host(b) + offset);
  uint8_t value = 0;
#ifdef GPUBROKER_HAVE_CUDA
  DeviceOf(b);
  Check(cudaMemcpy(&value, static_cast<uint8_t*>(b.data()) + offset, 1, cudaMemcpyDeviceToHost),
        "cudaMemcpy peek");
#endif
  return value;
}

void SlowFillAndSeal(Buffer& b, uint64_t seed, int delay_ms) {
#ifdef GPUBROKER_HAVE_CUDA
  if (!IsDevice(b)) throw std::runtime_error("slowfill needs a GPU buffer");
  DeviceOf(b);
  Staging s = Stage(seed);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Streams().push_back(stream);
  Check(cudaLaunchHostFunc(stream, HostDelay,
                           reinterpret_cast<void*>(static_cast<intptr_t>(delay_ms))),
        "cudaLaunchHostFunc");
  auto* dst = static_cast<uint8_t*>(b.data());
  for (uint64_t off = 0; off < b.size(); off += kChunk) {
    Check(cudaMemcpyAsync(dst + off, s.pattern, std::min(kChunk, b.size() - off),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync H2D");
  }
  b.seal(stream);
#else
  (void)b;
  (void)seed;
  (void)delay_ms;
  throw std::runtime_error("this build has no CUDA support");
#endif
}

void Drain() {
#ifdef GPUBROKER_HAVE_CUDA
  for (cudaStream_t s : Streams()) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  Streams().clear();
#endif
}

}  // namespace gpubroker::testing
