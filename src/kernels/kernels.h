// kernels/kernels.h — the numeric building blocks of a forward pass.
// Owns matmul over GGUF-typed weights and the float ops around it (norm, rope,
// softmax, activations). Pure functions over caller-owned buffers; no model
// knowledge, no allocation visible to callers beyond scratch they pass in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor_type.h"
#include "core/thread_pool.h"

namespace cairn::kernels {

struct PackedMatrix;  // kernels/packed.h

// A 2-D weight in its stored type: `rows` rows of `cols` elements each.
struct WeightMatrix {
  TensorType type = TensorType::F32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;  // bytes between rows
  // A repacked copy for the fast integer kernels (see prepare_weight), or null.
  std::shared_ptr<const PackedMatrix> packed;
};

// Repacks w for the active ISA's fastest kernel where one exists (done once at
// load; the original data stays valid and is still used by get_row).
void prepare_weight(WeightMatrix& w);

// Which kernels multiply Q4_0/Q8_0/Q4_K/Q6_K weights by batches of 16+
// tokens: "amx" (tile instructions), "amx-emulated" (CAIRN_AMX=emulate: the
// same kernels, their tile operations in plain C++, for tests), "avx512vnni",
// or "none" (the type table's kernels). CAIRN_AMX=off, or a CAIRN_ISA cap, turns AMX off.
const char* packed_tile_path();
// The same for BF16 weights: "amx" (AMX-BF16 tiles), "amx-emulated",
// "avx512bf16", or "none".
const char* packed_bf16_tile_path();
// Tokens the batched kernels take at a time: an AMX tile holds 16 tokens'
// activations, so 17 tokens cost about as much as 32 (the engine fills
// whole tiles when it sizes prompt chunks); 1 where cost grows per token.
int32_t batch_token_granule();

// out[t * w.rows + r] = dot(row r of w, x[t * w.cols ...]) for every token t.
// Activations are converted per row to the type's vec_dot_type first (integer
// dot products for quantized weights), exactly once per token.
// Weights of an unsupported type (see matmul_supported) give NaN outputs.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool& pool);

// Several weights applied to the same activations (e.g. Q, K and V; gate and
// up): out of job i as matmul(*jobs[i].w, x, ...). Where the kernels allow,
// the activations are converted once and one pass of the pool does them all.
// `next` optionally names the weights of the call that will follow (a decode
// step's next projection): threads that finish their share early start
// pulling in the part of it they will read. Results never depend on it.
struct MatmulJob {
  const WeightMatrix* w;
  float* out;
};
void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens,
                 ThreadPool& pool, std::span<const WeightMatrix* const> next = {});

// Activations made one token's row at a time from other rows (an RMSNorm of
// the residual stream, SwiGLU's silu(gate) * up): make(t, row) writes token
// t's row (the matrices' cols floats). Must be safe to call concurrently for
// different tokens.
class RowMaker {
 public:
  virtual void make(int64_t t, float* row) const = 0;

 protected:
  ~RowMaker() = default;
};

// matmul_many over rows made by `rows`, with the same results as making them
// all into `scratch` ([n_tokens, cols] floats) and passing that. The integer
// kernels (Q4_0, Q8_0, Q4_K, Q6_K packed) make each row into a thread's buffer
// and quantize it there, so a batch's floats are never written out and read
// back (a 512-token prompt's SwiGLU rows are 11.5 MB per TinyLlama layer);
// the others get every row made into `scratch` first.
void matmul_many(std::span<const MatmulJob> jobs, const RowMaker& rows, float* scratch,
                 int64_t n_tokens, ThreadPool& pool,
                 std::span<const WeightMatrix* const> next = {});

// The rows a decoder block makes (rms_norm and silu_mul below, rows of n).
// Row t of rms_norm(x[t]) * weight.
class NormedRows final : public RowMaker {
 public:
  NormedRows(const float* x, const float* weight, int64_t n, float eps)
      : x_(x), weight_(weight), n_(n), eps_(eps) {}
  void make(int64_t t, float* row) const override;

 private:
  const float* x_;
  const float* weight_;
  int64_t n_;
  float eps_;
};
// Row t of silu(gate[t]) * up[t].
class SwigluRows final : public RowMaker {
 public:
  SwigluRows(const float* gate, const float* up, int64_t n) : gate_(gate), up_(up), n_(n) {}
  void make(int64_t t, float* row) const override;

 private:
  const float* gate_;
  const float* up_;
  int64_t n_;
};

// The bytes a matmul over w reads, in memory order: its packed copy when it
// has one, else its stored rows (benchmarks compare kernels with plain loads
// over exactly these bytes).
std::span<const uint8_t> weight_stream(const WeightMatrix& w);

// Whether matmul can multiply weights of type t (loaders check this up front).
bool matmul_supported(TensorType t);

// Copies row `row` of w (any computable type) into dst as floats (embedding lookup).
void get_row(const WeightMatrix& w, int64_t row, float* dst);

// out = x / sqrt(mean(x^2) + eps) * weight   (weight may be null)
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// Rotary position embedding in place on `n_heads` heads of `head_dim` each.
// NORM style rotates adjacent pairs (x[2i], x[2i+1]) (llama); NEOX style rotates
// (x[i], x[i + head_dim/2]) (qwen2, neox). theta_i = pos * freq_scale * base^(-2i/n_rot).
// `freq_factors` (optional, one per rotated pair: rope_pairs() floats) divide
// each pair's angle before the scale, as Llama 3.1's rope_freqs.weight does:
// theta_i = freq_scale * (pos * base^(-2i/n_rot) / freq_factors[i]). Null
// leaves the angles (and their bits) as without it.
enum class RopeStyle { Norm, Neox };
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int32_t pos, float base,
          float freq_scale, RopeStyle style, const float* freq_factors = nullptr);
// rope() of one token's queries and keys (same position) with the angles
// computed once; the same bits as two rope() calls. q or k may be null.
void rope_qk(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t head_dim,
             int64_t n_rot, int32_t pos, float base, float freq_scale, RopeStyle style,
             const float* freq_factors = nullptr);
// The same in two steps, so a forward computes a position's angles once for
// all its layers: rope_pairs() cos and sin values (0: nothing rotates), then
// the rotation with them; rope_qk's bits.
int64_t rope_pairs(int64_t head_dim, int64_t n_rot);
void rope_angles(int64_t head_dim, int64_t n_rot, int32_t pos, float base, float freq_scale,
                 float* cos, float* sin, const float* freq_factors = nullptr);
void rope_qk_angles(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t head_dim,
                    int64_t n_rot, const float* cos, const float* sin, RopeStyle style);

// YaRN (and the reference's RoPE attention factor), as ggml's rope op
// computes them: each pair's angle blends the interpolated angle (times
// freq_scale) with the unscaled one by a ramp over the pairs between the
// correction dims (ext_factor weighs the blend; 0: interpolation only), and
// cos and sin are multiplied by attn_factor, times 1 + 0.1 ln(1 / freq_scale)
// when ext_factor is not 0. corr_low/high: rope_yarn_corr_dims.
struct RopeYarn {
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float corr_low = 0.0f;
  float corr_high = 0.0f;
};
// The pairs where the ramp starts and ends: those that turn beta_fast and
// beta_slow times over n_ctx_orig positions (floor and ceil, clamped to [0,
// n_dims - 1]).
void rope_yarn_corr_dims(int64_t n_dims, int64_t n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float& low, float& high);
// rope_angles with YaRN; with ext_factor 0 and attn_factor 1 the same bits as rope_angles.
void rope_angles_yarn(int64_t head_dim, int64_t n_rot, int32_t pos, float base, float freq_scale,
                      const RopeYarn& yarn, float* cos, float* sin,
                      const float* freq_factors = nullptr);

// In-place softmax over n values (max-subtracted, numerically stable), in the
// reference's order: exp_ggml in groups of 16, group sums added in double.
void softmax(float* x, int64_t n);
// softmax with one more logit, `sink`, in the max and the sum but with no
// output of its own (gpt-oss's attention sinks), as the reference adds it.
void softmax_with_sink(float* x, int64_t n, float sink);

// out[i] = exp(x[i] - max(x)) with softmax's exps (out may be x); returns the
// log-sum-exp, max + log(sum of out) with the sum in double. With no finite
// value it returns -inf and out is all 0. NaNs are the caller's to reject.
double log_sum_exp(const float* x, int64_t n, float* out);

// out[i] = silu(gate[i]) * up[i] for one row of n (with exp_ggml).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// ggml's vectorised expf (AVX-512 ggml_v_expf), one lane: within ~1.5 ulp of
// expf but not equal to it; the reference's softmax and silu use it.
float exp_ggml(float x);

// y[i] += x[i]
void add(float* y, const float* x, int64_t n);

}  // namespace cairn::kernels
