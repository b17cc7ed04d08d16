// Packed BF16 weights and their AVX-512 BF16 matmul (layout: packed.h).
//
// Each 64-byte chunk holds two adjacent columns of 16 rows, so one vdpbf16ps
// with a broadcast activation pair adds two exact products into each row's
// lane: no horizontal sums, and a decode pass reads the matrix front to back
// as one stream (from huge pages) instead of one 4 KiB-paged stream per row.
// Every (row, token) sum takes the same steps whatever the tile size or the
// thread split: four chains by chunk index mod 4, then (c0 + c1) + (c2 + c3).
// So a token gives the same bits alone or in a batch. The scalar reference
// sums in double, so against it only summation rounding differs.
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/simd.h"
#include "kernels/packed.h"

#define CAIRN_BF16 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")

namespace cairn::kernels {

namespace {

constexpr int kGroup = 16;
constexpr int kChunks = 16;          // per block of 32 columns
constexpr int kChains = 4;           // accumulators per (row, token)
constexpr int kMaxTile = 6;          // tokens per tile: 24 accumulators
constexpr int64_t kTokenChunk = 64;  // tokens whose activations stay in L2 per pass
static_assert(kChunks * 64 == kBF16BlockBytes, "packed.h names the block size");

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
  return pm.data + (size_t)g * (size_t)pm.n_blocks * kBF16BlockBytes;
}

// Rows of group g (16, or fewer in a short last group) for NT tokens:
// out[t * out_stride + r] for the group's rows r.
template <int NT>
CAIRN_BF16 void tile(const PackedMatrix& pm, int64_t g, const uint16_t* act, size_t act_stride,
                     float* out, int64_t out_stride) {
  __m512 acc[kChains][NT];
  for (int s = 0; s < kChains; ++s)
    for (int t = 0; t < NT; ++t) acc[s][t] = _mm512_setzero_ps();
  const uint8_t* w = group_data(pm, g);
  const int64_t n_pairs = pm.n_blocks * kChunks;  // column pairs
  for (int64_t c = 0; c < n_pairs; c += kChains, w += 64 * kChains) {
    for (int s = 0; s < kChains; ++s) {
      const __m512bh wv = (__m512bh)_mm512_load_si512(w + 64 * s);
      for (int t = 0; t < NT; ++t) {
        uint32_t pair;
        std::memcpy(&pair, act + (size_t)t * act_stride + 2 * (c + s), 4);
        acc[s][t] = _mm512_dpbf16_ps(acc[s][t], wv, (__m512bh)_mm512_set1_epi32((int)pair));
      }
    }
  }
  const int64_t rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 m = (__mmask16)((1u << rows) - 1);
  for (int t = 0; t < NT; ++t) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]), _mm512_add_ps(acc[2][t], acc[3][t]));
    _mm512_mask_storeu_ps(out + t * out_stride + g * kGroup, m, sum);
  }
}

using TileFn = void (*)(const PackedMatrix&, int64_t, const uint16_t*, size_t, float*, int64_t);
constexpr TileFn kTiles[kMaxTile] = {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

void pack_bf16_rows(const WeightMatrix& w, PackedMatrix& p) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    uint8_t* dst = p.data + (size_t)g * (size_t)p.n_blocks * kBF16BlockBytes;
    for (int r = 0; r < kGroup && g * kGroup + r < w.rows; ++r) {  // padding rows stay zero
      const uint8_t* row = src + (size_t)(g * kGroup + r) * w.row_stride;
      for (int64_t pair = 0; pair < p.n_blocks * kChunks; ++pair)
        std::memcpy(dst + 64 * pair + 4 * r, row + 4 * pair, 4);
    }
  }
}

void packed_bf16_matmul_many(std::span<const PackedJob> jobs, const float* x, int64_t n_tokens,
                             ThreadPool& pool) {
  const int64_t cols = jobs[0].matrix->cols;
  const size_t stride = (size_t)cols;  // bf16 elements per token
  thread_local std::vector<uint16_t> act;
  act.resize(std::max(act.size(), stride * (size_t)n_tokens));
  uint16_t* a = act.data();
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) activations_to_bf16(x + t * cols, cols, a + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // The jobs' groups as one range; each thread keeps its groups for every
  // chunk of tokens (their weights stay in its caches across chunks).
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
      const int64_t t1 = std::min(n_tokens, t0 + kTokenChunk);
      int64_t base = 0;
      for (const PackedJob& j : jobs) {
        const PackedMatrix& pm = *j.matrix;
        for (int64_t g = std::max(g0, base); g < std::min(g1, base + pm.n_groups); ++g) {
          for (int64_t t = t0; t < t1; t += kMaxTile) {
            const int nt = (int)std::min<int64_t>(kMaxTile, t1 - t);
            kTiles[nt - 1](pm, g - base, a + (size_t)t * stride, stride, j.out + t * pm.rows,
                           pm.rows);
          }
        }
        base += pm.n_groups;
      }
    }
  });
}

}  // namespace cairn::kernels
