// distributed/wire.h — what the worker and its agents exchange besides the
// gRPC messages themselves: tensors to and from proto, a graph's input and
// output specs, and the frames one pipeline stage sends the next through
// the group (a serialised Run: the activations, or none when the stage
// failed).
#pragma once

#include <string>
#include <vector>

#include "cairn/v1/agents.pb.h"
#include "core/status.h"
#include "core/value.h"
#include "onnx/session.h"

namespace cairn::distributed {

v1::Tensor to_proto(const values::Tensor& t);
// Checked as any client's tensor is (dtype, shape, byte count).
Result<values::Tensor> from_proto(const v1::Tensor& t);

v1::TensorSpec to_spec(const onnx::ValueInfo& v);
Result<onnx::ValueInfo> from_spec(const v1::TensorSpec& s);

// Stage to stage: a frame is an 8-byte length, then that many bytes of a
// serialised v1::Run; length 0 says the sending stage failed this forward.
inline constexpr uint32_t kStageTag = 7;

}  // namespace cairn::distributed
