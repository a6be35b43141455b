#pragma once

// How the test helper reads and writes a buffer's memory: plain loads and
// stores on the host backend; CUDA copies on the GPU backends.

#include <cstdint>
#include <string>

#include "gpubroker/client.hpp"

namespace gpubroker::testing {

/// The byte at offset `i` of a buffer filled with `seed`. Periodic in 256, so
/// that one chunk of it can be copied over a buffer of any size.
inline uint8_t PatternByte(uint64_t i, uint64_t seed) {
  return static_cast<uint8_t>((i * 131 + seed * 7 + 1) & 0xff);
}

bool IsDevice(const Buffer& b);

/// Fills [0, length) with the pattern of `seed`.
void Fill(Buffer& b, uint64_t seed, uint64_t length);
/// Index of the first byte in [0, length) that breaks the pattern, or -1.
/// With `stream_wait` (GPU), the copy runs on a stream that first waits for
/// the buffer's ready fence; without, it does not wait for anything.
int64_t Check(Buffer& b, uint64_t seed, uint64_t length, bool stream_wait = false);
/// Index of the first byte in [0, length) that is not 0, or -1.
int64_t FirstNonZero(Buffer& b, uint64_t length);
void Poke(Buffer& b, uint64_t offset, uint8_t value);
uint8_t Peek(Buffer& b, uint64_t offset);

/// GPU: queues, on a stream of its own, a host-side wait of `delay_ms` and
/// then the fill, records the ready fence there and seals, and returns at
/// once. The producer does not synchronize: only the fence orders readers.
void SlowFillAndSeal(Buffer& b, uint64_t seed, int delay_ms);
/// Waits for what SlowFillAndSeal queued.
void Drain();

/// "" where GPU operations are possible, else why not.
std::string GpuProblem();

}  // namespace gpubroker::testing
