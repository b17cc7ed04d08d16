// kernels/packed_q_vnni.cpp — AVX-512 VNNI kernels of Q4_0x16 / Q8_0x16 (packed_q.h).
//
// Why these kernels give the scalar functions' bits: the float work per block
// is the same operations in the same order — the scale product
// f16(w.d) * f16(a.d), the block's integer sum converted, one fma into the
// row's running sum. Only the integer sums are formed differently (vpdpbusd
// over unsigned codes, then an exact correction for the offset), and integer
// sums are exact.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/half.h"
#include "core/simd.h"
#include "kernels/packed_q.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
// A lambda inside a CAIRN_VNNI function: GCC inlines it into its caller's
// target; clang (the fuzz build) wants the target on the lambda itself.
#if defined(__clang__)
#define CAIRN_VNNI_LAMBDA CAIRN_VNNI
#else
#define CAIRN_VNNI_LAMBDA
#endif

namespace cairn::kernels {

namespace {

constexpr int kTile = 8;  // tokens per tile (accumulator registers)
// Tokens per two-group tile: 12 sums and 12 accumulators, 27 of the 32
// registers (6 prefilled Q4_0 faster than 5, Q8_0 the same).
constexpr int kTile2 = 6;

// ---- activations --------------------------------------------------------------
//
// One token's row into its records (layout and rounding: packed_q.h).
CAIRN_VNNI void quantize_act_vnni(int32_t offset, const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b);
    const __m512 v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
    const uint16_t dh = f32_to_f16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));  // ties to even
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
    uint8_t* rec = dst + kActRec * (size_t)b;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rec), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rec + 16), _mm512_cvtsepi32_epi8(i1));
    const float d = f16_to_f32(dh);
    const int32_t bias = -offset * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    std::memcpy(rec + 32, &d, 4);
    std::memcpy(rec + 36, &bias, 4);
  }
}

// acc += dpbusd(w, the 4 activation bytes at p broadcast to every lane), with
// the broadcast folded into the instruction's memory operand ({1to16}): one
// instruction where the intrinsics give a broadcast load plus the dot.
CAIRN_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// block(scales, chunks, b) for blocks [0, n) of one group's slice at gw, in
// the order stored (pairs, then a lone last block: see block_at), requesting
// weights `ahead` bytes before their loads (0: none; a prefetch past the end
// never faults).
template <size_t kBlock, typename Block>
CAIRN_VNNI inline __attribute__((always_inline)) void for_each_block(const uint8_t* gw, int64_t n,
                                                                     size_t ahead,
                                                                     const Block& block) {
  int64_t b = 0;
  for (; b + 2 <= n; b += 2) {
    const uint8_t* pair = gw + (size_t)b * kBlock;
    if (ahead != 0) {
      const uintptr_t next = reinterpret_cast<uintptr_t>(pair) + ahead;
      for (size_t line = 0; line < 2 * kBlock; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
    }
    block(pair, pair + 64, b);
    block(pair + 32, pair + 32 + kBlock, b + 1);
  }
  if (b < n) {
    const uint8_t* lone = gw + (size_t)b * kBlock;
    block(lone, lone + 32, b);
  }
}

// One token against blocks [0, n) of one 16-row group at gw, with the
// activation records act[0, n), continuing acc (decode). tile_blocks()'s
// arithmetic in fewer instructions per block, so more of the weight stream is
// in flight: the activation broadcasts are folded into the dots, and Q4_0's
// high nibbles are masked in place (16x their value) with their sum shifted
// back once per block, exact as every term is a multiple of 16: more of the
// weight stream in flight than the one-token tile keeps.
// ahead: how far ahead to prefetch the weights (stream_ahead when they come
// from memory, 0 when they were just read).
template <bool kQ4>
CAIRN_VNNI __m512 tile_one_blocks(const uint8_t* gw, int64_t n, const uint8_t* act, __m512 acc,
                                  size_t ahead) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  const auto block = [&](const uint8_t* scales, const uint8_t* chunks, int64_t b)
      __attribute__((always_inline)) CAIRN_VNNI_LAMBDA {
    const uint8_t* qs = act + kActRec * (size_t)b;
    __m512i s_lo = _mm512_set1_epi32(act_bias(qs)), s_hi = _mm512_setzero_si512();
    if constexpr (kQ4) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i q = _mm512_loadu_si512(chunks + 64 * k);
        s_lo = dpbusd_bcast(s_lo, _mm512_and_si512(q, m4), qs + 4 * k);
        s_hi = dpbusd_bcast(s_hi, _mm512_and_si512(q, mf0), qs + 16 + 4 * k);
      }
      s_lo = _mm512_add_epi32(s_lo, _mm512_srai_epi32(s_hi, 4));
    } else {  // Q8_0: two chains again, over the even and the odd chunks
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        s_lo = dpbusd_bcast(s_lo, _mm512_loadu_si512(chunks + 64 * k), qs + 4 * k);
        s_hi = dpbusd_bcast(s_hi, _mm512_loadu_si512(chunks + 64 * (k + 1)), qs + 4 * k + 4);
      }
      s_lo = _mm512_add_epi32(s_lo, s_hi);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(act_d(qs)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s_lo), dd, acc);
  };
  for_each_block<kBlock>(gw, n, ahead, block);
  return acc;
}

__mmask16 row_mask(const PackedMatrix& pm, int64_t g) {
  const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  return n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
}

// Groups [g0, g1) of one run against one token, slice by slice, so the
// weights are read front to back and each slice's activations serve every
// group of the run from L1 (see PackedMatrix). Each row still sums its blocks
// in order, one chain per group.
template <bool kQ4>
CAIRN_VNNI void tile_one_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                             float* out, size_t ahead) {
  __m512 acc[PackedMatrix::kRunGroups];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c) {
    const uint8_t* a = act + kActRec * (size_t)(c * pm.slice_blocks);
    for (int64_t g = g0; g < g1; ++g)
      acc[g - g0] = tile_one_blocks<kQ4>(pm.slice(g, c), pm.slice_len(c), a, acc[g - g0], ahead);
  }
  for (int64_t g = g0; g < g1; ++g)
    _mm512_mask_storeu_ps(out + g * kGroup, row_mask(pm, g), acc[g - g0]);
}

// NT (1..kFewTile) tokens against blocks [0, n) of one group at gw, as
// tile_one_blocks() does for one: each chunk of weights is loaded and masked
// once and feeds every token's dots straight from memory, with no split copy.
// For the few sequences of a lightly loaded server: the two-group tiles split
// each range of Q4_0 codes into a copy first, which at 2 tokens costs about as
// much as the dots.
template <bool kQ4, int NT>
[[gnu::noinline]] CAIRN_VNNI void tile_few_blocks(const uint8_t* gw, int64_t n, const uint8_t* act,
                                                  size_t stride, __m512* acc_io, size_t ahead) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc[t] = acc_io[t];
  // Inlined by force: called three times, GCC made it a function taking the
  // sums through memory (so is tile_one_blocks' block).
  const auto block = [&](const uint8_t* scales, const uint8_t* chunks, int64_t b)
      __attribute__((always_inline)) CAIRN_VNNI_LAMBDA {
    const uint8_t* qs = act + kActRec * (size_t)b;  // token t's record: qs + t * stride
    __m512i s_lo[NT], s_hi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      s_lo[t] = _mm512_set1_epi32(act_bias(qs + t * stride));
      s_hi[t] = _mm512_setzero_si512();
    }
    if constexpr (kQ4) {  // high nibbles masked in place, as tile_one_blocks()
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i q = _mm512_loadu_si512(chunks + 64 * k);
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(q, mf0);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          s_lo[t] = dpbusd_bcast(s_lo[t], lo, qs + t * stride + 4 * k);
          s_hi[t] = dpbusd_bcast(s_hi[t], hi, qs + t * stride + 16 + 4 * k);
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        s_lo[t] = _mm512_add_epi32(s_lo[t], _mm512_srai_epi32(s_hi[t], 4));
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        const __m512i w0 = _mm512_loadu_si512(chunks + 64 * k);
        const __m512i w1 = _mm512_loadu_si512(chunks + 64 * (k + 1));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          s_lo[t] = dpbusd_bcast(s_lo[t], w0, qs + t * stride + 4 * k);
          s_hi[t] = dpbusd_bcast(s_hi[t], w1, qs + t * stride + 4 * k + 4);
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) s_lo[t] = _mm512_add_epi32(s_lo[t], s_hi[t]);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(act_d(qs + t * stride)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s_lo[t]), dd, acc[t]);
    }
  };
  for_each_block<kBlock>(gw, n, ahead, block);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc_io[t] = acc[t];
}

// tile_few_blocks for 1..kFewTile tokens: 2 x 8 sums, 8 accumulators and the
// weights fill the 32 vector registers.
constexpr int kFewTile = 8;
using FewBlocksFn = void (*)(const uint8_t*, int64_t, const uint8_t*, size_t, __m512*, size_t);
constexpr FewBlocksFn kFewBlocks[2][kFewTile] = {
    {tile_few_blocks<false, 1>, tile_few_blocks<false, 2>, tile_few_blocks<false, 3>,
     tile_few_blocks<false, 4>, tile_few_blocks<false, 5>, tile_few_blocks<false, 6>,
     tile_few_blocks<false, 7>, tile_few_blocks<false, 8>},
    {tile_few_blocks<true, 1>, tile_few_blocks<true, 2>, tile_few_blocks<true, 3>,
     tile_few_blocks<true, 4>, tile_few_blocks<true, 5>, tile_few_blocks<true, 6>,
     tile_few_blocks<true, 7>, tile_few_blocks<true, 8>}};
static_assert(kFewTile == 8, "kFewBlocks names every tile size");

// Groups [g0, g1) of one run against tokens [0, n) (n <= kFewTokens), slice
// by slice as tile_one_run() walks them, each group's slice serving every tile
// of up to kFewTile tokens while in L1 (only the first tile requests weights
// ahead): out[t * out_stride + r].
CAIRN_VNNI void tile_few_run(bool q4, const PackedMatrix& pm, int64_t g0, int64_t g1,
                             const uint8_t* act, size_t stride, int64_t n, float* out,
                             int64_t out_stride, size_t ahead) {
  __m512 acc[PackedMatrix::kRunGroups][kFewTokens];
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t t = 0; t < n; ++t) acc[g - g0][t] = _mm512_setzero_ps();
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c) {
    const uint8_t* a = act + kActRec * (size_t)(c * pm.slice_blocks);
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t t = 0; t < n; t += kFewTile)
        kFewBlocks[q4][std::min<int64_t>(kFewTile, n - t) - 1](pm.slice(g, c), pm.slice_len(c),
                                                               a + (size_t)t * stride, stride,
                                                               acc[g - g0] + t, t == 0 ? ahead : 0);
  }
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t t = 0; t < n; ++t)
      _mm512_mask_storeu_ps(out + t * out_stride + g * kGroup, row_mask(pm, g), acc[g - g0][t]);
}

// Every loop over tokens and chunks is unrolled so the arrays below live in
// registers (the Release build is -O2, which would keep them in memory).

// The multi-token tiles run a slice's blocks in their own (not inlined)
// function, accumulators passed in memory: inlined into the loop over slices,
// the extra loop variables pushed the compiler into moving pointers through
// vector registers (~40 more instructions per block, -20% on prompt matmuls).

// NT tokens against one 16-row group, blocks [0, n) at gw with the activation
// records act[0, n): acc_io[t] += each token's dot products.
// Per block: the weights' 32 codes of 16 rows as 8 vectors of 4-byte runs
// (Q4_0: low and high nibbles of 4 loads; Q8_0: 8 loads); per token, 8
// vpdpbusd with a broadcast of the matching 4 activation codes, started from
// the offset correction, give each row's exact block sum.
template <bool kQ4, int NT>
[[gnu::noinline]] CAIRN_VNNI void tile_blocks(const uint8_t* gw, int64_t n, const uint8_t* act,
                                              size_t stride, __m512* acc_io) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc[t] = acc_io[t];
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n; ++b) {
    const BlockAt at = block_at(gw, b, n, kBlock);
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at.scales)));
    // w[k] holds elements 4k..4k+3 of every row.
    __m512i w[8];
    if constexpr (kQ4) {
#pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) {
        const __m512i q = _mm512_loadu_si512(at.chunks + 64 * k);
        w[k] = _mm512_and_si512(q, m4);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      }
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(at.chunks + 64 * k);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const uint8_t* qs = act + t * stride + kActRec * (size_t)b;
      const float d = act_d(qs);
      const int32_t bias = act_bias(qs);
      // Two dependency chains of 4 per token.
      __m512i s_lo = _mm512_set1_epi32(bias), s_hi = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) {
        int32_t a_lo, a_hi;
        std::memcpy(&a_lo, qs + 4 * k, 4);
        std::memcpy(&a_hi, qs + 16 + 4 * k, 4);
        s_lo = _mm512_dpbusd_epi32(s_lo, w[k], _mm512_set1_epi32(a_lo));
        s_hi = _mm512_dpbusd_epi32(s_hi, w[k + 4], _mm512_set1_epi32(a_hi));
      }
      const __m512i s = _mm512_add_epi32(s_lo, s_hi);
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(d));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc_io[t] = acc[t];
}

// NT tokens against group g: out[t * out_stride + r] for its rows.
template <bool kQ4, int NT>
CAIRN_VNNI void tile(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                     float* out, int64_t out_stride) {
  __m512 acc[NT];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c)
    tile_blocks<kQ4, NT>(pm.slice(g, c), pm.slice_len(c),
                         act + kActRec * (size_t)(c * pm.slice_blocks), stride, acc);
  const __mmask16 mask = row_mask(pm, g);
  for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(out + t * out_stride, mask, acc[t]);
}

// Two groups (32 rows) of Q8_0x16 codes against NT tokens: each activation
// broadcast feeds two vpdpbusd, so batches issue fewer instructions per
// product. Same per-row operations, in the same order, as tile_blocks() (the
// integer block sums are exact, whatever their order). acc_io: [2][NT],
// read unless fresh (then the sums start at zero).
// ahead (optional): two byte streams to request into L2 while the tile
// computes, ahead->lines cache lines of each per block (see tile2_ranges).
struct StreamAhead {
  const uint8_t* p[2];
  int64_t lines;
};
template <int NT>
[[gnu::noinline]] CAIRN_VNNI void tile2_blocks(const uint8_t* gw0, const uint8_t* gw1, int64_t n,
                                               const uint8_t* act, size_t stride, __m512* acc_io,
                                               const StreamAhead* ahead, bool fresh) {
  __m512 acc[2][NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[0][t] = fresh ? _mm512_setzero_ps() : acc_io[t];
    acc[1][t] = fresh ? _mm512_setzero_ps() : acc_io[NT + t];
  }
  for (int64_t b = 0; b < n; ++b) {
    if (ahead)
      for (int64_t l = b * ahead->lines, e = l + ahead->lines; l < e; ++l)
        for (const uint8_t* p : ahead->p)
          _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T1);
    const BlockAt blk[2] = {block_at(gw0, b, n, kQ8Block), block_at(gw1, b, n, kQ8Block)};
    __m512i s[2][NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const int32_t bias = act_bias(act + t * stride + kActRec * (size_t)b);
      s[0][t] = s[1][t] = _mm512_set1_epi32(bias);
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i w0 = _mm512_loadu_si512(blk[0].chunks + 64 * k);
      const __m512i w1 = _mm512_loadu_si512(blk[1].chunks + 64 * k);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        int32_t a0;
        std::memcpy(&a0, act + t * stride + kActRec * (size_t)b + 4 * k, 4);
        const __m512i va0 = _mm512_set1_epi32(a0);
        s[0][t] = _mm512_dpbusd_epi32(s[0][t], w0, va0);
        s[1][t] = _mm512_dpbusd_epi32(s[1][t], w1, va0);
      }
    }
    const __m512 dw0 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].scales)));
    const __m512 dw1 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].scales)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 d = _mm512_set1_ps(act_d(act + t * stride + kActRec * (size_t)b));
      acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][t]), _mm512_mul_ps(dw0, d), acc[0][t]);
      acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1][t]), _mm512_mul_ps(dw1, d), acc[1][t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc_io[t] = acc[0][t];
    acc_io[NT + t] = acc[1][t];
  }
}

// Groups g and g + 1 against n_tokens tokens (of one token chunk), in tiles of
// kTile2 tokens and one of what is left, range by range: each range of
// kUnpackBlocks blocks of both groups serves every tile from L1 while the next
// range is requested from memory, spread over the tiles' blocks. Without that
// the memory idled while the tiles computed and the tiles while the next range
// came in.
// Q4_0 codes are split once per range into bytes, laid out as Q8_0x16 blocks
// (chunk k + 4 holds chunk k's high nibbles, as Q8_0's chunk k + 4 holds
// elements 16 + 4k..), and every tile runs the Q8_0 arithmetic over that
// copy; splitting in every tile costs 3 instructions per chunk per tile. The activations'
// bias was made for Q4_0's offset, which the split codes keep, and each row
// still sums its blocks in order, so the bits do not change.
constexpr int64_t kMaxTiles2 = (kTokenChunk + kTile2 - 1) / kTile2;
// tile2_blocks<nt> for nt in 1..kTile2.
CAIRN_VNNI void tile2_blocks_n(int64_t nt, const uint8_t* gw0, const uint8_t* gw1, int64_t n,
                               const uint8_t* act, size_t stride, __m512* acc,
                               const StreamAhead* ahead, bool fresh) {
  switch (nt) {
    case 1:
      return tile2_blocks<1>(gw0, gw1, n, act, stride, acc, ahead, fresh);
    case 2:
      return tile2_blocks<2>(gw0, gw1, n, act, stride, acc, ahead, fresh);
    case 3:
      return tile2_blocks<3>(gw0, gw1, n, act, stride, acc, ahead, fresh);
    case 4:
      return tile2_blocks<4>(gw0, gw1, n, act, stride, acc, ahead, fresh);
    case 5:
      return tile2_blocks<5>(gw0, gw1, n, act, stride, acc, ahead, fresh);
    default:
      return tile2_blocks<kTile2>(gw0, gw1, n, act, stride, acc, ahead, fresh);
  }
}
static_assert(kTile2 == 6, "tile2_blocks_n names every tile size");

template <bool kQ4>
CAIRN_VNNI void tile2_ranges(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                             int64_t n_tokens, float* out, int64_t out_stride) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  alignas(64) static thread_local uint8_t unpacked[2][kUnpackBlocks * kQ8Block];
  // Tiles of kTile2 tokens, the last one holding what is left (1..kTile2).
  const int64_t n_tiles = (n_tokens + kTile2 - 1) / kTile2;
  const auto tile_tokens = [&](int64_t i) {
    return std::min<int64_t>(kTile2, n_tokens - i * kTile2);
  };
  __m512 acc[kMaxTiles2][2 * kTile2];  // each tile's first range starts them at zero
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t c = 0, nc = pm.n_slices(); c < nc; ++c) {
    const int64_t len = pm.slice_len(c);
    const uint8_t* w[2] = {pm.slice(g, c), pm.slice(g + 1, c)};
    const uint8_t* a = act + kActRec * (size_t)(c * pm.slice_blocks);
    for (int64_t b0 = 0; b0 < len; b0 += kUnpackBlocks) {
      const int64_t n = std::min(kUnpackBlocks, len - b0);
      // The range after this one (in this slice, the next slice, or the next
      // pair of groups), fetched while the tiles below compute.
      const NextRange next = next_range(pm, g, c, b0 + n, kBlock);
      // Both groups' blocks of the range as Q8_0x16 codes: Q8_0's in place,
      // Q4_0's split into the thread's copy.
      const uint8_t* codes[2] = {w[0] + (size_t)b0 * kBlock, w[1] + (size_t)b0 * kBlock};
      if constexpr (kQ4) {
        for (int gi = 0; gi < 2; ++gi) {
          for (int64_t b = 0; b < n; ++b) {
            const BlockAt from = block_at(codes[gi], b, n, kQ4Block);
            const BlockAt to = block_at(unpacked[gi], b, n, kQ8Block);
            std::memcpy(const_cast<uint8_t*>(to.scales), from.scales, 32);
            uint8_t* chunks = const_cast<uint8_t*>(to.chunks);
            for (int k = 0; k < 4; ++k) {
              const __m512i q = _mm512_loadu_si512(from.chunks + 64 * k);
              _mm512_storeu_si512(chunks + 64 * k, _mm512_and_si512(q, m4));
              _mm512_storeu_si512(chunks + 64 * (k + 4),
                                  _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            }
          }
          codes[gi] = unpacked[gi];
        }
      }
      // Lines of each stream per block of every tile, the tiles taking turns
      // (the first tiles of a prompt's chunk cover the range).
      const int64_t lines = ((int64_t)kBlock * next.n + 63) / 64;
      const int64_t per_block = (lines + n_tiles * n - 1) / (n_tiles * n);
      for (int64_t i = 0; i < n_tiles; ++i) {
        const size_t skip = (size_t)(64 * per_block * n * i);
        const StreamAhead ahead{{next.p[0] + skip, next.p[1] + skip}, per_block};
        const bool fetch = next.p[0] && (int64_t)skip < 64 * lines;
        tile2_blocks_n(tile_tokens(i), codes[0], codes[1], n,
                       a + (size_t)i * kTile2 * stride + kActRec * (size_t)b0, stride, acc[i],
                       fetch ? &ahead : nullptr, c == 0 && b0 == 0);
      }
    }
  }
  for (int64_t i = 0; i < n_tiles; ++i) {
    float* o = out + i * kTile2 * out_stride;
    const int64_t nt = tile_tokens(i);
    for (int64_t t = 0; t < nt; ++t) {
      _mm512_storeu_ps(o + t * out_stride, acc[i][t]);
      _mm512_storeu_ps(o + t * out_stride + kGroup, acc[i][nt + t]);
    }
  }
}

using TileFn = void (*)(const PackedMatrix&, int64_t, const uint8_t*, size_t, float*, int64_t);

// tile<kQ4, 2..kTile>; a single token takes tile_one_run.
template <bool kQ4, int... Ns>
constexpr std::array<TileFn, sizeof...(Ns)> tiles(std::integer_sequence<int, Ns...>) {
  return {tile<kQ4, Ns + 2>...};
}
constexpr auto kQ4Tiles = tiles<true>(std::make_integer_sequence<int, kTile - 1>{});
constexpr auto kQ8Tiles = tiles<false>(std::make_integer_sequence<int, kTile - 1>{});

// Tokens [t0, t1) of one group, in tiles of up to kTile tokens.
void run_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride, int64_t t0,
               int64_t t1, float* out) {
  const auto& fns = pm.layout == PackedMatrix::Layout::Q4_0x16 ? kQ4Tiles : kQ8Tiles;  // 2.. tokens
  const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
  for (int64_t t = t0; t < t1; t += kTile) {
    const int nt = (int)std::min<int64_t>(kTile, t1 - t);
    if (nt == 1) {
      // A batch's last token: its tiles have just read these weights.
      (q4 ? tile_one_run<true> : tile_one_run<false>)(pm, g, g + 1, act + (size_t)t * stride,
                                                      out + t * pm.rows, 0);
      continue;
    }
    fns[(size_t)nt - 2](pm, g, act + (size_t)t * stride, stride, out + t * pm.rows + g * kGroup,
                        pm.rows);
  }
}

}  // namespace

void vnni_quantize_act(int32_t offset, const float* x, int64_t cols, uint8_t* dst) {
  quantize_act_vnni(offset, x, cols, dst);
}

void vnni_one_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, float* out,
                  size_t ahead) {
  const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
  (q4 ? tile_one_run<true> : tile_one_run<false>)(pm, g0, g1, act, out, ahead);
}

void vnni_few_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, size_t stride,
                  int64_t n, float* out, int64_t out_stride, size_t ahead) {
  tile_few_run(pm.layout == PackedMatrix::Layout::Q4_0x16, pm, g0, g1, act, stride, n, out,
               out_stride, ahead);
}

void vnni_group_tiles(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                      int64_t t0, int64_t t1, float* out) {
  run_group(pm, g, act, stride, t0, t1, out);
}

void vnni_pair_ranges(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                      int64_t n_tokens, float* out, int64_t out_stride) {
  const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
  (q4 ? tile2_ranges<true> : tile2_ranges<false>)(pm, g, act, stride, n_tokens, out, out_stride);
}

}  // namespace cairn::kernels
