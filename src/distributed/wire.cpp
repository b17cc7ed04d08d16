// distributed/wire.cpp — see wire.h.
#include "distributed/wire.h"

#include "rpc/convert.h"

namespace cairn::distributed {

v1::Tensor to_proto(const values::Tensor& t) {
  v1::Tensor out;
  out.set_dtype(values::dtype_name(t.dtype));
  out.mutable_shape()->Add(t.shape.begin(), t.shape.end());
  out.set_data(t.data);
  return out;
}

Result<values::Tensor> from_proto(const v1::Tensor& t) {
  v1::Value v;
  *v.mutable_tensor_value() = t;
  CAIRN_ASSIGN_OR_RETURN(values::Value value, rpc::from_proto(v));
  return std::get<values::Tensor>(std::move(value));
}

v1::TensorSpec to_spec(const onnx::ValueInfo& v) {
  v1::TensorSpec s;
  s.set_name(v.name);
  s.set_dtype(values::dtype_name(v.dtype));
  if (v.has_shape) s.mutable_dims()->Add(v.dims.begin(), v.dims.end());
  return s;
}

Result<onnx::ValueInfo> from_spec(const v1::TensorSpec& s) {
  onnx::ValueInfo v;
  v.name = s.name();
  auto dtype = values::dtype_from_name(s.dtype());
  if (!dtype) return Status::invalid_argument("an agent reported tensor '" + s.name() + "' of unknown dtype");
  if (size_t(s.dims_size()) > values::kMaxTensorRank)
    return Status::invalid_argument("an agent reported tensor '" + s.name() + "' of rank " +
                                    std::to_string(s.dims_size()));
  v.dtype = *dtype;
  v.dims.assign(s.dims().begin(), s.dims().end());
  for (int64_t d : v.dims)
    if (d < -1) return Status::invalid_argument("an agent reported tensor '" + s.name() + "' with a bad dim");
  v.dim_names.assign(v.dims.size(), "");
  v.has_shape = true;
  return v;
}

}  // namespace cairn::distributed
