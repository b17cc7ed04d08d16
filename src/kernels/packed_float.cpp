// Packed 16-bit float weights and their AVX-512 matmuls (layouts: packed.h).
// Either way a decode pass reads the matrix front to back as one stream (from
// huge pages) instead of one 4 KiB-paged stream per row, and every (row,
// token) sum takes the same steps whatever the tile size or the thread split,
// so a token gives the same bits alone or in a batch.
//
// BF16: each 64-byte chunk holds two adjacent columns of 16 rows, so one
// vdpbf16ps with a broadcast activation pair adds two exact products into each
// row's lane: no horizontal sums. Four chains by chunk index mod 4, then
// (c0 + c1) + (c2 + c3). The scalar reference sums in double, so against it
// only summation rounding differs.
//
// F16: each row's 16 columns of a block are one 32-byte run, widened and
// multiplied with float activations into a 16-lane accumulator per (row,
// token), then reduced as _mm512_reduce_add_ps does: exactly the reference's
// tinyBLAS order (order::tiny_f16), so the bits are the type table's. Tiles
// are a quarter group (4 rows) by up to 4 tokens.
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/simd.h"
#include "kernels/packed.h"

#define CAIRN_BF16 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")
#define CAIRN_F16 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

namespace cairn::kernels {

namespace {

constexpr int kGroup = 16;
constexpr int kChunks = 16;          // BF16: column pairs per block of 32 columns
constexpr int kChains = 4;           // BF16: accumulators per (row, token)
constexpr int kMaxTile = 6;          // BF16 tokens per one-group tile: 24 accumulators
constexpr int kF16QuarterRows = 4;   // F16 rows per tile
constexpr int kF16MaxTile = 4;       // F16 tokens per tile: 4 x 4 accumulators, 4 weight rows
constexpr int64_t kTokenChunk = 64;  // tokens whose activations stay in L2 per pass
static_assert(kChunks * 64 == kBF16BlockBytes, "packed.h names the block size");
static_assert(kGroup * 32 == kF16BlockBytes, "packed.h names the block size");

// f32_to_bf16 for 16 floats at once, bit for bit (ties to even, NaN quieted).
CAIRN_BF16 inline __m256i round_bf16(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

CAIRN_BF16 void activations_to_bf16(const float* x, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), round_bf16(_mm512_loadu_si512(x + i)));
  for (; i < n; ++i) dst[i] = f32_to_bf16(x[i]);
}

inline const uint8_t* group_data(const PackedMatrix& pm, int64_t g) {
  return pm.data + (size_t)g * (size_t)pm.n_blocks * pm.block_bytes;
}

// Rows of groups g..g+NG-1 (16 each, or fewer in a short last group) for NT
// tokens: out[t * out_stride + r] for the groups' rows r. Two groups share
// each broadcast activation pair, which halves the broadcasts per vdpbf16ps
// in batches (the loads, not the arithmetic, bound these tiles).
template <int NG, int NT>
CAIRN_BF16 void bf16_tile(const PackedMatrix& pm, int64_t g, const void* activations,
                          size_t act_stride, float* out, int64_t out_stride) {
  const auto* act = static_cast<const uint16_t*>(activations);
  __m512 acc[NG][kChains][NT];
#pragma GCC unroll 16
  for (int k = 0; k < NG; ++k)
#pragma GCC unroll 16
    for (int s = 0; s < kChains; ++s)
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) acc[k][s][t] = _mm512_setzero_ps();
  const uint8_t* w = group_data(pm, g);
  const size_t group_bytes = (size_t)pm.n_blocks * kBF16BlockBytes;
  const int64_t n_pairs = pm.n_blocks * kChunks;  // column pairs
  for (int64_t c = 0; c < n_pairs; c += kChains, w += 64 * kChains) {
#pragma GCC unroll 16
    for (int s = 0; s < kChains; ++s) {
      __m512bh wv[NG];
#pragma GCC unroll 16
      for (int k = 0; k < NG; ++k)
        wv[k] = (__m512bh)_mm512_load_si512(w + k * group_bytes + 64 * s);
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        uint32_t pair;
        std::memcpy(&pair, act + (size_t)t * act_stride + 2 * (c + s), 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
#pragma GCC unroll 16
        for (int k = 0; k < NG; ++k) acc[k][s][t] = _mm512_dpbf16_ps(acc[k][s][t], wv[k], a);
      }
    }
  }
#pragma GCC unroll 16
  for (int k = 0; k < NG; ++k) {
    const int64_t rows = std::min<int64_t>(kGroup, pm.rows - (g + k) * kGroup);
    const __mmask16 m = (__mmask16)((1u << rows) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[k][0][t], acc[k][1][t]),
                                       _mm512_add_ps(acc[k][2][t], acc[k][3][t]));
      _mm512_mask_storeu_ps(out + t * out_stride + (g + k) * kGroup, m, sum);
    }
  }
}

// The four rows of quarter q of F16 group g for NT tokens of float
// activations (act_stride floats apart), stored as bf16_tile does. A quarter
// is contiguous (packed.h), so every tile streams its weights in order.
template <int NT>
CAIRN_F16 void f16_quarter(const PackedMatrix& pm, int64_t g, int q, const float* act,
                           size_t act_stride, float* out, int64_t out_stride) {
  constexpr int R = kF16QuarterRows;
  __m512 acc[R][NT];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* w = group_data(pm, g) + (size_t)q * (size_t)pm.n_blocks * (32 * R);
  for (int64_t b = 0; b < pm.n_blocks; ++b, w += 32 * R) {
    __m512 wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      wv[r] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(w + 32 * r)));
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m512 x = _mm512_loadu_ps(act + (size_t)t * act_stride + 16 * b);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], x, acc[r][t]);
    }
  }
  // Constant indices only (rows is checked inside the unrolled loop): indexing
  // acc at run time would keep all of it in memory instead of registers.
  const int64_t r0 = g * kGroup + q * R;
  const int64_t rows = std::min<int64_t>(R, pm.rows - r0);
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      if (r < rows) out[t * out_stride + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int NT>
CAIRN_F16 void f16_tile(const PackedMatrix& pm, int64_t g, const void* act, size_t act_stride,
                        float* out, int64_t out_stride) {
  for (int q = 0; q < kGroup / kF16QuarterRows && g * kGroup + q * kF16QuarterRows < pm.rows; ++q)
    f16_quarter<NT>(pm, g, q, static_cast<const float*>(act), act_stride, out, out_stride);
}

using TileFn = void (*)(const PackedMatrix&, int64_t, const void*, size_t, float*, int64_t);
constexpr TileFn kBf16Tiles[kMaxTile] = {bf16_tile<1, 1>, bf16_tile<1, 2>, bf16_tile<1, 3>,
                                         bf16_tile<1, 4>, bf16_tile<1, 5>, bf16_tile<1, 6>};
// Two groups at once, for batches: 2 x 4 chains x 3 tokens = 24 accumulators.
constexpr int kBf16PairTile = 3;
constexpr TileFn kBf16PairTiles[kBf16PairTile] = {bf16_tile<2, 1>, bf16_tile<2, 2>,
                                                  bf16_tile<2, 3>};
constexpr TileFn kF16Tiles[kF16MaxTile] = {f16_tile<1>, f16_tile<2>, f16_tile<3>, f16_tile<4>};

// Both layouts cut each row into runs of `run` bytes and interleave those of
// `rows` rows at a time: run i of row r goes to byte
// (r / rows) * runs * rows * run + (i * rows + r % rows) * run of its group.
void pack_runs(const WeightMatrix& w, PackedMatrix& p, size_t run, int rows) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  const size_t runs = (size_t)p.n_blocks * p.block_bytes / (kGroup * run);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    uint8_t* dst = p.data + (size_t)g * (size_t)p.n_blocks * p.block_bytes;
    for (int r = 0; r < kGroup && g * kGroup + r < w.rows; ++r) {  // padding rows stay zero
      const uint8_t* row = src + (size_t)(g * kGroup + r) * w.row_stride;
      uint8_t* sub = dst + (size_t)(r / rows) * runs * rows * run + (size_t)(r % rows) * run;
      for (size_t i = 0; i < runs; ++i) std::memcpy(sub + i * rows * run, row + run * i, run);
    }
  }
}

}  // namespace

void pack_bf16_rows(const WeightMatrix& w, PackedMatrix& p) { pack_runs(w, p, 4, kGroup); }

void pack_f16_rows(const WeightMatrix& w, PackedMatrix& p) { pack_runs(w, p, 32, kF16QuarterRows); }

void packed_float_matmul_many(std::span<const PackedJob> jobs, const float* x, int64_t n_tokens,
                              ThreadPool& pool, std::span<const PackedMatrix* const> next) {
  const int64_t cols = jobs[0].matrix->cols;
  const bool bf16 = jobs[0].matrix->layout == PackedMatrix::Layout::BF16x16;
  // F16 meets the float activations as they are; BF16 rounds them first.
  const void* act = x;
  size_t elem = sizeof(float);
  if (bf16) {
    thread_local std::vector<uint16_t> rounded;
    rounded.resize(std::max(rounded.size(), (size_t)(cols * n_tokens)));
    uint16_t* a = rounded.data();
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) activations_to_bf16(x + t * cols, cols, a + t * cols);
    });
    act = a;
    elem = sizeof(uint16_t);
  }
  const TileFn* tiles = bf16 ? kBf16Tiles : kF16Tiles;
  const int max_tile = bf16 ? kMaxTile : kF16MaxTile;
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // Groups [g0, g1) of the jobs (one index over all of them), tokens [t0, t1).
  const auto run_groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    int64_t base = 0;
    for (const PackedJob& j : jobs) {
      const PackedMatrix& pm = *j.matrix;
      const int64_t end = std::min(g1, base + pm.n_groups);
      for (int64_t g = std::max(g0, base); g < end;) {
        // BF16 batches take two groups per tile where two are left.
        const bool pair = bf16 && t1 - t0 >= 2 && g + 1 < end;
        const TileFn* fns = pair ? kBf16PairTiles : tiles;
        const int most = pair ? kBf16PairTile : max_tile;
        for (int64_t t = t0; t < t1; t += most) {
          const int nt = (int)std::min<int64_t>(most, t1 - t);
          fns[nt - 1](pm, g - base, static_cast<const char*>(act) + (size_t)(t * cols) * elem,
                      (size_t)cols, j.out + t * pm.rows, pm.rows);
        }
        g += pair ? 2 : 1;
      }
      base += pm.n_groups;
    }
  };
  // One token: one pass over the weights, nothing to keep in cache, so a
  // share that finishes early takes groups from a slower one, and workers warm
  // the next call's weights, as the integer kernels' decode does. (On this
  // busy AMD host, alternating runs with the static split could not tell the
  // two apart: run-to-run noise ±20 %.)
  if (n_tokens == 1 && pool.size() > 1) {
    run_groups_balanced(
        pool, total, [&](int64_t g0, int64_t g1) { run_groups(g0, g1, 0, 1); }, next);
    return;
  }
  // The jobs' groups as one range; each thread keeps its groups for every
  // chunk of tokens (their weights stay in its caches across chunks).
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk)
      run_groups(g0, g1, t0, std::min(n_tokens, t0 + kTokenChunk));
  });
}

}  // namespace cairn::kernels
