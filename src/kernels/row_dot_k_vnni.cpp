// kernels/row_dot_k_vnni.cpp — AVX-512 VNNI Q4_K/Q6_K row dot products (row_dot.h).
// AVX-512 VNNI versions of the Q4_K and Q6_K dot products (see
// kernels/row_dot.h). A 512-bit step covers two 32-element runs of a
// super-block; each int32 lane sums four adjacent products times their
// sub-block scale (maddubs, then vpdpwssd with the scales), so the lanes hold
// what ggml's AVX2 code holds in its 8 lanes, two runs at once. Integer sums
// are exact in any order; the float work per block (one fma per sum into one
// accumulator) is written out exactly as in the scalar reference (core/quant_k.cpp,
// kKQuantOrder), so the results are bit-identical.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/row_dot.h"
#include "kernels/vnni_int8.h"  // CAIRN_VNNI (no fp contraction) and the shared steps

namespace cairn::quant::avx512vnni {
namespace {

using vnni::f16;
using vnni::fma_ss;
using vnni::fold;
using vnni::hsum4;
using vnni::hsum8;

CAIRN_VNNI inline __m512i join(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// int16 lane i of the result = lane table[i] of the source (vpermw indices).
CAIRN_VNNI inline __m512i load_idx(const int16_t* table) { return _mm512_loadu_si512(table); }

// ---- Q4_K -------------------------------------------------------------------

// Scale-index tables: the 8 scales sit in int16 lanes 0..7 (mins in 8..15); a
// 512-bit step pairs sub-blocks (0,2), (1,3), (4,6), (5,7), 16 int16 lanes each.
struct Q4kIdx {
  alignas(64) int16_t v[4][32];
  constexpr Q4kIdx() : v{} {
    constexpr int pair[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    for (int s = 0; s < 4; ++s)
      for (int i = 0; i < 32; ++i) v[s][i] = static_cast<int16_t>(pair[s][i / 16]);
  }
};
constexpr Q4kIdx kQ4kIdx;

// One Q8_K block laid out for the Q4_K step: run pairs matching the nibbles of
// a 64-byte load of qs, and the 16 bsums summed in pairs (one per sub-block).
struct Q4kAct {
  __m512i q[4];
  __m128i bsum_pairs;
};

CAIRN_VNNI inline void load_q4k_act(const BlockQ8_K& y, Q4kAct* a) {
  const int8_t* q = y.qs;
  a->q[0] = join(q, q + 64);
  a->q[1] = join(q + 32, q + 96);
  a->q[2] = join(q + 128, q + 192);
  a->q[3] = join(q + 160, q + 224);
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  a->bsum_pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

struct Q4kIdxRegs {
  __m512i idx[4];
};

// The integer part of one block: 8 lanes of scaled code*q8 sums (`lanes`) and
// 4 lanes of min*bsum sums (`mins`), each lane as ggml's AVX2 code has it.
CAIRN_VNNI inline void q4k_block(const BlockQ4_K& x, const Q4kAct& a, const Q4kIdxRegs& c,
                                 __m256i* lanes, __m128i* mins) {
  // Unpack the twelve 6-bit scale/min bytes into sc0..7 | m0..7.
  uint32_t u[4];
  q4k_scales_mins(x.scales, u);
  const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]),
                                                        static_cast<int>(u[1]), static_cast<int>(u[0])));
  const __m512i sm512 = _mm512_inserti64x4(_mm512_setzero_si512(), sm, 0);
  *mins = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), a.bsum_pairs);

  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i w0 = _mm512_loadu_si512(x.qs);
  const __m512i w1 = _mm512_loadu_si512(x.qs + 64);
  // Codes 0..15 are the unsigned operand; pairs of products stay far from int16 limits.
  __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                    _mm512_maddubs_epi16(_mm512_and_si512(w0, low4), a.q[0]),
                                    _mm512_permutexvar_epi16(c.idx[0], sm512));
  acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w0, 4), low4), a.q[1]),
                            _mm512_permutexvar_epi16(c.idx[1], sm512));
  acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_and_si512(w1, low4), a.q[2]),
                            _mm512_permutexvar_epi16(c.idx[2], sm512));
  acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w1, 4), low4), a.q[3]),
                            _mm512_permutexvar_epi16(c.idx[3], sm512));
  *lanes = fold(acc);
}

// The scalar reference's float step for one block (core/quant_k.cpp, kKQuantOrder).
CAIRN_VNNI inline float q4k_accumulate(float sum, const BlockQ4_K& x, const BlockQ8_K& y, __m256i lanes,
                                       __m128i mins) {
  sum = fma_ss(y.d * f16(x.d), static_cast<float>(hsum8(lanes)), sum);
  return fma_ss(-y.d * f16(x.dmin), static_cast<float>(hsum4(mins)), sum);
}

CAIRN_VNNI inline Q4kIdxRegs q4k_idx() {
  Q4kIdxRegs c;
  for (int s = 0; s < 4; ++s) c.idx[s] = load_idx(kQ4kIdx.v[s]);
  return c;
}

// ---- Q6_K -------------------------------------------------------------------

// The 16 scales sit in int16 lanes 0..15; 64 elements (32 int16 lanes) span
// four 16-element sub-blocks: step s (0..3) covers sub-blocks 4s..4s+3.
struct Q6kIdx {
  alignas(64) int16_t v[4][32];
  constexpr Q6kIdx() : v{} {
    for (int s = 0; s < 4; ++s)
      for (int i = 0; i < 32; ++i) v[s][i] = static_cast<int16_t>(4 * s + i / 8);
  }
};
constexpr Q6kIdx kQ6kIdx;

struct Q6kConsts {
  __m512i idx[4];
  __m512i shift[2];  // per int16 lane: qh bit pair of runs (0, 1) and (2, 3)
};

CAIRN_VNNI inline Q6kConsts q6k_consts() {
  Q6kConsts c;
  for (int s = 0; s < 4; ++s) c.idx[s] = load_idx(kQ6kIdx.v[s]);
  const __mmask32 upper = 0xFFFF0000u;
  c.shift[0] = _mm512_mask_blend_epi16(upper, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
  c.shift[1] = _mm512_mask_blend_epi16(upper, _mm512_set1_epi16(4), _mm512_set1_epi16(6));
  return c;
}

// One Q8_K block for the Q6_K step: 64-element chunks and 32 * (pair sums),
// which turn code * q8 into (code - 32) * q8 per int16 lane.
struct Q6kAct {
  __m512i q[4];
  __m512i q32[4];
};

CAIRN_VNNI inline void load_q6k_act(const BlockQ8_K& y, Q6kAct* a) {
  const __m512i k32 = _mm512_set1_epi8(32);
  for (int s = 0; s < 4; ++s) {
    a->q[s] = _mm512_loadu_si512(y.qs + 64 * s);
    a->q32[s] = _mm512_maddubs_epi16(k32, a->q[s]);
  }
}

CAIRN_VNNI inline __m256i q6k_block(const BlockQ6_K& x, const Q6kAct& a, const Q6kConsts& c) {
  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i sc = _mm512_inserti64x4(
      _mm512_setzero_si512(), _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales))), 0);
  __m512i acc = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(x.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h)));
    // Elements 0..63 of this half: low nibbles of ql, qh bits 0-1 (run 0) and 2-3 (run 1);
    // elements 64..127: high nibbles, qh bits 4-5 and 6-7. Codes 0..63, unsigned.
    const __m512i c_lo = _mm512_or_si512(
        _mm512_and_si512(ql, low4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, c.shift[0]), three), 4));
    const __m512i c_hi =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                        _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, c.shift[1]), three), 4));
    const __m512i p_lo = _mm512_sub_epi16(_mm512_maddubs_epi16(c_lo, a.q[2 * h]), a.q32[2 * h]);
    const __m512i p_hi = _mm512_sub_epi16(_mm512_maddubs_epi16(c_hi, a.q[2 * h + 1]), a.q32[2 * h + 1]);
    acc = _mm512_dpwssd_epi32(acc, p_lo, _mm512_permutexvar_epi16(c.idx[2 * h], sc));
    acc = _mm512_dpwssd_epi32(acc, p_hi, _mm512_permutexvar_epi16(c.idx[2 * h + 1], sc));
  }
  return fold(acc);
}

// The scalar reference's float step for one block (core/quant_k.cpp, kKQuantOrder).
CAIRN_VNNI inline float q6k_accumulate(float sum, const BlockQ6_K& x, const BlockQ8_K& y, __m256i lanes) {
  return fma_ss(y.d * f16(x.d), static_cast<float>(hsum8(lanes)), sum);
}

template <typename Block>
inline const Block* row_at(const void* w, size_t stride, int64_t r) {
  return reinterpret_cast<const Block*>(static_cast<const char*>(w) + static_cast<size_t>(r) * stride);
}

}  // namespace

CAIRN_VNNI float q4_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  const Q4kIdxRegs c = q4k_idx();
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    Q4kAct a;
    load_q4k_act(y[i], &a);
    __m256i lanes;
    __m128i mins;
    q4k_block(x[i], a, c, &lanes, &mins);
    sum = q4k_accumulate(sum, x[i], y[i], lanes, mins);
  }
  return sum;
}

// One row after another: interleaving four rows per activation block is no
// faster in cache and far slower from memory (four strided streams defeat the
// prefetchers).
CAIRN_VNNI void q4_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                              float* out) {
  for (int64_t r = 0; r < n_rows; ++r) out[r] = avx512vnni::q4_k_dot_q8_k(n, row_at<BlockQ4_K>(w, w_stride, r), act);
}

CAIRN_VNNI float q6_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  const Q6kConsts c = q6k_consts();
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    Q6kAct a;
    load_q6k_act(y[i], &a);
    sum = q6k_accumulate(sum, x[i], y[i], q6k_block(x[i], a, c));
  }
  return sum;
}

// Sequential rows, as for Q4_K.
CAIRN_VNNI void q6_k_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                              float* out) {
  for (int64_t r = 0; r < n_rows; ++r) out[r] = avx512vnni::q6_k_dot_q8_k(n, row_at<BlockQ6_K>(w, w_stride, r), act);
}

}  // namespace cairn::quant::avx512vnni
