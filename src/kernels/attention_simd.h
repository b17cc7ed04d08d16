// kernels/attention_simd.h — the SIMD kernels of model/attention.cpp for
// one group of query heads that share a KV head, and their scratch.
// Owns nothing but the kernel entry points; the caller gathers the rows and
// checks the CPU (a kernel runs only when isa_enabled says its level may).
#pragma once

#include <cstdint>
#include <vector>

namespace cairn::kernels::attn_simd {

struct GroupJob {
  const uint8_t* const* krow = nullptr;  // per position: this KV head's K elements
  const uint8_t* const* vrow = nullptr;  // per position: this KV head's V elements
  int64_t n_pos = 0;
  int64_t head_dim = 0;  // a multiple of 16
  int nh = 0;            // query heads, head_dim floats apart in q and out
  const float* q = nullptr;
  float* out = nullptr;
  float scale = 1.0f;
  // Gemma: > 0, scores soft-capped as the scalar path does (cap * tanh(K.q /
  // cap), then * scale); 0: none.
  float softcap = 0.0f;
  // A sliding window: positions before `first` are masked (score -inf,
  // weight 0) and their rows never read; krow/vrow entries below it must
  // still point at readable rows (the caller repeats row `first`).
  int64_t first = 0;
  bool batch = false;  // the batch has >= 2 tokens (tinyBLAS orders)
  bool f16 = true;     // K/V elements are F16 (else F32)
  // > 0: while scoring positions p.., request the K/V rows of positions this
  // far ahead (rows out of cache, e.g. a decode step's); 0: none.
  int64_t prefetch_ahead = 0;
  // Batches (head_dim 64 or 128, first == 0): this KV head's K as floats, transposed by
  // blocks of 16 positions: block b holds [head_dim][16] (dim d of position
  // 16b + i at d * 16 + i), one contiguous run per block, covering n_pos; or
  // null to read krow.
  const float* kt = nullptr;
  // Batches: this KV head's V rows of positions [0, n_pos) one after another
  // (head_dim elements each, F16 or float as f16 says), or null to read vrow.
  const uint8_t* vc = nullptr;
};

struct Scratch {
  std::vector<float> qf;      // [nh][head_dim] queries as the products see them
  std::vector<float> kf;      // [16][head_dim] a block of K rows in float
  std::vector<float> tsum;    // scores_kt: [nh + 1][8][16] each head's half-reduced lanes
  std::vector<float> scores;  // [nh][n_pad] scores, then softmax weights
};

void attend_group_avx512(const GroupJob& job, Scratch& s);
void attend_group_avx2(const GroupJob& job, Scratch& s);

// K rows rows[0..np) (np <= 16, head_dim <= 128 elements, F16 or float) as
// one block of GroupJob::kt at dst (16 * head_dim floats; columns from np on
// zero).
void transpose_rows_avx512(const uint8_t* const* rows, int np, int64_t head_dim, bool f16,
                           float* dst);
void transpose_rows_avx2(const uint8_t* const* rows, int np, int64_t head_dim, bool f16,
                         float* dst);

}  // namespace cairn::kernels::attn_simd
