#pragma once
// Minimal DLPack ABI (the unversioned "dltensor" capsule layout, DLPack <= 0.8 and the legacy protocol of
// 1.x producers) for reading arrays handed over with x.__dlpack__(stream=...). Only what the bindings read.
#include <cstdint>

namespace toporoute::dlpack {

enum DeviceType : std::int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
};

enum DataTypeCode : std::uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBool = 6,
};

struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  ///< in elements; null means C-contiguous
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

/// Name of an unconsumed capsule; a consumer that takes ownership renames it "used_dltensor" (we never do).
constexpr const char* kCapsuleName = "dltensor";

}  // namespace toporoute::dlpack
