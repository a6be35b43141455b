#pragma once

// Two descriptions of a buffer compared field by field (BufferInfo has no
// ==): what a flat answer and its message tell a client, or what two
// clients learn of the same buffer, must be the same. Shared by the unit
// and the integration tests.

#include <optional>

#include "gpubroker/types.hpp"
#include "gtest/gtest.h"

namespace gpubroker::testing_util {

inline void ExpectSameTensor(const std::optional<TensorDesc>& a,
                             const std::optional<TensorDesc>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(a->dtype, b->dtype);
  EXPECT_EQ(a->shape, b->shape);
  EXPECT_EQ(a->strides, b->strides);
  EXPECT_EQ(a->byte_offset, b->byte_offset);
}

/// Every field; `leases` false leaves the lease count out (each open adds one).
inline void ExpectSameInfo(const BufferInfo& a, const BufferInfo& b, bool leases = true) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.reserved_size, b.reserved_size);
  EXPECT_EQ(a.device_uuid, b.device_uuid);
  EXPECT_EQ(a.tenant, b.tenant);
  EXPECT_EQ(a.state, b.state);
  ExpectSameTensor(a.tensor, b.tensor);
  EXPECT_EQ(a.keep, b.keep);
  EXPECT_EQ(a.expires_unix_ms, b.expires_unix_ms);
  EXPECT_EQ(a.shared_with, b.shared_with);
  if (leases) {
    EXPECT_EQ(a.leases, b.leases);
  }
  EXPECT_EQ(a.owner_session, b.owner_session);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  EXPECT_EQ(a.backing, b.backing);
  EXPECT_EQ(a.client_made, b.client_made);
}

}  // namespace gpubroker::testing_util
