// core/quant_bf16.h — SIMD dot products for BF16 weights against BF16
// activations (the type's vec_dot_type, as in llama.cpp), for one row and for
// many rows against one activation row (TypeOps::vec_dot_rows).
// Owns the AVX-512 BF16 form (vdpbf16ps: two exact products per lane per
// step) and forms for hosts without that instruction, AVX2+FMA and AVX-512
// F/BW, which replay its lanes and order with float fmas: all three give the
// same bits (but for subnormals, which the instruction flushes). They sum in
// float where the scalar reference sums in double, so they differ from it by
// summation rounding only (tests bound it). Never allocates, never checks
// sizes; call avx2:: only when quant::avx2::supported(), avx512:: only when
// isa_enabled(Isa::Avx512), avx512bf16:: only when bf16_enabled() (the type
// table in quant.cpp checks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cairn::quant {

namespace avx2 {
float bf16_dot(int64_t n, const void* w, const void* act);
// out[r] = bf16_dot(n, (const char*)w + r * w_stride, act) to rounding, r < n_rows.
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
}  // namespace avx2

namespace avx512 {
float bf16_dot(int64_t n, const void* w, const void* act);
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
}  // namespace avx512

namespace avx512bf16 {
float bf16_dot(int64_t n, const void* w, const void* act);
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
}  // namespace avx512bf16

}  // namespace cairn::quant
