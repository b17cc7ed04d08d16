// kernels/attention_q8.h — attention of one group of query heads that share a
// KV head over K/V rows stored as Q8_0 (--kv-type q8_0), read in place.
// Owns the kernels (scalar, AVX2, AVX-512) and their scratch; the caller
// (model/attention.cpp) gathers the rows and checks the CPU. Unlike the F16
// kernels there is no reference order to follow bit for bit: every path
// computes, per position, the dot of q with the dequantized K row (a block's
// 32 products summed, then times the block's scale) and accumulates V the same
// way, in float; the paths differ only in the order of float additions. A
// token's result does not depend on the other tokens of its batch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/quant_blocks.h"

namespace cairn::kernels::attn_q8 {

struct Job {
  // Per position: the row of this KV head (its blocks, or for the scalar
  // kernel the whole row's blocks with `offset` below). Entries before
  // `first` are never read.
  const uint8_t* const* krow = nullptr;
  const uint8_t* const* vrow = nullptr;
  // Scalar kernel only: the head's first element within krow/vrow's blocks
  // (any value; the SIMD kernels need it 0, rows starting at the head).
  int64_t offset = 0;
  int64_t n_pos = 0;
  int64_t head_dim = 0;  // SIMD kernels: a multiple of 32
  int nh = 0;            // query heads, head_dim floats apart in q and out
  const float* q = nullptr;
  float* out = nullptr;
  float scale = 1.0f;
  float softcap = 0.0f;          // > 0: cap * tanh(K.q / cap) before `scale`
  int64_t first = 0;             // positions before it are masked (a sliding window)
  const float* sinks = nullptr;  // null, or one logit per head (nh) joining the softmax
};

struct Scratch {
  std::vector<float> scores;  // [nh][n_pos]
  std::vector<float> kf;      // scalar kernel: one dequantized row (head_dim)
  std::vector<quant::BlockQ8_0> qb;  // [nh][head_dim / 32] q as Q8_0 blocks
  std::vector<float> qd;             // their scales as floats
  std::vector<float> acc;     // [nh][head_dim] V sums
};

void attend_scalar(const Job& job, Scratch& s);
void attend_avx2(const Job& job, Scratch& s);
void attend_avx512(const Job& job, Scratch& s);

}  // namespace cairn::kernels::attn_q8
