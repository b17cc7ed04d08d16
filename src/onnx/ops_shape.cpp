// onnx/ops_shape.cpp — (being written)
#include "onnx/op.h"

namespace cairn::onnx {

void add_shape_ops(OpTable& table) { (void)table; }

}  // namespace cairn::onnx
