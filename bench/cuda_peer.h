#pragma once

// B, the peer process of the CUDA hand-over cases (--serve-cuda-peer), and
// the operations A asks of it. CUDA builds only.

#include <cstdint>

namespace gpubroker::bench {

enum PeerOp : uint32_t {
  kImportPool = 1,  // fd: a bare exportable pool of A's
  kBrokerOpen = 2,  // a: buffer id; answer: a = Open+map ns, b = write+sync ns
  kBarePool = 3,    // data: cudaMemPoolPtrExportData
  kBareVmm = 4,     // fd, a: size
  kOpenWait = 5,    // data: name; variant kOpenEarly: allow_unsealed too, and B writes
  kRelease = 6,
  kQuit = 7,
  kPing = 8,             // answered at once: the bare round trip between A and B
  kFloorSetup = 9,       // fd, a: size of a VMM allocation that B maps once
  kFloor = 10,           // a: fence value, b: fence offset; B waits on it, writes, syncs
  kEvict = 11,           // B unmaps what its mapping cache keeps (the next open imports)
  kBrokerOpenName = 12,  // data: name; answered as kBrokerOpen (an Open that does not wait)
  kBrokerClaim = 13,     // data: a ticket of b bytes; claimed posted, answered as kBrokerOpen
};

// kOpenWait's variant: B's Open also takes the buffer unsealed (it is answered
// at A's Allocate and maps while A does), then its stream waits for A's seal,
// and B writes 4 bytes before it synchronizes.
constexpr uint32_t kOpenEarly = 1;
// kOpenWait's variant: B's Open(wait) waits awake (OpenOptions::awake,
// kOpenAwakeUs) instead of sleeping until the seal comes.
constexpr uint32_t kOpenAwake = 2;
constexpr int64_t kOpenAwakeUs = 5000;
// kOpenWait's variant: the daemon polls while B's Open(wait) is parked
// (OpenOptions::daemon_awake, kOpenAwakeUs), B itself sleeping as usual.
constexpr uint32_t kOpenDaemonAwake = 3;

}  // namespace gpubroker::bench
