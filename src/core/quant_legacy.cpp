// The 32-element block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, and the
// activation types they are multiplied with (Q8_0; Q8_1 for the two with an offset).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cairn::quant {

void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dst[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      dst[j + kQK4_0 / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// The value of largest magnitude maps to -8 (the one code with no positive twin),
// which keeps one more level for it than a symmetric amax/7 scale would.
void q4_0_from_float(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    // floor(v + 8.5): ties round up, exactly as llama.cpp's reference quantizer.
    auto code = [id](float v) { return std::clamp(static_cast<int>(v * id + 8.5f), 0, 15); };
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      b[i].qs[j] = static_cast<uint8_t>(code(src[j]) | (code(src[j + kQK4_0 / 2]) << 4));
    }
  }
}

// Not the 8-lane order of Q8_0: the reference repacks Q4_0 weights at load
// (8 rows interleaved) and its AVX2 gemv/gemm for them takes each block's full
// integer sum, fma'd with the scale product into one float per row: this
// order keeps the golden Q4_0 run bit-exact longest (docs/performance.md).
float q4_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK4_0 / 2];
    }
    sum = fma_lane(static_cast<float>(sumi), f16_lut(x[i].d) * f16_lut(y[i].d), sum);
  }
  return sum;
}

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// As ggml's reference: d = amax/127 kept in float for the division, stored as f16;
// ties round away from zero (roundf).
void q8_0_from_float(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(src[j] * id));
  }
}

// The SIMD quantizer of the reference: ties to even, and the scale inverted
// as 127/amax rather than 1/d (they differ in the last bit for some amax).
// One block's codes; returns d = amax / 127 unrounded.
static float act_block(const float* src, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < kQK8_0; ++j) qs[j] = static_cast<int8_t>(std::nearbyint(src[j] * id));
  return amax / 127.0f;
}

void q8_0_from_float_act(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) b[i].d = f32_to_f16(act_block(src, b[i].qs));
}

// Each block's exact integer sum, fma'd with the scale product into one float
// per row — the order the reference's int8 kernels on its AVX-512 VNNI / AMX
// host take, as for Q4_0 and the K-quants; it gives the golden files' bits,
// ggml's AVX2 order does not (docs/performance.md).
float q8_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum = fma_lane(static_cast<float>(sumi), f16_lut(x[i].d) * f16_lut(y[i].d), sum);
  }
  return sum;
}

// ---- Q4_1, Q5_0, Q5_1, Q8_1 ---------------------------------------------------

namespace {

// The 5-bit code of element j (0..31) of a Q5 block.
inline int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
  return low | (int)(((qh >> j) & 1u) << 4);
}

inline uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// min and max of a block, for the offset types.
inline void block_min_max(const float* x, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int j = 1; j < kQK4_0; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

// Codes l = floor((x - min) / d + 0.5) for the offset types (the reference's
// rounding), clamped to [0, nmax].
template <int nmax>
void offset_codes(const float* x, float min, float id, uint8_t* l) {
  for (int j = 0; j < kQK4_0; ++j)
    l[j] = (uint8_t)std::clamp((int)((x[j] - min) * id + 0.5f), 0, nmax);
}

void pack_q5(const uint8_t* l, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = (uint8_t)((l[j] & 0xF) | ((l[j + 16] & 0xF) << 4));
    qh |= (uint32_t)(l[j] >> 4) << j;
    qh |= (uint32_t)(l[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void q4_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d), m = f16_lut(b[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = (float)(b[i].qs[j] & 0xF) * d + m;
      dst[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void q4_1_from_float(const float* src, void* dst, int64_t n) {
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float lo, hi;
    block_min_max(src, &lo, &hi);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    uint8_t l[kQK4_0];
    offset_codes<15>(src, lo, id, l);
    for (int j = 0; j < 16; ++j) b[i].qs[j] = (uint8_t)(l[j] | (l[j + 16] << 4));
  }
}

// Per block: the products in Lanes8's order (quant_blocks.h), and the offset
// m_w times the activations' d * sum(q) fma'd into a float of its own, added last.
float q4_1_dot_q8_1(int64_t n, const void* w, const void* act) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(act);
  Lanes8 lanes;
  float offsets = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    uint8_t codes[32];
    for (int j = 0; j < 16; ++j) {
      codes[j] = x[i].qs[j] & 0xF;
      codes[j + 16] = x[i].qs[j] >> 4;
    }
    lanes.add_block(codes, y[i].qs, f16_lut(x[i].d) * f16_lut(y[i].d));
    offsets = fma_lane(f16_lut(x[i].m), f16_lut(y[i].s), offsets);
  }
  return lanes.sum() + offsets;
}

void q5_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < kQK4_0; ++j) dst[j] = (float)(q5_code(b[i].qs, qh, j) - 16) * d;
  }
}

// As Q4_0's quantizer with 32 levels: the value of largest magnitude maps to -16.
void q5_0_from_float(const float* src, void* dst, int64_t n) {
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    uint8_t l[kQK4_0];
    for (int j = 0; j < kQK4_0; ++j) l[j] = (uint8_t)std::clamp((int)(src[j] * id + 16.5f), 0, 31);
    pack_q5(l, b[i].qs, b[i].qh);
  }
}

float q5_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  Lanes8 lanes;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    int8_t codes[32];
    for (int j = 0; j < kQK4_0; ++j) codes[j] = (int8_t)(q5_code(x[i].qs, qh, j) - 16);
    lanes.add_block(codes, y[i].qs, f16_lut(x[i].d) * f16_lut(y[i].d));
  }
  return lanes.sum();
}

void q5_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d), m = f16_lut(b[i].m);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < kQK4_0; ++j) dst[j] = (float)q5_code(b[i].qs, qh, j) * d + m;
  }
}

void q5_1_from_float(const float* src, void* dst, int64_t n) {
  BlockQ5_1* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float lo, hi;
    block_min_max(src, &lo, &hi);
    const float d = (hi - lo) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    uint8_t l[kQK4_0];
    offset_codes<31>(src, lo, id, l);
    pack_q5(l, b[i].qs, b[i].qh);
  }
}

float q5_1_dot_q8_1(int64_t n, const void* w, const void* act) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(act);
  Lanes8 lanes;
  float offsets = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    uint8_t codes[32];
    for (int j = 0; j < kQK4_0; ++j) codes[j] = (uint8_t)q5_code(x[i].qs, qh, j);
    lanes.add_block(codes, y[i].qs, f16_lut(x[i].d) * f16_lut(y[i].d));
    offsets = fma_lane(f16_lut(x[i].m), f16_lut(y[i].s), offsets);
  }
  return lanes.sum() + offsets;
}

void q8_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void q8_1_from_float(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    const float d = act_block(src, b[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += b[i].qs[j];
    b[i].d = f32_to_f16(d);
    b[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

}  // namespace cairn::quant
