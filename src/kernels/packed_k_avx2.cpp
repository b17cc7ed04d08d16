// kernels/packed_k_avx2.cpp — AVX2 kernels of Q4_Kx16 / Q6_Kx16 (packed_k.h).
//
// The same packed blocks and records, 8 rows (half a group) per 256-bit
// register, the same exact integers and the same float operations as the
// VNNI kernels (packed_k_vnni.cpp), so again the scalar functions' bits. The integer dots use
// vpmaddubsw, whose 16-bit pair sums must not overflow: Q4_K codes (0..15)
// times activation codes (|a| <= 127) give at most 3810 per pair, so a
// sub-block's eight chunks add in 16 bits (30480); Q6_K's 6-bit codes give
// 16002 per pair, so two chunks at a time. vpmaddwd by the row's scale in
// both 16-bit halves then widens a pair sum and multiplies it in one step
// (where the VNNI kernels use vpmulld).
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/packed_k.h"

#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

namespace cairn::kernels {

namespace {

using quant::BlockQ8_K;

CAIRN_AVX2 inline __m256i bcast4_avx2(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
CAIRN_AVX2 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// 8 unsigned bytes as int32 lanes holding the byte in both 16-bit halves.
CAIRN_AVX2 inline __m256i scale_pairs_u8(const uint8_t* p) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}
// 8 f16 at p as floats.
CAIRN_AVX2 inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows 8h..8h+7 of one Q4_K super-block against NT tokens: acc[t] += as
// k_few_block() (sum_q by sub-block, the mins' sum, the two fma).
template <int NT>
CAIRN_AVX2 void q4k_half_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                              __m256* acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sum_q[NT], sum_mins[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = sum_mins[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int j = 0; j < 4; ++j) {  // run j: sub-blocks 2j (low nibbles) and 2j + 1 (high)
    __m256i lo[NT], hi[NT];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i q = load32(blk + kOffCodes + 64 * (8 * j + c) + 32 * h);
      const __m256i l = _mm256_and_si256(q, m4);
      const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const uint8_t* a = act + t * stride + kRecQs + 64 * j + 4 * c;
        const __m256i pl = _mm256_maddubs_epi16(l, bcast4_avx2(a));
        const __m256i pu = _mm256_maddubs_epi16(u, bcast4_avx2(a + 32));
        lo[t] = c == 0 ? pl : _mm256_add_epi16(lo[t], pl);
        hi[t] = c == 0 ? pu : _mm256_add_epi16(hi[t], pu);
      }
    }
    const __m256i sc_lo = scale_pairs_u8(blk + kOffScales + 16 * (2 * j) + 8 * h);
    const __m256i sc_hi = scale_pairs_u8(blk + kOffScales + 16 * (2 * j + 1) + 8 * h);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] = _mm256_add_epi32(sum_q[t], _mm256_add_epi32(_mm256_madd_epi16(lo[t], sc_lo),
                                                             _mm256_madd_epi16(hi[t], sc_hi)));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i m = _mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffMins + 32 * i + 16 * h)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_mins[t] = _mm256_add_epi32(
          sum_mins[t], _mm256_madd_epi16(m, bcast4_avx2(act + t * stride + kRecSums + 4 * i)));
  }
  const __m256 d = halves8(blk + kOffD + 16 * h), dmin = halves8(blk + kOffDmin + 16 * h);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float yd;
    std::memcpy(&yd, act + t * stride + kRecD, 4);
    const __m256 a =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(yd), d), _mm256_cvtepi32_ps(sum_q[t]), acc[t]);
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(-yd), dmin),
                             _mm256_cvtepi32_ps(sum_mins[t]), a);
  }
}

// Element group K (elements 64K + 4c..) of Q6_K chunk c, rows 8h.., as q6_group().
template <int K>
CAIRN_AVX2 inline __m256i q6_group_avx2(const uint8_t* blk, int c, int h) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i hb = load32(blk + kQ6OffHigh + 64 * c + 32 * h);
  const __m256i l = load32(blk + kQ6OffLow + 64 * (K % 2 ? 16 + c : c) + 32 * h);
  const __m256i low =
      K < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  const __m256i top = K == 0   ? _mm256_slli_epi16(hb, 4)
                      : K == 1 ? _mm256_slli_epi16(hb, 2)
                      : K == 2 ? hb
                               : _mm256_srli_epi16(hb, 2);
  return _mm256_or_si256(low, _mm256_and_si256(top, m30));
}

// Sub-blocks 4K + q of one Q6_K super-block, rows 8h.., for NT tokens:
// sum_q[t] += scale * (codes . activations), as k6_few_groups().
template <int K, int NT>
CAIRN_AVX2 inline void k6_groups_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                                      __m256i* sum_q) {
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
#pragma GCC unroll 1
  for (int q = 0; q < 4; ++q) {
    __m256i d[2][NT];  // chunks 4q, 4q + 1 and 4q + 2, 4q + 3: 16-bit sums of two
#pragma GCC unroll 4
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * q + cc;
      const __m256i g = q6_group_avx2<K>(blk, c, h);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i p =
            _mm256_maddubs_epi16(g, bcast4_avx2(act + t * stride + kRecQs + 64 * K + 4 * c));
        d[cc / 2][t] = cc % 2 == 0 ? p : _mm256_add_epi16(d[cc / 2][t], p);
      }
    }
    const int sb = 4 * K + q;  // scales of sub-blocks 2i, 2i + 1 are pair i
    const __m256i pairs = _mm256_cvtepi8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(blk + kQ6OffScales + 32 * (sb / 2) + 16 * h)));
    const __m256i sc =
        sb % 2 ? _mm256_or_si256(_mm256_srli_epi32(pairs, 16), _mm256_andnot_si256(lo16, pairs))
               : _mm256_or_si256(_mm256_and_si256(pairs, lo16), _mm256_slli_epi32(pairs, 16));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] = _mm256_add_epi32(sum_q[t], _mm256_add_epi32(_mm256_madd_epi16(d[0][t], sc),
                                                             _mm256_madd_epi16(d[1][t], sc)));
  }
}

// Rows 8h..8h+7 of one Q6_K super-block against NT tokens: acc[t] += as
// k6_few_block().
template <int NT>
CAIRN_AVX2 void q6k_half_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                              __m256* acc) {
  __m256i sum_q[NT], offset[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = offset[t] = _mm256_setzero_si256();
  k6_groups_avx2<0, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<1, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<2, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<3, NT>(blk, h, act, stride, sum_q);
#pragma GCC unroll 1
  for (int i = 0; i < 8; ++i) {
    const __m256i pairs = _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6OffScales + 32 * i + 16 * h)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      offset[t] = _mm256_add_epi32(
          offset[t], _mm256_madd_epi16(pairs, bcast4_avx2(act + t * stride + kRecSums + 4 * i)));
  }
  const __m256 d = halves8(blk + kQ6OffD + 16 * h);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float yd;
    std::memcpy(&yd, act + t * stride + kRecD, 4);
    const __m256i q = _mm256_sub_epi32(sum_q[t], _mm256_slli_epi32(offset[t], 5));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(yd), d), _mm256_cvtepi32_ps(q), acc[t]);
  }
}

// Tokens per call of the half kernels: their per-token sums fill the 16 registers.
constexpr int kKAvx2Tile = 4;
using KHalfFn = void (*)(const uint8_t*, int, const uint8_t*, size_t, __m256*);
constexpr KHalfFn kKHalves[2][kKAvx2Tile] = {
    {q4k_half_avx2<1>, q4k_half_avx2<2>, q4k_half_avx2<3>, q4k_half_avx2<4>},
    {q6k_half_avx2<1>, q6k_half_avx2<2>, q6k_half_avx2<3>, q6k_half_avx2<4>}};
static_assert(kKAvx2Tile == 4, "kKHalves names every tile size");

// Tokens [0, n) against groups [g0, g1): out[t * out_stride + r]. Each
// super-block serves both halves of every tile while in L1; weights requested
// `ahead` bytes before their loads.
CAIRN_AVX2 void k_groups_avx2_impl(const PackedMatrix& pm, int64_t g0, int64_t g1,
                                   const uint8_t* act, size_t stride, int64_t n, float* out,
                                   int64_t out_stride, size_t ahead) {
  const auto& halves = kKHalves[pm.layout == PackedMatrix::Layout::Q6_Kx16];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t rows = pm.rows - g * kGroup;
    __m256 acc[2][kKTokenChunk];  // [half][token]: a tile's sums lie side by side
    for (int64_t t = 0; t < n; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    const uint8_t* blk = pm.slice(g, 0);
    const uint8_t* a = act;
    for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes, a += kKRec) {
      if (ahead != 0)  // may point past the weights: a prefetch never faults
        for (size_t line = 0; line < pm.block_bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + line), _MM_HINT_T1);
      for (int64_t t = 0; t < n; t += kKAvx2Tile) {
        const int64_t nt = std::min<int64_t>(kKAvx2Tile, n - t);
        for (int h = 0; h < 2 && rows > 8 * h; ++h)
          halves[nt - 1](blk, h, a + (size_t)t * stride, stride, acc[h] + t);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      float* o = out + t * out_stride + g * kGroup;
      alignas(32) float lanes[kGroup];
      _mm256_store_ps(lanes, acc[0][t]);
      _mm256_store_ps(lanes + 8, acc[1][t]);
      std::memcpy(o, lanes, (size_t)std::min<int64_t>(kGroup, rows) * sizeof(float));
    }
  }
}

// CAIRN_AVX2 int32 lanes summed.
CAIRN_AVX2 inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// quantize_k_act 8 lanes at a time (the same steps, so the same records as
// quant::q8_k_from_float, which still takes blocks of zeros or with a NaN or
// infinity), vectorised as the scalar loop showed in prompts' profiles.
CAIRN_AVX2 void quantize_k_act_avx2_impl(bool q6, const float* x, int64_t cols, uint8_t* dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* src = x + kQK * b;
    uint8_t* rec = dst + kKRec * (size_t)b;
    __m256 amax8 = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    for (int i = 0; i < kQK / 8; ++i) {
      const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * i));
      odd = _mm256_or_ps(odd, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
      amax8 = _mm256_max_ps(amax8, a);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    int first = -1;
    const bool finite = _mm256_movemask_ps(odd) == 0;
    for (int i = 0; i < kQK / 8 && first < 0 && finite && amax != 0.0f; ++i) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(
          _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit != 0) first = 8 * i + __builtin_ctz((unsigned)hit);
    }
    BlockQ8_K blk;
    if (first < 0) {
      quant::q8_k_from_float(src, &blk, kQK);
      store_k_record(q6, blk, rec);
      continue;
    }
    const float iscale = -127.0f / src[first];
    const __m256 scale = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int i = 0; i < kQK / 16; ++i) {
      const __m256i q0 = _mm256_min_epi32(
          top, _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(src + 16 * i))));
      const __m256i q1 = _mm256_min_epi32(
          top, _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(src + 16 * i + 8))));
      // packs works within 128-bit halves: put q0's eight then q1's in order.
      const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(blk.qs + 16 * i),
          _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
      blk.bsums[i] = (int16_t)hsum_epi32(_mm256_add_epi32(q0, q1));
    }
    blk.d = 1.0f / iscale;
    store_k_record(q6, blk, rec);
  }
}

}  // namespace

void avx2_quantize_k_act(bool q6, const float* x, int64_t cols, uint8_t* dst) {
  quantize_k_act_avx2_impl(q6, x, cols, dst);
}

void avx2_k_groups(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                   size_t stride, int64_t n, float* out, int64_t out_stride, size_t ahead) {
  k_groups_avx2_impl(pm, g0, g1, act, stride, n, out, out_stride, ahead);
}

}  // namespace cairn::kernels
