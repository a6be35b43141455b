#include "daemon/core/tenant_books.h"

#include <algorithm>

#include "common/refusal.h"
#include "common/strings.h"

namespace gpubroker {

void TenantBooks::SessionOpened(const std::string& tenant) { usage_[tenant].sessions++; }

void TenantBooks::SessionEnded(const std::string& tenant) { usage_[tenant].sessions--; }

absl::Status TenantBooks::ReserveBuffer(const std::string& tenant, uint64_t bytes,
                                        bool owns_descriptor) {
  Usage& u = usage_[tenant];
  const uint64_t quota = directory_->QuotaFor(tenant);
  if (quota != 0 && u.bytes + bytes > quota) {
    const uint64_t left = quota > u.bytes ? quota - u.bytes : 0;
    return QuotaRefusal(StrCat("tenant '", tenant, "' over quota: requested ", bytes, " bytes, ",
                               u.bytes, " of ", quota, " in use, ", left, " left"));
  }
  if (limits_.max_buffers_per_tenant != 0 && u.buffers >= limits_.max_buffers_per_tenant) {
    return LimitRefusal(StrCat("tenant '", tenant, "' holds ", u.buffers,
                               " buffers, the limit (max_buffers_per_tenant); free some first"));
  }
  if (owns_descriptor) {
    if (limits_.max_descriptors_per_tenant != 0 &&
        u.descriptors >= limits_.max_descriptors_per_tenant) {
      return LimitRefusal(
          StrCat("tenant '", tenant, "' holds ", u.descriptors,
                 " buffers with a descriptor of their own (shared across tenants or large), the "
                 "limit (max_descriptors_per_tenant); free some first"));
    }
    if (limits_.descriptors != nullptr && !limits_.descriptors->TryCharge()) {
      return LimitRefusal(StrCat("gpubrokerd holds ", limits_.descriptors->in_use(), " of the ",
                                 limits_.descriptors->limit(),
                                 " descriptors it may hold for clients; try again later"));
    }
    u.descriptors++;
  }
  u.bytes += bytes;
  u.buffers++;
  return absl::OkStatus();
}

void TenantBooks::Settle(const std::string& tenant, uint64_t reserved, uint64_t actual) {
  Usage& u = usage_[tenant];
  u.bytes = u.bytes - reserved + actual;
}

void TenantBooks::ReleaseBuffer(const std::string& tenant, uint64_t bytes, bool owns_descriptor) {
  Usage& u = usage_[tenant];
  u.bytes -= bytes;
  u.buffers--;
  if (owns_descriptor) {
    u.descriptors--;
    if (limits_.descriptors != nullptr) limits_.descriptors->Release();
  }
}

absl::StatusOr<uint64_t> TenantBooks::ReserveRange(const std::string& tenant, uint64_t least,
                                                   uint64_t want, uint64_t granularity) {
  Usage& u = usage_[tenant];
  uint64_t length = std::max(least, want);
  const uint64_t quota = directory_->QuotaFor(tenant);
  if (quota != 0) {
    const uint64_t left = quota > u.bytes ? quota - u.bytes : 0;
    if (least > left) {
      return QuotaRefusal(StrCat("tenant '", tenant, "' over quota: requested ", least,
                                 " bytes (a range), ", u.bytes, " of ", quota, " in use, ", left,
                                 " left"));
    }
    const uint64_t half = (left - least) / 2 / granularity * granularity;
    length = std::min(length, least + half);
  }
  u.bytes += length;
  return length;
}

void TenantBooks::RangeLeased(const std::string& tenant, uint64_t length) {
  Usage& u = usage_[tenant];
  u.range_bytes += length;
  u.ranges++;
}

void TenantBooks::UnreserveRange(const std::string& tenant, uint64_t length) {
  usage_[tenant].bytes -= length;
}

void TenantBooks::ReleaseRange(const std::string& tenant, uint64_t length, uint64_t kept) {
  Usage& u = usage_[tenant];
  u.bytes = u.bytes - length + kept;
  u.range_bytes -= length;
  u.ranges--;
}

absl::Status TenantBooks::BufferPublished(const std::string& tenant) {
  Usage& u = usage_[tenant];
  if (limits_.max_buffers_per_tenant != 0 && u.buffers >= limits_.max_buffers_per_tenant) {
    return LimitRefusal(StrCat("tenant '", tenant, "' holds ", u.buffers,
                               " buffers, the limit (max_buffers_per_tenant); free some first"));
  }
  u.buffers++;
  return absl::OkStatus();
}

void TenantBooks::AddClientTotals(const std::string& tenant, const ClientCounters& d) {
  ClientCounters& t = usage_[tenant].client_totals;
  t.allocations += d.allocations;
  t.cache_hits += d.cache_hits;
  t.daemon_allocations += d.daemon_allocations;
  t.grpc_allocations += d.grpc_allocations;
  t.opens_arena += d.opens_arena;
  t.opens_cached += d.opens_cached;
  t.opens_import += d.opens_import;
  t.opens_grpc += d.opens_grpc;
  t.mapping_cache_misses += d.mapping_cache_misses;
  t.mapping_cache_evictions += d.mapping_cache_evictions;
}

std::vector<NodeStatus::Tenant> TenantBooks::Tally() const {
  std::vector<NodeStatus::Tenant> out;
  for (const auto& [name, u] : usage_) {
    const uint64_t quota = directory_->QuotaFor(name);
    if (u.sessions == 0 && u.buffers == 0 && u.ranges == 0 && quota == 0) continue;
    NodeStatus::Tenant t{name, quota, u.bytes, u.buffers, u.sessions};
    t.range_bytes = u.range_bytes;
    t.ranges = u.ranges;
    t.clients = u.client_totals;
    out.push_back(std::move(t));
  }
  for (const auto& spec : directory_->configured()) {
    if (!usage_.contains(spec.name)) out.push_back({spec.name, spec.quota_bytes, 0, 0, 0});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace gpubroker
