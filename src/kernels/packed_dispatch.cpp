// kernels/packed_dispatch.cpp — the packed layouts' table, one row per layout:
// pack_matrix and packed_matmul_many pick a layout's packer and driver by it;
// the AMX self-checks.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed.h"
#include "kernels/packed_k.h"
#include "kernels/packed_layout.h"
#include "kernels/packed_lut.h"
#include "kernels/packed_q.h"

namespace cairn::kernels {

namespace {

AmxMode amx_bf16_mode();

// Rows of more than kSliceAbove blocks are stored in slices of kSliceBlocks
// (see PackedMatrix): wide rows decode faster sliced, while rows of 2048
// columns stay whole (sliced, their prompt matmuls were slower, for no decode
// gain).
constexpr int64_t kSliceBlocks = 32;
constexpr int64_t kSliceAbove = 64;

// One row per packed layout, in PackedMatrix::Layout's order.
struct LayoutRow {
  PackedMatrix::Layout layout;
  TensorType type;        // the weights it packs
  int64_t block_cols;     // elements of a row per block
  size_t block_bytes;     // one block of one group
  bool sliced;            // wide rows go in slices (only the Q4_0/Q8_0 kernels walk them)
  bool quantizes_rows;    // takes made rows (ActRows::maker): the integer kernels
  PackFn pack;            // at load, into the sized and zeroed PackedMatrix
  PackedMatmulFn matmul;  // the family's driver: one token, few, or a prompt
  AmxModeFn amx_mode;     // which AMX tiles its driver may use
  Isa min_isa;            // the level its kernels need (AVX2: every family has AVX2 kernels)
};
using L = PackedMatrix::Layout;
constexpr LayoutRow kLayouts[] = {
    {L::Q4_0x16, TensorType::Q4_0, 32, kQ4Block, true, true, pack_q4_0_rows, packed_q_matmul_many,
     amx_mode, Isa::Avx2},
    {L::Q8_0x16, TensorType::Q8_0, 32, kQ8Block, true, true, pack_q8_0_rows, packed_q_matmul_many,
     amx_mode, Isa::Avx2},
    {L::Q4_Kx16, TensorType::Q4_K, kQK, kQ4KBlockBytes, false, true, pack_q4_k_rows,
     packed_k_matmul_many, amx_mode, Isa::Avx2},
    {L::Q6_Kx16, TensorType::Q6_K, kQK, kQ6KBlockBytes, false, true, pack_q6_k_rows,
     packed_k_matmul_many, amx_mode, Isa::Avx2},
    {L::BF16x16, TensorType::BF16, 32, kBF16BlockBytes, false, false, pack_bf16_rows,
     packed_float_matmul_many, amx_bf16_mode, Isa::Avx2},
    {L::F16x16, TensorType::F16, 16, kF16BlockBytes, false, false, pack_f16_rows,
     packed_float_matmul_many, amx_bf16_mode, Isa::Avx2},
    // No AVX2 kernels yet: an AVX2 host keeps the row-dot kernels for these.
    {L::IQ4_NLx16, TensorType::IQ4_NL, 32, kLutBlock, false, true, pack_iq4_nl_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
    {L::MXFP4x16, TensorType::MXFP4, 32, kLutBlock, false, true, pack_mxfp4_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
    {L::IQ4_XSx16, TensorType::IQ4_XS, kQK, kXsBlock, false, true, pack_iq4_xs_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
    {L::Q5_0x16, TensorType::Q5_0, 32, kQ5Block, false, true, pack_q5_0_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
    {L::Q4_1x16, TensorType::Q4_1, 32, kQ4_1Block, false, true, pack_q4_1_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
    {L::Q5_1x16, TensorType::Q5_1, 32, kQ5_1Block, false, true, pack_q5_1_rows,
     packed_lut_matmul_many, amx_mode, Isa::Avx512Vnni},
};
constexpr bool in_layout_order() {
  for (size_t i = 0; i < std::size(kLayouts); ++i)
    if ((size_t)kLayouts[i].layout != i) return false;
  return true;
}
static_assert(in_layout_order(), "kLayouts has one row per layout, in order");

const LayoutRow& row_of(PackedMatrix::Layout layout) { return kLayouts[(size_t)layout]; }

const LayoutRow* row_for(TensorType type) {
  for (const LayoutRow& row : kLayouts)
    if (row.type == type) return &row;
  return nullptr;
}

// ---- the AMX self-checks ----------------------------------------------------------
//
// Before the tiles are used (and when they are emulated, so the emulated test
// passes run these checks too), each tile kernel runs against its vector
// kernel on fixed random weights and activations: every bit must agree.

// n values in [-scale, scale) from a fixed seed.
std::vector<float> amx_check_values(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = scale * (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  return v;
}

// rows x cols such values quantized to `type` by its scalar conversion and
// packed (null when that fails).
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

// Q4_0 and Q8_0: two groups, two ranges, a lone last block.
bool amx_q_checks(AmxMode mode) {
  constexpr int64_t kRows = 32, kCols = 1056, kTokens = 2 * kAmxTokens;
  const std::vector<float> wf = amx_check_values((size_t)(kRows * kCols), 12345, 1.0f);
  const std::vector<float> x = amx_check_values((size_t)(kTokens * kCols), 54321, 3.0f);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0}) {
    const auto pm = amx_check_matrix(type, wf, kRows, kCols);
    if (!pm || !amx_q_agrees_with_vnni(mode, *pm, x.data(), kTokens)) return false;
  }
  return true;
}

// Q4_K and Q6_K: three groups (a pair and a lone one, the last one short),
// two super-blocks, two tiles of tokens.
bool amx_k_checks(AmxMode mode) {
  constexpr int64_t kRows = 44, kCols = 2 * kQK, kTokens = 2 * kAmxTokens;
  const std::vector<float> wf = amx_check_values((size_t)(kRows * kCols), 97531, 1.0f);
  const std::vector<float> x = amx_check_values((size_t)(kTokens * kCols), 86420, 3.0f);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    const auto pm = amx_check_matrix(type, wf, kRows, kCols);
    if (!pm || !amx_k_agrees_with_vnni(mode, *pm, x.data(), kTokens)) return false;
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
  if (!amx_q_checks(mode) || !amx_k_checks(mode)) {
    std::fprintf(stderr,
                 "cairn: AMX tile results differ from the AVX-512 VNNI kernels; using VNNI\n");
    return AmxMode::kOff;
  }
  return mode;
}

// AMX-BF16 where the int8 tiles run (amx_mode), the CPU has the BF16 tiles
// (or they are emulated) and the kernel agrees with the vdpbf16ps tiles (three
// groups, the last one short; three blocks; two tiles of tokens).
AmxMode resolve_amx_bf16_mode() {
  const AmxMode mode = amx_mode();
  if (mode == AmxMode::kOff || !bf16_enabled()) return AmxMode::kOff;
  if (mode == AmxMode::kHardware && !cpu_features().amx_bf16) return AmxMode::kOff;
  constexpr int64_t kRows = 40, kCols = 96, kTokens = 2 * kAmxTokens;
  const auto pm = amx_check_matrix(TensorType::BF16, amx_check_values(kRows * kCols, 24680, 1.0f),
                                   kRows, kCols);
  const std::vector<float> x = amx_check_values((size_t)(kTokens * kCols), 13579, 3.0f);
  if (!pm || !amx_bf16_agrees_with_vnni(mode, *pm, x.data(), kTokens)) {
    std::fprintf(stderr,
                 "cairn: AMX-BF16 tile results differ from the AVX-512 BF16 kernels; using "
                 "AVX-512 BF16\n");
    return AmxMode::kOff;
  }
  return mode;
}

AmxMode amx_bf16_mode() {
  static const AmxMode mode = resolve_amx_bf16_mode();
  return mode;
}

}  // namespace

AmxMode amx_mode() {
  static const AmxMode mode = resolve_amx_mode();
  return mode;
}

std::shared_ptr<const PackedMatrix> pack_matrix(const WeightMatrix& w) {
  if (!w.data || w.rows <= 0 || w.cols <= 0 || w.cols % 32 != 0) return nullptr;
  // Every layout has AVX2 kernels too.
  if (!isa_enabled(Isa::Avx512Vnni) && !isa_enabled(Isa::Avx2)) return nullptr;
  const LayoutRow* row = row_for(w.type);
  if (!row || w.cols % row->block_cols != 0 || !isa_enabled(row->min_isa)) return nullptr;
  auto p = std::make_shared<PackedMatrix>();
  p->layout = row->layout;
  p->rows = w.rows;
  p->cols = w.cols;
  p->n_groups = (w.rows + kGroup - 1) / kGroup;
  p->n_blocks = w.cols / row->block_cols;
  p->slice_blocks = p->n_blocks > kSliceAbove && row->sliced ? kSliceBlocks : p->n_blocks;
  p->block_bytes = row->block_bytes;
  const size_t bytes = (size_t)p->n_groups * (size_t)p->n_blocks * row->block_bytes;
  std::tie(p->storage, p->data) = alloc_packed(bytes);
  if (!p->data) return nullptr;  // out of memory: the type table's kernels still work
  // Only a short last group has bytes the packers leave unwritten; its blocks
  // lie among those of its run.
  if (w.rows % kGroup != 0) {
    const int64_t last_run =
        (p->n_groups - 1) / PackedMatrix::kRunGroups * PackedMatrix::kRunGroups;
    const size_t from = (size_t)last_run * (size_t)p->n_blocks * row->block_bytes;
    std::memset(p->data + from, 0, bytes - from);
  }
  row->pack(w, *p);
  return p;
}

void prepare_weight(WeightMatrix& w) {
  if (!w.packed) w.packed = pack_matrix(w);
}

bool packed_quantizes_rows(const PackedMatrix& p) { return row_of(p.layout).quantizes_rows; }

void packed_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                        ThreadPool& pool, std::span<const PackedMatrix* const> next) {
  if (n_tokens <= 0 || jobs.empty()) return;
  const LayoutRow& row = row_of(jobs[0].matrix->layout);
  row.matmul(jobs, in, n_tokens, pool, next, row.amx_mode);
}

const char* packed_tile_path() {
  if (!isa_enabled(Isa::Avx512Vnni)) return isa_enabled(Isa::Avx2) ? "avx2" : "none";
  return amx_path_name(amx_mode(), "avx512vnni");
}

const char* packed_bf16_tile_path() {
  if (!isa_enabled(Isa::Avx512Vnni) || !bf16_enabled())
    return isa_enabled(Isa::Avx2) ? "avx2" : "none";
  return amx_path_name(amx_bf16_mode(), "avx512bf16");
}

int32_t batch_token_granule() {
  return isa_enabled(Isa::Avx512Vnni) && amx_mode() == AmxMode::kHardware ? kAmxTokens : 1;
}

void packed_matmul(const PackedMatrix& pm, const float* x, int64_t n_tokens, float* out,
                   ThreadPool& pool) {
  const PackedJob job{&pm, out};
  packed_matmul_many({&job, 1}, ActRows{x, nullptr, pm.cols}, n_tokens, pool, {});
}

}  // namespace cairn::kernels
