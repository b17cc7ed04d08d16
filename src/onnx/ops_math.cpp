// onnx/ops_math.cpp — (being written)
#include "onnx/op.h"

namespace cairn::onnx {

void add_math_ops(OpTable& table) { (void)table; }

}  // namespace cairn::onnx
