#include "gpubroker/types.hpp"

#include "nlohmann/json.hpp"

namespace gpubroker {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  uint64_t size;
};

constexpr DTypeRow kDTypes[] = {
    {DType::kUnspecified, "unspecified", 0},
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kUInt8, "uint8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kUInt16, "uint16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kUInt32, "uint32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kComplex64, "complex64", 8},
    {DType::kComplex128, "complex128", 16},
};

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
                      {"backing", b.backing}};
  j["tensor"] = b.tensor ? Json(*b.tensor) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "unknown";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name && row.dtype != DType::kUnspecified) return row.dtype;
  }
  return std::nullopt;
}

uint64_t DTypeSize(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.size;
  }
  return 0;
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
                       {"sessions", t.sessions}});
  }
  nlohmann::json j = {{"version", s.version},
                      {"backend", s.backend},
                      {"devices", devices},
                      {"tenants", tenants},
                      {"sessions", s.sessions},
                      {"buffers", s.buffers},
                      {"metrics_address", s.metrics_address},
                      {"socket_dir", s.socket_dir},
                      {"started_unix_ms", s.started_unix_ms},
                      {"self", {{"session_id", s.self_session_id}, {"tenant", s.self_tenant}}}};
  return j.dump();
}

}  // namespace gpubroker
