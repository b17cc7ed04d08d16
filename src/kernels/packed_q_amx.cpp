// kernels/packed_q_amx.cpp — AMX-INT8 tile kernels of Q4_0x16 / Q8_0x16 (packed_q.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/simd.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed_q.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

namespace cairn::kernels {

namespace {

// Where the CPU has AMX-INT8 (and Linux granted its tile state), 16 tokens at
// a time take tile dot products instead of vpdpbusd: per block of a pair of
// groups, one tdpbssd per group gives the 16 x 16 block sums (tokens x rows)
// that the VNNI tile needs 128 vpdpbusd for, and the vector units only do the
// per-block float work (convert, scale product, fma), the same operations in
// the same order as tile2_blocks. So the bits match the VNNI path and the
// scalar functions; the integer sums are exact either way.
//
// Operands: A = 16 tokens' 32 activation codes (signed, the records' first 32
// bytes, one row per token); B = one group's block as 8 rows of 64 bytes, row
// k holding elements 4k..4k+3 of each of the 16 rows, which is the packed
// chunk layout itself. tdpbssd wants both signed: each range's codes are
// copied once as signed bytes (Q8_0's stored codes - 128, Q4_0's nibbles - 8),
// so no offset correction is needed, and the copy serves every tile of the
// token chunk from L1. The tile configuration and the hardware and emulated
// tile operations: amx_tiles.h.

// Groups g and g + 1 against n_tokens tokens (a multiple of kAmxTokens, at
// most kTokenChunk), range by range as tile2_ranges walks them (and
// requesting the next range the same way), 16 tokens per tile.
template <class Tiles, bool kQ4>
CAIRN_VNNI void amx_ranges(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                           int64_t n_tokens, float* out, int64_t out_stride) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  struct alignas(64) SignedRange {
    int8_t codes[kUnpackBlocks][8 * 64];
    uint16_t scales[kUnpackBlocks][kGroup];
  };
  static thread_local SignedRange copy[2];
  alignas(64) static thread_local int32_t sums[2][kAmxTokens * kGroup];
  constexpr int64_t kMaxTiles = kTokenChunk / kAmxTokens;
  const int64_t n_tiles = n_tokens / kAmxTokens;
  __m512 acc[kMaxTiles][2][kAmxTokens];  // started at zero by the first block
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i high = _mm512_set1_epi8((char)0x80);
  Tiles::begin(amx_config());
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c) {
    const int64_t len = pm.slice_len(c);
    const uint8_t* w[2] = {pm.slice(g, c), pm.slice(g + 1, c)};
    const uint8_t* a = act + kActRec * (size_t)(c * pm.slice_blocks);
    for (int64_t b0 = 0; b0 < len; b0 += kUnpackBlocks) {
      const int64_t n = std::min(kUnpackBlocks, len - b0);
      const NextRange next = next_range(pm, g, c, b0 + n, kBlock);
      for (int gi = 0; gi < 2; ++gi) {
        const uint8_t* range = w[gi] + (size_t)b0 * kBlock;
        for (int64_t b = 0; b < n; ++b) {
          const BlockAt from = block_at(range, b, n, kBlock);
          std::memcpy(copy[gi].scales[b], from.scales, 32);
          int8_t* to = copy[gi].codes[b];
          if constexpr (kQ4) {
            for (int k = 0; k < 4; ++k) {
              const __m512i q = _mm512_loadu_si512(from.chunks + 64 * k);
              _mm512_store_si512(to + 64 * k, _mm512_sub_epi8(_mm512_and_si512(q, m4), eight));
              _mm512_store_si512(
                  to + 64 * (k + 4),
                  _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), eight));
            }
          } else {
            for (int k = 0; k < 8; ++k)
              _mm512_store_si512(to + 64 * k,
                                 _mm512_xor_si512(_mm512_loadu_si512(from.chunks + 64 * k), high));
          }
        }
      }
      // The next range's lines, a few per block of each tile.
      const int64_t lines = ((int64_t)kBlock * next.n + 63) / 64;
      const int64_t per_block = (lines + n_tiles * n - 1) / (n_tiles * n);
      for (int64_t i = 0; i < n_tiles; ++i) {
        const uint8_t* at = a + (size_t)i * kAmxTokens * stride + kActRec * (size_t)b0;
        for (int64_t b = 0; b < n; ++b, at += kActRec) {
          if (next.p[0]) {
            const int64_t l0 = (i * n + b) * per_block, l1 = std::min(lines, l0 + per_block);
            for (int64_t l = l0; l < l1; ++l)
              for (const uint8_t* p : next.p)
                _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T1);
          }
          Tiles::template zero<0>();
          Tiles::template zero<1>();
          Tiles::template load<2>(at, stride);
          Tiles::template load<3>(copy[0].codes[b], 64);
          Tiles::template load<4>(copy[1].codes[b], 64);
          Tiles::template dot<0, 2, 3>();
          Tiles::template dot<1, 2, 4>();
          Tiles::template store<0>(sums[0], 64);
          Tiles::template store<1>(sums[1], 64);
          const bool first = c == 0 && b0 == 0 && b == 0;
          const __m512 dw0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)copy[0].scales[b]));
          const __m512 dw1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)copy[1].scales[b]));
#pragma GCC unroll 16
          for (int t = 0; t < kAmxTokens; ++t) {
            const __m512 d = _mm512_set1_ps(act_d(at + t * stride));
            const __m512i s0 = _mm512_load_si512(sums[0] + kGroup * t);
            const __m512i s1 = _mm512_load_si512(sums[1] + kGroup * t);
            const __m512 zero = _mm512_setzero_ps();
            acc[i][0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, d),
                                           first ? zero : acc[i][0][t]);
            acc[i][1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, d),
                                           first ? zero : acc[i][1][t]);
          }
        }
      }
    }
  }
  Tiles::end();
  for (int64_t i = 0; i < n_tiles; ++i) {
    for (int t = 0; t < kAmxTokens; ++t) {
      float* o = out + (i * kAmxTokens + t) * out_stride;
      _mm512_storeu_ps(o, acc[i][0][t]);
      _mm512_storeu_ps(o + kGroup, acc[i][1][t]);
    }
  }
}

template <class Tiles>
bool agrees_with_vnni(const PackedMatrix& pm, const float* x, int64_t n_tokens) {
  const int64_t cols = pm.cols, rows = pm.rows;
  const size_t stride = act_stride(cols);
  std::vector<uint8_t> act(stride * (size_t)n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t)
    vnni_quantize_act(weight_offset(pm.layout), x + t * cols, cols, act.data() + t * stride);
  std::vector<float> want((size_t)(n_tokens * rows)), got(want.size());
  vnni_pair_ranges(pm, 0, act.data(), stride, n_tokens, want.data(), rows);
  const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
  (q4 ? amx_ranges<Tiles, true> : amx_ranges<Tiles, false>)(pm, 0, act.data(), stride, n_tokens,
                                                            got.data(), rows);
  return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
}

}  // namespace

AmxPairFn amx_q_pair_fn(AmxMode mode, PackedMatrix::Layout layout) {
  const bool q4 = layout == PackedMatrix::Layout::Q4_0x16;
  switch (mode) {
    case AmxMode::kHardware:
      return q4 ? amx_ranges<AmxHardware, true> : amx_ranges<AmxHardware, false>;
    case AmxMode::kEmulated:
      return q4 ? amx_ranges<AmxEmulated, true> : amx_ranges<AmxEmulated, false>;
    case AmxMode::kOff:
      break;
  }
  return nullptr;
}

bool amx_q_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x,
                            int64_t n_tokens) {
  switch (mode) {
    case AmxMode::kHardware:
      return agrees_with_vnni<AmxHardware>(pm, x, n_tokens);
    case AmxMode::kEmulated:
      return agrees_with_vnni<AmxEmulated>(pm, x, n_tokens);
    case AmxMode::kOff:
      break;
  }
  return false;
}

}  // namespace cairn::kernels
