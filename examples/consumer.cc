// A consumer: waits for the producer's named tensor, checks it in place, and
// writes the sum of its values back into the producer's memory.
//
//   gpubroker-demo-consumer [NAME]
#include <cmath>
#include <cstdio>

#include "gpubroker/client.hpp"

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "demo.frame";
  try {
    auto client = gpubroker::Client::connect();
    gpubroker::OpenOptions options;
    options.wait = true;
    options.timeout = std::chrono::seconds(30);
    auto buffer = client.open(name, options);
    if (buffer.info().backing.rfind("cuda", 0) == 0) {
      // data() is a device pointer here: this demo's CPU loop cannot touch it.
      std::fprintf(stderr,
                   "consumer: %s is GPU memory (%s); this demo reads and writes host memory: "
                   "run gpubrokerd with --backend host, or share GPU buffers from a framework\n",
                   name.c_str(), buffer.info().backing.c_str());
      return 2;
    }
    const auto& t = buffer.tensor();
    if (!t || t->dtype != gpubroker::DType::kFloat32 || t->shape.size() != 2) {
      std::fprintf(stderr, "consumer: %s carries no float32 matrix descriptor\n", name.c_str());
      return 1;
    }
    auto values = buffer.as<float>();
    double sum = 0;
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float expected = static_cast<float>(i % 1000) * 0.5f;
      if (values[i] != expected) {
        std::fprintf(stderr, "consumer: value %zu is %f, expected %f\n", i,
                     static_cast<double>(values[i]), static_cast<double>(expected));
        return 1;
      }
      sum += values[i];
    }
    std::printf("consumer: opened %s [%ld x %ld] float32 in place, all %zu values check out\n",
                name.c_str(), static_cast<long>(t->shape[0]), static_cast<long>(t->shape[1]),
                values.size() - 1);
    values[values.size() - 1] = static_cast<float>(sum);
    std::printf("consumer: wrote back the sum %.1f\n",
                static_cast<double>(values[values.size() - 1]));
  } catch (const gpubroker::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
