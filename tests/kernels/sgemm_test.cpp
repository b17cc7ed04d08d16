// tests/kernels/sgemm_test.cpp — the float32 GEMM (kernels/sgemm.h) against a double reference.
// Every kernel level up to the active one (scalar, AVX2, AVX-512) on odd
// shapes, transposed A and B, the packed and scratch forms, the epilogue, and
// a few shapes past the cache blocks on a two-thread pool.
// Tolerance: |c - ref| <= 1e-5 · sum_k |a_ik·b_kj| + 1e-6 (float sums of K
// terms stay far inside K·2^-24 of that bound for the K tested).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/sgemm.h"

namespace cairn::kernels {
namespace {

struct Aligned {
  explicit Aligned(size_t bytes) : p(static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))) {}
  ~Aligned() { std::free(p); }
  float* p;
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<Isa> levels() {
  std::vector<Isa> out{Isa::Scalar};
  if (sgemm_isa() >= Isa::Avx2) out.push_back(Isa::Avx2);
  if (sgemm_isa() >= Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

struct Case {
  Case(int64_t m_, int64_t n_, int64_t k_, bool ta = false, bool tb = false)
      : m(m_), n(n_), k(k_), trans_a(ta), trans_b(tb) {}
  int64_t m, n, k;
  bool trans_a, trans_b;
  SgemmEpilogue epi;
  bool col_bias = false, row_bias = false;
  bool post = false;  // epi.post = v -> 2v + 1: applied twice, it shows
};

void double_plus_one(float* row, int64_t n, const void* ctx) {
  EXPECT_EQ(ctx, &double_plus_one);
  for (int64_t j = 0; j < n; ++j) row[j] = 2.0f * row[j] + 1.0f;
}

// Runs one case at one level and checks every element.
void check(const Case& cs, Isa isa, ThreadPool* pool, bool scratch_form = false) {
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  const auto a = random_vec(size_t(m * k), uint32_t(m * 131 + k));
  const auto b = random_vec(size_t(k * n), uint32_t(n * 17 + k * 3));
  const auto cb = random_vec(size_t(n), 5), rb = random_vec(size_t(m), 6);
  const auto c0 = random_vec(size_t(m * n), 7);
  // A[i][kk] at a[i*rsa + kk*csa]: row-major [M,K], or [K,M] when transposed.
  const int64_t rsa = cs.trans_a ? 1 : k, csa = cs.trans_a ? m : 1;
  const int64_t rsb = cs.trans_b ? 1 : n, csb = cs.trans_b ? k : 1;
  SgemmEpilogue epi = cs.epi;
  epi.col_bias = cs.col_bias ? cb.data() : nullptr;
  epi.row_bias = cs.row_bias ? rb.data() : nullptr;
  if (cs.post) {
    epi.post = &double_plus_one;
    epi.post_ctx = reinterpret_cast<const void*>(&double_plus_one);
  }
  std::vector<float> c = c0;
  if (scratch_form) {
    Aligned scratch(sgemm_scratch_bytes(k, n));
    sgemm(m, n, k, a.data(), rsa, csa, b.data(), rsb, csb, c.data(), n, epi, scratch.p, pool);
  } else {
    Aligned packed(sgemm_packed_bytes(k, n, isa));
    const PackedBView v = pack_b_into(packed.p, b.data(), rsb, csb, k, n, isa);
    ASSERT_EQ(v.isa, isa);
    sgemm_packed(m, a.data(), rsa, csa, v, c.data(), n, epi, pool);
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = double(a[size_t(i * rsa + kk * csa)]) * b[size_t(kk * rsb + j * csb)];
        sum += p;
        mag += std::fabs(p);
      }
      double ref = double(epi.alpha) * sum;
      if (epi.row_bias) ref += rb[size_t(i)];
      if (epi.col_bias) ref += cb[size_t(j)];
      if (epi.beta != 0.0f) ref += double(epi.beta) * c0[size_t(i * n + j)];
      double tol = 1e-5 * (std::fabs(epi.alpha) * mag + 1.0) + 1e-6;
      if (cs.post) ref = 2.0 * ref + 1.0, tol *= 2.0;
      ASSERT_NEAR(c[size_t(i * n + j)], ref, tol)
          << "isa " << isa_name(isa) << " m " << m << " n " << n << " k " << k << " at (" << i
          << ", " << j << ") transA " << cs.trans_a << " transB " << cs.trans_b;
    }
  }
}

TEST(Sgemm, OddShapesEveryLevel) {
  const int64_t sizes[] = {1, 2, 3, 5, 6, 7, 12, 13, 16, 17, 31, 32, 33, 47, 64, 70};
  for (Isa isa : levels()) {
    for (int64_t m : sizes)
      for (int64_t n : sizes)
        for (int64_t k : {int64_t(1), int64_t(3), int64_t(16), int64_t(33), int64_t(70)})
          check(Case(m, n, k), isa, nullptr);
  }
}

TEST(Sgemm, TransposedOperands) {
  for (Isa isa : levels()) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t s : {1, 5, 19, 37, 70}) {
          Case cs{s, 70 - s + 3, (s * 7) % 61 + 1};
          cs.trans_a = ta;
          cs.trans_b = tb;
          check(cs, isa, nullptr);
        }
  }
}

TEST(Sgemm, Epilogue) {
  for (Isa isa : levels()) {
    for (int64_t s : {1, 13, 33}) {
      Case cs{s + 2, s * 2 + 1, 300};  // K over one block: the epilogue runs once
      cs.epi.alpha = 0.5f;
      cs.epi.beta = -1.5f;
      cs.col_bias = true;
      check(cs, isa, nullptr);
      cs.row_bias = true;
      cs.col_bias = false;
      cs.epi.beta = 1.0f;
      check(cs, isa, nullptr);
    }
  }
}

// Once per element, after the last K block (three blocks here), with the
// biases and beta already in; every level, threaded and not.
TEST(Sgemm, PostRunsOnceOnFinishedRows) {
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    for (int64_t m : {1, 7, 40}) {
      Case cs{m, 300 + m, 2 * kSgemmKc + 5};
      cs.post = true;
      cs.col_bias = true;
      cs.epi.beta = 0.5f;
      check(cs, isa, nullptr);
      check(cs, isa, &pool);
    }
  }
}

TEST(Sgemm, BetaZeroIgnoresNanInC) {
  const int64_t m = 7, n = 19, k = 5;
  const auto a = random_vec(m * k, 1), b = random_vec(k * n, 2);
  for (Isa isa : levels()) {
    Aligned packed(sgemm_packed_bytes(k, n, isa));
    const PackedBView v = pack_b_into(packed.p, b.data(), n, 1, k, n, isa);
    std::vector<float> c(m * n, std::nanf(""));
    sgemm_packed(m, a.data(), k, 1, v, c.data(), n, SgemmEpilogue{}, nullptr);
    for (float x : c) ASSERT_FALSE(std::isnan(x)) << isa_name(isa);
  }
}

TEST(Sgemm, EmptyK) {
  const int64_t m = 3, n = 5;
  std::vector<float> c(m * n, 2.0f), bias(n, 1.0f);
  SgemmEpilogue epi;
  epi.beta = 0.5f;
  epi.col_bias = bias.data();
  const PackedBView v{nullptr, 0, n, sgemm_nr(sgemm_isa()), sgemm_isa()};
  sgemm_packed(m, nullptr, 0, 1, v, c.data(), n, epi, nullptr);
  for (float x : c) EXPECT_FLOAT_EQ(x, 2.0f);
  epi.post = &double_plus_one;
  epi.post_ctx = reinterpret_cast<const void*>(&double_plus_one);
  sgemm_packed(m, nullptr, 0, 1, v, c.data(), n, epi, nullptr);
  for (float x : c) EXPECT_FLOAT_EQ(x, 5.0f);  // 2·(0.5·2 + 1) + 1
}

TEST(Sgemm, LargeThreaded) {
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    check(Case(300, 530, 600), isa, &pool);        // past KC and MC, two K blocks
    check(Case(1, 2100, 260), isa, &pool);         // past NC, one row
    check(Case(250, 20, 513), isa, &pool);         // few panels: threads split M
    Case t(129, 77, 300, true, true);
    t.epi.beta = 2.0f;
    t.col_bias = true;
    check(t, isa, &pool);
  }
}

TEST(Sgemm, ScratchForm) {
  ThreadPool pool(2);
  check(Case(64, 128, 64, false, true), sgemm_isa(), &pool, true);  // Q·Kᵀ of one head
  check(Case(128, 64, 128), sgemm_isa(), nullptr, true);             // P·V
}

TEST(Sgemm, PackBOwned) {
  const int64_t k = 37, n = 45, m = 9;
  const auto a = random_vec(m * k, 3), b = random_vec(k * n, 4);
  std::vector<float> bt(size_t(n * k));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) bt[size_t(j * k + kk)] = b[size_t(kk * n + j)];
  const PackedB p1 = pack_b(b.data(), k, n, false), p2 = pack_b(bt.data(), k, n, true);
  ASSERT_TRUE(p1 && p2);
  std::vector<float> c1(m * n), c2(m * n);
  sgemm_packed(m, a.data(), k, 1, p1.view(), c1.data(), n, {}, nullptr);
  sgemm_packed(m, a.data(), k, 1, p2.view(), c2.data(), n, {}, nullptr);
  EXPECT_EQ(c1, c2);  // same packed bits, same sums
}

}  // namespace
}  // namespace cairn::kernels
