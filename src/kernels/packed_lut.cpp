// kernels/packed_lut.cpp — IQ4_NLx16 / MXFP4x16 (packed_lut.h): the packers,
// the tables and the driver over the VNNI kernels (packed_lut_vnni.cpp).
#include "kernels/packed_lut.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "kernels/packed_layout.h"

namespace cairn::kernels {

namespace {

// A 16-entry int8 table plus 128, as unsigned bytes.
struct Biased16 {
  uint8_t v[16];
  constexpr explicit Biased16(const int8_t* t) : v{} {
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(t[i] + 128);
  }
};
constexpr Biased16 kIq4nlBiased(quant::kIq4nlValues);
constexpr Biased16 kFp4Biased(quant::kFp4Values);
// The low four bits of a code plus `add`: Q5_0's + 112 (with the fifth bit's
// 16 added in the kernel, the value - 16 + 128); Q4_1's and Q5_1's + 128
// (unsigned codes: value + 128 again, so the records' bias fits all).
struct Low4 {
  uint8_t v[16];
  constexpr explicit Low4(int add) : v{} {
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(i + add);
  }
};
constexpr Low4 kQ5_0Low(112), kQ_1Low(128);

// Row r's scale (as f32, exactly the scalar dot's) to float r of the block,
// its qs bytes 4k..4k+3 to bytes 4r..4r+3 of chunk k (Q4_0x16's nibbles).
template <typename Block, typename Scale>
void pack_rows(const WeightMatrix& w, PackedMatrix& p, Scale scale) {
  constexpr bool kHigh = requires(const Block& x) { x.qh; };
  constexpr bool kMin = requires(const Block& x) { x.m; };
  constexpr size_t kCodes = lut_codes_at(kMin);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    uint8_t* gw = const_cast<uint8_t*>(p.slice(g, 0));
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      uint8_t* blk = gw + (size_t)b * p.block_bytes;
      uint64_t masks[8] = {};
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= w.rows) break;  // padding rows stay zero (scale 0)
        const auto* x = reinterpret_cast<const Block*>(src + (size_t)row * w.row_stride) + b;
        const float d = scale(*x);
        std::memcpy(blk + 4 * r, &d, 4);
        if constexpr (kMin) {
          const float m = f16_to_f32(x->m);
          std::memcpy(blk + 64 + 4 * r, &m, 4);
        }
        for (int k = 0; k < 4; ++k)
          std::memcpy(blk + kCodes + 64 * k + 4 * r, x->qs + 4 * k, 4);
        if constexpr (kHigh) {
          uint32_t qh;
          std::memcpy(&qh, x->qh, 4);
          // Element j's fifth bit is bit j: chunk k's low half holds elements
          // 4k..4k+3, its high half 16 + 4k..
          for (int h = 0; h < 8; ++h)
            for (int i = 0; i < 4; ++i)
              masks[h] |= (uint64_t)((qh >> (4 * h + i)) & 1) << (4 * r + i);
        }
      }
      if constexpr (kHigh) std::memcpy(blk + kCodes + 4 * 64, masks, sizeof(masks));
    }
  }
}

}  // namespace

void pack_iq4_xs_rows(const WeightMatrix& w, PackedMatrix& p) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    uint8_t* gw = const_cast<uint8_t*>(p.slice(g, 0));
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      uint8_t* blk = gw + (size_t)b * kXsBlock;
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= w.rows) break;  // padding rows stay zero (scale 0)
        const auto* x =
            reinterpret_cast<const quant::BlockIQ4_XS*>(src + (size_t)row * w.row_stride) + b;
        const float d = f16_to_f32(x->d);
        std::memcpy(blk + 4 * r, &d, 4);
        for (int ib = 0; ib < 8; ++ib) {
          const int ls = (((x->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                          (((x->scales_h >> (2 * ib)) & 3) << 4)) - 32;
          blk[kXsOffLs + 32 * ib + 2 * r] = blk[kXsOffLs + 32 * ib + 2 * r + 1] = (uint8_t)(int8_t)ls;
          for (int k = 0; k < 4; ++k)
            std::memcpy(blk + kXsOffCodes + 256 * ib + 64 * k + 4 * r, x->qs + 16 * ib + 4 * k, 4);
        }
      }
    }
  }
}

const uint8_t* lut_biased_table(PackedMatrix::Layout layout) {
  if (layout == PackedMatrix::Layout::Q5_0x16) return kQ5_0Low.v;
  if (layout == PackedMatrix::Layout::Q4_1x16 || layout == PackedMatrix::Layout::Q5_1x16)
    return kQ_1Low.v;
  return layout == PackedMatrix::Layout::MXFP4x16 ? kFp4Biased.v : kIq4nlBiased.v;
}

void pack_iq4_nl_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockIQ4_NL>(w, p, [](const quant::BlockIQ4_NL& x) { return f16_to_f32(x.d); });
}

void pack_mxfp4_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockMXFP4>(w, p, [](const quant::BlockMXFP4& x) { return quant::e8m0_half(x.e); });
}

void pack_q5_0_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockQ5_0>(w, p, [](const quant::BlockQ5_0& x) { return f16_to_f32(x.d); });
}

void pack_q4_1_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockQ4_1>(w, p, [](const quant::BlockQ4_1& x) { return f16_to_f32(x.d); });
}

void pack_q5_1_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockQ5_1>(w, p, [](const quant::BlockQ5_1& x) { return f16_to_f32(x.d); });
}

void packed_lut_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                            ThreadPool& pool, std::span<const PackedMatrix* const> next,
                            AmxModeFn) {
  const PackedMatrix& first = *jobs[0].matrix;
  const bool xs = first.layout == PackedMatrix::Layout::IQ4_XSx16;
  const size_t stride = xs ? xs_act_stride(first.cols) : lut_act_stride(first.cols);
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));  // grown only
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    float* buf = in.maker ? made_row_buffer(first.cols) : nullptr;
    for (int64_t t = b; t < e; ++t)
      (xs ? xs_vnni_quantize_act : lut_vnni_quantize_act)(in.row(t, buf), first.cols,
                                                          act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  const size_t ahead = packed_stream_ahead(first.layout);
  // Groups [g0, g1) of the jobs (one index over all of them), tokens [t0, t1).
  const auto run_groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    int64_t base = 0;
    for (const PackedJob& j : jobs) {
      const PackedMatrix& pm = *j.matrix;
      for (int64_t g = std::max(g0, base); g < std::min(g1, base + pm.n_groups); ++g)
        lut_vnni_group(pm, g - base, act + (size_t)t0 * stride, stride, t1 - t0,
                       j.out + t0 * pm.rows, pm.rows, ahead);
      base += pm.n_groups;
    }
  };
  // As packed_q_matmul_many: decode and small batches share the groups
  // (early finishers help the others); prompts keep each thread's groups for
  // the whole batch, token chunk by token chunk.
  if (n_tokens <= kLutTokenChunk && pool.size() > 1) {
    run_groups_balanced(
        pool, total, [&](int64_t g0, int64_t g1) { run_groups(g0, g1, 0, n_tokens); }, next);
    return;
  }
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kLutTokenChunk)
      run_groups(g0, g1, t0, std::min(n_tokens, t0 + kLutTokenChunk));
  });
}

}  // namespace cairn::kernels
