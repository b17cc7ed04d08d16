// core/quant_k.cpp — the scalar K-quant row functions (Q2_K to Q6_K) and Q8_K.
// The 256-element K-quant types Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, and their
// activation type Q8_K.
// The dot products do their integer math as ggml does (per sub-block int sums
// times the sub-block scale; mins through the Q8_K bsums). Q4_K and Q6_K do
// their float math in the order of the reference that made the golden files
// (kKQuantOrder below), so logits land where llama.cpp's do; Q2_K, Q3_K and
// Q5_K in the SIMD-friendly Lanes8 order (quant_blocks.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cairn::quant {
namespace {

// Round half to even, as ggml's nearest_int (the default FP rounding mode).
int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// Fits x ~= scale * l - min with l in [0, nmax], min >= 0, searching a few
// quantization grids and refitting scale/min by least squares for each.
void fit_scale_min(const float* x, int n, int nmax, float* scale, float* min) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) {
    *scale = 0.0f;
    *min = -lo;
    return;
  }
  float best_err = INFINITY, best_scale = (hi - lo) / nmax, best_min = -lo;
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (nmax + 0.1f * step) / (hi - lo);
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    int l[32];
    for (int i = 0; i < n; ++i) {
      l[i] = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      sl += l[i];
      sll += l[i] * l[i];
      sx += x[i];
      sxl += x[i] * l[i];
    }
    const double det = n * sll - sl * sl;
    if (det <= 0) continue;
    double a = (n * sxl - sl * sx) / det;  // least-squares x ~= a*l + b
    double b = (sll * sx - sl * sxl) / det;
    if (b > 0) {  // the format has no positive offset: refit the scale alone
      b = 0;
      a = sxl / sll;
    }
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = a * l[i] + b - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_scale = static_cast<float>(a);
      best_min = static_cast<float>(-b);
    }
  }
  *scale = std::max(best_scale, 0.0f);
  *min = best_min;
}

// Signed scale for x ~= scale * l with l in [-nmax, nmax - 1] (grid search + refit).
float fit_scale_signed(const float* x, int n, int nmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best_err = INFINITY, best = max / -nmax;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(nmax + 0.1f * step) / max;
    double sxl = 0, sll = 0;
    int l[16];
    for (int i = 0; i < n; ++i) {
      l[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sxl += x[i] * l[i];
      sll += l[i] * l[i];
    }
    if (sll == 0) continue;
    const double s = sxl / sll;
    double err = 0;
    for (int i = 0; i < n; ++i) err += (x[i] - s * l[i]) * (x[i] - s * l[i]);
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best = static_cast<float>(s);
    }
  }
  return best;
}

}  // namespace

// ---- Q4_K -------------------------------------------------------------------

void q4_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_lut(b[i].d), dmin = f16_lut(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < kQK_K / 64; ++j, q += 32, dst += 64) {
      uint8_t sc0, m0, sc1, m1;
      q4k_scale_min(2 * j, b[i].scales, &sc0, &m0);
      q4k_scale_min(2 * j + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        dst[l] = d0 * (q[l] & 0xF) - mm0;
        dst[l + 32] = d1 * (q[l] >> 4) - mm1;
      }
    }
  }
}

namespace {

// The scale/min fit of a Q4_K or Q5_K super-block: eight sub-blocks of 32
// fitted as x ~= scale * l - min with l in [0, nmax], the scales and mins put
// on 6-bit grids under two f16 super-scales; l[256] receives the codes chosen
// against the scales as stored (6-bit, f16), not the fitted ones.
void fit_k_min_block(const float* src, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                     uint8_t scales_out[12], uint8_t l[kQK_K]) {
  float scales[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(src + 32 * j, 32, nmax, &scales[j], &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  for (int j = 0; j < 4; ++j) {
    scales_out[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
    scales_out[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
    scales_out[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
  }
  const float d = f16_lut(*d_out), dmin = f16_lut(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, scales_out, &sc, &m);
    const float dl = d * sc, ml = dmin * m;
    for (int k = 0; k < 32; ++k) {
      const float v = dl != 0.0f ? (src[32 * j + k] + ml) / dl : 0.0f;
      l[32 * j + k] = static_cast<uint8_t>(std::clamp(nearest_int(v), 0, nmax));
    }
  }
}

}  // namespace

void q4_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t l[kQK_K];
    fit_k_min_block(src, 15, &b[i].d, &b[i].dmin, b[i].scales, l);
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int k = 0; k < 32; ++k) {
        b[i].qs[32 * j + k] = static_cast<uint8_t>(l[64 * j + k] | (l[64 * j + 32 + k] << 4));
      }
    }
  }
}

// kKQuantOrder: the float order of the reference's K-quant dot products, the one
// that gives ../shared/golden's bits (other orders: docs/performance.md):
// per super-block the exact integer sum (scaled codes; for Q4_K also the
// min * bsum sum), then one float accumulator per row updated by fma:
//   Q6_K: sum = fma(y.d * x.d, sum_q, sum)
//   Q4_K: sum = fma(y.d * x.d, sum_q, sum); sum = fma(-y.d * x.dmin, sum_mins, sum)
// Every SIMD version (kernels/row_dot_avx2.cpp, kernels/row_dot_k_vnni.cpp) does the same.
float q4_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, x[i].scales, &sc[j], &m[j]);
    // The min term: each of the 16 bsums covers half of a 32-wide sub-block.
    int32_t sum_mins = 0;
    for (int j = 0; j < kQK_K / 16; ++j) sum_mins += y[i].bsums[j] * m[j / 2];
    int32_t sum_q = 0;
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    for (int j = 0; j < kQK_K / 64; ++j, q4 += 32, q8 += 64) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q4[l] & 0xF) * q8[l];
        hi += (q4[l] >> 4) * q8[l + 32];
      }
      sum_q += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
    sum = fma_lane(y[i].d * f16_lut(x[i].d), static_cast<float>(sum_q), sum);
    sum = fma_lane(-y[i].d * f16_lut(x[i].dmin), static_cast<float>(sum_mins), sum);
  }
  return sum;
}

// ---- Q6_K -------------------------------------------------------------------

namespace {
// The 6-bit code (0..63) of element l + 32*k (k = 0..3) of a 128-element half.
inline int q6_code(const uint8_t* ql, const uint8_t* qh, int l, int k) {
  const int low = ((k & 1 ? ql[l + 32] : ql[l]) >> (k & 2 ? 4 : 0)) & 0xF;
  return low | (((qh[l] >> (2 * k)) & 3) << 4);
}
}  // namespace

void q6_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_lut(b[i].d);
    for (int h = 0; h < 2; ++h, dst += 128) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          dst[32 * k + l] = d * sc[(32 * k + l) / 16] * (q6_code(ql, qh, l, k) - 32);
        }
      }
    }
  }
}

void q6_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float scales[16], amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_scale_signed(src + 16 * j, 16, 32);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max = scales[j];
      }
    }
    std::memset(&b[i], 0, sizeof(BlockQ6_K));
    if (amax == 0.0f) continue;
    const float iscale = -128.0f / max;
    b[i].d = f32_to_f16(1.0f / iscale);
    for (int j = 0; j < 16; ++j) {
      b[i].scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    }
    const float d = f16_lut(b[i].d);
    uint8_t l[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      const float dl = d * b[i].scales[j / 16];
      const int q = dl != 0.0f ? nearest_int(src[j] / dl) : 0;
      l[j] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = b[i].ql + 64 * h;
      uint8_t* qh = b[i].qh + 32 * h;
      const uint8_t* c = l + 128 * h;
      for (int k = 0; k < 32; ++k) {
        ql[k] = static_cast<uint8_t>((c[k] & 0xF) | ((c[k + 64] & 0xF) << 4));
        ql[k + 32] = static_cast<uint8_t>((c[k + 32] & 0xF) | ((c[k + 96] & 0xF) << 4));
        qh[k] = static_cast<uint8_t>((c[k] >> 4) | ((c[k + 32] >> 4) << 2) | ((c[k + 64] >> 4) << 4) |
                                     ((c[k + 96] >> 4) << 6));
      }
    }
  }
}

float q6_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t sum_q = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      const int8_t* sc = x[i].scales + 8 * h;
      const int8_t* q8 = y[i].qs + 128 * h;
      for (int k = 0; k < 4; ++k) {
        int32_t s0 = 0, s1 = 0;  // the two 16-wide sub-blocks of this 32-run
        for (int l = 0; l < 16; ++l) s0 += (q6_code(ql, qh, l, k) - 32) * q8[32 * k + l];
        for (int l = 16; l < 32; ++l) s1 += (q6_code(ql, qh, l, k) - 32) * q8[32 * k + l];
        sum_q += sc[2 * k] * s0 + sc[2 * k + 1] * s1;
      }
    }
    sum = fma_lane(y[i].d * f16_lut(x[i].d), static_cast<float>(sum_q), sum);
  }
  return sum;
}

// ---- Q5_K -------------------------------------------------------------------

namespace {
// The 5-bit code of element 64*j + 32*h + l (j = 0..3, h = 0/1) of a Q5_K block.
inline int q5k_code(const BlockQ5_K& b, int j, int h, int l) {
  const uint8_t q = b.qs[32 * j + l];
  const int low = h ? q >> 4 : q & 0xF;
  return low | (((b.qh[l] >> (2 * j + h)) & 1) << 4);
}
}  // namespace

void q5_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_K* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_lut(b[i].d), dmin = f16_lut(b[i].dmin);
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int h = 0; h < 2; ++h, dst += 32) {
        uint8_t sc, m;
        q4k_scale_min(2 * j + h, b[i].scales, &sc, &m);
        const float dl = d * sc, ml = dmin * m;
        for (int l = 0; l < 32; ++l) dst[l] = dl * q5k_code(b[i], j, h, l) - ml;
      }
    }
  }
}

void q5_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ5_K* b = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    uint8_t l[kQK_K];
    fit_k_min_block(src, 31, &b[i].d, &b[i].dmin, b[i].scales, l);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int k = 0; k < 32; ++k) {
        const uint8_t lo = l[64 * j + k], hi = l[64 * j + 32 + k];
        b[i].qs[32 * j + k] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[k] |= static_cast<uint8_t>(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
      }
    }
  }
}

// Lanes8's order (quant_blocks.h): sub-block sums scaled, per lane; the mins
// through the bsums into their own float.
float q5_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  Lanes8 lanes;
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, x[i].scales, &sc[j], &m[j]);
    int32_t sum_mins = 0;
    for (int j = 0; j < kQK_K / 16; ++j) sum_mins += y[i].bsums[j] * m[j / 2];
    int32_t lane[8] = {};
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int h = 0; h < 2; ++h) {
        const int8_t* q8 = y[i].qs + 64 * j + 32 * h;
        for (int l = 0; l < 32; ++l) lane[lane_of(l)] += sc[2 * j + h] * q5k_code(x[i], j, h, l) * q8[l];
      }
    }
    lanes.add_lanes(lane, y[i].d * f16_lut(x[i].d));
    mins = fma_lane(y[i].d * f16_lut(x[i].dmin), static_cast<float>(sum_mins), mins);
  }
  return lanes.sum() - mins;
}

// ---- Q2_K -------------------------------------------------------------------

namespace {
// The 2-bit code of element e (0..255) of a Q2_K or Q3_K block: half e / 128,
// shift 2 * ((e % 128) / 32), byte e % 32 of that half's 32.
inline int q2_bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
}  // namespace

void q2_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    const float d = f16_lut(b[i].d), dmin = f16_lut(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sc = b[i].scales[e / 16];
      dst[e] = d * (sc & 0xF) * q2_bits(b[i].qs, e) - dmin * (sc >> 4);
    }
  }
}

void q2_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ2_K* b = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float scales[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
      fit_scale_min(src + 16 * j, 16, 3, &scales[j], &mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    std::memset(&b[i], 0, sizeof(BlockQ2_K));
    b[i].d = f32_to_f16(max_scale / 15.0f);
    b[i].dmin = f32_to_f16(max_min / 15.0f);
    const float d = f16_lut(b[i].d), dmin = f16_lut(b[i].dmin);
    for (int j = 0; j < 16; ++j) {
      const int ls = d > 0 ? std::clamp(nearest_int(scales[j] / d), 0, 15) : 0;
      const int lm = dmin > 0 ? std::clamp(nearest_int(mins[j] / dmin), 0, 15) : 0;
      b[i].scales[j] = static_cast<uint8_t>(ls | (lm << 4));
      const float dl = d * ls, ml = dmin * lm;
      for (int k = 0; k < 16; ++k) {
        const int e = 16 * j + k;
        const int q = dl != 0.0f ? std::clamp(nearest_int((src[e] + ml) / dl), 0, 3) : 0;
        b[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
      }
    }
  }
}

// Lanes8's order, as Q5_K.
float q2_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  Lanes8 lanes;
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t sum_mins = 0, lane[8] = {};
    for (int j = 0; j < kQK_K / 16; ++j) {
      sum_mins += y[i].bsums[j] * (x[i].scales[j] >> 4);
      for (int k = 0; k < 16; ++k) {
        const int e = 16 * j + k;
        lane[lane_of(e)] += (x[i].scales[j] & 0xF) * q2_bits(x[i].qs, e) * y[i].qs[e];
      }
    }
    lanes.add_lanes(lane, y[i].d * f16_lut(x[i].d));
    mins = fma_lane(y[i].d * f16_lut(x[i].dmin), static_cast<float>(sum_mins), mins);
  }
  return lanes.sum() - mins;
}

// ---- Q3_K -------------------------------------------------------------------

namespace {
// The signed 3-bit code (-4..3) of element e of a Q3_K block.
inline int q3_code(const BlockQ3_K& b, int e) {
  const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
  return q2_bits(b.qs, e) - (high ? 0 : 4);
}
}  // namespace

void q3_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    const float d = f16_lut(b[i].d);
    int8_t sc[16];
    q3k_scales(b[i].scales, sc);
    for (int e = 0; e < kQK_K; ++e) dst[e] = d * sc[e / 16] * q3_code(b[i], e);
  }
}

void q3_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ3_K* b = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float scales[16], amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_scale_signed(src + 16 * j, 16, 4);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max = scales[j];
      }
    }
    std::memset(&b[i], 0, sizeof(BlockQ3_K));
    if (amax == 0.0f) {
      for (int j = 8; j < 12; ++j) b[i].scales[j] = 0xAA;  // every scale 32: zero after the offset
      continue;
    }
    const float iscale = -32.0f / max;
    b[i].d = f32_to_f16(1.0f / iscale);
    int ls[16];
    for (int j = 0; j < 16; ++j) {
      ls[j] = std::clamp(nearest_int(iscale * scales[j]), -32, 31);
      const int u = ls[j] + 32;
      if (j < 8) b[i].scales[j] |= static_cast<uint8_t>(u & 0xF);
      else b[i].scales[j - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
      b[i].scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
    const float d = f16_lut(b[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * ls[e / 16];
      const int q = (dl != 0.0f ? std::clamp(nearest_int(src[e] / dl), -4, 3) : 0) + 4;
      b[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((q & 3) << (2 * ((e % 128) / 32)));
      b[i].hmask[e % 32] |= static_cast<uint8_t>((q >> 2) << (e / 32));
    }
  }
}

// Lanes8's order, as Q5_K (no mins).
float q3_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  Lanes8 lanes;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t sc[16];
    q3k_scales(x[i].scales, sc);
    int32_t lane[8] = {};
    for (int e = 0; e < kQK_K; ++e) lane[lane_of(e)] += sc[e / 16] * q3_code(x[i], e) * y[i].qs[e];
    lanes.add_lanes(lane, y[i].d * f16_lut(x[i].d));
  }
  return lanes.sum();
}

// ---- Q8_K -------------------------------------------------------------------

void q8_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) dst[j] = b[i].d * b[i].qs[j];
  }
}

// ggml's quantize_row_q8_K_ref: the signed value of largest magnitude maps to -127.
void q8_k_from_float(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    std::memset(&b[i], 0, sizeof(BlockQ8_K));
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[j])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += b[i].qs[16 * j + k];
      b[i].bsums[j] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace cairn::quant
