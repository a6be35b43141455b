// A producer: allocates a named float32 tensor, fills it, seals it, waits for
// a consumer in another process to write its answer back into the same
// memory, and holds the buffer until told to stop (SIGINT/SIGTERM).
//
//   gpubroker-demo-producer [NAME]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "gpubroker/client.hpp"

namespace {
volatile sig_atomic_t stop = 0;
void OnSignal(int) { stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "demo.frame";
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  constexpr int64_t kRows = 1024, kCols = 1024;
  try {
    auto client = gpubroker::Client::connect();
    gpubroker::AllocateOptions options;
    options.name = name;
    options.tensor = gpubroker::TensorDesc{gpubroker::DType::kFloat32, {kRows, kCols}, {}, 0};
    auto buffer = client.allocate(kRows * kCols * sizeof(float), options);
    if (buffer.info().backing.rfind("cuda", 0) == 0) {
      // data() is a device pointer here: this demo's CPU loop cannot touch it.
      std::fprintf(stderr,
                   "producer: %s is GPU memory (%s); this demo reads and writes host memory: "
                   "run gpubrokerd with --backend host, or share GPU buffers from a framework\n",
                   name.c_str(), buffer.info().backing.c_str());
      return 2;
    }
    auto values = buffer.as<float>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 0.5f;
    values[values.size() - 1] = 0;  // the consumer's answer goes here
    buffer.seal();
    std::printf("producer: %s is sealed: %zu floats (%s), tenant %s\n", name.c_str(), values.size(),
                buffer.device().c_str(), client.session().tenant.c_str());
    std::fflush(stdout);

    // The consumer writes into the very same pages: no copy, no message.
    volatile float* answer = &values[values.size() - 1];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (*answer == 0 && !stop && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (*answer == 0) {
      std::fprintf(stderr, "producer: no answer from a consumer\n");
      return 1;
    }
    std::printf("producer: the consumer wrote back %.1f\n", static_cast<double>(*answer));
    std::fflush(stdout);
    while (!stop) pause();
    std::printf("producer: releasing %s\n", name.c_str());
  } catch (const gpubroker::Error& e) {
    std::fprintf(stderr, "producer: %s\n", e.what());
    return 1;
  }
  return 0;
}
