// kernels/packed_k_amx.cpp — AMX-INT8 tile kernels of Q4_Kx16 / Q6_Kx16 (packed_k.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/simd.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed_k.h"
#include "kernels/packed_k_vnni.h"

namespace cairn::kernels {

namespace {

// Where AMX runs (amx_tiles.h), prompts take one tdpbssd per sub-block, group
// and 16 tokens: the 16 x 16 exact sums (codes . activations) of a sub-block
// that the VNNI tiles form with 8 (Q4_K) or 4 (Q6_K) vpdpbusd per token and
// group. The vector units keep the rest, the same integer and float
// operations as the VNNI kernels (scale products with vpmulld, the mins' or
// offset's sums with vpdpwssd, q4k_finish / q6_accumulate), so the bits do
// not change. Unmeasured: no host so far had AMX.
//
// Operands: A = 16 tokens' activation codes of one sub-block (32 or 16 bytes
// of each record); B = the sub-block's codes of one group, row k holding
// elements 4k..4k+3 of each of the 16 rows (tdpbssd reads them as signed
// bytes: the codes are 0..15 or 0..63, the same values). Each super-block's
// codes are split once into that form (Q4_K: nibbles masked; Q6_K: split_q6)
// for every tile of the token chunk.

// Q4_K super-block codes as B tiles: sub-block s at codes + 512 s, row c the
// low (even s) or high (odd s) nibbles of chunk c of run s / 2.
CAIRN_VNNI void split_q4k(const uint8_t* blk, uint8_t* codes) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    for (int c = 0; c < 8; ++c) {
      const __m512i q = _mm512_loadu_si512(blk + kOffCodes + 64 * (8 * j + c));
      _mm512_store_si512(codes + 512 * (2 * j) + 64 * c, _mm512_and_si512(q, m4));
      _mm512_store_si512(codes + 512 * (2 * j + 1) + 64 * c,
                         _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    }
  }
}

// Groups g .. g + ng - 1 (ng: 1 or 2) of Q4_K or Q6_K weights against
// n_tokens tokens (a multiple of kAmxTokens, at most kKTokenChunk):
// out[t * out_stride + r].
template <class Tiles, bool kQ6>
CAIRN_VNNI void amx_k_groups(const PackedMatrix& pm, int64_t g, int ng, const uint8_t* act,
                             size_t stride, int64_t n_tokens, float* out, int64_t out_stride) {
  constexpr int kSubs = kQ6 ? 16 : 8;            // sub-blocks per super-block
  constexpr int kSubElems = kQ6 ? 16 : 32;       // their elements: A's bytes per token
  constexpr int kSubBytes = kSubElems / 4 * 64;  // a B tile: a row of 64 bytes per 4 elements
  alignas(64) static thread_local uint8_t codes[2][kSubs * kSubBytes];
  alignas(64) static thread_local int32_t sums[2][kAmxTokens * kGroup];
  constexpr int64_t kMaxTiles = kKTokenChunk / kAmxTokens;
  const int64_t n_tiles = n_tokens / kAmxTokens;
  __m512 acc[kMaxTiles][2][kAmxTokens];
  for (int64_t i = 0; i < n_tiles; ++i)
    for (int gi = 0; gi < ng; ++gi)
      for (__m512& a : acc[i][gi]) a = _mm512_setzero_ps();
  Tiles::begin(amx_config());
  for (int64_t b = 0; b < pm.n_blocks; ++b) {
    const uint8_t* blk[2];
    for (int gi = 0; gi < ng; ++gi) {
      blk[gi] = pm.slice(g + gi, 0) + (size_t)b * pm.block_bytes;
      // The next super-block, requested while the tiles compute (as k6_group).
      for (size_t line = 0; line < pm.block_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk[gi] + pm.block_bytes + line), _MM_HINT_T1);
      kQ6 ? split_q6(blk[gi], codes[gi]) : split_q4k(blk[gi], codes[gi]);
    }
    for (int64_t i = 0; i < n_tiles; ++i) {
      const uint8_t* at = act + (size_t)(i * kAmxTokens) * stride + kKRec * (size_t)b;
      __m512i sum_q[2][kAmxTokens];
      for (int gi = 0; gi < ng; ++gi)
        for (__m512i& s : sum_q[gi]) s = _mm512_setzero_si512();
      for (int s = 0; s < kSubs; ++s) {
        Tiles::template zero<0>();
        if (kQ6) {
          Tiles::template load<5>(at + kRecQs + kSubElems * s, stride);
          Tiles::template load<6>(codes[0] + kSubBytes * s, 64);
          Tiles::template dot<0, 5, 6>();
        } else {
          Tiles::template load<2>(at + kRecQs + kSubElems * s, stride);
          Tiles::template load<3>(codes[0] + kSubBytes * s, 64);
          Tiles::template dot<0, 2, 3>();
        }
        Tiles::template store<0>(sums[0], 64);
        if (ng > 1) {
          Tiles::template zero<1>();
          if (kQ6) {
            Tiles::template load<7>(codes[1] + kSubBytes * s, 64);
            Tiles::template dot<1, 5, 7>();
          } else {
            Tiles::template load<4>(codes[1] + kSubBytes * s, 64);
            Tiles::template dot<1, 2, 4>();
          }
          Tiles::template store<1>(sums[1], 64);
        }
        for (int gi = 0; gi < ng; ++gi) {
          __m512i sc;
          if constexpr (kQ6) {
            const Q6Scales pair = q6_scales(blk[gi], s / 2);
            sc = s % 2 ? pair.odd : pair.even;
          } else {
            sc = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[gi] + kOffScales + 16 * s)));
          }
#pragma GCC unroll 16
          for (int t = 0; t < kAmxTokens; ++t)
            sum_q[gi][t] = _mm512_add_epi32(
                sum_q[gi][t], _mm512_mullo_epi32(_mm512_load_si512(sums[gi] + kGroup * t), sc));
        }
      }
      for (int gi = 0; gi < ng; ++gi) {
        if constexpr (kQ6) {
          for (int t = 0; t < kAmxTokens; ++t) {
            const uint8_t* a = at + (size_t)t * stride;
            __m512i offset = _mm512_setzero_si512();
            for (int p = 0; p < 8; ++p) {
              int32_t pair;
              std::memcpy(&pair, a + kRecSums + 4 * p, 4);
              offset =
                  _mm512_dpwssd_epi32(offset, q6_scales(blk[gi], p).pairs, _mm512_set1_epi32(pair));
            }
            acc[i][gi][t] = q6_accumulate(blk[gi], a, sum_q[gi][t], offset, acc[i][gi][t]);
          }
        } else {
          q4k_finish<kAmxTokens>(blk[gi], at, stride, sum_q[gi], acc[i][gi]);
        }
      }
    }
  }
  Tiles::end();
  for (int64_t i = 0; i < n_tiles; ++i)
    for (int gi = 0; gi < ng; ++gi)
      for (int t = 0; t < kAmxTokens; ++t)
        store_rows(pm, g + gi, out + (i * kAmxTokens + t) * out_stride + (g + gi) * kGroup,
                   acc[i][gi][t]);
}

}  // namespace

AmxKFn amx_k_fn(AmxMode mode, bool q6) {
  switch (mode) {
    case AmxMode::kHardware:
      return q6 ? amx_k_groups<AmxHardware, true> : amx_k_groups<AmxHardware, false>;
    case AmxMode::kEmulated:
      return q6 ? amx_k_groups<AmxEmulated, true> : amx_k_groups<AmxEmulated, false>;
    case AmxMode::kOff:
      break;
  }
  return nullptr;
}

bool amx_k_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x,
                            int64_t n_tokens) {
  const bool q6 = pm.layout == PackedMatrix::Layout::Q6_Kx16;
  const AmxKFn amx = amx_k_fn(mode, q6);
  if (!amx || pm.n_groups != 3) return false;  // a pair and a lone group, as below
  const int64_t rows = pm.rows, cols = pm.cols;
  const size_t stride = k_act_stride(cols);
  std::vector<uint8_t> act(stride * (size_t)n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t)
    vnni_quantize_k_act(q6, x + t * cols, cols, act.data() + t * stride);
  std::vector<float> want((size_t)(n_tokens * rows)), got(want.size());
  for (int64_t g = 0; g < pm.n_groups; ++g) {
    if (q6)
      vnni_k6_group(pm, g, act.data(), stride, n_tokens, want.data() + g * kGroup, rows);
    else
      vnni_k_few(pm, g, g + 1, act.data(), stride, n_tokens, want.data(), rows, 0);
  }
  amx(pm, 0, 2, act.data(), stride, n_tokens, got.data(), rows);
  amx(pm, 2, 1, act.data(), stride, n_tokens, got.data(), rows);
  return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
}

}  // namespace cairn::kernels
