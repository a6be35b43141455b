#pragma once

// Which socket a call belongs on: the one rule that the daemon advertises in
// Welcome, enforces on session.sock, and the client library routes by.
//
//  * Allocate: RouteAllocate below (Welcome.quick_allocation_limit).
//  * Open, waiting or not: session.sock when Welcome.max_waiting_opens is not
//    0 (a waiting one is parked in the daemon and answered by the session
//    thread when the buffer is sealed, or published and sealed in one frame);
//    gRPC otherwise.
//  * LeaseRange, ReturnRange, Publish, Unmapped (docs/fast-path.md):
//    session.sock only, when Welcome.range_limit is not 0: a range and the
//    mappings a client keeps belong to the session's connection.
//  * Seal, Release: session.sock; everything else (Free, List, Status, shares
//    across tenants): gRPC.

#include <cstdint>

#include "gpubroker/v1/broker.pb.h"

namespace gpubroker {

/// Where an Allocate goes.
enum class AllocateRoute {
  /// session.sock: no new device allocation of its own is needed.
  kSession,
  /// session.sock when a kept allocation of the tenant's serves it (a
  /// recycled VMM allocation or host memfd: no cuMemCreate); otherwise the
  /// daemon answers ABORTED there, and the client asks again through gRPC.
  kSessionIfKept,
  /// gRPC only: shared with other tenants, it needs memory of its own.
  kGrpc,
};

/// The route of an Allocate, by the daemon's `quick_allocation_limit`
/// (Welcome; 0: no limit). Under the limit, and not shared, it is quick. At
/// or over it, it may need a new device allocation (a fresh 40 GiB
/// cuMemCreate took over 0.1 s on an H200), which would hold up every
/// session on the socket's one thread: session.sock serves it only from a
/// kept allocation.
inline AllocateRoute RouteAllocate(const v1::AllocateRequest& request,
                                   uint64_t quick_allocation_limit) {
  if (request.share_with_size() > 0) return AllocateRoute::kGrpc;
  if (quick_allocation_limit == 0 || request.size() < quick_allocation_limit) {
    return AllocateRoute::kSession;
  }
  return AllocateRoute::kSessionIfKept;
}

/// True for an Allocate that session.sock serves without condition.
inline bool AllocateIsQuick(const v1::AllocateRequest& request, uint64_t quick_allocation_limit) {
  return RouteAllocate(request, quick_allocation_limit) == AllocateRoute::kSession;
}

}  // namespace gpubroker
