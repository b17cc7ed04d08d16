// core/quant_blocks.h — byte layouts of the quantized blocks cairn computes with.
// Owns the structs that must match ggml's GGUF block formats bit for bit (files
// quantized by llama.cpp are read in place), and the scalar row functions the
// type table in quant.cpp is built from. Never holds state or allocates.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cairn::quant {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;  // super-block of the K-quants

// x = (q - 8) * d; qs[j] low nibble is element j, high nibble element j + 16.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x = q * d
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j]; 6-bit sc/m packed in `scales`.
struct BlockQ4_K {
  uint16_t d;     // f16, scale of the sub-block scales
  uint16_t dmin;  // f16, scale of the sub-block mins
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q 6 bits (4 in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation type of the K-quant dot products: x = q * d, bsums = sums of 16 q.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K block.
inline void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// All eight 6-bit scales and mins of a Q4_K block at once, as bytes
// sc0..sc7 | m0..m7 in u[0..3] (little-endian words): q4k_scale_min four
// bytes at a time, for the SIMD kernels.
inline void q4k_scales_mins(const uint8_t* scales, uint32_t u[4]) {
  std::memcpy(u, scales, 12);
  u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  const uint32_t m03 = u[1] & 0x3f3f3f3fu;
  u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  u[2] = m03;
  u[0] &= 0x3f3f3f3fu;
}

// The last bits of a logit depend on the order of a dot product's float
// operations, and an int8 activation on a rounding boundary flips with them.
// The reference's int8 kernels (on its AVX-512 VNNI host) take, per block, the
// exact integer sum and fold it into one float per row with fma; the scalar
// functions replay that with std::fma (exact, as the SIMD instruction) and
// every SIMD variant runs it natively: all give identical bits.
inline float fma_lane(float a, float b, float c) { return std::fma(a, b, c); }

// Scalar row functions (n is a multiple of the block size).
void q4_0_to_float(const void* src, float* dst, int64_t n);
void q4_0_from_float(const float* src, void* dst, int64_t n);
float q4_0_dot_q8_0(int64_t n, const void* w, const void* act);
void q8_0_to_float(const void* src, float* dst, int64_t n);
void q8_0_from_float(const float* src, void* dst, int64_t n);
// Activations: as ggml's SIMD quantize_row_q8_0 (scale 127/amax, ties to even),
// which differs from the storage quantizer above in the last bit of some codes.
void q8_0_from_float_act(const float* src, void* dst, int64_t n);
float q8_0_dot_q8_0(int64_t n, const void* w, const void* act);

void q4_k_to_float(const void* src, float* dst, int64_t n);
void q4_k_from_float(const float* src, void* dst, int64_t n);
float q4_k_dot_q8_k(int64_t n, const void* w, const void* act);
void q6_k_to_float(const void* src, float* dst, int64_t n);
void q6_k_from_float(const float* src, void* dst, int64_t n);
float q6_k_dot_q8_k(int64_t n, const void* w, const void* act);
void q8_k_to_float(const void* src, float* dst, int64_t n);
void q8_k_from_float(const float* src, void* dst, int64_t n);

// f16 -> f32 through a 64K-entry table (the hot loops of F16 weights).
float f16_lut(uint16_t h);

}  // namespace cairn::quant
