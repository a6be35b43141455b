#pragma once

#include <cstdint>
#include <string_view>

namespace gpubroker {

/// One element type: its gpubroker.v1.DType value, its name as NumPy and
/// DLPack name it, and its size.
struct DTypeTraits {
  int value;
  std::string_view name;
  uint64_t bytes;
};

/// Every gpubroker.v1.DType, indexed by value (row 0 is DTYPE_UNSPECIFIED,
/// 0 bytes): the one table that the daemon and the client read.
inline constexpr DTypeTraits kDTypes[] = {
    {0, "unspecified", 0}, {1, "bool", 1},     {2, "int8", 1},       {3, "uint8", 1},
    {4, "int16", 2},       {5, "uint16", 2},   {6, "int32", 4},      {7, "uint32", 4},
    {8, "int64", 8},       {9, "uint64", 8},   {10, "float16", 2},   {11, "bfloat16", 2},
    {12, "float32", 4},    {13, "float64", 8}, {14, "complex64", 8}, {15, "complex128", 16},
};

/// The row of a DType value; nullptr when the value is unknown.
constexpr const DTypeTraits* FindDType(int value) {
  if (value < 0 || value >= static_cast<int>(std::size(kDTypes))) return nullptr;
  return &kDTypes[value];
}

/// The row of a name ("float32"); nullptr when unknown.
constexpr const DTypeTraits* FindDType(std::string_view name) {
  for (const DTypeTraits& t : kDTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace gpubroker
