#pragma once

// The one conversion between a tensor descriptor and its message, for the
// daemon's TensorDesc (dtype as an int) and the client's (dtype as an enum):
// both have dtype, shape, strides and byte_offset.

#include "gpubroker/v1/broker.pb.h"

namespace gpubroker {

template <typename Tensor>
void TensorToProto(const Tensor& tensor, v1::TensorDescriptor* out) {
  out->set_dtype(static_cast<v1::DType>(tensor.dtype));
  out->mutable_shape()->Assign(tensor.shape.begin(), tensor.shape.end());
  out->mutable_strides()->Assign(tensor.strides.begin(), tensor.strides.end());
  out->set_byte_offset(tensor.byte_offset);
}

template <typename Tensor>
Tensor TensorFromProto(const v1::TensorDescriptor& tensor) {
  Tensor t;
  t.dtype = static_cast<decltype(t.dtype)>(tensor.dtype());
  t.shape.assign(tensor.shape().begin(), tensor.shape().end());
  t.strides.assign(tensor.strides().begin(), tensor.strides().end());
  t.byte_offset = tensor.byte_offset();
  return t;
}

}  // namespace gpubroker
