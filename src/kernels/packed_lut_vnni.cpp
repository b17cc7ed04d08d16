// kernels/packed_lut_vnni.cpp — AVX-512 VNNI kernels of IQ4_NLx16 / MXFP4x16
// (packed_lut.h).
//
// Why these kernels give the scalar functions' bits: per block and lane the
// float work is the scalar's — the scale product x.d * y.d, the lane's exact
// integer sum converted, one fma into that lane's chain — and the lanes are
// added in Lanes8::sum's tree at the end. Only the integer lane sums are
// formed differently (vpdpbusd over the table values + 128, started from the
// record's exact -128 * activation sum), and integer sums are exact.
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/simd.h"
#include <vector>

#include "core/quant_blocks.h"
#include "kernels/packed_k.h"
#include "kernels/packed_layout.h"
#include "kernels/packed_lut.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

namespace cairn::kernels {

namespace {

// One token's row into its records (quantized as packed_q_vnni.cpp's
// quantize_act_vnni: scale 127/amax, ties to even; then the lane biases).
CAIRN_VNNI void quantize_act(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b);
    const __m512 v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
    const uint16_t dh = f32_to_f16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
    uint8_t* rec = dst + kLutActRec * (size_t)b;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rec), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rec + 16), _mm512_cvtsepi32_epi8(i1));
    const float d = f16_to_f32(dh);
    std::memcpy(rec + kLutActD, &d, 4);
    int32_t sum = 0;
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int i = 0; i < 4; ++i) s += (int8_t)rec[4 * l + i];
      sum += s;
      const int32_t bias = -128 * s;
      std::memcpy(rec + kLutActBias + 4 * l, &bias, 4);
    }
    // Q8_1's s: the codes' sum times the unrounded scale, stored as f16.
    const float s = f16_to_f32(f32_to_f16((float)sum * (amax / 127.0f)));
    std::memcpy(rec + kLutActS, &s, 4);
  }
}

// acc += dpbusd(w, the 4 activation bytes at p broadcast to every lane), the
// broadcast folded into the memory operand (as packed_q_vnni.cpp does).
CAIRN_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// NT (1 or 2) tokens against blocks [0, n) of one group at gw: per block the
// 4 chunks become 8 vectors of table values (+128) once, then per token and
// lane one vpdpbusd and one fma. 2 tokens x 8 lanes of accumulators, 8 of
// weights and the constants fill the 32 registers; a third token spilled.
// kHigh (Q5_0, Q5_1): the shuffled low bits get 16 where the block's byte
// mask of that chunk half says so. kMin (Q4_1, Q5_1): each token's second
// chain, min * the activation block's s, added after the lanes (the scalar's
// offsets).
template <int NT, bool kHigh, bool kMin>
[[gnu::noinline]] CAIRN_VNNI void tile(const uint8_t* gw, int64_t n, const uint8_t* table,
                                       const uint8_t* act, size_t stride, float* out,
                                       int64_t out_stride, __mmask16 mask, size_t ahead) {
  const __m512i tbl =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NT][8], off[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    off[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) acc[t][l] = _mm512_setzero_ps();
  }
  constexpr size_t kBlock = lut_block_bytes(kHigh, kMin);
  constexpr size_t kCodes = lut_codes_at(kMin), kMasks = kCodes + 4 * 64;
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* blk = gw + (size_t)b * kBlock;
    if (ahead != 0) {
      const uintptr_t next = reinterpret_cast<uintptr_t>(blk) + ahead;
      for (size_t line = 0; line < kBlock; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
    }
    const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(blk));
    // w[l]: lane l's 4 values of every row (chunk k's low nibbles are lane k,
    // its high nibbles lane 4 + k).
    __m512i w[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i q = _mm512_loadu_si512(blk + kCodes + 64 * k);
      w[k] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m4));
      w[k + 4] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
      if constexpr (kHigh) {
        const __m512i sixteen = _mm512_set1_epi8(16);
        uint64_t lo, hi;
        std::memcpy(&lo, blk + kMasks + 8 * k, 8);
        std::memcpy(&hi, blk + kMasks + 8 * (k + 4), 8);
        w[k] = _mm512_mask_add_epi8(w[k], (__mmask64)lo, w[k], sixteen);
        w[k + 4] = _mm512_mask_add_epi8(w[k + 4], (__mmask64)hi, w[k + 4], sixteen);
      }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; ++t) {
      const uint8_t* rec = act + t * stride + kLutActRec * (size_t)b;
      float d;
      std::memcpy(&d, rec + kLutActD, 4);
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(d));
      if constexpr (kMin) {
        float s;
        std::memcpy(&s, rec + kLutActS, 4);
        off[t] = _mm512_fmadd_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(blk + 64)),
                                 _mm512_set1_ps(s), off[t]);
      }
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        int32_t bias;
        std::memcpy(&bias, rec + kLutActBias + 4 * l, 4);
        // Lane l's activation codes are bytes 4l..4l+3 of the record.
        const __m512i s = dpbusd_bcast(_mm512_set1_epi32(bias), w[l], rec + 4 * l);
        acc[t][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[t][l]);
      }
    }
  }
#pragma GCC unroll 2
  for (int t = 0; t < NT; ++t) {
    // Lanes8::sum's tree.
    __m512 sum =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][4]),
                                    _mm512_add_ps(acc[t][2], acc[t][6])),
                      _mm512_add_ps(_mm512_add_ps(acc[t][1], acc[t][5]),
                                    _mm512_add_ps(acc[t][3], acc[t][7])));
    if constexpr (kMin) sum = _mm512_add_ps(sum, off[t]);
    _mm512_mask_storeu_ps(out + t * out_stride, mask, sum);
  }
}

// ---- IQ4_XSx16 ----------------------------------------------------------------

// One token's Q8_K records (packed_k's quantizer: quant::q8_k_from_float's
// bits) rearranged as packed_lut.h's IQ4_XS records.
void xs_quantize_act(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 256;
  thread_local std::vector<uint8_t> k_rec;
  k_rec.resize(std::max(k_rec.size(), kKRec * (size_t)nb));
  vnni_quantize_k_act(false, x, cols, k_rec.data());
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = k_rec.data() + kKRec * (size_t)b;
    uint8_t* rec = dst + kXsActRec * (size_t)b;
    std::memset(rec, 0, kXsActHead);
    std::memcpy(rec, src + kRecD, 4);
    const auto* qs = reinterpret_cast<const int8_t*>(src + kRecQs);
    for (int ib = 0; ib < 8; ++ib) {
      for (int l = 0; l < 8; ++l) {
        const int e = 32 * ib + 4 * l;
        const int16_t pairs[4] = {qs[e], qs[e + 2], qs[e + 1], qs[e + 3]};
        std::memcpy(rec + kXsActHead + 64 * ib + 8 * l, pairs, 8);
      }
    }
  }
}

// kIq4nlValues as int16, twice: vpermw reads 5 bits of each index, so the
// bit above a nibble needs no mask.
struct Words32 {
  int16_t v[32];
  constexpr Words32() : v{} {
    for (int i = 0; i < 32; ++i) v[i] = quant::kIq4nlValues[i % 16];
  }
};
alignas(64) constexpr Words32 kXsWords;

// acc += vpdpwssd(w, the two int16 at p broadcast to every lane).
CAIRN_VNNI inline __m512i dpwssd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// NT (1..3) tokens against super-blocks [0, n) of one IQ4_XSx16 group: per
// sub-block and chunk, four vpermw give the int16 table values of lanes k
// (elements 0, 2 and 1, 3) and 4 + k, times the rows' scales (vpmullw, exact:
// |ls * value| <= 32 * 127); per token each lane's integer takes two vpdpwssd.
// Lane integers: 3 x 8 registers; the float chains are updated once per
// super-block, from memory.
template <int NT>
[[gnu::noinline]] CAIRN_VNNI void xs_tile(const uint8_t* gw, int64_t n, const uint8_t* act,
                                          size_t stride, float* out, int64_t out_stride,
                                          __mmask16 mask, size_t ahead) {
  const __m512i tbl = _mm512_load_si512(kXsWords.v);
  __m512 facc[NT][8];
  for (int t = 0; t < NT; ++t)
    for (int l = 0; l < 8; ++l) facc[t][l] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* blk = gw + (size_t)b * kXsBlock;
    if (ahead != 0) {
      const uintptr_t next = reinterpret_cast<uintptr_t>(blk) + ahead;
      for (size_t line = 0; line < kXsBlock; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
    }
    __m512i iacc[NT][8];
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) iacc[t][l] = _mm512_setzero_si512();
    for (int ib = 0; ib < 8; ++ib) {
      const __m512i ls = _mm512_cvtepi8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kXsOffLs + 32 * ib)));
      const uint8_t* codes = blk + kXsOffCodes + 256 * ib;
      const uint8_t* a = act + kXsActRec * (size_t)b + kXsActHead + 64 * ib;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i q = _mm512_loadu_si512(codes + 64 * k);
        const __m512i v0 = _mm512_mullo_epi16(_mm512_permutexvar_epi16(q, tbl), ls);
        const __m512i v1 =
            _mm512_mullo_epi16(_mm512_permutexvar_epi16(_mm512_srli_epi16(q, 8), tbl), ls);
        const __m512i v2 =
            _mm512_mullo_epi16(_mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), tbl), ls);
        const __m512i v3 =
            _mm512_mullo_epi16(_mm512_permutexvar_epi16(_mm512_srli_epi16(q, 12), tbl), ls);
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) {
          const uint8_t* at = a + t * stride;
          iacc[t][k] = dpwssd_bcast(iacc[t][k], v0, at + 8 * k);
          iacc[t][k] = dpwssd_bcast(iacc[t][k], v1, at + 8 * k + 4);
          iacc[t][k + 4] = dpwssd_bcast(iacc[t][k + 4], v2, at + 8 * (k + 4));
          iacc[t][k + 4] = dpwssd_bcast(iacc[t][k + 4], v3, at + 8 * (k + 4) + 4);
        }
      }
    }
    const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(blk));
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) {
      float d;
      std::memcpy(&d, act + t * stride + kXsActRec * (size_t)b, 4);
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(d));
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l)
        facc[t][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t][l]), dd, facc[t][l]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(facc[t][0], facc[t][4]),
                                    _mm512_add_ps(facc[t][2], facc[t][6])),
                      _mm512_add_ps(_mm512_add_ps(facc[t][1], facc[t][5]),
                                    _mm512_add_ps(facc[t][3], facc[t][7])));
    _mm512_mask_storeu_ps(out + t * out_stride, mask, sum);
  }
}

}  // namespace

void xs_vnni_quantize_act(const float* x, int64_t cols, uint8_t* dst) {
  xs_quantize_act(x, cols, dst);
}

void lut_vnni_quantize_act(const float* x, int64_t cols, uint8_t* dst) {
  quantize_act(x, cols, dst);
}

void lut_vnni_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                    int64_t n, float* out, int64_t out_stride, size_t ahead) {
  const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 mask =
      n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
  const uint8_t* gw = pm.slice(g, 0);
  const uint8_t* table = lut_biased_table(pm.layout);
  float* o = out + g * kGroup;
  if (pm.layout == PackedMatrix::Layout::IQ4_XSx16) {
    for (int64_t t = 0; t < n; t += 3) {
      const size_t a = t == 0 ? ahead : 0;
      const uint8_t* at = act + (size_t)t * stride;
      float* ot = o + t * out_stride;
      switch (std::min<int64_t>(3, n - t)) {
        case 1:
          xs_tile<1>(gw, pm.n_blocks, at, stride, ot, out_stride, mask, a);
          break;
        case 2:
          xs_tile<2>(gw, pm.n_blocks, at, stride, ot, out_stride, mask, a);
          break;
        default:
          xs_tile<3>(gw, pm.n_blocks, at, stride, ot, out_stride, mask, a);
      }
    }
    return;
  }
  using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, const uint8_t*, size_t, float*,
                         int64_t, __mmask16, size_t);
  using L = PackedMatrix::Layout;
  const bool high = pm.layout == L::Q5_0x16 || pm.layout == L::Q5_1x16;
  const bool min = pm.layout == L::Q4_1x16 || pm.layout == L::Q5_1x16;
  // [tokens - 1][high][min]
  constexpr TileFn kTiles[2][2][2] = {
      {{tile<1, false, false>, tile<1, false, true>}, {tile<1, true, false>, tile<1, true, true>}},
      {{tile<2, false, false>, tile<2, false, true>}, {tile<2, true, false>, tile<2, true, true>}}};
  const TileFn one = kTiles[0][high][min], two = kTiles[1][high][min];
  for (int64_t t = 0; t < n; t += 2) {
    // Later pairs find the group's weights in cache.
    const size_t a = t == 0 ? ahead : 0;
    (n - t >= 2 ? two : one)(gw, pm.n_blocks, table, act + (size_t)t * stride, stride,
                             o + t * out_stride, out_stride, mask, a);
  }
}

}  // namespace cairn::kernels
