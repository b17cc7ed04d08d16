#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

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
  EXPECT_EQ(type_ops(TensorType::Q5_K), nullptr);
  EXPECT_EQ(type_ops(TensorType::IQ4_NL), nullptr);
  // The structs agree with the size table every reader bounds-checks with.
  EXPECT_EQ(sizeof(BlockQ4_0), type_info(TensorType::Q4_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_0), type_info(TensorType::Q8_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_K), type_info(TensorType::Q4_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ6_K), type_info(TensorType::Q6_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_K), type_info(TensorType::Q8_K).block_bytes);
}

// ---- hand-built blocks pin the byte layouts ----------------------------------

TEST(KnownBlocks, Q4_0NibbleOrder) {
  BlockQ4_0 b;
  b.d = 0x3c00;  // 1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto v = dequant(TensorType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], j - 8.0f) << j;           // low nibbles: elements 0..15
    EXPECT_EQ(v[16 + j], 7.0f - j) << j;      // high nibbles: elements 16..31
  }
}

TEST(KnownBlocks, Q8_0) {
  BlockQ8_0 b;
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  const auto v = dequant(TensorType::Q8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(v[j], (j - 16) * 0.5f);
}

TEST(KnownBlocks, Q4_KScalesAndNibbles) {
  BlockQ4_K b;
  b.d = 0x3c00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  const uint8_t scales[12] = {1 | 0x40, 2, 3, 4, 5 | 0x80, 6, 7, 8, 0x21, 0x43, 0x65, 0x87};
  std::memcpy(b.scales, scales, 12);
  // Sub-blocks 0-3 take the low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
  // 4-7 take nibbles of bytes 8-11 plus the top two bits of bytes 0-3 / 4-7.
  const int sc[8] = {1, 2, 3, 4, 1 | (1 << 4), 3, 5, 7};
  const int mn[8] = {5, 6, 7, 8, 2 | (2 << 4), 4, 6, 8};
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const auto v = dequant(TensorType::Q4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int within = e % 64;
    // Byte 32c+l holds element 64c+l (low nibble) and 64c+32+l (high nibble).
    const int q = within < 32 ? within % 16 : 15 - (within - 32) % 16;
    const float want = 1.0f * sc[e / 32] * q - 0.5f * mn[e / 32];
    ASSERT_EQ(v[e], want) << e;
  }
}

TEST(KnownBlocks, Q6_KCodes) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3800;  // 0.5
  for (int k = 0; k < 16; ++k) b.scales[k] = static_cast<int8_t>(k - 8);
  b.ql[0] = 0x21;   // element 0: low nibble 1; element 64: high nibble 2
  b.ql[32] = 0x03;  // element 32: low nibble 3
  b.qh[0] = 0xE4;   // 2-bit highs 00,01,10,11 for elements 0, 32, 64, 96
  b.ql[64] = 0x05;  // second half: element 128
  b.qh[32] = 0x03;  // element 128 high bits 11
  b.ql[70] = 0x90;  // element 128+70-64+64=198: high nibble 9 (ql[64+6] high -> 128+64+6)
  std::vector<int> code(256, 0);
  code[0] = 1;
  code[32] = 3 + 16;
  code[64] = 2 + 32;
  code[96] = 0 + 48;
  code[128] = 5 + 48;
  code[198] = 9;
  const auto v = dequant(TensorType::Q6_K, &b, 256);
  for (int e = 0; e < 256; ++e) ASSERT_EQ(v[e], 0.5f * (e / 16 - 8) * (code[e] - 32)) << e;
}

TEST(KnownBlocks, Q8_KQuantizesLikeGgml) {
  std::vector<float> x(256, 0.0f);
  x[0] = -2.0f;  // signed max: iscale = -127 / -2 = 63.5
  x[1] = 1.0f;   // 63.5 -> 64 (ties to even)
  x[2] = 3.0f / 127.0f;
  x[17] = -0.5f;
  BlockQ8_K b;
  type_ops(TensorType::Q8_K)->from_float(x.data(), &b, 256);
  EXPECT_FLOAT_EQ(b.d, 1.0f / 63.5f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 64);
  EXPECT_EQ(b.qs[2], 2);  // 1.5 -> 2
  EXPECT_EQ(b.qs[17], -32);  // -31.75 -> -32
  EXPECT_EQ(b.bsums[0], -127 + 64 + 2);
  EXPECT_EQ(b.bsums[1], -32);
  for (int j = 2; j < 16; ++j) EXPECT_EQ(b.bsums[j], 0);
  // The signed max may be positive: then it maps to -127 with a negative d.
  std::vector<float> y(256, 0.0f);
  y[5] = 4.0f;
  type_ops(TensorType::Q8_K)->from_float(y.data(), &b, 256);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_LT(b.d, 0.0f);
  EXPECT_FLOAT_EQ(dequant(TensorType::Q8_K, &b, 256)[5], 4.0f);
  std::vector<float> zero(256, 0.0f);
  type_ops(TensorType::Q8_K)->from_float(zero.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  EXPECT_EQ(b.bsums[3], 0);
}

TEST(KnownBlocks, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = -63.5f;
  x[2] = 2.5f;
  BlockQ8_0 b;
  type_ops(TensorType::Q8_0)->from_float(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3c00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -64);
  EXPECT_EQ(b.qs[2], 3);
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
