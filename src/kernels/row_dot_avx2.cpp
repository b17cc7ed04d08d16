// kernels/row_dot_avx2.cpp — AVX2/FMA/F16C row dot products (row_dot.h).
// AVX2/FMA/F16C variants of the hottest dot products, compiled for those
// targets function by function (never -march=native) and installed in the type
// table only when the CPU reports all three. The quantized ones do the same
// exact integer sums per block as the scalar reference and the same float
// math on them, so they return bit-identical results; the float types differ
// only in summation order.
#include <cpuid.h>

#include <cstring>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/avx2_int8.h"
#include "kernels/row_dot.h"

namespace cairn::quant::avx2 {
namespace {

CAIRN_AVX2 inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

CAIRN_AVX2 inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace

CAIRN_AVX2 float f32_dot(int64_t n, const void* w, const void* act) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(act);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Hardware rounding is round-to-nearest-even like f32_to_f16, subnormals and
// overflow included; only NaN payloads differ, so a group holding a NaN takes
// the scalar path. Used for every K/V row a forward writes.
CAIRN_AVX2 void f16_from_float(const float* src, void* dst, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) {
      for (int k = 0; k < 8; ++k) d[i + k] = f32_to_f16(src[i + k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
}

CAIRN_AVX2 float f16_dot(int64_t n, const void* w, const void* act) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(act);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load_f16(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(load_f16(a + i), _mm256_loadu_ps(b + i), acc[0]);
  float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += f16_lut(a[i]) * b[i];
  return sum;
}

CAIRN_AVX2 float q8_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const float sumi = static_cast<float>(hsum_epi32(dot_i8(qx, qy)));
    sum = fma_ss(sumi, f16_lut(x[i].d) * f16_lut(y[i].d), sum);
  }
  return sum;
}

// Q4_0 weights are repacked at load by the reference (8 rows interleaved,
// ggml's AVX2 gemv/gemm for q4_0_8x8): each block's full integer sum, then
// fma with the scale product into one float per row.
CAIRN_AVX2 float q4_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  const __m128i low4 = _mm_set1_epi8(0xF);
  const __m256i eight = _mm256_set1_epi8(8);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs));
    const __m128i lo = _mm_and_si128(bytes, low4);                     // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);  // elements 16..31
    const __m256i qx = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), eight);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const float sumi = static_cast<float>(hsum_epi32(dot_i8(qx, qy)));
    sum = _mm_cvtss_f32(_mm_fmadd_ss(
        _mm_set_ss(sumi), _mm_set_ss(f16_lut(x[i].d) * f16_lut(y[i].d)), _mm_set_ss(sum)));
  }
  return sum;
}

CAIRN_AVX2 float q4_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  const __m256i low4 = _mm256_set1_epi8(0xF);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // The twelve 6-bit scale/min bytes as int16 sc0..7 | m0..7 (q4k_scale_min,
    // four bytes at a time).
    uint32_t u[4];
    q4k_scales_mins(x[i].scales, u);
    const __m256i sm =
        _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]),
                                           static_cast<int>(u[1]), static_cast<int>(u[0])));
    alignas(16) int16_t sc[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm256_castsi256_si128(sm));
    // Mins: bsums summed in pairs (one per 32-element sub-block) times m.
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].bsums));
    const __m128i pairs =
        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m128i mins = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), pairs);
    mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, _MM_SHUFFLE(1, 0, 3, 2)));
    mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, _MM_SHUFFLE(2, 3, 0, 1)));
    const int32_t sum_mins = _mm_cvtsi128_si32(mins);
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < kQK_K / 64; ++j) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * j));
      const __m256i lo = _mm256_and_si256(bytes, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      const __m256i q8lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 64 * j));
      const __m256i q8hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 64 * j + 32));
      // Codes are 0..15, so they are the unsigned operand as they are.
      const __m256i plo =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, q8lo), _mm256_set1_epi16(sc[2 * j]));
      const __m256i phi =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, q8hi), _mm256_set1_epi16(sc[2 * j + 1]));
      acc = _mm256_add_epi32(acc, _mm256_add_epi32(plo, phi));
    }
    const int32_t sum_q = hsum_epi32(acc);
    // The reference's float order (quant_k.cpp, kKQuantOrder).
    sum = fma_ss(y[i].d * f16_lut(x[i].d), static_cast<float>(sum_q), sum);
    sum = fma_ss(-y[i].d * f16_lut(x[i].dmin), static_cast<float>(sum_mins), sum);
  }
  return sum;
}

CAIRN_AVX2 float q6_k_dot_q8_k(int64_t n, const void* w, const void* act) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(act);
  const __m256i low4 = _mm256_set1_epi8(0xF);
  const __m256i two = _mm256_set1_epi8(3);
  const __m256i k32 = _mm256_set1_epi8(32);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].ql + 64 * h));
      const __m256i ql1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh + 32 * h));
      const __m256i codes[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, two), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4)),
      };
      const int8_t* sc = x[i].scales + 8 * h;
      for (int k = 0; k < 4; ++k) {
        const __m256i q8 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 128 * h + 32 * k));
        // (code - 32) * q8 as code * q8 - 32 * q8: codes 0..63 are the unsigned operand.
        const __m256i p =
            _mm256_sub_epi16(_mm256_maddubs_epi16(codes[k], q8), _mm256_maddubs_epi16(k32, q8));
        // int16 lanes 0-7 hold elements 0-15 (one sub-block), 8-15 the next one.
        const __m256i scales =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales));
      }
    }
    const int32_t sum_q = hsum_epi32(acc);
    sum = fma_ss(y[i].d * f16_lut(x[i].d), static_cast<float>(sum_q), sum);
  }
  return sum;
}

bool supported() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  // Not every compiler's __builtin_cpu_supports knows "f16c": ask CPUID (leaf 1, ECX bit 29).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

}  // namespace cairn::quant::avx2
