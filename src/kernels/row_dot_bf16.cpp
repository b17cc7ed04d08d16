// kernels/row_dot_bf16.cpp — BF16 row dot products (kernels/row_dot.h).
// BF16 x BF16 dot products on AVX2+FMA, AVX-512 F/BW and AVX-512 BF16 (see
// kernels/row_dot.h). The product of two bf16 values is exact in float (8-bit
// significands), so the only rounding is the summation's. A row's sum takes
// the same steps whether it is dotted alone or among several rows (the row
// count only decides how many rows share each activation load), so
// vec_dot_rows gives vec_dot's bits.
#include "core/half.h"
#include "core/simd.h"
#include "kernels/row_dot.h"

#define CAIRN_BF16_AVX2 CAIRN_SIMD_FN("avx2,fma")
#define CAIRN_BF16_512F CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx2,fma")
#define CAIRN_BF16_512 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")

namespace cairn::quant {
namespace {

// Every form keeps vdpbf16ps's lanes and order, so all give its bits (the
// reference's own BF16 dot on its AVX-512 BF16 build): 16 lanes, lane j
// adding the products of elements 2j+1 and then 2j of each 32-element step,
// each as one rounding (a bf16 x bf16 product is exact in float, so an fma is
// that add); two chains per row, steps of 64 elements split between them; a
// ragged end in steps of 32 into the first chain, zero-padded; the chains
// added lane by lane, then _mm512_reduce_add_ps's tree. Where the instruction
// is missing, the elements are split into even (shifted up) and odd (masked)
// floats and fed to fmas in that order. Only subnormal inputs or sums differ
// (the instruction flushes them to zero).

// Rows dotted per pass over the activations: the row weight streams share
// each activation load; as many as leave registers for the accumulators
// (four per row on AVX2, two on AVX-512).
constexpr int kRowsPerPassAvx2 = 2;
constexpr int kRowsPerPass512 = 4;

inline const uint16_t* row_at(const void* w, size_t stride, int64_t r) {
  return reinterpret_cast<const uint16_t*>(static_cast<const char*>(w) + (size_t)r * stride);
}

// The same row kernel for kPass rows at a time, then for each row left.
using RowsFn = void (*)(int64_t n, const void* w, size_t stride, int64_t first, const void* act,
                        float* out);
template <int kPass>
void rows_in_passes(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                    float* out, RowsFn pass, RowsFn one) {
  int64_t r = 0;
  for (; r + kPass <= n_rows; r += kPass) pass(n, w, w_stride, r, act, out + r);
  for (; r < n_rows; ++r) one(n, w, w_stride, r, act, out + r);
}

// ---- AVX2 + FMA ------------------------------------------------------------

// acc (8 lanes) += odd products, then += even products of the 16 bf16 pairs
// in w and the activations' even / odd halves as floats.
CAIRN_BF16_AVX2 inline __m256 dp8(__m256 acc, __m256i w, __m256 a_even, __m256 a_odd) {
  const __m256i odd = _mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u));
  acc = _mm256_fmadd_ps(_mm256_castsi256_ps(odd), a_odd, acc);
  return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), a_even, acc);
}

// _mm512_reduce_add_ps of lanes 0-7 in lo and 8-15 in hi.
CAIRN_BF16_AVX2 inline float reduce16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(hi, lo);
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 elements of the activations at ap and of row r at wp[r] + k into
// accumulator q of each row. A function, not a lambda: clang does not give a
// lambda its enclosing function's target.
template <int R>
CAIRN_BF16_AVX2 inline __attribute__((always_inline)) void quarter(__m256 (*acc)[4],
                                                                   const uint16_t* ap,
                                                                   const uint16_t* const* wp,
                                                                   int64_t k, int q) {
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap));
  const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(av, 16));
  const __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(av, _mm256_set1_epi32((int)0xFFFF0000u)));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    acc[r][q] =
        dp8(acc[r][q], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[r] + k)), ae, ao);
}

// Rows first..first+R-1. acc[r][q]: chain q / 2, lanes 8 * (q % 2) onwards,
// each fed one 16-element quarter of a 64-element step.
template <int R>
CAIRN_BF16_AVX2 void avx2_rows(int64_t n, const void* w, size_t stride, int64_t first,
                               const void* act, float* out) {
  const uint16_t* a = static_cast<const uint16_t*>(act);
  const uint16_t* rows[R];
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    rows[r] = row_at(w, stride, first + r);
    acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    quarter<R>(acc, a + k, rows, k, 0);
    quarter<R>(acc, a + k + 16, rows, k + 16, 1);
    quarter<R>(acc, a + k + 32, rows, k + 32, 2);
    quarter<R>(acc, a + k + 48, rows, k + 48, 3);
  }
  if (k + 32 <= n) {
    quarter<R>(acc, a + k, rows, k, 0);
    quarter<R>(acc, a + k + 16, rows, k + 16, 1);
    k += 32;
  }
  if (k < n) {  // the last 1..31 elements, zero-padded as the masked loads are
    alignas(32) uint16_t at[32] = {}, wt[R][32] = {};
    const uint16_t* wp[R];
    for (int64_t i = k; i < n; ++i) at[i - k] = a[i];
    for (int r = 0; r < R; ++r) {
      for (int64_t i = k; i < n; ++i) wt[r][i - k] = rows[r][i];
      wp[r] = wt[r];
    }
    quarter<R>(acc, at, wp, 0, 0);
    quarter<R>(acc, at + 16, wp, 16, 1);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    out[r] = reduce16(_mm256_add_ps(acc[r][0], acc[r][2]), _mm256_add_ps(acc[r][1], acc[r][3]));
}

// ---- AVX-512 F/BW without BF16 ---------------------------------------------

// dp8 on 16 lanes.
CAIRN_BF16_512F inline __m512 dp16(__m512 acc, __m512i w, __m512 a_even, __m512 a_odd) {
  const __m512i odd = _mm512_and_si512(w, _mm512_set1_epi32((int)0xFFFF0000u));
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(odd), a_odd, acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), a_even, acc);
}

// Elements [k, k + 32) under mask m of the activations and of each row into
// chain c (a function for clang, as quarter()).
template <int R>
CAIRN_BF16_512F inline __attribute__((always_inline)) void step512(__m512 (*acc)[2],
                                                                   const uint16_t* a,
                                                                   const uint16_t* const* rows,
                                                                   int64_t k, __mmask32 m, int c) {
  const __m512i av = _mm512_maskz_loadu_epi16(m, a + k);
  const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(av, 16));
  const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(av, _mm512_set1_epi32((int)0xFFFF0000u)));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    acc[r][c] = dp16(acc[r][c], _mm512_maskz_loadu_epi16(m, rows[r] + k), ae, ao);
}

// Rows first..first+R-1, as avx512_rows below with dp16 for the instruction.
template <int R>
CAIRN_BF16_512F void avx512f_rows(int64_t n, const void* w, size_t stride, int64_t first,
                                  const void* act, float* out) {
  const uint16_t* a = static_cast<const uint16_t*>(act);
  const uint16_t* rows[R];
  __m512 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    rows[r] = row_at(w, stride, first + r);
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    step512<R>(acc, a, rows, k, ~__mmask32{0}, 0);
    step512<R>(acc, a, rows, k + 32, ~__mmask32{0}, 1);
  }
  for (; k < n; k += 32) {
    const int64_t left = n - k;
    step512<R>(acc, a, rows, k, left >= 32 ? ~__mmask32{0} : (__mmask32)((1u << left) - 1), 0);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

// ---- AVX-512 BF16 ----------------------------------------------------------

CAIRN_BF16_512 inline __m512bh load_bh(const uint16_t* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}

CAIRN_BF16_512 inline __m512bh load_bh(const uint16_t* p, __mmask32 m) {
  return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

// Rows first..first+R-1, 64 elements per step in two 16-lane chains per row
// (each lane adds two exact products per vdpbf16ps); a ragged end is loaded
// masked (zeros add nothing) into the first chain.
template <int R>
CAIRN_BF16_512 void avx512_rows(int64_t n, const void* w, size_t stride, int64_t first,
                                const void* act, float* out) {
  const uint16_t* a = static_cast<const uint16_t*>(act);
  const uint16_t* rows[R];
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    rows[r] = row_at(w, stride, first + r);
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m512bh a0 = load_bh(a + k), a1 = load_bh(a + k + 32);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], load_bh(rows[r] + k), a0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], load_bh(rows[r] + k + 32), a1);
    }
  }
  for (; k < n; k += 32) {
    const int64_t left = n - k;
    const __mmask32 m = left >= 32 ? ~__mmask32{0} : (__mmask32)((1u << left) - 1);
    const __m512bh av = load_bh(a + k, m);
    for (int r = 0; r < R; ++r)
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], load_bh(rows[r] + k, m), av);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

}  // namespace

namespace avx2 {
float bf16_dot(int64_t n, const void* w, const void* act) {
  float out;
  avx2_rows<1>(n, w, 0, 0, act, &out);
  return out;
}
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out) {
  rows_in_passes<kRowsPerPassAvx2>(n, w, w_stride, n_rows, act, out, avx2_rows<kRowsPerPassAvx2>,
                                   avx2_rows<1>);
}
}  // namespace avx2

namespace avx512 {
float bf16_dot(int64_t n, const void* w, const void* act) {
  float out;
  avx512f_rows<1>(n, w, 0, 0, act, &out);
  return out;
}
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out) {
  rows_in_passes<kRowsPerPass512>(n, w, w_stride, n_rows, act, out, avx512f_rows<kRowsPerPass512>,
                                  avx512f_rows<1>);
}
}  // namespace avx512

namespace avx512bf16 {
float bf16_dot(int64_t n, const void* w, const void* act) {
  float out;
  avx512_rows<1>(n, w, 0, 0, act, &out);
  return out;
}
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out) {
  rows_in_passes<kRowsPerPass512>(n, w, w_stride, n_rows, act, out, avx512_rows<kRowsPerPass512>,
                                  avx512_rows<1>);
}
}  // namespace avx512bf16

}  // namespace cairn::quant
