#pragma once

// A process made by fork() shares its parent's session socket and gRPC
// channel (and, on a GPU, a CUDA state that does not work in it). Whatever a
// client built before the fork must then neither talk to the daemon nor undo
// its CUDA imports: either would act on the parent's session.

#include <cstdint>

namespace gpubroker::detail {

/// How many fork()s lie between the first client of this process and now (0
/// in the process that made it). Installs the fork handler on first use.
uint64_t ForkGeneration() noexcept;

/// True when `generation` was taken in an ancestor of this process.
inline bool ForkedSince(uint64_t generation) noexcept { return ForkGeneration() != generation; }

}  // namespace gpubroker::detail
