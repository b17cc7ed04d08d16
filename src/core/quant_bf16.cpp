// BF16 x BF16 dot products on AVX2+FMA and AVX-512 BF16 (see
// core/quant_bf16.h). The product of two bf16 values is exact in float (8-bit
// significands), so the only rounding is the summation's. A row's sum takes
// the same steps whether it is dotted alone or among several rows (the row
// count only decides how many rows share each activation load), so
// vec_dot_rows gives vec_dot's bits.
#include "core/quant_bf16.h"

#include "core/half.h"
#include "core/simd.h"

#define CAIRN_BF16_AVX2 CAIRN_SIMD_FN("avx2,fma")
#define CAIRN_BF16_512 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")

namespace cairn::quant {
namespace {

// Rows dotted per pass over the activations: four weight streams and one
// activation load per step keep the loads (not the arithmetic) the limit
// without running out of registers.
constexpr int kRowsPerPass = 4;

inline const uint16_t* row_at(const void* w, size_t stride, int64_t r) {
  return reinterpret_cast<const uint16_t*>(static_cast<const char*>(w) + (size_t)r * stride);
}

// The same row kernel for kRowsPerPass rows at a time, then for each row left.
using RowsFn = void (*)(int64_t n, const void* w, size_t stride, int64_t first, const void* act,
                        float* out);
void rows_in_passes(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                    float* out, RowsFn pass, RowsFn one) {
  int64_t r = 0;
  for (; r + kRowsPerPass <= n_rows; r += kRowsPerPass) pass(n, w, w_stride, r, act, out + r);
  for (; r < n_rows; ++r) one(n, w, w_stride, r, act, out + r);
}

// ---- AVX2 + FMA ------------------------------------------------------------

CAIRN_BF16_AVX2 inline __m256 widen(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

CAIRN_BF16_AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows first..first+R-1, 16 elements per step in two 8-lane chains per row;
// the last n % 16 elements summed in order after the lanes.
template <int R>
CAIRN_BF16_AVX2 void avx2_rows(int64_t n, const void* w, size_t stride, int64_t first,
                               const void* act, float* out) {
  const uint16_t* a = static_cast<const uint16_t*>(act);
  const uint16_t* rows[R];
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) {
    rows[r] = row_at(w, stride, first + r);
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k));
    const __m256 alo = widen(_mm256_castsi256_si128(av));
    const __m256 ahi = widen(_mm256_extracti128_si256(av, 1));
    for (int r = 0; r < R; ++r) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + k));
      acc[r][0] = _mm256_fmadd_ps(widen(_mm256_castsi256_si128(wv)), alo, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(widen(_mm256_extracti128_si256(wv, 1)), ahi, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = hsum256(_mm256_add_ps(acc[r][0], acc[r][1]));
    for (int64_t i = k; i < n; ++i) sum += bf16_to_f32(rows[r][i]) * bf16_to_f32(a[i]);
    out[r] = sum;
  }
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
  rows_in_passes(n, w, w_stride, n_rows, act, out, avx2_rows<kRowsPerPass>, avx2_rows<1>);
}
}  // namespace avx2

namespace avx512bf16 {
float bf16_dot(int64_t n, const void* w, const void* act) {
  float out;
  avx512_rows<1>(n, w, 0, 0, act, &out);
  return out;
}
void bf16_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                   float* out) {
  rows_in_passes(n, w, w_stride, n_rows, act, out, avx512_rows<kRowsPerPass>, avx512_rows<1>);
}
}  // namespace avx512bf16

}  // namespace cairn::quant
