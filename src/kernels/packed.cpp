// Packed Q4_0 / Q8_0 weights and their AVX-512 VNNI matmul (layouts: packed.h).
//
// Why these kernels give the scalar functions' bits: the float work per block
// is the same operations in the same order — the scale product
// f16(w.d) * f16(a.d), the block's integer sum converted, one fma into the
// row's running sum. Only the integer sums are formed differently (vpdpbusd
// over unsigned codes, then an exact correction for the offset), and integer
// sums are exact.
#include "kernels/packed.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed_q.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

namespace cairn::kernels {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Memory in transparent huge pages: a packed matrix is streamed whole for each
// decoded token, and with 4 KiB pages every page of it is a TLB miss.
std::shared_ptr<uint8_t> alloc_huge(size_t bytes, bool populate) {
  const size_t n = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  void* p = std::aligned_alloc(kHugePage, n);
  if (p == nullptr) return nullptr;
  ::madvise(p, n, MADV_HUGEPAGE);
  // Page tables filled in one call, where a fault per page would take longer
  // than the packing itself (measured: most of the load time).
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14; harmless where unknown
  if (populate) ::madvise(p, n, kPopulateWrite);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// Matrices below kOwnPages share 64 MiB huge-page chunks, filled in load
// order, instead of sitting in 4 KiB pages or each rounding up to whole huge
// pages (TinyLlama's 2.4 MB Q and O matrices would waste 72 MB). Measured on
// TinyLlama Q4_0 decode, 6 alternating runs each: every matrix in huge pages
// +2.6..+13.8 % (mean +7 %) over 4 KiB pages for the small ones; these
// chunks, 5 of 6 runs faster (mean +2.8 %) at the same RSS. A chunk lives
// while a matrix in it does; only pages written are resident, so a small
// model does not pay for a whole chunk.
constexpr size_t kOwnPages = size_t{4} << 20;
constexpr size_t kChunkBytes = size_t{64} << 20;

struct Arena {
  std::mutex mu;
  std::weak_ptr<uint8_t> chunk;
  uint8_t* base = nullptr;
  size_t used = 0;
};

std::pair<std::shared_ptr<uint8_t>, uint8_t*> alloc_packed(size_t bytes) {
  if (bytes >= kOwnPages) {
    auto own = alloc_huge(bytes, true);
    return {own, own.get()};
  }
  static Arena arena;
  const size_t need = (bytes + 63) & ~size_t{63};
  std::lock_guard<std::mutex> lock(arena.mu);
  std::shared_ptr<uint8_t> chunk = arena.chunk.lock();
  if (!chunk || arena.used + need > kChunkBytes) {
    chunk = alloc_huge(kChunkBytes, false);
    if (!chunk) return {nullptr, nullptr};
    arena.chunk = chunk;
    arena.base = chunk.get();
    arena.used = 0;
  }
  uint8_t* p = arena.base + arena.used;
  arena.used += need;
  return {std::move(chunk), p};
}

using quant::BlockQ4_0;
using quant::BlockQ8_0;

constexpr int kTile = 8;  // tokens per tile (accumulator registers)
// Tokens per two-group tile: 12 sums and 12 accumulators, 27 of the 32
// registers. 6 against 5, alternating (`bench-model -p 512`, TinyLlama, AMD
// EPYC Zen 5): Q4_0 prefill better in 6 of 8 pairs (mean +4 %, e.g. 446 ->
// 458 tok/s), Q8_0 even (5 pairs, -5 % .. +5 %).
constexpr int kTile2 = 6;
constexpr int64_t kTokenChunk = 64;  // tokens whose activations stay in L2 per pass
// Rows of more than kSliceAbove blocks are stored in slices of kSliceBlocks
// (see PackedMatrix). Measured on 22 TinyLlama FFN-down matrices (5632
// columns), one token, 2 threads, layouts alternated in one process: 64-block
// slices +8..11% over whole rows, 32-block slices +2..8% over 64 (Q4_0 and
// Q8_0). Rows of 2048 columns stay whole: sliced, their prompt matmuls lost
// ~7% (128 tokens, one thread) for no decode gain with Q4_0.
constexpr int64_t kSliceBlocks = 32;
constexpr int64_t kSliceAbove = 64;

// ---- packing (plain C++: runs once at load) ---------------------------------

// Row r's 4-byte run k of block b goes to bytes 4r..4r+3 of chunk k.
template <typename Block, int kChunks, uint8_t kXor>
void pack_rows(const WeightMatrix& w, PackedMatrix& p) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      const int64_t c = b / p.slice_blocks;
      const BlockAt at = block_at(p.slice(g, c), b % p.slice_blocks, p.slice_len(c), p.block_bytes);
      auto* scales = const_cast<uint8_t*>(at.scales);
      auto* chunks = const_cast<uint8_t*>(at.chunks);
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= w.rows) break;  // padding rows stay zero (scale 0)
        const auto* blk = reinterpret_cast<const Block*>(src + (size_t)row * w.row_stride) + b;
        std::memcpy(scales + 2 * r, &blk->d, 2);
        const auto* qs = reinterpret_cast<const uint8_t*>(blk->qs);
        for (int k = 0; k < kChunks; ++k) {
          for (int i = 0; i < 4; ++i) chunks[64 * k + 4 * r + i] = (uint8_t)(qs[4 * k + i] ^ kXor);
        }
      }
    }
  }
}

// ---- activations --------------------------------------------------------------
//
// One token's row into its records (layout and rounding: packed_q.h).
CAIRN_VNNI void quantize_act(int32_t offset, const float* x, int64_t cols, uint8_t* dst) {
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

// ---- kernels ------------------------------------------------------------------

// How far ahead of its loads the one-token kernel asks for weights
// (prefetcht1 for every line, bytes ahead; 0: no software prefetch).
// CAIRN_PREFETCH=<bytes> overrides; the default is per vendor, measured with
// bench_matmul's DecodeMatmulsVsLoads (TinyLlama decode matmuls vs plain loads
// of the same bytes, 2 threads, kernel/loads):
// - Intel Xeon (Emerald Rapids, 2 vCPU): none 0.73-0.75; every line 1-2 KiB
//   ahead (t0) 0.82-0.88, 3-6 KiB (t1) 0.90-0.92, 8-16 KiB 0.88-0.89; one
//   line per pair 0.76-0.78. Its L2 streamer stops at each 4 KiB page and the
//   Q4_0 loop issues its loads too slowly to keep enough lines in flight.
// - AMD EPYC (Zen 5): the hardware prefetchers already keep up; software
//   prefetch cost 13-18 % there.
// The K-quant kernels spend more instructions per line of weights (Q6_K ~8,
// Q4_K ~5, against Q8_0's ~3), so fewer of their loads are in flight even
// where the Q4_0/Q8_0 ones keep up: on the AMD host (`cairn bench-model -p 32
// -n 64 --batch 1`, alternating) 4 KiB ahead took Q4_K decode from 66-68 to
// 85-91 tok/s and Q6_K from 36-38 to 51-57 (8 KiB the same, 2 KiB less).
// They prefetch 4 KiB ahead on every host (dense_stream_ahead), as do the
// Q4_0/Q8_0 kernels for 4 to kFewTokens tokens (tile_few_run).
std::optional<size_t> prefetch_from_env() {
  if (const char* e = std::getenv("CAIRN_PREFETCH")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(e, &end, 10);
    if (end != e && *end == '\0' && v <= (size_t{1} << 20)) return v & ~size_t{63};
  }
  return std::nullopt;
}
const size_t stream_ahead = prefetch_from_env().value_or(cpu_features().intel ? 4096 : 0);
const size_t dense_stream_ahead = prefetch_from_env().value_or(4096);

}  // namespace

size_t packed_stream_ahead(PackedMatrix::Layout layout) {
  const bool k_quant =
      layout == PackedMatrix::Layout::Q4_Kx16 || layout == PackedMatrix::Layout::Q6_Kx16;
  return k_quant ? dense_stream_ahead : stream_ahead;
}

namespace {

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
// back once per block, exact as every term is a multiple of 16. Measured
// against the one-token tile (bench_matmul, 151 MB Q4_0 from DRAM, one
// thread): 26 GB/s vs 19-21; TinyLlama-shaped decode: Q4_0 +3%, Q8_0 +6%
// (alternating runs).
// ahead: how far ahead to prefetch the weights (stream_ahead when they come
// from memory, 0 when they were just read).
template <bool kQ4>
CAIRN_VNNI __m512 tile_one_blocks(const uint8_t* gw, int64_t n, const uint8_t* act, __m512 acc,
                                  size_t ahead) {
  constexpr size_t kBlock = kQ4 ? kQ4Block : kQ8Block;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  const auto block = [&](const uint8_t* scales, const uint8_t* chunks, int64_t b)
      __attribute__((always_inline)) {
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
// each range of Q4_0 codes into a copy first, which at 2 tokens cost about as
// much as the dots (bench_matmul, 5632x2048 Q4_0, one thread: 2 tokens took
// 244-319 us, one token 95), and batch-2 decode ran no faster than batch 1.
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
      __attribute__((always_inline)) {
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

// Batches of 2..kFewTokens tokens take tile_few_run. TinyLlama Q4_0 decode,
// `bench-model -p 32 -n 32`, two rounds against the two-group tiles (AMD
// EPYC Zen 5, 2 threads, aggregate tok/s): batch 2 88-101 -> 152-165, 3
// 140-149 -> 189-203, 4 173-181 -> 218-239, 6 218-229 -> 273-308, 8 245-280
// -> 332-351; Q8_0 batch 2 70 -> 97, 4 119 -> 153, 8 236 -> 261. In tiles of
// 8 beyond that, against the same: Q4_0 batch 12 267-275 -> 322-324, 16
// 290-302 -> 332-350, 24 344-349 -> 369; Q8_0 12 248-256 -> 275-281, 16
// 287-293 -> 320-327. At 32 tokens the two paths tie, at 64 the two-group
// tiles win (412 against 374-384).
constexpr int kFewTokens = 24;
// From 4 tokens on, the kernels issue enough instructions per line of weights
// that the hardware prefetchers no longer keep up (as with the K-quants):
// they request weights dense_stream_ahead ahead on every host. At 2 and 3
// tokens that measured no better (batch 3: 167-190 with it, 189-203 without).
constexpr int kFewPrefetchFrom = 4;

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
// came in: bench_matmul BatchedDecodeSequence (TinyLlama decode matmuls, 2
// threads, alternating runs, Intel Xeon), 16 tokens: Q4_0 278-286 vs 201-215
// tok/s, Q8_0 280-283 vs 154-158; 8 tokens: Q4_0 227 vs 150, Q8_0 159 vs 77.
// Q4_0 codes are split once per range into bytes, laid out as Q8_0x16 blocks
// (chunk k + 4 holds chunk k's high nibbles, as Q8_0's chunk k + 4 holds
// elements 16 + 4k..), and every tile runs the Q8_0 arithmetic over that
// copy; splitting in every tile costs 3 instructions per chunk per tile (128
// tokens, one thread: 5632x2048 198-200 vs 189-195 GMAC/s). The activations'
// bias was made for Q4_0's offset, which the split codes keep, and each row
// still sums its blocks in order, so the bits do not change.
constexpr int64_t kUnpackBlocks = 16;  // even: every range starts a pair (see block_at)
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

// The range after the one ending at block `end` of slice c of groups g and
// g + 1: the rest of this slice, the next slice, or the next pair of groups
// (null at the end of the matrix); kUnpackBlocks blocks at most.
struct NextRange {
  const uint8_t* p[2] = {nullptr, nullptr};
  int64_t n = 0;
};
NextRange next_range(const PackedMatrix& pm, int64_t g, int64_t c, int64_t end, size_t block) {
  NextRange r;
  if (end < pm.slice_len(c)) {
    r.n = std::min(kUnpackBlocks, pm.slice_len(c) - end);
    for (int gi = 0; gi < 2; ++gi) r.p[gi] = pm.slice(g + gi, c) + (size_t)end * block;
  } else if (c + 1 < pm.n_slices()) {
    r.n = std::min(kUnpackBlocks, pm.slice_len(c + 1));
    for (int gi = 0; gi < 2; ++gi) r.p[gi] = pm.slice(g + gi, c + 1);
  } else if (g + 3 < pm.n_groups) {
    r.n = std::min(kUnpackBlocks, pm.slice_len(0));
    for (int gi = 0; gi < 2; ++gi) r.p[gi] = pm.slice(g + 2 + gi, 0);
  }
  return r;
}

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

// ---- AMX tiles ------------------------------------------------------------------
//
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

using PairFn = void (*)(const PackedMatrix&, int64_t, const uint8_t*, size_t, int64_t, float*,
                        int64_t);

// The tile kernel against the VNNI tiles on random weights and activations
// (both layouts, two ranges, a lone last block): true when every bit agrees.
// Run before the hardware path is used, and before the emulated one (so the
// emulated test passes run this check too).
template <class Tiles>
bool amx_agrees_with_vnni() {
  constexpr int64_t kRows = 32, kCols = 1056, kTokens = 2 * kAmxTokens;
  const std::vector<float> wf = amx_check_values((size_t)(kRows * kCols), 12345, 1.0f);
  const std::vector<float> x = amx_check_values((size_t)(kTokens * kCols), 54321, 3.0f);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0}) {
    const auto pm = amx_check_matrix(type, wf, kRows, kCols);
    if (!pm) return false;
    const size_t stride = act_stride(kCols);
    std::vector<uint8_t> act(stride * kTokens);
    for (int64_t t = 0; t < kTokens; ++t)
      quantize_act(weight_offset(pm->layout), x.data() + t * kCols, kCols, act.data() + t * stride);
    std::vector<float> want((size_t)(kTokens * kRows)), got(want.size());
    const bool q4 = type == TensorType::Q4_0;
    (q4 ? tile2_ranges<true> : tile2_ranges<false>)(*pm, 0, act.data(), stride, kTokens,
                                                    want.data(), kRows);
    (q4 ? amx_ranges<Tiles, true> : amx_ranges<Tiles, false>)(*pm, 0, act.data(), stride, kTokens,
                                                              got.data(), kRows);
    if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// amx_mode's answer (amx_tiles.h); the ISA level is capped by CAIRN_ISA.
AmxMode resolve_amx_mode() {
  const char* env = std::getenv("CAIRN_AMX");
  const std::string want = env ? env : "";
  if (want == "off" || !isa_enabled(Isa::Avx512Vnni)) return AmxMode::kOff;
  const bool emulate = want == "emulate";
  if (!emulate && !isa_enabled(Isa::Amx)) return AmxMode::kOff;
  const AmxMode mode = emulate ? AmxMode::kEmulated : AmxMode::kHardware;
  if (!(emulate ? amx_agrees_with_vnni<AmxEmulated>() : amx_agrees_with_vnni<AmxHardware>()) ||
      !amx_k_agrees_with_vnni(mode)) {
    std::fprintf(stderr,
                 "cairn: AMX tile results differ from the AVX-512 VNNI kernels; using VNNI\n");
    return AmxMode::kOff;
  }
  return mode;
}

// The AMX pair kernel of the active mode for this layout, or null.
PairFn amx_pair_fn(PackedMatrix::Layout layout) {
  const bool q4 = layout == PackedMatrix::Layout::Q4_0x16;
  switch (amx_mode()) {
    case AmxMode::kHardware:
      return q4 ? amx_ranges<AmxHardware, true> : amx_ranges<AmxHardware, false>;
    case AmxMode::kEmulated:
      return q4 ? amx_ranges<AmxEmulated, true> : amx_ranges<AmxEmulated, false>;
    case AmxMode::kOff:
      break;
  }
  return nullptr;
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

// Groups [g0, g1) of pm against tokens [t0, t1) with the AVX2 kernels: one
// token walks whole runs slice by slice (reading the weights in order, as
// tile_one_run), more go group by group in tiles (avx2_group_tokens), asking
// for weights ahead where few tokens leave the memory idle between lines.
void run_groups_avx2(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
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

// [0, n) split as the pool's static split (one contiguous range per share),
// each range walked front to back in whole chunks of kStealChunk (claims
// below); a share that finishes its own range takes chunks from the back of
// the others'. Reading stays sequential in every range (what the hardware
// prefetcher wants, which a shared queue of chunks would break), and no share
// waits for a slower one.
constexpr int64_t kStealChunk = 4;

struct alignas(64) StealRange {
  int64_t begin = 0, end = 0;
  std::atomic<uint64_t> front_back{0};  // next chunk from the front (high 32 bits), end (low)
};

// An owner claims a quarter of what is left of its range (at least one
// chunk), not one chunk at a time: every claim is a locked compare-exchange,
// which waits for the loads in flight before it, so per-chunk claims cut the
// weight stream ~6600 times per TinyLlama token (perf: ~2 % of decode samples
// on the CAS). Stealing still takes one chunk from the back, so the tail
// stays balanced. Measured on AMD EPYC (Zen 5), 2 threads, Q4_0 TinyLlama
// decode, 6 alternating bench-model runs: strict efficiency +1.3 points on
// average, paired +0.9, better in every pair.
constexpr uint64_t kGuideDiv = 4;

// Chunks [first, first + count) of r, claimed from its front (own) or its
// back (stolen); count 0 when none is left.
struct Claim {
  int64_t first = 0, count = 0;
};
Claim claim_chunks(StealRange& r, bool from_back) {
  uint64_t v = r.front_back.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = v >> 32, back = v & 0xFFFFFFFFu;
    if (front >= back) return {};
    const uint64_t take = from_back ? 1 : std::max<uint64_t>(1, (back - front) / kGuideDiv);
    const uint64_t next = from_back ? (front << 32) | (back - take) : ((front + take) << 32) | back;
    if (r.front_back.compare_exchange_weak(v, next, std::memory_order_relaxed))
      return {(int64_t)(from_back ? back - take : front), (int64_t)take};
  }
}

// Where share t of `shares` begins in run_balanced's split of [0, n).
inline int64_t share_begin(int64_t n, int shares, int t) {
  return t * (n / shares) + std::min<int64_t>(t, n % shares);
}

// Bytes a worker pulls in, after its share of one call, from where its share
// of the next call will begin (ThreadPool::warm_after_share): otherwise the
// worker idles through the caller's quantization and serial ops. Measured on
// TinyLlama decode, with and without it alternated token by token in one process
// (cairn run, 128 tokens each): Q4_0 +0.1..1.6 % tok/s (4 runs, mean +1.0 %),
// Q8_0 +0.2..0.4 %.
constexpr size_t kWarmBytes = size_t{256} << 10;

struct WarmRange {
  const uint8_t* p = nullptr;
  size_t bytes = 0;
};

// fn(g0, g1) over [0, n) as above; then each worker is asked to warm
// warm[share] (null: nothing to warm).
template <typename Fn>
void run_balanced(ThreadPool& pool, int64_t n, const Fn& fn, const WarmRange* warm) {
  const int shares = pool.size();
  thread_local std::unique_ptr<StealRange[]> ranges;
  thread_local int capacity = 0;
  if (capacity < shares) {
    ranges = std::make_unique<StealRange[]>((size_t)shares);
    capacity = shares;
  }
  for (int t = 0; t < shares; ++t) {
    StealRange& r = ranges[(size_t)t];
    r.begin = share_begin(n, shares, t);
    r.end = share_begin(n, shares, t + 1);
    const uint64_t chunks = (uint64_t)((r.end - r.begin + kStealChunk - 1) / kStealChunk);
    r.front_back.store(chunks, std::memory_order_relaxed);  // front 0, back = chunks
  }
  StealRange* all = ranges.get();
  pool.run([&](int share, int n_shares) {
    for (int k = 0; k < n_shares; ++k) {
      StealRange& r = all[(share + k) % n_shares];
      for (Claim c; (c = claim_chunks(r, k != 0)).count > 0;) {
        const int64_t b = r.begin + c.first * kStealChunk;
        fn(b, std::min(r.end, b + c.count * kStealChunk));
      }
    }
    if (warm) ThreadPool::warm_after_share(warm[share].p, warm[share].bytes);
  });
}

// For each share of a balanced single-pass call over `next`: the first
// kWarmBytes of its range (the start of the run holding its first group, up
// to the end of that matrix).
const WarmRange* warm_ranges(std::span<const PackedMatrix* const> next, int shares) {
  if (next.empty()) return nullptr;
  thread_local std::vector<WarmRange> ranges;
  ranges.assign((size_t)shares, WarmRange{});
  int64_t total = 0;
  for (const PackedMatrix* m : next) total += m->n_groups;
  for (int t = 0; t < shares; ++t) {
    int64_t g = share_begin(total, shares, t);
    for (const PackedMatrix* m : next) {
      if (g >= m->n_groups) {
        g -= m->n_groups;
        continue;
      }
      const size_t run_bytes = (size_t)m->n_blocks * m->block_bytes;
      const size_t at = (size_t)(g - g % PackedMatrix::kRunGroups) * run_bytes;
      const size_t size = (size_t)m->n_groups * run_bytes;
      ranges[(size_t)t] = {m->data + at, std::min(kWarmBytes, size - at)};
      break;
    }
  }
  return ranges.data();
}

}  // namespace

AmxMode amx_mode() {
  static const AmxMode mode = resolve_amx_mode();
  return mode;
}

std::vector<float> amx_check_values(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = scale * (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  return v;
}

std::shared_ptr<const PackedMatrix> amx_check_matrix(TensorType type, const std::vector<float>& w,
                                                     int64_t rows, int64_t cols) {
  const TypeOps* ops = scalar_type_ops(type);
  const std::optional<size_t> rb = row_bytes(type, cols);
  if (!ops || !rb) return nullptr;
  std::vector<uint8_t> data(*rb * (size_t)rows);
  for (int64_t r = 0; r < rows; ++r)
    ops->from_float(w.data() + r * cols, data.data() + r * *rb, cols);
  // The packed copy owns its bytes: data may go.
  return pack_matrix(WeightMatrix{type, data.data(), rows, cols, *rb, nullptr});
}

std::shared_ptr<const PackedMatrix> pack_matrix(const WeightMatrix& w) {
  if (!w.data || w.rows <= 0 || w.cols <= 0 || w.cols % 32 != 0) return nullptr;
  // Every layout has AVX2 kernels too: Q4_0, Q8_0 in packed_avx2.cpp, Q4_K,
  // Q6_K in packed_k.cpp, BF16 and F16 in packed_float.cpp.
  const bool avx2_type = w.type == TensorType::Q4_0 || w.type == TensorType::Q8_0 ||
                         w.type == TensorType::Q4_K || w.type == TensorType::Q6_K ||
                         w.type == TensorType::BF16 || w.type == TensorType::F16;
  if (!isa_enabled(Isa::Avx512Vnni) && !(avx2_type && isa_enabled(Isa::Avx2))) return nullptr;
  PackedMatrix::Layout layout;
  size_t block_bytes;
  if (w.type == TensorType::Q4_0) {
    layout = PackedMatrix::Layout::Q4_0x16;
    block_bytes = kQ4Block;
  } else if (w.type == TensorType::Q8_0) {
    layout = PackedMatrix::Layout::Q8_0x16;
    block_bytes = kQ8Block;
  } else if (w.type == TensorType::Q4_K && w.cols % 256 == 0) {
    layout = PackedMatrix::Layout::Q4_Kx16;
    block_bytes = kQ4KBlockBytes;
  } else if (w.type == TensorType::Q6_K && w.cols % 256 == 0) {
    layout = PackedMatrix::Layout::Q6_Kx16;
    block_bytes = kQ6KBlockBytes;
  } else if (w.type == TensorType::BF16) {
    layout = PackedMatrix::Layout::BF16x16;
    block_bytes = kBF16BlockBytes;
  } else if (w.type == TensorType::F16) {
    layout = PackedMatrix::Layout::F16x16;
    block_bytes = kF16BlockBytes;
  } else {
    return nullptr;
  }
  auto p = std::make_shared<PackedMatrix>();
  p->layout = layout;
  p->rows = w.rows;
  p->cols = w.cols;
  p->n_groups = (w.rows + kGroup - 1) / kGroup;
  const bool k_quant =
      layout == PackedMatrix::Layout::Q4_Kx16 || layout == PackedMatrix::Layout::Q6_Kx16;
  p->n_blocks = w.cols / (k_quant ? 256 : layout == PackedMatrix::Layout::F16x16 ? 16 : 32);
  // Only the Q4_0/Q8_0 kernels walk slices.
  const bool sliced =
      layout == PackedMatrix::Layout::Q4_0x16 || layout == PackedMatrix::Layout::Q8_0x16;
  p->slice_blocks = p->n_blocks > kSliceAbove && sliced ? kSliceBlocks : p->n_blocks;
  p->block_bytes = block_bytes;
  const size_t bytes = (size_t)p->n_groups * (size_t)p->n_blocks * block_bytes;
  std::tie(p->storage, p->data) = alloc_packed(bytes);
  if (!p->data) return nullptr;  // out of memory: the type table's kernels still work
  // Only a short last group has bytes the packers leave unwritten; its blocks
  // lie among those of its run.
  if (w.rows % kGroup != 0) {
    const int64_t last_run =
        (p->n_groups - 1) / PackedMatrix::kRunGroups * PackedMatrix::kRunGroups;
    const size_t from = (size_t)last_run * (size_t)p->n_blocks * block_bytes;
    std::memset(p->data + from, 0, bytes - from);
  }
  if (layout == PackedMatrix::Layout::BF16x16)
    pack_bf16_rows(w, *p);
  else if (layout == PackedMatrix::Layout::F16x16)
    pack_f16_rows(w, *p);
  else if (layout == PackedMatrix::Layout::Q4_Kx16)
    pack_q4_k_rows(w, *p);
  else if (layout == PackedMatrix::Layout::Q6_Kx16)
    pack_q6_k_rows(w, *p);
  else if (layout == PackedMatrix::Layout::Q4_0x16)
    pack_rows<BlockQ4_0, 4, 0x00>(w, *p);
  else
    pack_rows<BlockQ8_0, 8, 0x80>(w, *p);  // codes + 128: unsigned for vpdpbusd
  return p;
}

void prepare_weight(WeightMatrix& w) {
  if (!w.packed) w.packed = pack_matrix(w);
}

bool packed_compatible(const PackedMatrix& a, const PackedMatrix& b) {
  return a.layout == b.layout && a.cols == b.cols;
}

float* made_row_buffer(int64_t cols) {
  thread_local std::vector<float> row;
  row.resize(std::max(row.size(), (size_t)cols));
  return row.data();
}

bool packed_quantizes_rows(const PackedMatrix& p) {
  return p.layout != PackedMatrix::Layout::BF16x16 && p.layout != PackedMatrix::Layout::F16x16;
}

void packed_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                        ThreadPool& pool, std::span<const PackedMatrix* const> next) {
  if (n_tokens <= 0 || jobs.empty()) return;
  const PackedMatrix& first = *jobs[0].matrix;
  if (first.layout == PackedMatrix::Layout::Q4_Kx16 ||
      first.layout == PackedMatrix::Layout::Q6_Kx16)
    return packed_k_matmul_many(jobs, in, n_tokens, pool, next);
  if (!packed_quantizes_rows(first)) {
    if (in.maker) std::abort();  // matmul_many makes the rows first (packed_quantizes_rows)
    return packed_float_matmul_many(jobs, in.x, n_tokens, pool, next);
  }
  const size_t stride = act_stride(first.cols);
  thread_local std::vector<uint8_t> scratch;
  // Grown only: a prompt's layers alternate 2048- and 5632-column inputs, and
  // growing back after a shrink zero-filled megabytes every time (memset was
  // ~2 % of a 512-token TinyLlama prefill).
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  const bool vnni = isa_enabled(Isa::Avx512Vnni);  // else AVX2 (pack_matrix checked)
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    float* buf = in.maker ? made_row_buffer(first.cols) : nullptr;
    for (int64_t t = b; t < e; ++t)
      (vnni ? quantize_act : avx2_quantize_act)(weight_offset(first.layout), in.row(t, buf),
                                                first.cols, act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // Groups [g0, g1) of the jobs (one index over all of them), tokens [t0, t1).
  const auto run_groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    int64_t base = 0;
    for (const PackedJob& j : jobs) {
      if (!vnni) {
        run_groups_avx2(*j.matrix, std::max(g0, base) - base,
                        std::min(g1, base + j.matrix->n_groups) - base, act, stride, t0, t1, j.out);
        base += j.matrix->n_groups;
        continue;
      }
      const int64_t n = j.matrix->n_groups;
      const int64_t end = std::min(g1, base + n);
      // Where AMX runs, batches of a whole tile of tokens stay with it
      // (unmeasured: no host so far had AMX).
      const int64_t few_max = amx_pair_fn(j.matrix->layout) ? kAmxTokens - 1 : kFewTokens;
      if (t1 - t0 <= few_max) {  // whole runs in step, so the reads stay in order
        const PackedMatrix& pm = *j.matrix;
        const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
        const int64_t nt = t1 - t0;
        for (int64_t lg = std::max(g0, base) - base; lg < end - base;) {
          const int64_t run_end =
              std::min(end - base, lg - lg % PackedMatrix::kRunGroups + PackedMatrix::kRunGroups);
          const uint8_t* a = act + (size_t)t0 * stride;
          float* o = j.out + t0 * pm.rows;
          if (nt == 1)
            (q4 ? tile_one_run<true> : tile_one_run<false>)(pm, lg, run_end, a, o, stream_ahead);
          else
            tile_few_run(q4, pm, lg, run_end, a, stride, nt, o, pm.rows,
                         nt >= kFewPrefetchFrom ? dense_stream_ahead : stream_ahead);
          lg = run_end;
        }
        base += n;
        continue;
      }
      for (int64_t g = std::max(g0, base); g < end;) {
        const PackedMatrix& pm = *j.matrix;
        const int64_t lg = g - base;
        // Two whole groups and 2+ tokens: the two-group tiles.
        // Whole tiles of 16 tokens take AMX where it runs.
        if (g + 1 < end && (lg + 2) * kGroup <= pm.rows && t1 - t0 >= 2) {
          int64_t t = t0;
          if (t1 - t0 >= kAmxTokens) {
            if (const PairFn amx = amx_pair_fn(pm.layout)) {
              const int64_t n = (t1 - t0) / kAmxTokens * kAmxTokens;
              amx(pm, lg, act + (size_t)t * stride, stride, n, j.out + t * pm.rows + lg * kGroup,
                  pm.rows);
              t += n;
            }
          }
          if (t < t1) {
            const bool q4 = pm.layout == PackedMatrix::Layout::Q4_0x16;
            (q4 ? tile2_ranges<true>
                : tile2_ranges<false>)(pm, lg, act + (size_t)t * stride, stride, t1 - t,
                                       j.out + t * pm.rows + lg * kGroup, pm.rows);
          }
          g += 2;
          continue;
        }
        run_group(pm, lg, act, stride, t0, t1, j.out);
        ++g;
      }
      base += n;
    }
  };
  // Decode and small batches: one pass over the weights, nothing to keep in
  // cache, so a share that finishes early helps the others. Measured over 8
  // alternating TinyLlama Q4_0 decode runs: +3.5% tok/s on average (the
  // caller's share, e.g., often runs slower than a pinned worker's).
  if (n_tokens <= kTokenChunk && pool.size() > 1) {
    run_balanced(
        pool, total, [&](int64_t g0, int64_t g1) { run_groups(g0, g1, 0, n_tokens); },
        warm_ranges(next, pool.size()));
    return;
  }
  // The jobs' groups as one range, so one pass of the pool covers them all.
  // Each thread keeps its rows for the whole batch (its weights stay in its
  // caches across token chunks); a chunk's activations stay in L2 while the
  // thread's groups pass over them.
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk)
      run_groups(g0, g1, t0, std::min(n_tokens, t0 + kTokenChunk));
  });
}

void run_groups_balanced(ThreadPool& pool, int64_t n,
                         const std::function<void(int64_t, int64_t)>& fn,
                         std::span<const PackedMatrix* const> next) {
  run_balanced(pool, n, fn, warm_ranges(next, pool.size()));
}

const char* packed_tile_path() {
  if (!isa_enabled(Isa::Avx512Vnni)) return isa_enabled(Isa::Avx2) ? "avx2" : "none";
  return amx_path_name(amx_mode(), "avx512vnni");
}

void packed_matmul(const PackedMatrix& pm, const float* x, int64_t n_tokens, float* out,
                   ThreadPool& pool) {
  const PackedJob job{&pm, out};
  packed_matmul_many({&job, 1}, ActRows{x, nullptr, pm.cols}, n_tokens, pool, {});
}

}  // namespace cairn::kernels
