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

// x = q * d + m, q 4 bits (as Q4_0's nibbles).
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// x = (q - 16) * d, q 5 bits: the low four as Q4_0's nibbles, bit 4 of
// element j in bit j of qh (little-endian).
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// x = q * d + m, q 5 bits as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Activation type of Q4_1/Q5_1: x = q * d, and s = d * sum(q) for their offsets.
struct BlockQ8_1 {
  uint16_t d;  // f16
  uint16_t s;  // f16
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_1) == 36);

// x = d * kIq4nlValues[q]: a 4-bit index into a non-linear table; nibbles as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// Microscaling FP4 (OCP MX): x = 2^(e - 127) * fp4(q), the E2M1 values kept
// doubled as integers (kFp4Values) and the scale halved (e8m0_half).
struct BlockMXFP4 {
  uint8_t e;  // E8M0 exponent
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// 16 sub-blocks of 16: x = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits.
// Codes: element 32*k + l of a 128-element half sits at bits 2k of qs[l] (that half's 32 bytes).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // f16
  uint16_t dmin;  // f16
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 sub-blocks of 16: x = d * (sc - 32) * (q - (hmask bit ? 0 : 4)), q 2 low
// bits as in Q2_K, the high bit of element 32*k + l (k = 0..7 over the block) in bit k of hmask[l];
// 6-bit scales packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K with a fifth bit per code: bit (2j or 2j+1) of qh[l] for element l of sub-block 2j / 2j+1.
struct BlockQ5_K {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 8 sub-blocks of 32: x = d * (ls - 32) * kIq4nlValues[q], ls 6 bits (low
// four in scales_l nibbles, high two in scales_h), nibbles per sub-block as Q4_0.
struct BlockIQ4_XS {
  uint16_t d;  // f16
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The non-linear 4-bit grid of IQ4_NL / IQ4_XS, and the E2M1 values of MXFP4
// doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half of the E8M0 scale 2^(e - 127) (pairs with kFp4Values' doubling), exact
// for every e but 255 (NaN in the format; here 2^127).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The 6-bit signed scales of a Q3_K block, each minus 32, as bytes.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  uint32_t a[3], u[4];
  std::memcpy(a, packed, 12);
  u[0] = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
  u[1] = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
  u[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
  u[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
  std::memcpy(out, u, 16);
  for (int j = 0; j < 16; ++j) out[j] = (int8_t)(out[j] - 32);
}

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

// The types without a golden bit pattern to keep (Q4_1, Q5_0, Q5_1, IQ4_NL,
// MXFP4, Q2_K, Q3_K, Q5_K, IQ4_XS) take the float order an 8-lane SIMD loop
// gets without a horizontal sum per block: lane l holds the exact integer sum
// of the (scaled) products of the elements e with (e % 32) / 4 == l over a
// block (32 elements) or super-block (256: each sub-block's products times its
// scale), fma'd with the block's float scale into lane l's accumulator; the
// lanes are summed at the end as ((0+4)+(2+6))+((1+5)+(3+7)). The K-quants'
// min terms go into a float of their own, one fma per super-block, subtracted last.
struct Lanes8 {
  float acc[8] = {};
  // x, y: a block's 32 codes (weights as signed values, activations).
  template <typename X>
  void add_block(const X* x, const int8_t* y, float d) {
    for (int l = 0; l < 8; ++l) {
      int s = 0;
      for (int i = 4 * l; i < 4 * l + 4; ++i) s += (int)x[i] * y[i];
      acc[l] = fma_lane(static_cast<float>(s), d, acc[l]);
    }
  }
  // A super-block's lane sums (exact integers), scaled by d.
  void add_lanes(const int32_t* s, float d) {
    for (int l = 0; l < 8; ++l) acc[l] = fma_lane(static_cast<float>(s[l]), d, acc[l]);
  }
  float sum() const {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  }
};

// The lane of element e (within its block or super-block) in Lanes8's order.
inline int lane_of(int e) { return (e % 32) / 4; }

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

void q4_1_to_float(const void* src, float* dst, int64_t n);
void q4_1_from_float(const float* src, void* dst, int64_t n);
float q4_1_dot_q8_1(int64_t n, const void* w, const void* act);
void q5_0_to_float(const void* src, float* dst, int64_t n);
void q5_0_from_float(const float* src, void* dst, int64_t n);
float q5_0_dot_q8_0(int64_t n, const void* w, const void* act);
void q5_1_to_float(const void* src, float* dst, int64_t n);
void q5_1_from_float(const float* src, void* dst, int64_t n);
float q5_1_dot_q8_1(int64_t n, const void* w, const void* act);
void q8_1_to_float(const void* src, float* dst, int64_t n);
// As the reference's SIMD quantize_row_q8_1 (Q8_0's activation rounding, s = d * sum).
void q8_1_from_float(const float* src, void* dst, int64_t n);

void iq4_nl_to_float(const void* src, float* dst, int64_t n);
void iq4_nl_from_float(const float* src, void* dst, int64_t n);
float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act);
void mxfp4_to_float(const void* src, float* dst, int64_t n);
void mxfp4_from_float(const float* src, void* dst, int64_t n);
float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act);
void iq4_xs_to_float(const void* src, float* dst, int64_t n);
void iq4_xs_from_float(const float* src, void* dst, int64_t n);
float iq4_xs_dot_q8_k(int64_t n, const void* w, const void* act);

void q2_k_to_float(const void* src, float* dst, int64_t n);
void q2_k_from_float(const float* src, void* dst, int64_t n);
float q2_k_dot_q8_k(int64_t n, const void* w, const void* act);
void q3_k_to_float(const void* src, float* dst, int64_t n);
void q3_k_from_float(const float* src, void* dst, int64_t n);
float q3_k_dot_q8_k(int64_t n, const void* w, const void* act);
void q5_k_to_float(const void* src, float* dst, int64_t n);
void q5_k_from_float(const float* src, void* dst, int64_t n);
float q5_k_dot_q8_k(int64_t n, const void* w, const void* act);

// f16 -> f32 through a 64K-entry table (the hot loops of F16 weights).
float f16_lut(uint16_t h);

}  // namespace cairn::quant
