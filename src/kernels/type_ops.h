// kernels/type_ops.h — the per-type table cairn computes with: core's scalar
// table (core/quant.h) with the SIMD row dot products (kernels/row_dot.h)
// swapped in where this CPU has them, chosen once at start-up from CPUID and
// the ISA cap (CAIRN_ISA=scalar or CAIRN_SCALAR=1 keeps the scalar entries, to
// tell a kernel bug from a model bug; see core/cpu_features.h).
#pragma once

#include "core/quant.h"
#include "core/tensor_type.h"

namespace cairn {

// nullptr when cairn has no compute functions for the type.
const TypeOps* type_ops(TensorType t);

}  // namespace cairn
