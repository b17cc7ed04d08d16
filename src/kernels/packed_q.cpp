// kernels/packed_q.cpp — Q4_0x16 / Q8_0x16: the packers and the driver over their kernels.
#include "kernels/packed_q.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant_blocks.h"
#include "kernels/packed_layout.h"

namespace cairn::kernels {

namespace {

// Row r's 4-byte run k of block b goes to bytes 4r..4r+3 of chunk k.
template <typename Block, int kChunks, uint8_t kXor>
void pack_rows(const WeightMatrix& w, PackedMatrix& p) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      const int64_t c = b / p.slice_blocks;
      const BlockAt at = block_at(p.slice(g, c), b % p.slice_blocks, p.slice_len(c), p.block_bytes);
      auto* scales = const_cast<uint8_t*>(at.scales);
      auto* chunks = const_cast<uint8_t*>(at.chunks);
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= w.rows) break;  // padding rows stay zero (scale 0)
        const auto* blk = reinterpret_cast<const Block*>(src + (size_t)row * w.row_stride) + b;
        std::memcpy(scales + 2 * r, &blk->d, 2);
        const auto* qs = reinterpret_cast<const uint8_t*>(blk->qs);
        for (int k = 0; k < kChunks; ++k) {
          for (int i = 0; i < 4; ++i) chunks[64 * k + 4 * r + i] = (uint8_t)(qs[4 * k + i] ^ kXor);
        }
      }
    }
  }
}

}  // namespace

void pack_q4_0_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockQ4_0, 4, 0x00>(w, p);
}

void pack_q8_0_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_rows<quant::BlockQ8_0, 8, 0x80>(w, p);  // codes + 128: unsigned for vpdpbusd
}

void packed_q_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                          ThreadPool& pool, std::span<const PackedMatrix* const> next,
                          AmxModeFn amx_mode_fn) {
  const PackedMatrix& first = *jobs[0].matrix;
  const size_t stride = act_stride(first.cols);
  thread_local std::vector<uint8_t> scratch;
  // Grown only: a prompt's layers alternate 2048- and 5632-column inputs, and
  // growing back after a shrink zero-filled megabytes every time.
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  const bool vnni = isa_enabled(Isa::Avx512Vnni);  // else AVX2 (pack_matrix checked)
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    float* buf = in.maker ? made_row_buffer(first.cols) : nullptr;
    for (int64_t t = b; t < e; ++t)
      (vnni ? vnni_quantize_act : avx2_quantize_act)(weight_offset(first.layout), in.row(t, buf),
                                                     first.cols, act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // Groups [g0, g1) of the jobs (one index over all of them), tokens [t0, t1).
  const auto run_groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
    int64_t base = 0;
    for (const PackedJob& j : jobs) {
      if (!vnni) {
        avx2_run_groups(*j.matrix, std::max(g0, base) - base,
                        std::min(g1, base + j.matrix->n_groups) - base, act, stride, t0, t1, j.out);
        base += j.matrix->n_groups;
        continue;
      }
      const int64_t n = j.matrix->n_groups;
      const int64_t end = std::min(g1, base + n);
      // Where AMX runs, batches of a whole tile of tokens stay with it
      // (unmeasured: no host so far had AMX).
      const int64_t few_max =
          amx_q_pair_fn(amx_mode_fn(), j.matrix->layout) ? kAmxTokens - 1 : kFewTokens;
      if (t1 - t0 <= few_max) {  // whole runs in step, so the reads stay in order
        const PackedMatrix& pm = *j.matrix;
        const int64_t nt = t1 - t0;
        for (int64_t lg = std::max(g0, base) - base; lg < end - base;) {
          const int64_t run_end =
              std::min(end - base, lg - lg % PackedMatrix::kRunGroups + PackedMatrix::kRunGroups);
          const uint8_t* a = act + (size_t)t0 * stride;
          float* o = j.out + t0 * pm.rows;
          if (nt == 1)
            vnni_one_run(pm, lg, run_end, a, o, stream_ahead);
          else
            vnni_few_run(pm, lg, run_end, a, stride, nt, o, pm.rows,
                         nt >= kFewPrefetchFrom ? dense_stream_ahead : stream_ahead);
          lg = run_end;
        }
        base += n;
        continue;
      }
      for (int64_t g = std::max(g0, base); g < end;) {
        const PackedMatrix& pm = *j.matrix;
        const int64_t lg = g - base;
        // Two whole groups and 2+ tokens: the two-group tiles.
        // Whole tiles of 16 tokens take AMX where it runs.
        if (g + 1 < end && (lg + 2) * kGroup <= pm.rows && t1 - t0 >= 2) {
          int64_t t = t0;
          if (t1 - t0 >= kAmxTokens) {
            if (const AmxPairFn amx = amx_q_pair_fn(amx_mode_fn(), pm.layout)) {
              const int64_t n = (t1 - t0) / kAmxTokens * kAmxTokens;
              amx(pm, lg, act + (size_t)t * stride, stride, n, j.out + t * pm.rows + lg * kGroup,
                  pm.rows);
              t += n;
            }
          }
          if (t < t1)
            vnni_pair_ranges(pm, lg, act + (size_t)t * stride, stride, t1 - t,
                             j.out + t * pm.rows + lg * kGroup, pm.rows);
          g += 2;
          continue;
        }
        vnni_group_tiles(pm, lg, act, stride, t0, t1, j.out);
        ++g;
      }
      base += n;
    }
  };
  // Decode and small batches: one pass over the weights, nothing to keep in
  // cache, so a share that finishes early helps the others (the caller's
  // share, e.g., often runs slower than a pinned worker's).
  if (n_tokens <= kTokenChunk && pool.size() > 1) {
    run_groups_balanced(
        pool, total, [&](int64_t g0, int64_t g1) { run_groups(g0, g1, 0, n_tokens); }, next);
    return;
  }
  // The jobs' groups as one range, so one pass of the pool covers them all.
  // Each thread keeps its rows for the whole batch (its weights stay in its
  // caches across token chunks); a chunk's activations stay in L2 while the
  // thread's groups pass over them.
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk)
      run_groups(g0, g1, t0, std::min(n_tokens, t0 + kTokenChunk));
  });
}

}  // namespace cairn::kernels
