// kernels/packed_float.cpp — the BF16x16 / F16x16 layouts: packers, kernels, driver.
// Packed 16-bit float weights and their AVX-512 matmuls, with AVX2 kernels
// over the same layouts for hosts without them (layouts: packed.h).
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
// AMX-BF16 (where it runs): the same chains in tile accumulators, see below.
//
// F16: each row's 16 columns of a block are one 32-byte run, widened and
// multiplied with float activations into a 16-lane accumulator per (row,
// token), then reduced as _mm512_reduce_add_ps does: exactly the reference's
// tinyBLAS order (order::tiny_f16), so the bits are the type table's. Tiles
// are a quarter group (4 rows) by up to 4 tokens.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/simd.h"
#include "kernels/amx_tiles.h"
#include "kernels/float_order.h"
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

// ---- AMX-BF16 tiles -----------------------------------------------------------
//
// Where AMX-BF16 runs (amx_tiles.h), batches take tdpbf16ps, 16 tokens x 16
// rows x 8 columns per instruction, in the same float steps as the vdpbf16ps
// tiles, so a token keeps its bits alone or in a batch: one tile accumulator
// per chain (chain s: column pairs s, s + 4, s + 8, ... in order, as
// bf16_tile's acc[s]), B = four chunks of the packed group (pairs s + 4i of a
// block: one strided tile load) and A = the tokens' activations of the same
// pairs (a copy laid out by chain). vdpbf16ps adds a pair's odd product
// first, tdpbf16ps the even one: both copies swap each pair's halves, so the
// adds come in the vdpbf16ps order. Unmeasured: no host so far had AMX.

// Tiles 0..3: the chains' sums (16 tokens x 16 rows of float); 4: 16
// tokens' 4 pairs of one chain and block; 5: the group's 4 chunks of them.
const TileConfig& amx_bf16_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < kChains; ++i) t.rows[i] = kAmxTokens, t.colsb[i] = 64;
    t.rows[4] = kAmxTokens, t.colsb[4] = 16;
    t.rows[5] = kChunks / kChains, t.colsb[5] = 64;
    return t;
  }();
  return c;
}

// One token's BF16 activations (cols, a multiple of 32) by chain: block b's
// pairs s + 4i (i = 0..3) at pairs 16b + 4s + i, each pair's halves swapped.
CAIRN_BF16 void amx_bf16_activations(const uint16_t* act, int64_t cols, uint16_t* dst) {
  const __m512i by_chain = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  for (int64_t c = 0; c < cols; c += 32) {
    const __m512i x = _mm512_loadu_si512(act + c);
    _mm512_storeu_si512(dst + c, _mm512_rol_epi32(_mm512_permutexvar_epi32(by_chain, x), 16));
  }
}

// Group g against n_tokens tokens (a multiple of kAmxTokens) of activations
// laid out by amx_bf16_activations (act_stride elements apart):
// out[t * out_stride + r], as bf16_tile stores them.
template <class Tiles>
CAIRN_BF16 void amx_bf16_group(const PackedMatrix& pm, int64_t g, const uint16_t* act,
                               size_t act_stride, int64_t n_tokens, float* out,
                               int64_t out_stride) {
  // The group's chunks with each pair's halves swapped, for every tile.
  struct alignas(64) Chunk {
    uint8_t bytes[64];
  };
  thread_local std::vector<Chunk> swapped;
  const int64_t n_chunks = pm.n_blocks * kChunks;
  swapped.resize((size_t)n_chunks);
  const uint8_t* w = group_data(pm, g);
  for (int64_t c = 0; c < n_chunks; ++c)
    _mm512_store_si512(swapped[(size_t)c].bytes,
                       _mm512_rol_epi32(_mm512_load_si512(w + 64 * c), 16));
  const uint8_t* wc = swapped.data()->bytes;
  const size_t a_bytes = act_stride * 2;
  alignas(64) float sums[kChains][kAmxTokens * kGroup];
  const int64_t rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 m = (__mmask16)((1u << rows) - 1);
  Tiles::begin(amx_bf16_config());
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kAmxTokens) {
    const uint8_t* a = reinterpret_cast<const uint8_t*>(act + (size_t)t0 * act_stride);
    Tiles::template zero<0>();
    Tiles::template zero<1>();
    Tiles::template zero<2>();
    Tiles::template zero<3>();
    for (int64_t b = 0; b < pm.n_blocks; ++b) {
      const uint8_t* ab = a + 64 * b;     // 16 pairs of 4 bytes per block
      const uint8_t* wb = wc + 1024 * b;  // 16 chunks of 64 bytes per block
      Tiles::template load<4>(ab, a_bytes);
      Tiles::template load<5>(wb, 256);
      Tiles::template dot_bf16<0, 4, 5>();
      Tiles::template load<4>(ab + 16, a_bytes);
      Tiles::template load<5>(wb + 64, 256);
      Tiles::template dot_bf16<1, 4, 5>();
      Tiles::template load<4>(ab + 32, a_bytes);
      Tiles::template load<5>(wb + 128, 256);
      Tiles::template dot_bf16<2, 4, 5>();
      Tiles::template load<4>(ab + 48, a_bytes);
      Tiles::template load<5>(wb + 192, 256);
      Tiles::template dot_bf16<3, 4, 5>();
    }
    Tiles::template store<0>(sums[0], 64);
    Tiles::template store<1>(sums[1], 64);
    Tiles::template store<2>(sums[2], 64);
    Tiles::template store<3>(sums[3], 64);
    for (int t = 0; t < kAmxTokens; ++t) {
      const __m512 sum = _mm512_add_ps(
          _mm512_add_ps(_mm512_load_ps(sums[0] + kGroup * t), _mm512_load_ps(sums[1] + kGroup * t)),
          _mm512_add_ps(_mm512_load_ps(sums[2] + kGroup * t),
                        _mm512_load_ps(sums[3] + kGroup * t)));
      _mm512_mask_storeu_ps(out + (t0 + t) * out_stride + g * kGroup, m, sum);
    }
  }
  Tiles::end();
}

using AmxBf16Fn = void (*)(const PackedMatrix&, int64_t, const uint16_t*, size_t, int64_t, float*,
                           int64_t);

AmxBf16Fn amx_bf16_fn(AmxMode mode) {
  switch (mode) {
    case AmxMode::kHardware:
      return amx_bf16_group<AmxHardware>;
    case AmxMode::kEmulated:
      return amx_bf16_group<AmxEmulated>;
    case AmxMode::kOff:
      break;
  }
  return nullptr;
}

// ---- BF16 on AVX2 -------------------------------------------------------------
//
// Hosts without vdpbf16ps (AVX2, or AVX-512 without BF16) read the same packed
// copy in the same float steps: a 64-byte chunk is two ymm of 8 rows' pairs
// each; a pair's odd element (the high half of its 32 bits, masked) and even
// one (shifted up) are floats, each multiplied by its activation and added in
// vdpbf16ps's order, odd first (an exact product, so the fma is that add). The
// chains and their final sum are bf16_tile's: the same bits, so a model gives
// the same tokens on either host (subnormals aside: the instruction flushes
// them). The activations are rounded to bf16 and widened back to float once,
// so each is one broadcast load.

#define CAIRN_BF16_AVX2 CAIRN_SIMD_FN("avx2,fma")

// dst[i] = bf16_to_f32(f32_to_bf16(x[i])), bit for bit (ties to even, NaN
// quieted).
CAIRN_BF16_AVX2 void activations_to_bf16_floats(const float* x, int64_t n, float* dst) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_and_si256(_mm256_add_epi32(v, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_and_si256(v, hi), _mm256_set1_epi32(0x00400000));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_blendv_epi8(rounded, quiet, nan));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// Group g's 16 rows against one token's activations (floats): out[r] for the
// group's rows r.
CAIRN_BF16_AVX2 void bf16_group_avx2(const PackedMatrix& pm, int64_t g, const float* act,
                                     float* out) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  __m256 acc[2][kChains];  // [rows 0-7 / 8-15][chain]
#pragma GCC unroll 4
  for (int s = 0; s < kChains; ++s) acc[0][s] = acc[1][s] = _mm256_setzero_ps();
  const uint8_t* w = group_data(pm, g);
  const int64_t n_pairs = pm.n_blocks * kChunks;
  for (int64_t c = 0; c < n_pairs; c += kChains, w += 64 * kChains) {
#pragma GCC unroll 4
    for (int s = 0; s < kChains; ++s) {
      const __m256 a_even = _mm256_broadcast_ss(act + 2 * (c + s));
      const __m256 a_odd = _mm256_broadcast_ss(act + 2 * (c + s) + 1);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 64 * s + 32 * h));
        acc[h][s] =
            _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(wv, hi)), a_odd, acc[h][s]);
        acc[h][s] =
            _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wv, 16)), a_even, acc[h][s]);
      }
    }
  }
  const int64_t rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  alignas(32) float sums[kGroup];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
    _mm256_store_ps(sums + 8 * h, _mm256_add_ps(_mm256_add_ps(acc[h][0], acc[h][1]),
                                                _mm256_add_ps(acc[h][2], acc[h][3])));
  std::memcpy(out, sums, (size_t)rows * sizeof(float));
}

// ---- F16 on AVX2 --------------------------------------------------------------
//
// f16_quarter's steps for one token with each 16-lane accumulator as two ymm
// (lanes 0-7 and 8-15) and _mm512_reduce_add_ps's tree at the end
// (order::reduce16): the same bits, the tinyBLAS order. Tokens of a batch go
// one after another; a quarter's weights (4 rows) stay in L1 or L2 between
// them.

#define CAIRN_F16_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

// Group g's rows against one token's float activations: out[r] for the
// group's rows r.
CAIRN_F16_AVX2 void f16_group_avx2(const PackedMatrix& pm, int64_t g, const float* act,
                                   float* out) {
  constexpr int R = kF16QuarterRows;
  for (int q = 0; q < kGroup / R && g * kGroup + q * R < pm.rows; ++q) {
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const uint8_t* w = group_data(pm, g) + (size_t)q * (size_t)pm.n_blocks * (32 * R);
    for (int64_t b = 0; b < pm.n_blocks; ++b, w += 32 * R) {
      const __m256 x0 = _mm256_loadu_ps(act + 16 * b), x1 = _mm256_loadu_ps(act + 16 * b + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m128i* run = reinterpret_cast<const __m128i*>(w + 32 * r);
        acc[r][0] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_load_si128(run)), x0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_load_si128(run + 1)), x1, acc[r][1]);
      }
    }
    const int64_t rows = std::min<int64_t>(R, pm.rows - g * kGroup - q * R);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      alignas(32) float lanes[16];
      _mm256_store_ps(lanes, acc[r][0]);
      _mm256_store_ps(lanes + 8, acc[r][1]);
      out[q * R + r] = order::reduce16(lanes);
    }
  }
}

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

bool amx_bf16_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x,
                               int64_t n_tokens) {
  const int64_t rows = pm.rows, cols = pm.cols;
  std::vector<uint16_t> act((size_t)(n_tokens * cols)), by_chain(act.size());
  activations_to_bf16(x, (int64_t)act.size(), act.data());
  const AmxBf16Fn amx = amx_bf16_fn(mode);
  if (!amx) return false;
  for (int64_t t = 0; t < n_tokens; ++t)
    amx_bf16_activations(act.data() + t * cols, cols, by_chain.data() + t * cols);
  std::vector<float> want((size_t)(n_tokens * rows)), got(want.size());
  for (int64_t g = 0; g < pm.n_groups; ++g) {
    for (int64_t t = 0; t < n_tokens; ++t)
      bf16_tile<1, 1>(pm, g, act.data() + t * cols, cols, want.data() + t * rows, rows);
    amx(pm, g, by_chain.data(), cols, n_tokens, got.data(), rows);
  }
  return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
}

void packed_float_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                              ThreadPool& pool, std::span<const PackedMatrix* const> next,
                              AmxModeFn amx_bf16_mode) {
  if (in.maker) std::abort();  // matmul_many makes the rows first (packed_quantizes_rows)
  const float* x = in.x;
  const int64_t cols = jobs[0].matrix->cols;
  const bool bf16 = jobs[0].matrix->layout == PackedMatrix::Layout::BF16x16;
  // Without AVX-512 (VNNI, and BF16 for BF16): every (group, token) through
  // the AVX2 kernels.
  const bool avx2 = !isa_enabled(Isa::Avx512Vnni) || (bf16 && !bf16_enabled());
  // F16 meets the float activations as they are; BF16 rounds them first (to
  // bf16, or for the AVX2 kernel to floats of bf16 values).
  const void* act = x;
  size_t elem = sizeof(float);
  if (bf16 && avx2) {
    thread_local std::vector<float> rounded;
    rounded.resize(std::max(rounded.size(), (size_t)(cols * n_tokens)));
    float* a = rounded.data();  // through a pointer: each worker has its own `rounded`
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) activations_to_bf16_floats(x + t * cols, cols, a + t * cols);
    });
    act = a;
  } else if (bf16) {
    thread_local std::vector<uint16_t> rounded;
    rounded.resize(std::max(rounded.size(), (size_t)(cols * n_tokens)));
    uint16_t* a = rounded.data();
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) activations_to_bf16(x + t * cols, cols, a + t * cols);
    });
    act = a;
    elem = sizeof(uint16_t);
  }
  // AMX-BF16: whole tiles of 16 tokens, from a copy of the activations laid
  // out by chain.
  const AmxBf16Fn amx =
      bf16 && !avx2 && n_tokens >= kAmxTokens ? amx_bf16_fn(amx_bf16_mode()) : nullptr;
  const uint16_t* amx_act = nullptr;
  if (amx) {
    thread_local std::vector<uint16_t> by_chain;
    by_chain.resize(std::max(by_chain.size(), (size_t)(cols * n_tokens)));
    // Through a pointer: by_chain named inside the workers' lambda would be
    // each worker's own, empty vector.
    uint16_t* dst = by_chain.data();
    const auto* a = static_cast<const uint16_t*>(act);
    pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) amx_bf16_activations(a + t * cols, cols, dst + t * cols);
    });
    amx_act = dst;
  }
  const TileFn* tiles = bf16 ? kBf16Tiles : kF16Tiles;
  const int max_tile = bf16 ? kMaxTile : kF16MaxTile;
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // Groups [g0, g1) of the jobs (one index over all of them), tokens [t0, t1).
  const auto run_groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    if (avx2) {
      const auto group = bf16 ? bf16_group_avx2 : f16_group_avx2;
      const auto* a = static_cast<const float*>(act);
      int64_t base = 0;
      for (const PackedJob& j : jobs) {
        const PackedMatrix& pm = *j.matrix;
        const int64_t end = std::min(g1, base + pm.n_groups);
        for (int64_t g = std::max(g0, base); g < end; ++g)
          for (int64_t t = t0; t < t1; ++t)
            group(pm, g - base, a + t * cols, j.out + t * pm.rows + (g - base) * kGroup);
        base += pm.n_groups;
      }
      return;
    }
    const int64_t n_amx = amx ? (t1 - t0) / kAmxTokens * kAmxTokens : 0;
    int64_t base = 0;
    for (const PackedJob& j : jobs) {
      const PackedMatrix& pm = *j.matrix;
      const int64_t end = std::min(g1, base + pm.n_groups);
      for (int64_t g = std::max(g0, base); g < end && n_amx > 0; ++g)
        amx(pm, g - base, amx_act + t0 * cols, (size_t)cols, n_amx, j.out + t0 * pm.rows, pm.rows);
      base += pm.n_groups;
    }
    t0 += n_amx;
    base = 0;
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
  // the next call's weights, as the integer kernels' decode does.
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
