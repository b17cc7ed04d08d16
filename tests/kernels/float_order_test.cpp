// The reference's float summation orders (kernels/float_order.h): the AVX2
// forms give the scalar forms' bits, and the orders are the documented ones
// (inputs chosen so that any other order gives a different float).
#include "kernels/float_order.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"

namespace cairn::kernels {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(FloatOrder, Reduce16IsHalvesThenQuarters) {
  // Lane 0 and lane 8 cancel first; a sequential sum would lose the ones.
  float l[16];
  for (float& v : l) v = 1.0f;
  l[0] = 1e8f;
  l[8] = -1e8f;
  EXPECT_EQ(order::reduce16(l), 14.0f);
}

TEST(FloatOrder, TinyAccumulatesLanePerColumn) {
  // k = 32: lane 0 sees 1e8 then -1e8 (cancel exactly), the others 1 + 1.
  std::vector<float> w(32, 1.0f), x(32, 1.0f);
  w[0] = 1e8f;
  w[16] = -1e8f;
  EXPECT_EQ(order::tiny_f32(w.data(), x.data(), 32), 30.0f);
  EXPECT_EQ(order::scalar::tiny_f32(w.data(), x.data(), 32), 30.0f);
}

TEST(FloatOrder, VecTakesFourAccumulatorsThenTail) {
  // n = 66: element 0 (acc 0) and element 32 (acc 2) cancel in the pairwise
  // reduction; the two tail elements are added to the reduced sum.
  std::vector<float> w(66, 1.0f), x(66, 1.0f);
  w[0] = 1e8f;
  w[32] = -1e8f;
  EXPECT_EQ(order::vec_f32(w.data(), x.data(), 66), 64.0f);
  EXPECT_EQ(order::scalar::vec_f32(w.data(), x.data(), 66), 64.0f);
}

TEST(FloatOrder, SimdFormsGiveTheScalarBits) {
  if (!order::simd_enabled()) GTEST_SKIP() << "no AVX2/FMA here (or CAIRN_SCALAR=1): scalar only";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {16, 64, 80, 128, 172, 2048, 5632}) {
    std::vector<float> w((size_t)n), x((size_t)n);
    std::vector<uint16_t> wh((size_t)n), xh((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
      w[(size_t)i] = nd(rng);
      x[(size_t)i] = nd(rng);
      wh[(size_t)i] = f32_to_f16(w[(size_t)i]);
      xh[(size_t)i] = f32_to_f16(x[(size_t)i]);
    }
    EXPECT_EQ(bits(order::vec_f32(w.data(), x.data(), n)),
              bits(order::scalar::vec_f32(w.data(), x.data(), n)))
        << n;
    EXPECT_EQ(bits(order::vec_f16(wh.data(), xh.data(), n)),
              bits(order::scalar::vec_f16(wh.data(), xh.data(), n)))
        << n;
    if (n % 16 == 0) {
      EXPECT_EQ(bits(order::tiny_f32(w.data(), x.data(), n)),
                bits(order::scalar::tiny_f32(w.data(), x.data(), n)))
          << n;
      EXPECT_EQ(bits(order::tiny_f16(wh.data(), x.data(), n)),
                bits(order::scalar::tiny_f16(wh.data(), x.data(), n)))
          << n;
      // Four rows at once: rows 16 elements apart inside wh, each its own chain.
      if (n >= 64) {
        const int64_t k = n - 48;
        float four[4];
        order::tiny_f16_x4(wh.data(), 16, x.data(), k, four);
        for (int r = 0; r < 4; ++r)
          EXPECT_EQ(bits(four[r]), bits(order::scalar::tiny_f16(wh.data() + 16 * r, x.data(), k)))
              << n << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace cairn::kernels
