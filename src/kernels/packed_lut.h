// kernels/packed_lut.h — internal to src/kernels: the "4-bit lookup" layouts
// IQ4_NLx16, MXFP4x16, Q5_0x16, Q4_1x16, Q5_1x16 and IQ4_XSx16 (packed_lut.cpp
// packs and drives them, the AVX-512 VNNI kernels are packed_lut_vnni.cpp).
// IQ4_NL and MXFP4 are a 4-bit index into a 16-entry int8 table times a per-32
// scale, so one layout serves both: Q4_0x16's nibble chunks (packed.h), the
// scale as an exact f32 (f16 d, or E8M0 halved), and the type's table, applied
// in the kernel with a byte shuffle; the 5-bit and offset types add a bit
// mask and mins to it, IQ4_XS a sub-block scale per row.
//
// Their scalar dot (core/quant_nonlinear.cpp) sums in Lanes8's order: lane l
// of a block is the exact integer sum over elements 4l..4l+3, and each lane
// keeps its own float chain (fma per block), added up in a fixed tree at the
// end. Q4_0x16's chunk k holds exactly lane k (low nibbles) and lane 4 + k
// (high nibbles) of 16 rows, so one vpdpbusd per chunk and nibble half gives
// one lane's integer sum for 16 rows, and the kernels keep 8 float
// accumulators per row group: the scalar bits, at 8 fma per block where Q4_0
// takes 1 (the bound on these types' prompt speed, docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/packed.h"

namespace cairn::kernels {

// One block (32 columns) of a 16-row group: 16 f32 scales, then 4 chunks of
// 16 rows x 4 bytes of nibbles (Q4_0x16's). 5 cache lines: every block
// starts on a line. Blocks one after another, groups one after another (one
// slice).
constexpr size_t kLutBlock = 64 + 4 * 64;
// Q5_0x16: the same, the table being the codes + 112 (value + 128), then each
// chunk half's fifth bits as a 64-bit byte mask (bit 4r + i: byte i of row r;
// low halves of chunks 0..3, then their high halves): 6 cache lines.
// Q4_1x16 / Q5_1x16: the scales, then the 16 mins as f32, the chunks (the
// table the codes + 128), Q5_1 then the masks: 6 and 7 cache lines.
constexpr size_t lut_codes_at(bool min) { return min ? 128 : 64; }
constexpr size_t lut_block_bytes(bool high, bool min) {
  return lut_codes_at(min) + 4 * 64 + (high ? 64 : 0);
}
constexpr size_t kQ5Block = lut_block_bytes(true, false);
constexpr size_t kQ4_1Block = lut_block_bytes(false, true);
constexpr size_t kQ5_1Block = lut_block_bytes(true, true);

// An activation record per block of 32: qs[32] (Q8_0 codes, as
// quant::q8_0_from_float_act; Q8_1's are the same), d (the f16 scale as
// float), s (Q8_1's f16 s as float, for Q4_1/Q5_1), then per lane l the int32
// -128 * (sum of codes 4l..4l+3): the exact correction for the table values
// being stored + 128 (unsigned, as vpdpbusd wants them).
constexpr size_t kLutActRec = 32 + 4 + 4 + 8 * 4;
constexpr size_t kLutActD = 32, kLutActS = 36, kLutActBias = 40;

inline size_t lut_act_stride(int64_t cols) {
  const size_t bytes = kLutActRec * (size_t)(cols / 32);
  return (bytes + 63) & ~size_t{63};
}

// Tokens whose records stay in L2 per pass over a thread's groups.
constexpr int64_t kLutTokenChunk = 64;

// IQ4_XSx16: one 256-element super-block of a group: 16 f32 d, the 8
// sub-block scales (ls - 32) of each row as int8, each twice ([sub-block][row]
// [2]: one vpmovsxbw gives each row's scale in both words of its dword), then
// per sub-block Q4_0x16's 4 nibble chunks. Super-blocks one after another.
// Its scalar dot sums each lane's exact integer over the whole super-block
// (ls * value * code), one fma per lane per super-block; the kernels form the
// lane integers with vpdpwssd over int16 values (ls * table value, from a
// vpermw lookup) and int16 activation codes.
constexpr size_t kXsOffLs = 64, kXsOffCodes = 64 + 8 * 32;
constexpr size_t kXsBlock = kXsOffCodes + 8 * 4 * 64;
// Its activation record per super-block: d (float, Q8_K's) in a 64-byte head,
// then per sub-block and lane l the codes e, e + 2 and then e + 1, e + 3 as
// int16 pairs (e = 4l of the sub-block: the pairs vpermw's words hold).
constexpr size_t kXsActHead = 64;
constexpr size_t kXsActRec = kXsActHead + 8 * 8 * 8;
inline size_t xs_act_stride(int64_t cols) { return kXsActRec * (size_t)(cols / 256); }

// The type's 16 values plus 128 (unsigned bytes) for a layout.
const uint8_t* lut_biased_table(PackedMatrix::Layout layout);

// ---- AVX-512 VNNI kernels (packed_lut_vnni.cpp) -------------------------------
//
// The records of one token's row x (cols a multiple of 32).
void lut_vnni_quantize_act(const float* x, int64_t cols, uint8_t* dst);

// The IQ4_XS records of one token's row x (cols a multiple of 256).
void xs_vnni_quantize_act(const float* x, int64_t cols, uint8_t* dst);

// Tokens [0, n) (records `stride` bytes apart) against group g of pm (any of
// the three layouts):
// out[t * out_stride + row] for its rows (row counted from the matrix's first). ahead: bytes ahead of its loads to
// request weights on the first pass over them (0: none).
void lut_vnni_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                    int64_t n, float* out, int64_t out_stride, size_t ahead);

}  // namespace cairn::kernels
