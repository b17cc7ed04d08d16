// model/moe.cpp — the mixture-of-experts FFN: route, group tokens by expert,
// one batched FFN per chosen expert, sum in each token's slot order.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cairn::model {

Result<std::vector<kernels::WeightMatrix>> expert_views(const gguf::File& f, const std::string& name,
                                                         int64_t cols, int64_t rows, int64_t n_expert) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  const std::vector<int64_t> want = {cols, rows, n_expert};
  if (t->dims != want) {
    auto str = [](const std::vector<int64_t>& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    return Status::error("tensor '" + name + "' has shape " + str(t->dims) + ", expected " + str(want));
  }
  if (!kernels::matmul_supported(t->type))
    return Status::error("tensor '" + name + "' has type " + std::string(type_info(t->type).name) +
                         ", which cairn cannot compute with");
  const auto stride = row_bytes(t->type, cols);
  if (!stride)
    return Status::error("tensor '" + name + "': rows of " + std::to_string(cols) +
                         " elements are not whole " + std::string(type_info(t->type).name) + " blocks");
  const uint64_t slab = *stride * (uint64_t)rows;
  if (!t->data || slab * (uint64_t)n_expert > t->n_bytes)
    return Status::error("tensor '" + name + "' data is smaller than its shape");
  std::vector<kernels::WeightMatrix> views((size_t)n_expert);
  for (int64_t e = 0; e < n_expert; ++e) {
    kernels::WeightMatrix& w = views[(size_t)e];
    w.type = t->type;
    w.data = t->data + e * slab;
    w.rows = rows;
    w.cols = cols;
    w.row_stride = *stride;
  }
  return views;
}

void route_token(const float* logits, int64_t n_expert, int64_t n_used, bool norm_topk, float scale,
                 int32_t* experts, float* weights, MoeGating gating) {
  std::vector<float> p(logits, logits + n_expert);
  if (gating == MoeGating::Softmax) kernels::softmax(p.data(), n_expert);
  std::vector<int32_t> order((size_t)n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float sum = 0.0f;
  for (int64_t k = 0; k < n_used; ++k) {
    experts[k] = order[(size_t)k];
    weights[k] = p[order[(size_t)k]];
  }
  if (gating == MoeGating::SoftmaxChosen) kernels::softmax(weights, n_used);
  for (int64_t k = 0; k < n_used; ++k) sum += weights[k];
  if (norm_topk) {
    sum = std::max(sum, 6.103515625e-5f);  // the reference's clamp: F16's smallest normal
    for (int64_t k = 0; k < n_used; ++k) weights[k] /= sum;
  }
  if (scale != 0.0f && scale != 1.0f)
    for (int64_t k = 0; k < n_used; ++k) weights[k] *= scale;
}

namespace {

// The bias row `e` of `bias` (rows of n) added to m rows of n; none when empty.
void add_bias_row(float* rows, int64_t m, const std::vector<float>& bias, int64_t e, int64_t n) {
  if (bias.empty()) return;
  const float* b = bias.data() + e * n;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < n; ++i) rows[t * n + i] += b[i];
}

// gpt-oss's gated unit, as the reference's swiglu_oai computes it.
void swiglu_oai(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit);
    const float y = std::clamp(up[i], -kLimit, kLimit);
    out[i] = x / (1.0f + std::exp(kAlpha * -x)) * (y + 1.0f);
  }
}

// down(act(gate(x) [+ bias], up(x) [+ bias])) [+ bias] for m rows of x, with
// expert e's biases where `w` has them (`e` < 0: none, the shared expert).
void ffn_rows(const MoeWeights& w, int64_t e, const kernels::WeightMatrix& gate,
              const kernels::WeightMatrix& up, const kernels::WeightMatrix& down, const float* x,
              int64_t m, float* out, std::vector<float>& g, std::vector<float>& u, ThreadPool& pool) {
  const int64_t n_ff = gate.rows;
  g.resize((size_t)(m * n_ff));
  u.resize((size_t)(m * n_ff));
  const kernels::MatmulJob jobs[2] = {{&gate, g.data()}, {&up, u.data()}};
  kernels::matmul_many(jobs, x, m, pool);
  if (e >= 0) {
    add_bias_row(u.data(), m, w.up_bias, e, n_ff);  // the reference's order: up, then gate
    add_bias_row(g.data(), m, w.gate_bias, e, n_ff);
  }
  for (int64_t t = 0; t < m; ++t) {
    float* gt = g.data() + t * n_ff;
    if (e >= 0 && w.activation == MoeActivation::SwigluOai)
      swiglu_oai(gt, u.data() + t * n_ff, n_ff, gt);
    else
      kernels::silu_mul(gt, u.data() + t * n_ff, n_ff, gt);
  }
  kernels::matmul(down, g.data(), m, out, pool);
  if (e >= 0) add_bias_row(out, m, w.down_bias, e, down.rows);
}

}  // namespace

void moe_forward(const MoeWeights& w, const float* x, int64_t n_tokens, float* out, ThreadPool& pool) {
  const int64_t E = w.n_expert, K = w.n_used, D = w.n_embd;
  if (n_tokens <= 0) return;
  std::vector<float> logits((size_t)(n_tokens * E));
  kernels::matmul(w.router, x, n_tokens, logits.data(), pool);
  if (!w.router_bias.empty())
    for (int64_t t = 0; t < n_tokens; ++t) kernels::add(logits.data() + t * E, w.router_bias.data(), E);
  std::vector<int32_t> chosen((size_t)(n_tokens * K));
  std::vector<float> weight((size_t)(n_tokens * K));
  for (int64_t t = 0; t < n_tokens; ++t)
    route_token(logits.data() + t * E, E, K, w.norm_topk, w.scale, chosen.data() + t * K,
                weight.data() + t * K, w.gating);

  // Each (token, slot) pair's expert output lands in its own row, so the sum
  // below runs in slot order whatever order the experts ran in.
  std::vector<float> slot_out((size_t)(n_tokens * K * D));
  std::vector<float> xe, ye, g, u;
  std::vector<int64_t> members;  // token * K + slot
  for (int32_t e = 0; e < E; ++e) {
    members.clear();
    for (int64_t i = 0; i < n_tokens * K; ++i)
      if (chosen[(size_t)i] == e) members.push_back(i);
    if (members.empty()) continue;
    const int64_t m = (int64_t)members.size();
    xe.resize((size_t)(m * D));
    for (int64_t r = 0; r < m; ++r) std::copy_n(x + (members[(size_t)r] / K) * D, D, xe.data() + r * D);
    ye.resize((size_t)(m * D));
    ffn_rows(w, e, w.gate[(size_t)e], w.up[(size_t)e], w.down[(size_t)e], xe.data(), m, ye.data(), g,
             u, pool);
    for (int64_t r = 0; r < m; ++r) std::copy_n(ye.data() + r * D, D, slot_out.data() + members[(size_t)r] * D);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* o = out + t * D;
    for (int64_t k = 0; k < K; ++k) {
      const float* y = slot_out.data() + (t * K + k) * D;
      const float wk = weight[(size_t)(t * K + k)];
      if (k == 0)
        for (int64_t i = 0; i < D; ++i) o[i] = y[i] * wk;
      else
        for (int64_t i = 0; i < D; ++i) o[i] += y[i] * wk;
    }
  }
  if (!w.shared) return;
  std::vector<float> gate_logit((size_t)n_tokens);
  kernels::matmul(w.shared_gate_inp, x, n_tokens, gate_logit.data(), pool);
  ye.resize((size_t)(n_tokens * D));
  ffn_rows(w, -1, w.shared_gate, w.shared_up, w.shared_down, x, n_tokens, ye.data(), g, u, pool);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float s = 1.0f / (1.0f + std::exp(-gate_logit[(size_t)t]));
    float* o = out + t * D;
    for (int64_t i = 0; i < D; ++i) o[i] += ye[(size_t)(t * D + i)] * s;
  }
}

}  // namespace cairn::model
