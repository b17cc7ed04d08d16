// tests/kernels/ops_test.cpp — the float ops (add, RMSNorm, RoPE, SiLU·mul, softmax) against plain references, and each SIMD path against the scalar bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/float_order.h"
#include "kernels/kernels.h"
#include "kernels/ops_paths.h"

namespace cairn::kernels {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

TEST(RmsNorm, MatchesDefinition) {
  const auto x = random_vec(96, 1);
  const auto w = random_vec(96, 2);
  std::vector<float> out(96), plain(96);
  rms_norm(x.data(), w.data(), 96, 1e-5f, out.data());
  rms_norm(x.data(), nullptr, 96, 1e-5f, plain.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / 96 + 1e-5);
  for (int i = 0; i < 96; ++i) {
    EXPECT_NEAR(plain[i], x[i] * scale, 1e-5);
    EXPECT_NEAR(out[i], x[i] * scale * w[i], 1e-5);
  }
}

TEST(RmsNorm, EpsilonKeepsZeroFinite) {
  std::vector<float> x(8, 0.0f), out(8, 1.0f);
  rms_norm(x.data(), nullptr, 8, 1e-6f, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// Rotation by the direct formula: theta_i = pos * freq_scale * base^(-2i/n_rot).
void rope_reference(std::vector<float>& x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    int pos, float base, float freq_scale, RopeStyle style) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x.data() + h * head_dim;
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double theta =
          pos * double(freq_scale) * std::pow(double(base), -2.0 * double(i) / double(n_rot));
      const int64_t a = style == RopeStyle::Norm ? 2 * i : i;
      const int64_t b = style == RopeStyle::Norm ? 2 * i + 1 : i + n_rot / 2;
      const double x0 = v[a], x1 = v[b];
      v[a] = float(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[b] = float(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  }
}

TEST(Rope, NormAndNeoxMatchDirectFormula) {
  for (RopeStyle style : {RopeStyle::Norm, RopeStyle::Neox}) {
    for (int pos : {0, 1, 7, 300}) {
      for (int64_t n_rot : {int64_t{32}, int64_t{16}}) {  // 16: partial rotation
        auto x = random_vec(3 * 32, 3 + pos);
        auto ref = x;
        rope(x.data(), 3, 32, n_rot, pos, 10000.0f, 0.5f, style);
        rope_reference(ref, 3, 32, n_rot, pos, 10000.0f, 0.5f, style);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], ref[i], 2e-4 * (1 + std::fabs(ref[i])))
              << "style " << int(style) << " pos " << pos << " n_rot " << n_rot << " i " << i;
        }
      }
    }
  }
}

TEST(Rope, PositionZeroIsIdentityAndDimsPastNRotUntouched) {
  auto x = random_vec(64, 9);
  auto orig = x;
  rope(x.data(), 2, 32, 16, 0, 10000.0f, 1.0f, RopeStyle::Neox);
  EXPECT_EQ(x, orig);
  rope(x.data(), 2, 32, 16, 5, 10000.0f, 1.0f, RopeStyle::Norm);
  for (int h = 0; h < 2; ++h) {
    for (int i = 16; i < 32; ++i) EXPECT_EQ(x[h * 32 + i], orig[h * 32 + i]);
    EXPECT_NE(x[h * 32], orig[h * 32]);
  }
}

TEST(Rope, PairLayoutDiffersByStyle) {
  // One head of 4 with a vector (1,0,0,0) at pos 1, base 1 (all thetas = 1 rad).
  std::vector<float> norm = {1, 0, 0, 0}, neox = {1, 0, 0, 0};
  rope(norm.data(), 1, 4, 4, 1, 1.0f, 1.0f, RopeStyle::Norm);
  rope(neox.data(), 1, 4, 4, 1, 1.0f, 1.0f, RopeStyle::Neox);
  EXPECT_NEAR(norm[1], std::sin(1.0f), 1e-6);  // partner of 0 is 1
  EXPECT_EQ(norm[2], 0.0f);
  EXPECT_NEAR(neox[2], std::sin(1.0f), 1e-6);  // partner of 0 is 2
  EXPECT_EQ(neox[1], 0.0f);
}

TEST(Softmax, SumsToOneAndIsStable) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f, -1e30f};
  softmax(x.data(), 4);
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(x[1] / x[0], std::exp(1.0), 1e-4);
  EXPECT_EQ(x[3], 0.0f);
}

// gpt-oss's sinks: one more logit in the max and the denominator, no output.
TEST(Softmax, WithASinkMatchesTheDefinitionOnEveryPath) {
  for (int64_t n : {1, 5, 16, 37}) {
    for (float sink : {-3.0f, 0.5f, 40.0f}) {
      const auto x = random_vec(n, 7 + (int)n, 4.0f);
      std::vector<float> got = x;
      softmax_with_sink(got.data(), n, sink);
      double mx = sink, z = 0;
      for (float v : x) mx = std::max(mx, (double)v);
      for (float v : x) z += std::exp(v - mx);
      z += std::exp(sink - mx);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(got[(size_t)i], std::exp(x[(size_t)i] - mx) / z, 1e-6) << n << " " << sink;
        sum += got[(size_t)i];
      }
      EXPECT_LT(sum, 1.0);  // the sink keeps its share
    }
  }
}

TEST(SiluMul, MatchesDefinition) {
  const auto g = random_vec(50, 4, 3.0f), u = random_vec(50, 5);
  std::vector<float> out(50);
  silu_mul(g.data(), u.data(), 50, out.data());
  for (int i = 0; i < 50; ++i)
    EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-5);
}

TEST(Add, AddsInPlace) {
  std::vector<float> y = {1, 2, 3}, x = {0.5f, -2, 10};
  add(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0, 13}));
}

TEST(Rope, QkTogetherEqualsTwoCalls) {
  for (RopeStyle style : {RopeStyle::Norm, RopeStyle::Neox}) {
    for (int pos : {0, 3, 511, 40000}) {
      for (int64_t n_rot : {int64_t{64}, int64_t{32}, int64_t{1}}) {
        const auto q0 = random_vec(8 * 64, 20 + pos), k0 = random_vec(2 * 64, 30 + pos);
        auto q1 = q0, k1 = k0, q2 = q0, k2 = k0;
        rope(q1.data(), 8, 64, n_rot, pos, 10000.0f, 1.0f, style);
        rope(k1.data(), 2, 64, n_rot, pos, 10000.0f, 1.0f, style);
        rope_qk(q2.data(), 8, k2.data(), 2, 64, n_rot, pos, 10000.0f, 1.0f, style);
        EXPECT_EQ(std::memcmp(q1.data(), q2.data(), q1.size() * 4), 0) << pos << " " << n_rot;
        EXPECT_EQ(std::memcmp(k1.data(), k2.data(), k1.size() * 4), 0) << pos << " " << n_rot;
        if (n_rot > 1 && pos > 0) {
          EXPECT_NE(q1, q0);
        }
      }
    }
  }
}

// ---- every SIMD path gives the scalar path's bits ------------------------------

std::vector<ops::Path> simd_paths() {
  std::vector<ops::Path> v;
  for (ops::Path p : {ops::Path::Avx2, ops::Path::Avx512})
    if (ops::supported(p)) v.push_back(p);
  return v;
}

// Index of the first element whose bits differ, or -1.
int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return (int64_t)i;
  return -1;
}

std::vector<int64_t> ragged_sizes() {
  std::vector<int64_t> v;
  for (int64_t n = 1; n <= 70; ++n) v.push_back(n);
  for (int64_t n : {96, 127, 128, 172, 500, 2048, 5632}) v.push_back(n);
  return v;
}

// Values that reach exp's edges: underflow to subnormals and zero, overflow,
// the |n| > 192 cut-off, signed zeros.
std::vector<float> edgy_vec(size_t n, uint32_t seed, float scale) {
  auto v = random_vec(n, seed, scale);
  std::mt19937 rng(seed);
  const float edges[] = {0.0f,    -0.0f,   -87.0f, -103.0f, -104.5f,
                         -130.0f, -150.0f, 88.0f,  89.0f,   -1e30f};
  for (size_t i = 0; i < n; i += 7) v[i] = edges[rng() % 10];
  return v;
}

TEST(OpsPaths, SoftmaxBitIdentical) {
  const auto paths = simd_paths();
  if (paths.empty()) GTEST_SKIP() << "no SIMD path on this CPU (or CAIRN_ISA cap)";
  for (int64_t n : ragged_sizes()) {
    for (float scale : {1.0f, 30.0f}) {
      auto x = edgy_vec((size_t)n, (uint32_t)(n * 3 + scale), scale);
      for (int64_t i = n - n / 4; i < n; ++i) x[(size_t)i] = -INFINITY;  // padding as attention has
      if (n >= 2) x[0] = 5.0f;                                           // keep a finite max
      auto ref = x;
      ops::softmax(ops::Path::Scalar, ref.data(), n);
      for (ops::Path p : paths) {
        auto got = x;
        ops::softmax(p, got.data(), n);
        const int64_t d = first_diff(ref, got);
        ASSERT_EQ(d, -1) << "path " << int(p) << " n " << n << " scale " << scale << " at " << d;
      }
    }
  }
}

// The sampler's log-softmax: the same exps on every path, and the value of
// log(sum(exp(x))) within float rounding of the exps.
TEST(OpsPaths, LogSumExpBitIdenticalAndCorrect) {
  for (int64_t n : ragged_sizes()) {
    auto x = edgy_vec((size_t)n, (uint32_t)(n * 7 + 1), 8.0f);
    if (n >= 3) x[1] = -INFINITY;
    std::vector<float> ref((size_t)n);
    const double want_lse = ops::log_sum_exp(ops::Path::Scalar, x.data(), n, ref.data());
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);
    double sum = 0;
    for (float v : x) sum += std::exp((double)v - mx);
    EXPECT_NEAR(want_lse, mx + std::log(sum), 1e-5 * std::max(1.0, std::abs(want_lse))) << n;
    for (ops::Path p : simd_paths()) {
      std::vector<float> got((size_t)n);
      const double lse = ops::log_sum_exp(p, x.data(), n, got.data());
      EXPECT_EQ(lse, want_lse) << "path " << int(p) << " n " << n;
      ASSERT_EQ(first_diff(ref, got), -1) << "path " << int(p) << " n " << n;
    }
  }
  // No finite value: -inf, and every exp 0.
  std::vector<float> inf(20, -INFINITY), out(20, 5.0f);
  EXPECT_EQ(log_sum_exp(inf.data(), 20, out.data()), -INFINITY);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(OpsPaths, SiluMulBitIdentical) {
  const auto paths = simd_paths();
  if (paths.empty()) GTEST_SKIP() << "no SIMD path on this CPU (or CAIRN_ISA cap)";
  for (int64_t n : ragged_sizes()) {
    for (float scale : {1.0f, 40.0f}) {
      auto g = edgy_vec((size_t)n, (uint32_t)n, scale);
      for (float& x : g) x = -x;  // exp(-gate) sees the edges
      const auto u = random_vec((size_t)n, (uint32_t)n + 1);
      std::vector<float> ref((size_t)n);
      ops::silu_mul(ops::Path::Scalar, g.data(), u.data(), n, ref.data());
      for (ops::Path p : paths) {
        std::vector<float> got((size_t)n, NAN);
        ops::silu_mul(p, g.data(), u.data(), n, got.data());
        const int64_t d = first_diff(ref, got);
        ASSERT_EQ(d, -1) << "path " << int(p) << " n " << n << " scale " << scale << " at " << d;
      }
    }
  }
}

TEST(OpsPaths, RmsNormBitIdentical) {
  const auto paths = simd_paths();
  if (paths.empty()) GTEST_SKIP() << "no SIMD path on this CPU (or CAIRN_ISA cap)";
  for (int64_t n : ragged_sizes()) {
    const auto x = random_vec((size_t)n, (uint32_t)n + 7, 3.0f);
    const auto w = random_vec((size_t)n, (uint32_t)n + 8);
    for (const float* weight : {w.data(), (const float*)nullptr}) {
      std::vector<float> ref((size_t)n);
      ops::rms_norm(ops::Path::Scalar, x.data(), weight, n, 1e-5f, ref.data());
      for (ops::Path p : paths) {
        std::vector<float> got((size_t)n, NAN);
        ops::rms_norm(p, x.data(), weight, n, 1e-5f, got.data());
        const int64_t d = first_diff(ref, got);
        ASSERT_EQ(d, -1) << "path " << int(p) << " n " << n << " at " << d;
      }
    }
  }
}

// Both pair layouts, rotations of whole vectors and of ragged tails (n_rot
// not a multiple of 16 or 8; partial rotary with dims past n_rot untouched).
TEST(OpsPaths, RopeRotateBitIdentical) {
  const auto paths = simd_paths();
  if (paths.empty()) GTEST_SKIP() << "no SIMD path on this CPU (or CAIRN_ISA cap)";
  const struct {
    int64_t head_dim, n_rot;
  } shapes[] = {{64, 64}, {128, 128}, {80, 80}, {96, 40}, {64, 6}, {32, 2}, {48, 34}, {256, 200}};
  for (const auto& sh : shapes) {
    for (RopeStyle style : {RopeStyle::Norm, RopeStyle::Neox}) {
      for (int32_t pos : {0, 1, 37, 4000}) {
        const int64_t heads = 5, pairs = rope_pairs(sh.head_dim, sh.n_rot);
        std::vector<float> cs((size_t)(2 * pairs));
        rope_angles(sh.head_dim, sh.n_rot, pos, 10000.0f, 1.0f, cs.data(), cs.data() + pairs);
        const auto x = random_vec((size_t)(heads * sh.head_dim), (uint32_t)(pos + sh.n_rot), 2.0f);
        auto ref = x;
        ops::rope_rotate(ops::Path::Scalar, ref.data(), heads, sh.head_dim, 2 * pairs, cs.data(),
                         cs.data() + pairs, style);
        for (ops::Path p : paths) {
          auto got = x;
          ops::rope_rotate(p, got.data(), heads, sh.head_dim, 2 * pairs, cs.data(),
                           cs.data() + pairs, style);
          const int64_t d = first_diff(ref, got);
          ASSERT_EQ(d, -1) << "path " << int(p) << " head_dim " << sh.head_dim << " n_rot "
                           << sh.n_rot << " style " << int(style) << " pos " << pos << " at " << d;
        }
        // And the one-call form gives the same bits as the two-step form.
        auto one = x;
        rope(one.data(), heads, sh.head_dim, sh.n_rot, pos, 10000.0f, 1.0f, style);
        auto two = x;
        rope_qk_angles(two.data(), heads, nullptr, 0, sh.head_dim, sh.n_rot, cs.data(),
                       cs.data() + pairs, style);
        ASSERT_EQ(first_diff(one, two), -1);
        if (pos > 0) {
          ASSERT_NE(first_diff(one, x), -1);  // something rotated
        }
      }
    }
  }
}

// The scalar softmax is the reference's: exp_ggml in groups of 16, each
// group's reduce16 added in double.
TEST(OpsPaths, ScalarSoftmaxIsGroupsOf16) {
  auto x = random_vec(48, 11, 4.0f);
  auto got = x;
  ops::softmax(ops::Path::Scalar, got.data(), 48);
  float max = -INFINITY;
  for (float v : x) max = std::max(max, v);
  double sum = 0;
  for (int g = 0; g < 48; g += 16) {
    for (int i = g; i < g + 16; ++i) x[(size_t)i] = exp_ggml(x[(size_t)i] - max);
    sum += (double)order::reduce16(x.data() + g);
  }
  const float inv = (float)(1.0 / sum);
  for (float& v : x) v *= inv;
  EXPECT_EQ(first_diff(x, got), -1);
}

}  // namespace
}  // namespace cairn::kernels
