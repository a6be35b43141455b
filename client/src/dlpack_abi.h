#pragma once

// The DLPack ABI (dlpack.h, versions 0.x and 1.x), as the structs that a
// consumer reads: written out from the specification so that the library
// needs no DLPack headers to build. The layout is the contract; the
// static_asserts below pin it.

#include <cstddef>
#include <cstdint>

namespace gpubroker::dlpack {

inline constexpr uint32_t kMajorVersion = 1;
inline constexpr uint32_t kMinorVersion = 0;

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct Device {
  int32_t device_type;  // DeviceType
  int32_t device_id;
};

struct DataType {
  uint8_t code;  // TypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};

// DLManagedTensor: the legacy capsule's ("dltensor") content.
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

// DLManagedTensorVersioned: the 1.x capsule's ("dltensor_versioned") content.
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

inline constexpr uint64_t kFlagReadOnly = 1ULL << 0;

static_assert(sizeof(Tensor) == 48 && offsetof(Tensor, shape) == 24 &&
              offsetof(Tensor, byte_offset) == 40);
static_assert(sizeof(ManagedTensor) == 64 && offsetof(ManagedTensor, deleter) == 56);
static_assert(sizeof(ManagedTensorVersioned) == 80 &&
              offsetof(ManagedTensorVersioned, flags) == 24 &&
              offsetof(ManagedTensorVersioned, dl_tensor) == 32);

}  // namespace gpubroker::dlpack
