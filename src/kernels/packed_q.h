// kernels/packed_q.h — internal to src/kernels: what the Q4_0x16 / Q8_0x16
// kernels share, the AVX-512 VNNI ones (packed_q_vnni.cpp), the AMX ones
// (packed_q_amx.cpp) and the AVX2 ones (packed_q_avx2.cpp): where a block
// keeps its scales and codes, the activation records, the token batching, and
// the entry points their driver (packed_q.cpp) calls. The layouts
// themselves: packed.h.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/packed.h"
#include "kernels/packed_layout.h"

namespace cairn::kernels {

constexpr size_t kQ4Block = 32 + 4 * 64;  // scales + 4 chunks of 16 rows x 4 bytes (nibbles)
constexpr size_t kQ8Block = 32 + 8 * 64;  // scales + 8 chunks of 16 rows x 4 bytes

constexpr int64_t kTokenChunk = 64;  // tokens whose activations stay in L2 per pass
// Batches of 2..kFewTokens tokens take the VNNI few-token tiles
// (vnni_few_run), faster there than the two-group tiles, which win from about
// 32 tokens on.
constexpr int kFewTokens = 24;
// From 4 tokens on, the kernels issue enough instructions per line of weights
// that the hardware prefetchers no longer keep up (as with the K-quants):
// they request weights dense_stream_ahead ahead on every host (at 2 and 3
// tokens that is no better).
constexpr int kFewPrefetchFrom = 4;

// Batches walk a pair of groups range by range (vnni_pair_ranges, and the AMX
// tiles): kUnpackBlocks blocks of both groups at a time, while the next range
// is requested from memory.
constexpr int64_t kUnpackBlocks = 16;  // even: every range starts a pair (see block_at)

// The range after the one ending at block `end` of slice c of groups g and
// g + 1: the rest of this slice, the next slice, or the next pair of groups
// (null at the end of the matrix); kUnpackBlocks blocks at most.
struct NextRange {
  const uint8_t* p[2] = {nullptr, nullptr};
  int64_t n = 0;
};
inline NextRange next_range(const PackedMatrix& pm, int64_t g, int64_t c, int64_t end,
                            size_t block) {
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

// Where block b of a slice of `len` blocks at s keeps its 16 scales and its
// chunks (see PackedMatrix): blocks go in pairs, both blocks' scales in the
// pair's first cache line, then each block's chunks; an odd slice's last block
// stands alone, scales then chunks.
struct BlockAt {
  const uint8_t* scales;
  const uint8_t* chunks;
};
inline BlockAt block_at(const uint8_t* s, int64_t b, int64_t len, size_t block_bytes) {
  const uint8_t* pair = s + (size_t)(b & ~int64_t{1}) * block_bytes;
  if ((b | 1) >= len) return {pair, pair + 32};
  const size_t second = (size_t)(b & 1);
  return {pair + 32 * second, pair + 64 + second * (block_bytes - 32)};
}

// ---- activations --------------------------------------------------------------
//
// Each token's row is quantized to Q8_0 exactly as quant::q8_0_from_float_act
// does (scale 127/amax, ties to even; the stored f16 scale is what the dot
// uses), laid out as one 40-byte record per block: qs[32], d (float), bias:
// the exact correction for the weights' offset, -8 (Q4_0 codes are stored
// 0..15) or -128 (Q8_0 codes are stored +128, unsigned for vpdpbusd) times
// the block's sum of activation codes. One record per block means one pointer
// per token in the kernels: with separate qs/d/bias arrays a 5-token tile
// needed 15, and the compiler kept them in vector registers and moved them
// back per use (~60 extra instructions per block).
constexpr size_t kActRec = 40;

inline size_t act_stride(int64_t cols) {
  const size_t bytes = kActRec * (size_t)(cols / 32);
  return (bytes + 63) & ~size_t{63};
}

inline float act_d(const uint8_t* rec) {
  float d;
  std::memcpy(&d, rec + 32, 4);
  return d;
}
inline int32_t act_bias(const uint8_t* rec) {
  int32_t b;
  std::memcpy(&b, rec + 36, 4);
  return b;
}

inline int32_t weight_offset(PackedMatrix::Layout layout) {
  return layout == PackedMatrix::Layout::Q4_0x16 ? 8 : 128;
}

// ---- AVX-512 VNNI kernels (packed_q_vnni.cpp) ------------------------------------
//
// The VNNI kernels' records of one token's row x (cols a multiple of 32).
void vnni_quantize_act(int32_t offset, const float* x, int64_t cols, uint8_t* dst);

// One token against groups [g0, g1) of one run of pm, slice by slice:
// out[r] for their rows. ahead: bytes ahead of its loads to request weights
// (0: none).
void vnni_one_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, float* out,
                  size_t ahead);

// Tokens [0, n) (n <= kFewTokens, records `stride` bytes apart) against groups
// [g0, g1) of one run, slice by slice: out[t * out_stride + r]. Only the first
// tile of tokens requests weights `ahead`.
void vnni_few_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, size_t stride,
                  int64_t n, float* out, int64_t out_stride, size_t ahead);

// Tokens [t0, t1) against group g, in one-group tiles (records `stride` bytes
// apart from act): out[t * pm.rows + r].
void vnni_group_tiles(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                      int64_t t0, int64_t t1, float* out);

// Groups g and g + 1 (both whole) against n_tokens tokens (at most
// kTokenChunk) in two-group tiles, range by range: out[t * out_stride + r] for
// their 32 rows, out pointing at group g's first row.
void vnni_pair_ranges(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                      int64_t n_tokens, float* out, int64_t out_stride);

// ---- AMX kernels (packed_q_amx.cpp) ------------------------------------------------

// vnni_pair_ranges' contract for n_tokens a multiple of kAmxTokens, in tiles.
using AmxPairFn = void (*)(const PackedMatrix&, int64_t, const uint8_t*, size_t, int64_t, float*,
                           int64_t);
// The AMX pair kernel for `mode` (null when off).
AmxPairFn amx_q_pair_fn(AmxMode mode, PackedMatrix::Layout layout);

// The tile kernel against the VNNI tiles on the weights pm (Q4_0x16 or
// Q8_0x16; an even number of whole groups) and n_tokens (a multiple of
// kAmxTokens) rows of x: true when every bit agrees. Part of amx_mode's check.
bool amx_q_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x, int64_t n_tokens);

// ---- AVX2 kernels (packed_q_avx2.cpp) ---------------------------------------------

// The records of one token's row x (cols a multiple of 32) at dst, the same
// bytes as the VNNI quantizer writes.
void avx2_quantize_act(int32_t offset, const float* x, int64_t cols, uint8_t* dst);

// One token against groups [g0, g1) of one run of pm (Q4_0x16 or Q8_0x16),
// slice by slice: out[r] for their rows. ahead: bytes ahead of its loads to
// request weights (0: none).
void avx2_one_run(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, float* out,
                  size_t ahead);

// n_tokens tokens (records `stride` bytes apart) against group g:
// out[t * out_stride + r] for its rows. ahead as above, for the first pass
// over the group's weights (later passes find them in cache).
void avx2_group_tokens(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                       int64_t n_tokens, float* out, int64_t out_stride, size_t ahead);

// Groups [g0, g1) of pm against tokens [t0, t1) with the AVX2 kernels:
// out[t * pm.rows + r].
void avx2_run_groups(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                     size_t stride, int64_t t0, int64_t t1, float* out);

}  // namespace cairn::kernels
