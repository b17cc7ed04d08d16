// core/quant_nonlinear.cpp — the scalar IQ4_NL, IQ4_XS and MXFP4 row functions:
// 4-bit indices into a fixed table of values (a non-linear grid; FP4's E2M1
// numbers) with a per-block scale. Their dot products take exact integer sums
// of table values times activation codes, then the scales: Lanes8's order for
// the 32-element ones and, per super-block, IQ4_XS.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cairn::quant {
namespace {

// The index of the table value v[i] * d nearest to x (the first on a tie).
int nearest_index(const int8_t* v, float d, float x) {
  int best = 0;
  float best_err = std::fabs(v[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(v[i] * d - x);
    if (err < best_err) {
      best_err = err;
      best = i;
    }
  }
  return best;
}

// The scale s for x ~= s * kIq4nlValues[idx] over n values: candidate scales
// around max / -127 (where the largest value lands on the grid's end), each
// with its nearest indices and least-squares refit; the lowest error wins.
float fit_iq4_scale(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  double sxx = 0;
  for (int i = 0; i < n; ++i) sxx += (double)x[i] * x[i];
  float best = max / kIq4nlValues[0];
  double best_err = INFINITY;
  for (int step = -7; step <= 7; ++step) {
    const float d = max / (kIq4nlValues[0] + step);
    double sxv = 0, svv = 0;
    for (int i = 0; i < n; ++i) {
      const int v = kIq4nlValues[nearest_index(kIq4nlValues, d, x[i])];
      sxv += (double)x[i] * v;
      svv += (double)v * v;
    }
    if (svv <= 0) continue;
    const double err = sxx - sxv * sxv / svv;  // the residual of the refit scale
    if (err < best_err) {
      best_err = err;
      best = (float)(sxv / svv);
    }
  }
  return best;
}

// Nibbles of 32 elements under scale d: element j low, j + 16 high.
void pack_indices(const int8_t* table, float d, const float* x, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) {
    const int lo = d != 0.0f ? nearest_index(table, d, x[j]) : 8;
    const int hi = d != 0.0f ? nearest_index(table, d, x[j + 16]) : 8;
    qs[j] = (uint8_t)(lo | (hi << 4));
  }
}

// A block's 32 table values in element order.
inline void table_values(const int8_t* table, const uint8_t* qs, int8_t* v) {
  for (int j = 0; j < 16; ++j) {
    v[j] = table[qs[j] & 0xF];
    v[j + 16] = table[qs[j] >> 4];
  }
}

inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  return (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

}  // namespace

// ---- IQ4_NL -------------------------------------------------------------------

void iq4_nl_to_float(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * kIq4nlValues[b[i].qs[j] & 0xF];
      dst[j + 16] = d * kIq4nlValues[b[i].qs[j] >> 4];
    }
  }
}

void iq4_nl_from_float(const float* src, void* dst, int64_t n) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    b[i].d = f32_to_f16(fit_iq4_scale(src, kQK4_0));
    pack_indices(kIq4nlValues, f16_lut(b[i].d), src, b[i].qs);  // against the stored scale
  }
}

float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  Lanes8 lanes;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int8_t v[32];
    table_values(kIq4nlValues, x[i].qs, v);
    lanes.add_block(v, y[i].qs, f16_lut(x[i].d) * f16_lut(y[i].d));
  }
  return lanes.sum();
}

// ---- MXFP4 --------------------------------------------------------------------

void mxfp4_to_float(const void* src, float* dst, int64_t n) {
  const BlockMXFP4* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * kFp4Values[b[i].qs[j] & 0xF];
      dst[j + 16] = d * kFp4Values[b[i].qs[j] >> 4];
    }
  }
}

// The shared exponent puts the block's largest magnitude in E2M1's top
// binade (4..6, i.e. 2^(floor(log2 amax) - 2) times 4..6).
void mxfp4_from_float(const float* src, void* dst, int64_t n) {
  BlockMXFP4* b = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) amax = std::max(amax, std::fabs(src[j]));
    int e = 0;
    if (amax > 0.0f && std::isfinite(amax)) e = std::clamp((int)std::floor(std::log2(amax)) - 2 + 127, 0, 254);
    b[i].e = (uint8_t)e;
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < 16; ++j) {
      b[i].qs[j] = (uint8_t)(nearest_index(kFp4Values, d, src[j]) |
                             (nearest_index(kFp4Values, d, src[j + 16]) << 4));
    }
  }
}

float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockMXFP4* x = static_cast<const BlockMXFP4*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  Lanes8 lanes;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int8_t v[32];
    table_values(kFp4Values, x[i].qs, v);
    lanes.add_block(v, y[i].qs, f16_lut(y[i].d) * e8m0_half(x[i].e));
  }
  return lanes.sum();
}

// ---- IQ4_XS -------------------------------------------------------------------

void iq4_xs_to_float(const void* src, float* dst, int64_t n) {
  const BlockIQ4_XS* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_lut(b[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, dst += 32) {
      const float dl = d * (float)iq4_xs_scale(b[i], ib);
      const uint8_t* qs = b[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * kIq4nlValues[qs[j] & 0xF];
        dst[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
    }
  }
}

// Each sub-block's own scale fitted, the eight put on a 6-bit signed grid
// whose largest magnitude lands on -32, the indices chosen under the stored scales.
void iq4_xs_from_float(const float* src, void* dst, int64_t n) {
  BlockIQ4_XS* b = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float scales[8], amax = 0.0f, max = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = fit_iq4_scale(src + 32 * ib, 32);
      if (std::fabs(scales[ib]) > amax) {
        amax = std::fabs(scales[ib]);
        max = scales[ib];
      }
    }
    std::memset(&b[i], 0, sizeof(BlockIQ4_XS));
    const float d = max / -32.0f;
    b[i].d = f32_to_f16(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::clamp((int)std::nearbyint(id * scales[ib]), -32, 31) + 32;
      b[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << (4 * (ib % 2)));
      b[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
      pack_indices(kIq4nlValues, f16_lut(b[i].d) * (float)(l - 32), src + 32 * ib, b[i].qs + 16 * ib);
    }
  }
}

// Lanes8's order, as the K-quants.
float iq4_xs_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  Lanes8 lanes;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t lane[8] = {};
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      int8_t v[32];
      table_values(kIq4nlValues, x[i].qs + 16 * ib, v);
      const int ls = iq4_xs_scale(x[i], ib);
      for (int e = 0; e < 32; ++e) lane[lane_of(e)] += ls * v[e] * y[i].qs[32 * ib + e];
    }
    lanes.add_lanes(lane, y[i].d * f16_lut(x[i].d));
  }
  return lanes.sum();
}

}  // namespace cairn::quant
