// core/quant.h — the per-type table of compute functions.
// Owns dequantize (to_float), quantize (from_float) and the dot product of a
// weight row with an activation row for every type cairn computes with, in
// their scalar reference versions. The table the code computes with is
// kernels/type_ops.h's type_ops(): this one with SIMD variants swapped in at
// start-up (chosen from CPUID; CAIRN_SCALAR=1 keeps the scalar ones), tested
// against it. Block layouts: core/quant_blocks.h. Never keeps
// state beyond the tables built at load time, never allocates, never checks
// sizes: callers pass whole blocks of buffers they have bounds-checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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
  // Optional (nullptr: call vec_dot per token). One weight row against
  // n_act <= kMaxDotTokens activation rows, row t at (const char*)act + t *
  // act_stride: out[t * out_stride] = vec_dot(n, w, act row t), bit for bit.
  // Lets a kernel decode each weight block once for several tokens (prompts).
  void (*vec_dot_tokens)(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                         float* out, size_t out_stride) = nullptr;
};

inline constexpr int64_t kMaxDotTokens = 4;

// The quantizer for activations of `ops`' type (from_float_act or from_float).
inline auto act_from_float(const TypeOps& ops) {
  return ops.from_float_act ? ops.from_float_act : ops.from_float;
}

// The scalar reference table (nullptr when cairn has no compute functions for
// the type). Code computes with kernels/type_ops.h's type_ops(), which starts
// from this table; tests compare against it.
const TypeOps* scalar_type_ops(TensorType t);

// Every row of the scalar table, one per type cairn computes with.
std::span<const TypeOps> scalar_type_table();

}  // namespace cairn
