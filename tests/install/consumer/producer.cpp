// Allocates a named buffer that outlives this process, fills it and seals it.
// Usage: producer SOCKET_DIR NAME BYTES
#include <gpubroker/client.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

static_assert(__cplusplus == 201703L, "this check builds as C++17");

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: producer SOCKET_DIR NAME BYTES\n");
    return 2;
  }
  try {
    auto client = gpubroker::Client::connect(argv[1]);
    gpubroker::AllocateOptions options;
    options.name = argv[2];
    options.keep = true;
    gpubroker::Buffer buffer = client.allocate(std::strtoull(argv[3], nullptr, 10), options);
    auto* bytes = static_cast<uint8_t*>(buffer.data());
    for (uint64_t i = 0; i < buffer.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 % 251);
    buffer.seal();
    std::printf("producer: %s sealed, %llu bytes on %s\n", buffer.name().c_str(),
                static_cast<unsigned long long>(buffer.size()), buffer.device().c_str());
  } catch (const gpubroker::Error& e) {
    std::fprintf(stderr, "producer: %s\n", e.what());
    return 1;
  }
  return 0;
}
