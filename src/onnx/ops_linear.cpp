// onnx/ops_linear.cpp — (being written)
#include "onnx/op.h"

namespace cairn::onnx {

void add_linear_ops(OpTable& table) { (void)table; }

}  // namespace cairn::onnx
