// kernels/packed.h — internal to src/kernels: Q4_0, Q8_0, Q4_K and Q6_K weights
// repacked at load for the integer-dot kernels (AVX-512 VNNI, AMX for
// batches; on hosts without VNNI, AVX2 kernels over the same layouts:
// packed_q_*.cpp, packed_k_*.cpp), IQ4_NL, MXFP4, IQ4_XS, Q5_0, Q4_1 and Q5_1
// for AVX-512 VNNI only (packed_lut*.cpp), BF16 and F16 for AVX-512 (BF16) float tiles or
// AVX2 kernels in the same float steps, and the matmul over them. Owns the packed layouts and their
// kernels. The integer kernels give the bits of the type table's scalar vec_dot for the same
// weights and activations (the golden tests depend on the reference's float order, which the scalar
// functions document); only integer partial sums are computed differently.
// F16 gives the bits of matmul's unpacked F16 path (order::tiny_f16); BF16
// alone sums differently from its scalar dot (float against double).
// Never used when the active ISA lacks the instructions (pack_matrix says no).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace cairn::kernels {

// Rows go in groups of 16 (one zmm of outputs). Within a group, block b of all
// 16 rows is stored together: 16 f16 scales (32 B), then 64-byte chunks where
// chunk k holds, for row r at bytes 4r..4r+3, that row's 4-byte run k of the
// block, so one vpdpbusd with a broadcast of 4 activation bytes does 4
// products for each of the 16 rows:
// - Q4_0: 4 chunks of qs (low nibbles are elements 4k.., high nibbles
//   elements 16+4k..);
// - Q8_0: 8 chunks of qs + 128 (unsigned, as vpdpbusd wants them).
// A last group with fewer than 16 rows is padded with zero rows.
//
// Blocks go in pairs: both blocks' scales (2 x 32 B, one cache line), then
// the first block's chunks, then the second's; a slice with an odd number of
// blocks ends in a lone block (scales, then chunks). A pair is 9 cache lines
// (Q4_0) or 17 (Q8_0), so while every slice has an even number of blocks (any
// width that is a multiple of 64 columns) each 64-byte chunk load starts on a
// line; with blocks one after another (288 and 544 B), every other block's
// chunks each straddled two lines, which slowed Q8_0 decode (docs/performance.md).
//
// Groups go in runs of kRunGroups; a run stores its groups' blocks slice by
// slice: blocks [0, KS) of each group of the run, then blocks [KS, 2 KS) of
// each, and so on (KS = slice_blocks). A decode pass over a run then reads
// memory front to back while one slice's activations (KS records) stay in L1
// for all its groups; with a whole wide row of weights between two uses, they
// did not (wide rows streamed slower; docs/performance.md). A row of at most KS blocks is
// one slice: then the layout is simply group after group.
struct PackedMatrix {
  static constexpr int64_t kRunGroups = 4;
  enum class Layout { Q4_0x16, Q8_0x16, Q4_Kx16, Q6_Kx16, BF16x16, F16x16, IQ4_NLx16, MXFP4x16,
                      IQ4_XSx16, Q5_0x16, Q4_1x16, Q5_1x16 };
  Layout layout = Layout::Q4_0x16;
  int64_t rows = 0, cols = 0;
  int64_t n_groups = 0, n_blocks = 0;  // 16-row groups; blocks per row (32 elements; K: 256)
  int64_t slice_blocks = 0;            // KS: blocks per slice (n_blocks when one slice)
  size_t block_bytes = 0;              // one block of one group
  std::shared_ptr<uint8_t> storage;    // owns `data`; several small matrices may share it
  uint8_t* data = nullptr;             // 64-byte aligned

  int64_t n_slices() const { return (n_blocks + slice_blocks - 1) / slice_blocks; }
  // Blocks in slice c (slice_blocks, or fewer in the last).
  int64_t slice_len(int64_t c) const { return std::min(slice_blocks, n_blocks - c * slice_blocks); }
  // Group g's blocks [c * KS, c * KS + slice_len(c)), back to back.
  const uint8_t* slice(int64_t g, int64_t c) const {
    const int64_t run = g - g % kRunGroups;
    const int64_t run_len = std::min(kRunGroups, n_groups - run);
    const int64_t blocks = run * n_blocks + run_len * c * slice_blocks + (g - run) * slice_len(c);
    return data + (size_t)blocks * block_bytes;
  }
};

// Q4_Kx16 (packed_k.h): one 256-element super-block of a group in
// kQ4KBlockBytes: 16 d, 16 dmin (f16), the 8 sub-block scales of each row
// (u8, [sub-block][row]), their mins in pairs ([pair][row][2] u8), then the
// codes as 4 runs of 8 chunks of 16 rows x 4 bytes (chunk c of run j holds
// bytes 32j + 4c.. of each row's qs: low nibbles sub-block 2j, high 2j + 1).
// Super-blocks go one after another, groups one after another (one slice).
constexpr size_t kQ4KBlockBytes = 320 + 4 * 8 * 64;
// Q6_Kx16 likewise: 16 d, the 16 sub-block scales of each row, then the codes'
// low 4 bits and their top 2 bits in 16-row chunks (packed_k.h has the map).
constexpr size_t kQ6KBlockBytes = 32 + 256 + 32 * 64 + 16 * 64;

// BF16x16 (packed_float.cpp, AVX-512 BF16 or AVX2): a block is 32 columns of a group
// as 16 chunks of 64 bytes; chunk c holds, for row r at bytes 4r..4r+3, the
// row's elements 2c and 2c + 1 of the block (one vdpbf16ps operand). Unlike
// the other layouts, its kernels sum in float where the scalar BF16 dot sums
// in double: not bit-identical to it.
constexpr size_t kBF16BlockBytes = 16 * 64;
// F16x16 (packed_float.cpp, AVX-512 F16C or AVX2): a block is 16 columns of a group,
// each row's 16 halves one 32-byte run; a group is stored as four quarters of
// 4 rows, each quarter's blocks one after another (128 bytes each: its rows'
// runs in order), so a 4-row tile streams. For rows of a multiple of 32
// columns, where the type table takes the 16-lane tinyBLAS order, whose bits
// these kernels give.
constexpr size_t kF16BlockBytes = 16 * 32;
// Both: one slice; groups one after another.
// IQ4_NLx16 / MXFP4x16 (packed_lut.h, AVX-512 VNNI only): Q4_0x16's nibble
// chunks after 16 f32 scales per block, the type's 16-value table applied in
// the kernel; one slice. IQ4_XSx16 likewise per 256-element super-block,
// with each row's 6-bit sub-block scales, Q5_0x16 with the fifth bits as
// byte masks, Q4_1x16 / Q5_1x16 with the mins (packed_lut.h has the maps).

// A packed copy of `w` when a packed kernel exists for its type at the active
// ISA level, else nullptr (matmul then uses the type table's vec_dot).
std::shared_ptr<const PackedMatrix> pack_matrix(const WeightMatrix& w);

// out[t * rows + r] for every token, as matmul().
void packed_matmul(const PackedMatrix& p, const float* x, int64_t n_tokens, float* out,
                   ThreadPool& pool);

// Several matrices over the same activations (packed_compatible with each
// other): the activations are quantized once and one pass of the pool runs
// every matrix's rows.
struct PackedJob {
  const PackedMatrix* matrix;
  float* out;
};
bool packed_compatible(const PackedMatrix& a, const PackedMatrix& b);

// The activations of an integer kernel: the rows of x ([n_tokens, cols]), or
// rows `maker` makes one at a time (see RowMaker), into a buffer of the
// thread that quantizes them.
struct ActRows {
  const float* x = nullptr;
  const RowMaker* maker = nullptr;
  int64_t cols = 0;
  // Token t's row: in x, or made into buf (cols floats).
  const float* row(int64_t t, float* buf) const {
    if (!maker) return x + t * cols;
    maker->make(t, buf);
    return buf;
  }
};
// This thread's buffer for one made row: cols floats, grown only.
float* made_row_buffer(int64_t cols);
// Whether packed_matmul_many takes made rows for this layout (the integer
// ones, which quantize each row once); the float layouts take x only.
bool packed_quantizes_rows(const PackedMatrix& p);

// `next`: the matrices of the call that will follow (may be empty); workers
// that finish early pull in the start of their share of it. Made rows
// (in.maker) only where packed_quantizes_rows.
void packed_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                        ThreadPool& pool, std::span<const PackedMatrix* const> next);

// How far ahead of its loads a one-token kernel over `layout` requests
// weights streamed from memory (bytes; 0: no software prefetch). See
// packed_layout.cpp.
size_t packed_stream_ahead(PackedMatrix::Layout layout);

// Whether the AMX tiles run, and how (amx_tiles.h).
enum class AmxMode { kOff, kHardware, kEmulated };
using AmxModeFn = AmxMode (*)();

// ---- the layouts' families, one row each in packed_dispatch.cpp's table -------
//
// Each family packs its layouts' rows at load into a PackedMatrix that
// pack_matrix has sized, and multiplies jobs of its layouts
// (packed_matmul_many's contract) with the kernels the active ISA allows;
// `amx_mode_fn` tells it whether and how to use the AMX tiles (asked only where
// a batch could use them).
using PackFn = void (*)(const WeightMatrix& w, PackedMatrix& p);
using PackedMatmulFn = void (*)(std::span<const PackedJob> jobs, const ActRows& in,
                                int64_t n_tokens, ThreadPool& pool,
                                std::span<const PackedMatrix* const> next, AmxModeFn amx_mode_fn);

// Q4_0x16 / Q8_0x16 (packed_q.cpp).
void pack_q4_0_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_q8_0_rows(const WeightMatrix& w, PackedMatrix& p);
void packed_q_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                          ThreadPool& pool, std::span<const PackedMatrix* const> next,
                          AmxModeFn amx_mode_fn);

// Q4_Kx16 / Q6_Kx16 (packed_k.cpp).
void pack_q4_k_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_q6_k_rows(const WeightMatrix& w, PackedMatrix& p);
void packed_k_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                          ThreadPool& pool, std::span<const PackedMatrix* const> next,
                          AmxModeFn amx_mode_fn);

// The lookup layouts, IQ4_NLx16 .. Q5_1x16 (packed_lut.cpp): AVX-512 VNNI kernels only.
void pack_iq4_nl_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_mxfp4_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_iq4_xs_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_q5_0_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_q4_1_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_q5_1_rows(const WeightMatrix& w, PackedMatrix& p);
void packed_lut_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                            ThreadPool& pool, std::span<const PackedMatrix* const> next,
                            AmxModeFn amx_mode_fn);

// BF16x16 / F16x16 (packed_float.cpp): activations from in.x only (never
// made rows); amx_mode_fn gives the AMX-BF16 mode.
void pack_bf16_rows(const WeightMatrix& w, PackedMatrix& p);
void pack_f16_rows(const WeightMatrix& w, PackedMatrix& p);
void packed_float_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                              ThreadPool& pool, std::span<const PackedMatrix* const> next,
                              AmxModeFn amx_mode_fn);
// The AMX-BF16 kernel against the vdpbf16ps tiles on the weights pm (BF16x16)
// and n_tokens (a multiple of kAmxTokens) rows of x: true when every bit
// agrees. Part of the AMX-BF16 mode's check.
bool amx_bf16_agrees_with_vnni(AmxMode mode, const PackedMatrix& pm, const float* x,
                               int64_t n_tokens);

// fn(g0, g1) over disjoint ranges covering [0, n) as packed_matmul_many splits
// a decode step's groups: each share walks its own range front to back, then
// takes chunks from the back of the others' (no share waits for a slow one);
// afterwards each worker warms the start of its share of `next`.
void run_groups_balanced(ThreadPool& pool, int64_t n,
                         const std::function<void(int64_t, int64_t)>& fn,
                         std::span<const PackedMatrix* const> next);

}  // namespace cairn::kernels
