// kernels/packed_q_avx2.cpp — AVX2 kernels of Q4_0x16 / Q8_0x16 (packed_q.h).
// Packed Q4_0 / Q8_0 weights (layouts: packed.h) on hosts with AVX2 but not
// AVX-512 VNNI (AMD Zen 2/3, Intel before Ice Lake, or CAIRN_ISA=avx2|avx512).
// The same packed copies and activation records as the VNNI kernels
// (packed_q_vnni.cpp), 8 rows (half a group) per 256-bit register. Only the integer
// block sums are formed differently, and integer sums are exact, so the bits
// are again the scalar functions':
// - Q4_0: vpmaddubsw multiplies the codes (0..15) by the activation codes
//   (|a| <= 127) and adds pairs, at most 2 * 15 * 127 = 3810 per 16-bit lane,
//   so a block's eight products add in 16 bits without overflow (8 * 3810 =
//   30480 < 32767); one vpmaddwd by ones widens them and the record's bias
//   corrects the offset of 8.
// - Q8_0: the stored codes + 128 would overflow vpmaddubsw's 16-bit pairs, so
//   the signed codes come back (xor 128) and are multiplied as |w| by a with
//   w's sign (at most 2 * 128 * 127 = 32512 per pair), each chunk widened at
//   once; nothing to correct (the record's bias is for the VNNI kernels).
// The float work per block is the VNNI kernels': dw * da, one fma of the
// converted sum into the row's chain.
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/simd.h"
#include "kernels/packed_layout.h"
#include "kernels/packed_q.h"

#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

namespace cairn::kernels {

namespace {

constexpr int kHalf = 8;  // rows per register

CAIRN_AVX2 inline __m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Rows 8h..8h+7 of one block against the record qs: their exact block sums,
// offset-corrected.
template <bool kQ4>
CAIRN_AVX2 inline __m256i block_sums(const uint8_t* chunks, int h, const uint8_t* qs) {
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* c = chunks + 32 * h;
  if constexpr (kQ4) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i p[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * k));
      p[k] = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), bcast4(qs + 4 * k));
      p[k + 4] = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                      bcast4(qs + 16 + 4 * k));
    }
    const __m256i s16 = _mm256_add_epi16(
        _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
        _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
    return _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(act_bias(qs)));
  } else {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i w =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * k)), flip);
      const __m256i p =
          _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast4(qs + 4 * k), w));
      s[k & 1] = _mm256_add_epi32(s[k & 1], _mm256_madd_epi16(p, ones));
    }
    return _mm256_add_epi32(s[0], s[1]);
  }
}

// acc + (float)sums * (dw * d) for rows 8h..8h+7 (their scales at scales + 16h).
CAIRN_AVX2 inline __m256 accumulate(__m256 acc, __m256i sums, const uint8_t* scales, int h,
                                    float d) {
  const __m256 dw =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * h)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, _mm256_set1_ps(d)), acc);
}

// At the first block of each pair: request the pair `ahead` bytes further on
// (0: nothing; a prefetch past the end never faults).
template <size_t kBlock>
inline void request_ahead(const uint8_t* gw, int64_t b, size_t ahead) {
  if (ahead == 0 || (b & 1) != 0) return;
  const uint8_t* next = gw + (size_t)b * kBlock + ahead;
  for (size_t line = 0; line < 2 * kBlock; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
}

// One token against blocks [0, n) of one group's slice at gw, both halves,
// continuing acc[0..2): one pass over the weight stream (decode).
template <bool kQ4>
CAIRN_AVX2 void one_blocks(const uint8_t* gw, int64_t n, const uint8_t* act, __m256* acc,
                           size_t ahead) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  __m256 a0 = acc[0], a1 = acc[1];
  for (int64_t b = 0; b < n; ++b) {
    request_ahead<kBlock>(gw, b, ahead);
    const BlockAt at = block_at(gw, b, n, kBlock);
    const uint8_t* qs = act + kActRec * (size_t)b;
    const float d = act_d(qs);
    a0 = accumulate(a0, block_sums<kQ4>(at.chunks, 0, qs), at.scales, 0, d);
    a1 = accumulate(a1, block_sums<kQ4>(at.chunks, 1, qs), at.scales, 1, d);
  }
  acc[0] = a0;
  acc[1] = a1;
}

// NT tokens (records `stride` apart) against half h of blocks [0, n) of one
// group's slice, adding into acc[0..NT). Each block's codes are split once
// into registers and serve the tokens one after another; the accumulators
// stay in memory. Holding every token's partial sums in registers instead
// (codes split chunk by chunk) spilled them and was slower; tiles of 8 tokens
// beat 4, 6, 12 and 16.
template <bool kQ4, int NT>
[[gnu::noinline]] CAIRN_AVX2 void half_tile(const uint8_t* gw, int64_t n, int h, const uint8_t* act,
                                            size_t stride, __m256* acc, size_t ahead) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  for (int64_t b = 0; b < n; ++b) {
    request_ahead<kBlock>(gw, b, ahead);
    const BlockAt at = block_at(gw, b, n, kBlock);
    const uint8_t* qs = act + kActRec * (size_t)b;  // token t's record: qs + t * stride
    const uint8_t* c = at.chunks + 32 * h;
    __m256i sums[NT];
    if constexpr (kQ4) {
      __m256i w[8];  // elements 4k.. (k < 4: low nibbles; else high, 16 + 4(k - 4)..)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * k));
        w[k] = _mm256_and_si256(q, m4);
        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      }
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const uint8_t* a = qs + t * stride;
        __m256i p[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) p[k] = _mm256_maddubs_epi16(w[k], bcast4(a + 4 * k));
        const __m256i s16 = _mm256_add_epi16(
            _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
            _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
        sums[t] = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(act_bias(a)));
      }
    } else {
      // Two rounds of four chunks: their signed codes and magnitudes fill 8 registers.
#pragma GCC unroll 2
      for (int k0 = 0; k0 < 8; k0 += 4) {
        __m256i w[4], aw[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          w[k] = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * (k0 + k))), flip);
          aw[k] = _mm256_abs_epi8(w[k]);
        }
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          const uint8_t* a = qs + t * stride + 4 * k0;
          __m256i p[4];
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k)
            p[k] = _mm256_madd_epi16(
                _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(bcast4(a + 4 * k), w[k])), ones);
          const __m256i s =
              _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
          sums[t] = k0 == 0 ? s : _mm256_add_epi32(sums[t], s);
        }
      }
    }
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at.scales + 16 * h)));
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(act_d(qs + t * stride)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t]), dd, acc[t]);
    }
  }
}

constexpr int kTile = 8;  // tokens per half_tile (see there)
using HalfTileFn = void (*)(const uint8_t*, int64_t, int, const uint8_t*, size_t, __m256*, size_t);
constexpr HalfTileFn kHalfTiles[2][kTile] = {
    {half_tile<false, 1>, half_tile<false, 2>, half_tile<false, 3>, half_tile<false, 4>,
     half_tile<false, 5>, half_tile<false, 6>, half_tile<false, 7>, half_tile<false, 8>},
    {half_tile<true, 1>, half_tile<true, 2>, half_tile<true, 3>, half_tile<true, 4>,
     half_tile<true, 5>, half_tile<true, 6>, half_tile<true, 7>, half_tile<true, 8>}};
static_assert(kTile == 8, "kHalfTiles names every tile size");

// The first n_rows (at most 8) lanes of v at out.
CAIRN_AVX2 inline void store_rows(float* out, __m256 v, int64_t n_rows) {
  if (n_rows >= kHalf) {
    _mm256_storeu_ps(out, v);
  } else if (n_rows > 0) {
    alignas(32) float lanes[kHalf];
    _mm256_store_ps(lanes, v);
    std::memcpy(out, lanes, (size_t)n_rows * sizeof(float));
  }
}

bool is_q4(const PackedMatrix& pm) { return pm.layout == PackedMatrix::Layout::Q4_0x16; }

}  // namespace

CAIRN_AVX2 void avx2_quantize_act(int32_t offset, const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // packs_epi32 then packs_epi16 leave 4-byte groups in the order 0 2 4 6 1 3 5 7.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < nb; ++b) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
    const __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const uint16_t dh = f32_to_f16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));  // ties to even
    uint8_t* rec = dst + kActRec * (size_t)b;
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec), _mm256_permutevar8x32_epi32(bytes, order));
    // The sum of the codes before saturation, as the VNNI quantizer takes it.
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    const float d = f16_to_f32(dh);
    const int32_t bias = -offset * _mm_cvtsi128_si32(s4);
    std::memcpy(rec + 32, &d, 4);
    std::memcpy(rec + 36, &bias, 4);
  }
}

CAIRN_AVX2 void avx2_one_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                             float* out, size_t ahead) {
  __m256 acc[PackedMatrix::kRunGroups][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  const auto blocks = is_q4(pm) ? one_blocks<true> : one_blocks<false>;
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c) {
    const uint8_t* a = act + kActRec * (size_t)(c * pm.slice_blocks);
    for (int64_t g = g0; g < g1; ++g)
      blocks(pm.slice(g, c), pm.slice_len(c), a, acc[g - g0], ahead);
  }
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t rows = pm.rows - g * kGroup;
    store_rows(out + g * kGroup, acc[g - g0][0], rows);
    store_rows(out + g * kGroup + kHalf, acc[g - g0][1], rows - kHalf);
  }
}

CAIRN_AVX2 void avx2_group_tokens(const PackedMatrix& pm, int64_t g, const uint8_t* act,
                                  size_t stride, int64_t n_tokens, float* out, int64_t out_stride,
                                  size_t ahead) {
  const auto& tiles = kHalfTiles[is_q4(pm)];
  const int64_t rows = pm.rows - g * kGroup;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const int64_t nt = std::min<int64_t>(kTile, n_tokens - t0);
    for (int h = 0; h < 2 && rows > kHalf * h; ++h) {
      __m256 acc[kTile];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c)
        tiles[(size_t)nt - 1](pm.slice(g, c), pm.slice_len(c), h,
                              act + (size_t)t0 * stride + kActRec * (size_t)(c * pm.slice_blocks),
                              stride, acc, t0 == 0 && h == 0 ? ahead : 0);
      for (int64_t t = 0; t < nt; ++t)
        store_rows(out + (t0 + t) * out_stride + kHalf * h, acc[t], rows - kHalf * h);
    }
  }
}

// One token walks whole runs slice by slice (reading the weights in order, as
// the VNNI kernels do), more go group by group in tiles (avx2_group_tokens),
// asking for weights ahead where few tokens leave the memory idle between
// lines.
void avx2_run_groups(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                     size_t stride, int64_t t0, int64_t t1, float* out) {
  const uint8_t* a = act + (size_t)t0 * stride;
  float* o = out + t0 * pm.rows;
  if (t1 - t0 == 1) {
    for (int64_t g = g0; g < g1;) {
      const int64_t run_end =
          std::min(g1, g - g % PackedMatrix::kRunGroups + PackedMatrix::kRunGroups);
      avx2_one_run(pm, g, run_end, a, o, stream_ahead);
      g = run_end;
    }
    return;
  }
  const size_t ahead = t1 - t0 <= kFewTokens ? dense_stream_ahead : 0;
  for (int64_t g = g0; g < g1; ++g)
    avx2_group_tokens(pm, g, a, stride, t1 - t0, o + g * kGroup, pm.rows, ahead);
}

}  // namespace cairn::kernels
