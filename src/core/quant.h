// core/quant.h — the per-type table of compute functions.
// Owns dequantize (to_float), quantize (from_float) and the dot product of a
// weight row with an activation row for every type cairn computes with.
// Scalar reference versions live here; SIMD variants replace entries of the
// table at start-up (chosen from CPUID; CAIRN_SCALAR=1 keeps the scalar ones)
// and are tested against them. Block layouts: core/quant_blocks.h. Never keeps
// state beyond the tables built at load time, never allocates, never checks
// sizes: callers pass whole blocks of buffers they have bounds-checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor_type.h"

namespace cairn {

struct TypeOps {
  TensorType type;
  // n must be a multiple of the type's block size.
  void (*to_float)(const void* src, float* dst, int64_t n);
  void (*from_float)(const float* src, void* dst, int64_t n);
  // Activations are converted to this type (per block, as llama.cpp does:
  // Q8_0 for Q4_0/Q8_0, Q8_K for K-quants, BF16 for BF16, F32 for F32 and F16:
  // the golden outputs show F16 weights meeting unrounded activations) before
  // vec_dot, so quantized dot products run on integers.
  TensorType vec_dot_type;
  // Dot product of n elements: `w` is a row of `type`, `act` a row of vec_dot_type.
  float (*vec_dot)(int64_t n, const void* w, const void* act);
  // How a row of activations becomes this type for vec_dot, where that differs
  // from from_float (the storage quantizer, which matches llama.cpp's files):
  // Q8_0 activations round as the reference's SIMD quantizer does. nullptr:
  // use from_float. See act_from_float().
  void (*from_float_act)(const float* src, void* dst, int64_t n) = nullptr;
  // Optional (nullptr: call vec_dot per row). n_rows consecutive weight rows,
  // row r at (const char*)w + r * w_stride, each dotted with the one activation
  // row `act` (vec_dot_type, n elements): out[r] = vec_dot(n, row r, act), bit
  // for bit. Lets a kernel keep the activation block in registers across rows.
  void (*vec_dot_rows)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                       float* out) = nullptr;
};

// The quantizer for activations of `ops`' type (from_float_act or from_float).
inline auto act_from_float(const TypeOps& ops) {
  return ops.from_float_act ? ops.from_float_act : ops.from_float;
}

// nullptr when cairn has no compute functions for the type.
const TypeOps* type_ops(TensorType t);

// The scalar reference table, kept for tests even after SIMD variants exist.
const TypeOps* scalar_type_ops(TensorType t);

}  // namespace cairn
