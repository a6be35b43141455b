#pragma once

// The one conversion between a tensor descriptor and its message, and
// between either and the flat layouts' facts (FlatAnswerFacts,
// FlatCallFacts: has_tensor, dtype, shape and strides as views,
// byte_offset), for the daemon's TensorDesc (dtype as an int) and the
// client's (dtype as an enum): both have dtype, shape, strides and
// byte_offset.

#include <cstdint>
#include <optional>
#include <span>

#include "gpubroker/v1/broker.pb.h"

namespace gpubroker {

/// (Flat facts' tensor fields go into a message the same way.)
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

/// A tensor into flat facts, the lists as views into it (which must outlive
/// them); none: has_tensor false and the fields left as they are.
template <typename Tensor, typename Facts>
void TensorToFacts(const std::optional<Tensor>& tensor, Facts* f) {
  f->has_tensor = tensor.has_value();
  if (!tensor) return;
  f->dtype = static_cast<int32_t>(tensor->dtype);
  f->shape = tensor->shape;
  f->strides = tensor->strides;
  f->byte_offset = tensor->byte_offset;
}

/// The tensor that flat facts say, if they have one.
template <typename Tensor, typename Facts>
std::optional<Tensor> TensorFromFacts(const Facts& f) {
  if (!f.has_tensor) return std::nullopt;
  Tensor t;
  t.dtype = static_cast<decltype(t.dtype)>(f.dtype);
  t.shape.assign(f.shape.begin(), f.shape.end());
  t.strides.assign(f.strides.begin(), f.strides.end());
  t.byte_offset = f.byte_offset;
  return t;
}

/// A message's tensor fields into flat facts, the lists as views into it
/// (presence, has_tensor, is the caller's to say).
template <typename Facts>
void TensorProtoToFacts(const v1::TensorDescriptor& t, Facts* f) {
  f->dtype = t.dtype();
  f->shape = std::span<const int64_t>(t.shape().data(), static_cast<size_t>(t.shape_size()));
  f->strides = std::span<const int64_t>(t.strides().data(), static_cast<size_t>(t.strides_size()));
  f->byte_offset = t.byte_offset();
}

}  // namespace gpubroker
