// kernels/row_dot.h — the SIMD row dot products of the dispatched type table
// (kernels/type_ops.h): one weight row against one activation row, and for
// some types many rows against one activation row (TypeOps::vec_dot_rows).
// Owns their entry points; the scalar references they replace are in core
// (core/quant_blocks.h, scalar_type_ops()). Never allocates, never checks
// sizes; each must only be called where its instruction level runs (the table
// in type_ops.cpp checks):
// - avx2:: (row_dot_avx2.cpp, row_dot_avx2_q.cpp, row_dot_avx2_k.cpp): AVX2+FMA+F16C, when avx2::supported(). The
//   quantized ones return the scalar reference's bits (same exact integer sums
//   per block, same float operations in the same order); the float types
//   differ only in summation order.
// - avx512vnni:: (row_dot_k_vnni.cpp: Q4_K, Q6_K; row_dot_vnni_q.cpp: Q4_1,
//   Q5_0, Q5_1, IQ4_NL, MXFP4; row_dot_vnni_k.cpp: Q2_K, Q3_K, Q5_K, IQ4_XS)
//   on AVX-512 F/BW/VL/DQ + VNNI, when isa_enabled(Isa::Avx512Vnni); the
//   scalar reference's bits.
// - BF16 (row_dot_bf16.cpp) against BF16 activations (the type's vec_dot_type,
//   as in llama.cpp): the AVX-512 BF16 form (vdpbf16ps: two exact products per
//   lane per step, avx512bf16::, when bf16_enabled()) and forms for hosts
//   without it, AVX2+FMA (avx2::) and AVX-512 F/BW (avx512::, when
//   isa_enabled(Isa::Avx512)), which replay its lanes and order with float
//   fmas: all three give the same bits (but for subnormals, which the
//   instruction flushes). They sum in float where the scalar reference sums in
//   double, so they differ from it by summation rounding only (tests bound it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cairn::quant {

namespace avx2 {
bool supported();
float f32_dot(int64_t n, const void* w, const void* act);
float f16_dot(int64_t n, const void* w, const void* act);  // F16 weights, F32 activations
// F32 -> F16 with F16C: the bits of the scalar f32_to_f16 (NaN lanes included).
void f16_from_float(const float* src, void* dst, int64_t n);
float q8_0_dot_q8_0(int64_t n, const void* w, const void* act);
float q4_0_dot_q8_0(int64_t n, const void* w, const void* act);
float q4_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q6_k_dot_q8_k(int64_t n, const void* w, const void* act);
// row_dot_avx2_q.cpp and row_dot_avx2_k.cpp: the scalar reference's bits.
float q4_1_dot_q8_1(int64_t n, const void* w, const void* act);
float q5_0_dot_q8_0(int64_t n, const void* w, const void* act);
float q5_1_dot_q8_1(int64_t n, const void* w, const void* act);
float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act);
float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act);
float q2_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q3_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q5_k_dot_q8_k(int64_t n, const void* w, const void* act);
float iq4_xs_dot_q8_k(int64_t n, const void* w, const void* act);
// TypeOps::vec_dot_tokens: one row against up to kMaxDotTokens tokens, each
// token's bits as the single dot above.
// TypeOps::vec_dot_rows: two rows at a time (two accumulator chains).
void q4_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q5_0_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q5_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void iq4_nl_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void mxfp4_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q4_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q5_0_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q5_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void iq4_nl_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                       size_t out_stride);
void mxfp4_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                      size_t out_stride);
void q5_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q2_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q3_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void iq4_xs_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                       size_t out_stride);

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

namespace avx512vnni {
float q4_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q6_k_dot_q8_k(int64_t n, const void* w, const void* act);
// out[r] = *_dot_q8_k(n, (const char*)w + r * w_stride, act) for r < n_rows.
void q4_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
void q6_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out);
// row_dot_vnni_q.cpp and row_dot_vnni_k.cpp: single dots, vec_dot_tokens and
// vec_dot_rows as the avx2:: entries of the same names, the same bits.
float q4_1_dot_q8_1(int64_t n, const void* w, const void* act);
float q5_0_dot_q8_0(int64_t n, const void* w, const void* act);
float q5_1_dot_q8_1(int64_t n, const void* w, const void* act);
float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act);
float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act);
float q2_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q3_k_dot_q8_k(int64_t n, const void* w, const void* act);
float q5_k_dot_q8_k(int64_t n, const void* w, const void* act);
float iq4_xs_dot_q8_k(int64_t n, const void* w, const void* act);
void q4_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q5_0_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q5_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void iq4_nl_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void mxfp4_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q2_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q3_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q5_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void iq4_xs_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out);
void q4_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q5_0_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q5_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void iq4_nl_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                       size_t out_stride);
void mxfp4_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                      size_t out_stride);
void q2_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q3_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void q5_k_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                     size_t out_stride);
void iq4_xs_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out,
                       size_t out_stride);
}  // namespace avx512vnni

}  // namespace cairn::quant
