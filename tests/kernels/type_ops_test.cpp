// The type table cairn computes with (kernels/type_ops.h), SIMD entries and
// all: every type present, round trips within bounds, dot products that
// agree with the float dot of what they multiply.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "kernels/type_ops.h"

namespace cairn {
namespace {

using namespace quant;

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<float> dequant(TensorType t, const void* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  type_ops(t)->to_float(data, out.data(), n);
  return out;
}

TEST(TypeTable, HasEveryComputeType) {
  struct Want {
    TensorType t, act;
    bool dot;
  };
  const Want wants[] = {
      {TensorType::F32, TensorType::F32, true},   {TensorType::F16, TensorType::F32, true},
      {TensorType::BF16, TensorType::BF16, true}, {TensorType::Q8_0, TensorType::Q8_0, true},
      {TensorType::Q4_0, TensorType::Q8_0, true}, {TensorType::Q4_K, TensorType::Q8_K, true},
      {TensorType::Q6_K, TensorType::Q8_K, true}, {TensorType::Q8_K, TensorType::Q8_K, false},
      {TensorType::Q4_1, TensorType::Q8_1, true}, {TensorType::Q5_0, TensorType::Q8_0, true},
      {TensorType::Q5_1, TensorType::Q8_1, true}, {TensorType::Q2_K, TensorType::Q8_K, true},
      {TensorType::Q3_K, TensorType::Q8_K, true}, {TensorType::Q5_K, TensorType::Q8_K, true},
      {TensorType::IQ4_NL, TensorType::Q8_0, true}, {TensorType::IQ4_XS, TensorType::Q8_K, true},
      {TensorType::MXFP4, TensorType::Q8_0, true}, {TensorType::Q8_1, TensorType::Q8_1, false},
  };
  for (const Want& w : wants) {
    for (const TypeOps* ops : {type_ops(w.t), scalar_type_ops(w.t)}) {
      ASSERT_NE(ops, nullptr) << type_info(w.t).name;
      EXPECT_EQ(ops->type, w.t);
      EXPECT_EQ(ops->vec_dot_type, w.act);
      EXPECT_NE(ops->to_float, nullptr);
      EXPECT_NE(ops->from_float, nullptr);
      EXPECT_EQ(ops->vec_dot != nullptr, w.dot);
    }
  }
  for (TensorType t : {TensorType::IQ2_XXS, TensorType::IQ3_S, TensorType::IQ1_M, TensorType::TQ2_0,
                       TensorType::NVFP4, TensorType::Q1_0})
    EXPECT_EQ(type_ops(t), nullptr) << type_info(t).name;
  // The structs agree with the size table every reader bounds-checks with.
  EXPECT_EQ(sizeof(BlockQ4_0), type_info(TensorType::Q4_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_0), type_info(TensorType::Q8_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_K), type_info(TensorType::Q4_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ6_K), type_info(TensorType::Q6_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_K), type_info(TensorType::Q8_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_1), type_info(TensorType::Q4_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_0), type_info(TensorType::Q5_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_1), type_info(TensorType::Q5_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_1), type_info(TensorType::Q8_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ2_K), type_info(TensorType::Q2_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ3_K), type_info(TensorType::Q3_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_K), type_info(TensorType::Q5_K).block_bytes);
  EXPECT_EQ(sizeof(BlockIQ4_NL), type_info(TensorType::IQ4_NL).block_bytes);
  EXPECT_EQ(sizeof(BlockIQ4_XS), type_info(TensorType::IQ4_XS).block_bytes);
  EXPECT_EQ(sizeof(BlockMXFP4), type_info(TensorType::MXFP4).block_bytes);
}

// ---- quantize -> dequantize error -------------------------------------------

struct ErrorBound {
  TensorType t;
  double max_rmse;  // relative to the rms of the input
};

TEST(RoundTrip, ErrorWithinBounds) {
  const ErrorBound bounds[] = {
      {TensorType::F32, 0.0},     {TensorType::F16, 5e-4},   {TensorType::BF16, 4e-3},
      {TensorType::Q8_0, 6e-3},   {TensorType::Q4_0, 0.10},  {TensorType::Q4_K, 0.085},
      {TensorType::Q6_K, 0.025},  {TensorType::Q8_K, 9e-3},
  };
  const int64_t n = 4096;
  for (const ErrorBound& eb : bounds) {
    for (float scale : {1.0f, 1e-3f, 300.0f}) {
      const auto x = random_vec(n, 21, scale);
      const TypeOps* ops = type_ops(eb.t);
      std::vector<unsigned char> q(*row_bytes(eb.t, n));
      ops->from_float(x.data(), q.data(), n);
      const auto y = dequant(eb.t, q.data(), n);
      double se = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) {
        se += double(y[i] - x[i]) * (y[i] - x[i]);
        ss += double(x[i]) * x[i];
      }
      EXPECT_LE(std::sqrt(se / ss), eb.max_rmse) << type_info(eb.t).name << " scale " << scale;
    }
  }
}

TEST(RoundTrip, BlockMaxErrorOfLinearTypes) {
  // Q8_0 and Q4_0 are uniform grids: no element is off by more than one step.
  const auto x = random_vec(1024, 5);
  for (auto [t, steps] : {std::pair{TensorType::Q8_0, 127.0f}, std::pair{TensorType::Q4_0, 8.0f}}) {
    std::vector<unsigned char> q(*row_bytes(t, 1024));
    type_ops(t)->from_float(x.data(), q.data(), 1024);
    const auto y = dequant(t, q.data(), 1024);
    for (int b = 0; b < 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), amax / steps * 1.01f);
    }
  }
}

TEST(RoundTrip, ConstantAndZeroBlocks) {
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K}) {
    for (float c : {0.0f, 0.75f, -3.0f}) {
      std::vector<float> x(256, c);
      std::vector<unsigned char> q(*row_bytes(t, 256));
      type_ops(t)->from_float(x.data(), q.data(), 256);
      const auto y = dequant(t, q.data(), 256);
      for (float v : y) ASSERT_NEAR(v, c, std::fabs(c) * 0.01f + 1e-6f) << type_info(t).name << " " << c;
    }
  }
}

// ---- vec_dot agrees with the float dot of what it multiplies ------------------

TEST(VecDot, MatchesFloatDotOfDequantizedOperands) {
  const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                              TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K};
  const int64_t n = 1024;
  for (TensorType t : types) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const TypeOps* ops = type_ops(t);
      const TypeOps* act_ops = type_ops(ops->vec_dot_type);
      const auto wf = random_vec(n, 100 + seed, seed == 3 ? 50.0f : 1.0f);
      auto af = random_vec(n, 200 + seed);
      if (seed == 2) {
        for (float& v : af) v = std::fabs(v);  // one-signed activations stress the min term
      }
      std::vector<unsigned char> w(*row_bytes(t, n)), a(*row_bytes(act_ops->type, n));
      ops->from_float(wf.data(), w.data(), n);
      act_ops->from_float(af.data(), a.data(), n);
      const auto wd = dequant(t, w.data(), n);
      const auto ad = dequant(act_ops->type, a.data(), n);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(wd[i]) * ad[i];
        mag += std::fabs(double(wd[i]) * ad[i]);
      }
      const float got = ops->vec_dot(n, w.data(), a.data());
      EXPECT_NEAR(got, ref, 2e-6 * mag) << type_info(t).name << " seed " << seed;
      // And against the unquantized inputs, within the activation rounding.
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) exact += double(wd[i]) * af[i];
      EXPECT_NEAR(got, exact, 1e-2 * mag) << type_info(t).name << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace cairn
