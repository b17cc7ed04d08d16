// model/moe.h: routing (softmax, top-k, renormalisation, scale), the grouped
// expert FFNs against a plain per-token computation, and expert tensor views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant.h"
#include "gguf/gguf_writer.h"
#include "kernels/type_ops.h"
#include "model/moe.h"

namespace cairn::model {
namespace {

TEST(MoeRoute, TopKOfTheSoftmaxRenormalisedOrNot) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t ex[3];
  float w[3];
  route_token(logits, 5, 3, /*norm_topk=*/false, 0.0f, ex, w);
  EXPECT_EQ(ex[0], 1);  // equal logits: the lower index first
  EXPECT_EQ(ex[1], 3);
  EXPECT_EQ(ex[2], 4);
  double z = 0;
  for (float l : logits) z += std::exp((double)l);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-6);
  route_token(logits, 5, 3, /*norm_topk=*/true, 0.0f, ex, w);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6);
  EXPECT_NEAR(w[2] / w[0], std::exp(-1.0), 1e-6);
  route_token(logits, 5, 2, true, 2.5f, ex, w);
  EXPECT_NEAR(w[0] + w[1], 2.5f, 1e-5);
}

// gpt-oss: the largest logits chosen as they are, weighed by a softmax over
// those alone.
TEST(MoeRoute, SoftmaxOverTheChosenLogits) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 3.0f, 1.0f};
  int32_t ex[2];
  float w[2];
  route_token(logits, 5, 2, false, 0.0f, ex, w, MoeGating::SoftmaxChosen);
  EXPECT_EQ(ex[0], 3);
  EXPECT_EQ(ex[1], 1);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
}

struct Experts {
  std::vector<std::vector<uint8_t>> bytes;  // keeps the matrices' data
  MoeWeights w;
};

kernels::WeightMatrix matrix(Experts& ex, TensorType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f / std::sqrt((float)cols));
  std::vector<float> v((size_t)(rows * cols));
  for (float& f : v) f = g(rng);
  const size_t rb = *row_bytes(t, cols);
  ex.bytes.emplace_back(rb * rows);
  for (int64_t r = 0; r < rows; ++r) type_ops(t)->from_float(v.data() + r * cols, ex.bytes.back().data() + r * rb, cols);
  kernels::WeightMatrix m;
  m.type = t;
  m.data = ex.bytes.back().data();
  m.rows = rows;
  m.cols = cols;
  m.row_stride = rb;
  return m;
}

Experts make_experts(TensorType t, bool shared, bool norm) {
  Experts ex;
  ex.bytes.reserve(64);
  std::mt19937 rng(5);
  MoeWeights& w = ex.w;
  w.n_expert = 6;
  w.n_used = 2;
  w.n_embd = 64;
  w.n_ff = 96;
  w.norm_topk = norm;
  w.router = matrix(ex, t, w.n_expert, w.n_embd, rng);
  for (int e = 0; e < w.n_expert; ++e) {
    w.gate.push_back(matrix(ex, t, w.n_ff, w.n_embd, rng));
    w.up.push_back(matrix(ex, t, w.n_ff, w.n_embd, rng));
    w.down.push_back(matrix(ex, t, w.n_embd, w.n_ff, rng));
  }
  if (shared) {
    w.shared = true;
    w.n_ff_shared = 128;
    w.shared_gate = matrix(ex, t, 128, w.n_embd, rng);
    w.shared_up = matrix(ex, t, 128, w.n_embd, rng);
    w.shared_down = matrix(ex, t, w.n_embd, 128, rng);
    w.shared_gate_inp = matrix(ex, TensorType::F32, 1, w.n_embd, rng);
  }
  return ex;
}

std::vector<float> dequant(const kernels::WeightMatrix& m) {
  std::vector<float> v((size_t)(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) kernels::get_row(m, r, v.data() + r * m.cols);
  return v;
}

// The FFN of one token in double from the dequantized weights.
std::vector<double> dense_ffn(const kernels::WeightMatrix& gate, const kernels::WeightMatrix& up,
                              const kernels::WeightMatrix& down, const float* x) {
  const auto G = dequant(gate), U = dequant(up), Dn = dequant(down);
  const int64_t n_ff = gate.rows, D = gate.cols;
  std::vector<double> h((size_t)n_ff), y((size_t)D, 0.0);
  for (int64_t f = 0; f < n_ff; ++f) {
    double a = 0, b = 0;
    for (int64_t i = 0; i < D; ++i) {
      a += (double)G[f * D + i] * x[i];
      b += (double)U[f * D + i] * x[i];
    }
    h[f] = a / (1 + std::exp(-a)) * b;
  }
  for (int64_t i = 0; i < D; ++i)
    for (int64_t f = 0; f < n_ff; ++f) y[i] += (double)Dn[i * n_ff + f] * h[f];
  return y;
}

TEST(MoeForward, MatchesAPlainPerTokenComputation) {
  for (bool shared : {false, true}) {
    Experts ex = make_experts(TensorType::F32, shared, /*norm=*/!shared);
    const MoeWeights& w = ex.w;
    const int64_t n = 7;
    std::mt19937 rng(9);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x((size_t)(n * w.n_embd)), out((size_t)(n * w.n_embd));
    for (float& f : x) f = g(rng);
    ThreadPool pool(2);
    moe_forward(w, x.data(), n, out.data(), pool);
    const auto R = dequant(w.router);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * w.n_embd;
      std::vector<float> logits((size_t)w.n_expert);
      for (int64_t e = 0; e < w.n_expert; ++e) {
        double s = 0;
        for (int64_t i = 0; i < w.n_embd; ++i) s += (double)R[e * w.n_embd + i] * xt[i];
        logits[e] = (float)s;
      }
      int32_t chosen[2];
      float wt[2];
      route_token(logits.data(), w.n_expert, w.n_used, w.norm_topk, w.scale, chosen, wt);
      std::vector<double> want((size_t)w.n_embd, 0.0);
      for (int k = 0; k < 2; ++k) {
        const auto y = dense_ffn(w.gate[chosen[k]], w.up[chosen[k]], w.down[chosen[k]], xt);
        for (int64_t i = 0; i < w.n_embd; ++i) want[i] += wt[k] * y[i];
      }
      if (shared) {
        const auto gi = dequant(w.shared_gate_inp);
        double l = 0;
        for (int64_t i = 0; i < w.n_embd; ++i) l += (double)gi[i] * xt[i];
        const auto y = dense_ffn(w.shared_gate, w.shared_up, w.shared_down, xt);
        for (int64_t i = 0; i < w.n_embd; ++i) want[i] += y[i] / (1 + std::exp(-l));
      }
      for (int64_t i = 0; i < w.n_embd; ++i)
        ASSERT_NEAR(out[t * w.n_embd + i], want[i], 2e-4) << "token " << t << " dim " << i << " shared " << shared;
    }
  }
}

// Grouping tokens by expert does not change a token's bits: with integer
// weights every row's dot product is the same alone or in a batch.
TEST(MoeForward, ABatchGivesEachTokensOwnBits) {
  Experts ex = make_experts(TensorType::Q8_0, true, true);
  const MoeWeights& w = ex.w;
  const int64_t n = 9;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x((size_t)(n * w.n_embd)), all((size_t)(n * w.n_embd)), one((size_t)w.n_embd);
  for (float& f : x) f = g(rng);
  ThreadPool pool(2);
  moe_forward(w, x.data(), n, all.data(), pool);
  for (int64_t t = 0; t < n; ++t) {
    moe_forward(w, x.data() + t * w.n_embd, 1, one.data(), pool);
    for (int64_t i = 0; i < w.n_embd; ++i) ASSERT_EQ(all[t * w.n_embd + i], one[i]) << t << " " << i;
  }
}

TEST(MoeExperts, ViewsOfA3DTensorAndClearErrors) {
  gguf::Writer wr;
  std::vector<uint8_t> data(32 * 3 * 3 * 4);  // F32 [32 cols, 3 rows, 3 experts]: element i = i
  for (size_t i = 0; i < data.size() / 4; ++i) {
    const float v = (float)i;
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  ASSERT_TRUE(wr.add_tensor("exps", TensorType::F32, {32, 3, 3}, data).is_ok());
  auto f = gguf::File::parse(wr.to_bytes());
  ASSERT_TRUE(f) << f.status().message();
  auto views = expert_views(**f, "exps", 32, 3, 3);
  ASSERT_TRUE(views) << views.status().message();
  float row[32];
  kernels::get_row((*views)[2], 1, row);
  EXPECT_EQ(row[0], (float)(2 * 96 + 32));  // expert 2, row 1
  EXPECT_FALSE(expert_views(**f, "exps", 32, 3, 4).is_ok());
  EXPECT_FALSE(expert_views(**f, "nope", 32, 3, 3).is_ok());
  EXPECT_NE(expert_views(**f, "exps", 32, 4, 3).status().message().find("expected [32, 4, 3]"), std::string::npos);
}

}  // namespace
}  // namespace cairn::model
