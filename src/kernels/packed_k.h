// kernels/packed_k.h — internal to src/kernels: what the Q4_Kx16 / Q6_Kx16
// kernels share, the AVX-512 VNNI ones (packed_k_vnni.cpp), the AMX ones
// (packed_k_amx.cpp) and the AVX2 ones (packed_k_avx2.cpp): where a
// super-block keeps its scales and codes, the activation records, the token
// batching, and the entry points their driver (packed_k.cpp) calls. The
// layouts in words: packed.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "core/quant_blocks.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed.h"
#include "kernels/packed_layout.h"

namespace cairn::kernels {

constexpr int64_t kQK = 256;  // elements per super-block

// One super-block of one 16-row group (kQ4KBlockBytes in all):
constexpr size_t kOffD = 0;        // 16 f16 d
constexpr size_t kOffDmin = 32;    // 16 f16 dmin
constexpr size_t kOffScales = 64;  // [8 sub-blocks][16 rows] u8 scales
constexpr size_t kOffMins = 192;   // [4 pairs][16 rows][2] u8: mins of sub-blocks 2i, 2i+1
constexpr size_t kOffCodes = 320;  // [4 runs j][8 chunks][16 rows][4 bytes]: qs[32j + 4c ..]
static_assert(kOffCodes + 4 * 8 * 64 == kQ4KBlockBytes, "packed.h names the block size");

// One Q6_K super-block of one group (kQ6KBlockBytes): 16 f16 d; the 16
// sub-block scales of each row in pairs ([pair][row][2] int8: one load gives
// both the int32 scales and vpdpwssd's pairs); the low 4 bits of the codes as
// 32 chunks (chunk c: elements 4c.. in the low nibbles, 128 + 4c.. in the
// high ones); their top 2 bits as 16 chunks (chunk c: elements 4c.., 64 + 4c..,
// 128 + 4c.., 192 + 4c.. in bit pairs 0-1, 2-3, 4-5, 6-7).
constexpr size_t kQ6OffD = 0, kQ6OffScales = 32, kQ6OffLow = 288, kQ6OffHigh = 288 + 32 * 64;
static_assert(kQ6OffHigh + 16 * 64 == kQ6KBlockBytes, "packed.h names the block size");

// Activations: each token's row quantized to Q8_K exactly as the type table
// does (quant::q8_k_from_float), one record per super-block: the 256 codes,
// d, and sums of codes as int16 (pairs of them feed vpdpwssd): Q4_K, the
// eight 32-element sub-blocks' sums; Q6_K, Q8_K's own sixteen bsums.
constexpr size_t kRecQs = 0, kRecD = 256, kRecSums = 260;
constexpr size_t kKRec = 320;  // 292 used at most, rounded to keep the codes 64-byte aligned

inline size_t k_act_stride(int64_t cols) { return kKRec * (size_t)(cols / kQK); }

// One Q8_K block into its record.
inline void store_k_record(bool q6, const quant::BlockQ8_K& blk, uint8_t* rec) {
  std::memcpy(rec + kRecQs, blk.qs, kQK);
  std::memcpy(rec + kRecD, &blk.d, 4);
  if (q6) {
    std::memcpy(rec + kRecSums, blk.bsums, sizeof(blk.bsums));
    return;
  }
  int16_t sums[8];
  for (int s = 0; s < 8; ++s)
    sums[s] = (int16_t)(blk.bsums[2 * s] + blk.bsums[2 * s + 1]);  // |.| <= 32 * 128
  std::memcpy(rec + kRecSums, sums, sizeof(sums));
}

// Batches of 2..kKFewTokens tokens take vnni_k_few (faster there than
// splitting each super-block's codes once for tiles).
constexpr int kKFewTokens = 16;

// Longer batches (prompts) go by chunks of this many tokens: each thread
// keeps its groups for every chunk, their weights stay in its caches.
constexpr int64_t kKTokenChunk = 64;

// ---- AVX-512 VNNI kernels (packed_k_vnni.cpp) ------------------------------------

// One token's row x (cols a multiple of kQK) into its records at dst.
void vnni_quantize_k_act(bool q6, const float* x, int64_t cols, uint8_t* dst);

// One token against groups [g0, g1), super-block by super-block: out[r] for
// their rows; weights requested `ahead` bytes before their loads (0: none).
// gfni: Q6_K builds its codes with GFNI (only where gfni_enabled()).
void vnni_k_one(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, float* out,
                size_t ahead, bool gfni);

// Tokens [0, n) (n <= kKTokenChunk, records `stride` bytes apart) against
// groups [g0, g1): out[t * out_stride + r]. Each super-block serves every
// tile of up to 8 tokens while in L1; weights requested `ahead` bytes before
// their loads.
void vnni_k_few(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, size_t stride,
                int64_t n, float* out, int64_t out_stride, size_t ahead);

// Q6_K group g against tokens [0, n_tokens) (at most kKTokenChunk) in tiles
// over a split copy of each super-block's codes: out[t * out_stride + r],
// out pointing at the group's first row.
void vnni_k6_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                   int64_t n_tokens, float* out, int64_t out_stride);

// ---- AMX kernels (packed_k_amx.cpp) ----------------------------------------------

// ng (1 or 2) groups from g against n_tokens tokens (a multiple of
// kAmxTokens, at most kKTokenChunk): out[t * out_stride + r].
using AmxKFn = void (*)(const PackedMatrix&, int64_t, int, const uint8_t*, size_t, int64_t, float*,
                        int64_t);
// The tile kernel of the given mode for Q4_K or Q6_K, or null (off).
AmxKFn amx_k_fn(AmxMode mode, bool q6);

// The tile kernel against the VNNI kernels on the weights pm (Q4_Kx16 or
// Q6_Kx16, three groups) and n_tokens (a multiple of kAmxTokens) rows of x:
// true when every bit agrees. Part of amx_mode's check.
bool amx_k_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x, int64_t n_tokens);

// ---- AVX2 kernels (packed_k_avx2.cpp) ----------------------------------------------

// vnni_quantize_k_act's records with AVX2.
void avx2_quantize_k_act(bool q6, const float* x, int64_t cols, uint8_t* dst);

// vnni_k_few's contract (any n up to kKTokenChunk) with AVX2.
void avx2_k_groups(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                   size_t stride, int64_t n, float* out, int64_t out_stride, size_t ahead);

}  // namespace cairn::kernels
