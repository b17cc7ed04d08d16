// kernels/packed_q.h — internal to src/kernels: what the Q4_0x16 / Q8_0x16
// kernels share, the AVX-512 VNNI ones (packed.cpp) and the AVX2 ones
// (packed_avx2.cpp): where a block keeps its scales and codes, the
// activation records, and the AVX2 entry points packed_matmul_many calls on
// hosts without VNNI. The layouts themselves: packed.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/packed.h"

namespace cairn::kernels {

constexpr int kGroup = 16;
constexpr size_t kQ4Block = 32 + 4 * 64;  // scales + 4 chunks of 16 rows x 4 bytes (nibbles)
constexpr size_t kQ8Block = 32 + 8 * 64;  // scales + 8 chunks of 16 rows x 4 bytes

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
// back per use (~60 extra instructions per block; a 5632x2048 Q4_0 matmul of
// 128 tokens on one thread: 288-298 vs 274-286 GMAC/s, alternating runs).
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

// ---- AVX2 kernels (packed_avx2.cpp) ---------------------------------------------

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

}  // namespace cairn::kernels
