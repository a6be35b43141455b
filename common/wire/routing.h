#pragma once

// Which socket a call belongs on: the one rule that the daemon advertises in
// Welcome, enforces on session.sock, and the client library routes by.

#include <cstdint>

#include "gpubroker/v1/broker.pb.h"

namespace gpubroker {

/// True for an Allocate that session.sock serves: under the daemon's
/// `quick_allocation_limit` (Welcome; 0: no limit) and not shared with other
/// tenants. The others may need a new device allocation of their own (a
/// fresh 40 GiB cuMemCreate took over 0.1 s on an H200), which would hold up
/// every session on the socket's one thread: they go through gRPC, and the
/// daemon refuses them on session.sock with FAILED_PRECONDITION.
inline bool AllocateIsQuick(const v1::AllocateRequest& request, uint64_t quick_allocation_limit) {
  if (request.share_with_size() > 0) return false;
  return quick_allocation_limit == 0 || request.size() < quick_allocation_limit;
}

}  // namespace gpubroker
