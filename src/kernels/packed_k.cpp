// kernels/packed_k.cpp — Q4_Kx16 / Q6_Kx16: the packers and the driver over their kernels.
#include "kernels/packed_k.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant_blocks.h"

namespace cairn::kernels {

namespace {

using quant::BlockQ4_K;

// fn(job, first group, end group) for each job's share of the jobs' groups
// [g0, g1), taken as one range.
template <typename Fn>
void for_each_job_share(std::span<const PackedJob> jobs, int64_t g0, int64_t g1, const Fn& fn) {
  int64_t base = 0;
  for (const PackedJob& j : jobs) {
    const int64_t b = std::max(g0, base) - base;
    const int64_t e = std::min(g1, base + j.matrix->n_groups) - base;
    if (b < e) fn(j, b, e);
    base += j.matrix->n_groups;
  }
}

// Each row's super-blocks in their 16-row group's packed blocks: row(blk, r,
// block) writes row r of one (padding rows are left zero: scales 0).
template <typename Block, typename Row>
void pack_k_rows(const WeightMatrix& w, PackedMatrix& p, const Row& row_into) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      uint8_t* blk = p.data + ((size_t)g * (size_t)p.n_blocks + (size_t)b) * p.block_bytes;
      for (int r = 0; r < kGroup && g * kGroup + r < w.rows; ++r)
        row_into(blk, r,
                 reinterpret_cast<const Block*>(src + (size_t)(g * kGroup + r) * w.row_stride)[b]);
    }
  }
}

}  // namespace

void pack_q4_k_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_k_rows<BlockQ4_K>(w, p, [](uint8_t* blk, int r, const BlockQ4_K& x) {
    std::memcpy(blk + kOffD + 2 * r, &x.d, 2);
    std::memcpy(blk + kOffDmin + 2 * r, &x.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      quant::q4k_scale_min(s, x.scales, &sc, &m);
      blk[kOffScales + 16 * s + r] = sc;
      blk[kOffMins + 32 * (s / 2) + 2 * r + s % 2] = m;
    }
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 8; ++c)
        std::memcpy(blk + kOffCodes + 64 * (8 * j + c) + 4 * r, x.qs + 32 * j + 4 * c, 4);
  });
}

void pack_q6_k_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_k_rows<quant::BlockQ6_K>(w, p, [](uint8_t* blk, int r, const quant::BlockQ6_K& xb) {
    const quant::BlockQ6_K* x = &xb;  // one row's super-block
    std::memcpy(blk + kQ6OffD + 2 * r, &x->d, 2);
    for (int sb = 0; sb < 16; ++sb)
      blk[kQ6OffScales + 32 * (sb / 2) + 2 * r + sb % 2] = (uint8_t)x->scales[sb];
    uint8_t code[kQK];  // element e: 128h + 32k + l as q6_k_dot_q8_k reads it
    for (int e = 0; e < kQK; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t* ql = x->ql + 64 * h;
      const uint8_t* qh = x->qh + 32 * h;
      const int low = ((k & 1 ? ql[l + 32] : ql[l]) >> (k & 2 ? 4 : 0)) & 0xF;
      code[e] = (uint8_t)(low | (((qh[l] >> (2 * k)) & 3) << 4));
    }
    for (int c = 0; c < 32; ++c)
      for (int i = 0; i < 4; ++i)
        blk[kQ6OffLow + 64 * c + 4 * r + i] =
            (uint8_t)((code[4 * c + i] & 0xF) | ((code[128 + 4 * c + i] & 0xF) << 4));
    for (int c = 0; c < 16; ++c)
      for (int i = 0; i < 4; ++i) {
        uint8_t hb = 0;
        for (int k = 0; k < 4; ++k) hb |= (uint8_t)((code[64 * k + 4 * c + i] >> 4) << (2 * k));
        blk[kQ6OffHigh + 64 * c + 4 * r + i] = hb;
      }
  });
}

void packed_k_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                          ThreadPool& pool, std::span<const PackedMatrix* const> next,
                          AmxModeFn amx_mode_fn) {
  const int64_t cols = jobs[0].matrix->cols;
  const size_t stride = k_act_stride(cols);
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  const bool q6 = jobs[0].matrix->layout == PackedMatrix::Layout::Q6_Kx16;
  const bool vnni = isa_enabled(Isa::Avx512Vnni);  // else AVX2 (pack_matrix checked)
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    float* buf = in.maker ? made_row_buffer(cols) : nullptr;
    for (int64_t t = b; t < e; ++t)
      (vnni ? vnni_quantize_k_act : avx2_quantize_k_act)(q6, in.row(t, buf), cols,
                                                         act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  if (!vnni) {
    // Decode and small batches balanced as below; prompts by token chunks.
    const auto groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t nt) {
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        avx2_k_groups(pm, b, e, act + (size_t)t0 * stride, stride, nt, j.out + t0 * pm.rows,
                      pm.rows, nt <= kKFewTokens ? packed_stream_ahead(pm.layout) : pm.block_bytes);
      });
    };
    if (n_tokens <= kKFewTokens && pool.size() > 1) {
      run_groups_balanced(
          pool, total, [&](int64_t g0, int64_t g1) { groups(g0, g1, 0, n_tokens); }, next);
      return;
    }
    pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kKTokenChunk)
        groups(g0, g1, t0, std::min(kKTokenChunk, n_tokens - t0));
    });
    return;
  }
  // One token, or a batch of up to kKFewTokens (decode of several
  // sequences): one pass over the weights, so a share that finishes early
  // takes groups from a slower one, and workers warm the next call's weights
  // (as the Q4_0 decode does): with the static split the worker idled while
  // the caller, which also quantizes, ran on.
  // Where AMX runs, batches of a whole tile of tokens go to it.
  const AmxKFn amx = amx_k_fn(amx_mode_fn(), q6);
  const bool gfni = gfni_enabled();
  if (n_tokens <= kKFewTokens && !(amx && n_tokens >= kAmxTokens)) {
    const auto groups = [&](int64_t g0, int64_t g1) {
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        const size_t ahead = packed_stream_ahead(pm.layout);
        if (n_tokens == 1)
          vnni_k_one(pm, b, e, act, j.out, ahead, gfni);
        else
          vnni_k_few(pm, b, e, act, stride, n_tokens, j.out, pm.rows, ahead);
      });
    };
    if (pool.size() > 1)
      run_groups_balanced(pool, total, groups, next);
    else
      groups(0, total);
    return;
  }
  // Prompts: Q4_K through vnni_k_few too, each super-block's codes masked per
  // tile of 8 straight from memory (faster than splitting them once for
  // tiles). Q6_K through vnni_k6_group.
  // With AMX, whole tiles of 16 tokens through amx_k_groups, two groups at a
  // time (each tile of activations serves both).
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kKTokenChunk) {
      const int64_t n_chunk = std::min(kKTokenChunk, n_tokens - t0);
      const int64_t n_amx = amx ? n_chunk / kAmxTokens * kAmxTokens : 0;
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        if (n_amx > 0)
          for (int64_t g = b; g < e; g += 2)
            amx(pm, g, (int)std::min<int64_t>(2, e - g), act + (size_t)t0 * stride, stride, n_amx,
                j.out + t0 * pm.rows, pm.rows);
        const int64_t t = t0 + n_amx, nt = n_chunk - n_amx;
        if (nt == 0) return;
        const uint8_t* chunk = act + (size_t)t * stride;
        float* out = j.out + t * pm.rows;
        if (!q6)  // ahead: the next super-block, as k6_group requests it
          return vnni_k_few(pm, b, e, chunk, stride, nt, out, pm.rows, pm.block_bytes);
        for (int64_t g = b; g < e; ++g)
          vnni_k6_group(pm, g, chunk, stride, nt, out + g * kGroup, pm.rows);
      });
    }
  });
}

}  // namespace cairn::kernels
