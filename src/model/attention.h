// model/attention.h — internal to src/model: causal attention of a batch's
// query heads over the K/V rows in a KvView, in the reference's float order.
// Owns the score/softmax/weighted-sum arithmetic and its SIMD forms, the
// per-thread scratch it needs, and how the work is split across the pool.
// Never writes K/V (blocks.cpp does, before calling it), never allocates a
// T x n_pos score matrix, and for F16/F32 rows every path gives the scalar
// path's exact bits. Q8_0 rows (--kv-type q8_0) are read in place by the
// kernels of kernels/attention_q8.h: the paths agree to float rounding (the
// order of additions differs), and the SIMD ones need head_dim % 32 == 0.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "model/model.h"

namespace cairn::model {

enum class AttnPath { Auto, Scalar, Avx2, Avx512 };

struct AttnShape {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // n_head % n_head_kv == 0; consecutive query heads share one
  int64_t head_dim = 0;
  float scale = 1.0f;  // applied to K.q before the softmax
  // Gemma: scores soft-capped (cap * tanh(K.q / cap), before `scale`; 0:
  // none) and a sliding window (> 0: only the last `window` positions, the
  // older ones masked as the reference masks them, their rows never read).
  float softcap = 0.0f;
  int64_t window = 0;
  // gpt-oss: one learned logit per query head (n_head floats) that joins
  // every softmax's max and sum but weighs no value; null: none. Runs the
  // scalar path.
  const float* sinks = nullptr;
};

// For every token t: out[t] (n_head * head_dim floats) = attention of q[t]
// over positions [0, positions[t]] of seqs[t] in layer `layer`. The float
// order depends on whether the batch has one token or more (as the
// reference's kernel choice does; see attention.cpp), or is the one-token
// order for every row under kernels::order::OneTokenOrder. Auto picks the best path
// isa_enabled() allows for this head_dim; an explicit path must be supported
// (attention_path_supported), else Scalar runs.
void attend(const KvView& kv, int layer, std::span<const SeqId> seqs,
            std::span<const int32_t> positions, const float* q, const AttnShape& shape, float* out,
            ThreadPool& pool, AttnPath path = AttnPath::Auto);

// Whether `path` can run here (CPU and CAIRN_ISA cap) for this head_dim.
bool attention_path_supported(AttnPath path, int64_t head_dim);

}  // namespace cairn::model
