#include "gpubroker/types.hpp"

#include "common/dtype.h"
#include "nlohmann/json.hpp"

namespace gpubroker {
namespace {

nlohmann::json Json(const TensorDesc& t) {
  return {{"dtype", DTypeName(t.dtype)},
          {"shape", t.shape},
          {"strides", t.strides},
          {"byte_offset", t.byte_offset}};
}

nlohmann::json Json(const BufferInfo& b) {
  nlohmann::json j = {{"id", b.id},
                      {"name", b.name},
                      {"size", b.size},
                      {"reserved_size", b.reserved_size},
                      {"device", b.device_uuid},
                      {"tenant", b.tenant},
                      {"state", BufferStateName(b.state)},
                      {"keep", b.keep},
                      {"expires_unix_ms", b.expires_unix_ms},
                      {"shared_with", b.shared_with},
                      {"leases", b.leases},
                      {"owner_session", b.owner_session},
                      {"created_unix_ms", b.created_unix_ms},
                      {"backing", b.backing},
                      {"client_made", b.client_made}};
  j["tensor"] = b.tensor ? Json(*b.tensor) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  const DTypeTraits* row = FindDType(static_cast<int>(dtype));
  return row != nullptr ? row->name : "unknown";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  const DTypeTraits* row = FindDType(name);
  if (row == nullptr || row->value == 0) return std::nullopt;
  return static_cast<DType>(row->value);
}

uint64_t DTypeSize(DType dtype) {
  const DTypeTraits* row = FindDType(static_cast<int>(dtype));
  return row != nullptr ? row->bytes : 0;
}

std::string_view BufferStateName(BufferState state) {
  switch (state) {
    case BufferState::kAllocated:
      return "allocated";
    case BufferState::kSealed:
      return "sealed";
    case BufferState::kFreed:
      return "freed";
  }
  return "unknown";
}

std::string ToJson(const BufferInfo& info) { return Json(info).dump(); }

std::string ToJson(const std::vector<BufferInfo>& buffers) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& b : buffers) j.push_back(Json(b));
  return j.dump();
}

std::string ToJson(const BrokerStatus& s) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : s.devices) {
    devices.push_back({{"uuid", d.uuid},
                       {"name", d.name},
                       {"backend", d.backend},
                       {"ordinal", d.ordinal},
                       {"total_bytes", d.total_bytes},
                       {"capacity_bytes", d.capacity_bytes},
                       {"reserved_bytes", d.reserved_bytes},
                       {"used_bytes", d.used_bytes},
                       {"free_bytes", d.free_bytes},
                       {"buffers", d.buffers},
                       {"compute_capability", d.compute_capability}});
  }
  nlohmann::json tenants = nlohmann::json::array();
  for (const auto& t : s.tenants) {
    tenants.push_back({{"name", t.name},
                       {"quota_bytes", t.quota_bytes},
                       {"used_bytes", t.used_bytes},
                       {"buffers", t.buffers},
                       {"sessions", t.sessions},
                       {"range_bytes", t.range_bytes},
                       {"ranges", t.ranges}});
  }
  nlohmann::json j = {
      {"version", s.version},
      {"backend", s.backend},
      {"devices", devices},
      {"tenants", tenants},
      {"sessions", s.sessions},
      {"buffers", s.buffers},
      {"metrics_address", s.metrics_address},
      {"socket_dir", s.socket_dir},
      {"started_unix_ms", s.started_unix_ms},
      {"all_tenants", s.all_tenants},
      {"self",
       {{"session_id", s.self_session_id}, {"tenant", s.self_tenant}, {"admin", s.self_admin}}}};
  return j.dump();
}

std::string ToJson(const ClientStats& s) {
  return nlohmann::json{{"allocations",
                         {{"client_made", s.client_made},
                          {"cache_hits", s.cache_hits},
                          {"daemon_session", s.daemon_session},
                          {"daemon_grpc", s.daemon_grpc},
                          {"publishes", s.publishes}}},
                        {"maps",
                         {{"mapped", s.maps_mapped},
                          {"imported", s.maps_imported},
                          {"cached", s.maps_cached},
                          {"opens_grpc", s.opens_grpc},
                          {"seal_wakes", s.seal_wakes}}},
                        {"mapping_cache",
                         {{"hits", s.mapping_cache_hits},
                          {"misses", s.mapping_cache_misses},
                          {"evictions", s.mapping_cache_evictions},
                          {"entries", s.mapping_cache_entries},
                          {"mapped_bytes", s.mapping_cache_bytes}}},
                        {"books",
                         {{"ranges", s.ranges},
                          {"range_bytes", s.range_bytes},
                          {"in_use_blocks", s.in_use_blocks},
                          {"in_use_bytes", s.in_use_bytes},
                          {"cached_bytes", s.cached_bytes},
                          {"free_bytes", s.free_bytes},
                          {"quarantined_bytes", s.quarantined_bytes},
                          {"pending_releases", s.pending_releases},
                          {"unsynced_releases", s.unsynced_releases}}}}
      .dump();
}

}  // namespace gpubroker
