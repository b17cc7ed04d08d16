// The byte layouts of the quantized blocks, pinned by hand-built blocks
// through the scalar table (core/quant.h).
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

std::vector<float> dequant(TensorType t, const void* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  scalar_type_ops(t)->to_float(data, out.data(), n);
  return out;
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
  scalar_type_ops(TensorType::Q8_K)->from_float(x.data(), &b, 256);
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
  scalar_type_ops(TensorType::Q8_K)->from_float(y.data(), &b, 256);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_LT(b.d, 0.0f);
  EXPECT_FLOAT_EQ(dequant(TensorType::Q8_K, &b, 256)[5], 4.0f);
  std::vector<float> zero(256, 0.0f);
  scalar_type_ops(TensorType::Q8_K)->from_float(zero.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  EXPECT_EQ(b.bsums[3], 0);
}

TEST(KnownBlocks, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = -63.5f;
  x[2] = 2.5f;
  BlockQ8_0 b;
  scalar_type_ops(TensorType::Q8_0)->from_float(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3c00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -64);
  EXPECT_EQ(b.qs[2], 3);
}

// ---- the types added for downloaded files (issue 38) -------------------------

TEST(KnownBlocks, Q5_0HighBitsInQh) {
  BlockQ5_0 b;
  b.d = 0x3c00;  // 1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint32_t qh = 0x80000001u;  // element 0 and element 31 get bit 4
  std::memcpy(b.qh, &qh, 4);
  const auto v = dequant(TensorType::Q5_0, &b, 32);
  EXPECT_EQ(v[0], 0 + 16 - 16.0f);
  EXPECT_EQ(v[1], 1 - 16.0f);
  EXPECT_EQ(v[16], 15 - 16.0f);
  EXPECT_EQ(v[31], 0 + 16 - 16.0f);  // high nibble of byte 15 is 0, plus bit 4
}

TEST(KnownBlocks, Q4_1AndQ5_1AddTheMin) {
  BlockQ4_1 a;
  a.d = 0x3800;  // 0.5
  a.m = 0xbc00;  // -1
  for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(j | (j << 4));
  auto v = dequant(TensorType::Q4_1, &a, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 0.5f * j - 1);
    EXPECT_EQ(v[16 + j], 0.5f * j - 1);
  }
  BlockQ5_1 b;
  b.d = 0x3c00;
  b.m = 0x4000;  // 2
  std::memset(b.qs, 0, sizeof b.qs);
  const uint32_t qh = 1u << 20;
  std::memcpy(b.qh, &qh, 4);
  v = dequant(TensorType::Q5_1, &b, 32);
  EXPECT_EQ(v[20], 16 + 2.0f);
  EXPECT_EQ(v[19], 2.0f);
}

TEST(KnownBlocks, Q2_KCodesAndNibbleScales) {
  BlockQ2_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3c00;     // 1
  b.dmin = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>((j % 15 + 1) | ((j % 3) << 4));
  b.qs[0] = 0b11100100;  // elements 0, 32, 64, 96: codes 0, 1, 2, 3
  b.qs[32 + 17] = 0b10 << 2;  // second half, element 128 + 32 + 17 = 177: code 2
  const auto v = dequant(TensorType::Q2_K, &b, 256);
  auto want = [&](int e, int q) { return 1.0f * (b.scales[e / 16] & 15) * q - 0.5f * (b.scales[e / 16] >> 4); };
  EXPECT_EQ(v[0], want(0, 0));
  EXPECT_EQ(v[32], want(32, 1));
  EXPECT_EQ(v[64], want(64, 2));
  EXPECT_EQ(v[96], want(96, 3));
  EXPECT_EQ(v[177], want(177, 2));
  EXPECT_EQ(v[178], want(178, 0));
}

TEST(KnownBlocks, Q3_KSignedScalesAndHighMask) {
  BlockQ3_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3c00;
  // Scales 0..15 = 32 + (j - 8): low nibbles in bytes 0-7 (j < 8) and their
  // high nibbles (j >= 8), the top two bits in bytes 8-11.
  for (int j = 0; j < 16; ++j) {
    const int u = 32 + j - 8;
    if (j < 8) b.scales[j] |= static_cast<uint8_t>(u & 15);
    else b.scales[j - 8] |= static_cast<uint8_t>((u & 15) << 4);
    b.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
  }
  int8_t sc[16];
  q3k_scales(b.scales, sc);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(sc[j], j - 8);
  b.qs[5] = 0b01;          // element 5: low bits 1, no high bit -> 1 - 4
  b.hmask[6] = 1 << 7;     // element 6 + 32*7 = 230: high bit set, low bits 0 -> 0
  b.qs[32 + 6] = 0b11 << 6;  // element 128 + 96 + 6 = 230: low bits 3 -> 3
  const auto v = dequant(TensorType::Q3_K, &b, 256);
  EXPECT_EQ(v[5], 1.0f * sc[0] * (1 - 4));
  EXPECT_EQ(v[230], 1.0f * sc[230 / 16] * 3);
  EXPECT_EQ(v[7], 1.0f * sc[0] * -4);
}

TEST(KnownBlocks, IQ4_XSAndMXFP4Tables) {
  BlockIQ4_XS b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3800;  // 0.5
  // Sub-block 3: ls = 0x2 | (0b10 << 4) = 34 -> scale 2.
  b.scales_l[1] = 0x20;
  b.scales_h = 0b10 << 6;
  b.qs[16 * 3 + 4] = 0xF0;  // element 96 + 4 low nibble 0 (-127), element 96 + 20 high 15 (113)
  auto v = dequant(TensorType::IQ4_XS, &b, 256);
  EXPECT_EQ(v[96 + 4], 0.5f * 2 * -127);
  EXPECT_EQ(v[96 + 20], 0.5f * 2 * 113);
  EXPECT_EQ(v[0], 0.5f * -32 * -127);  // scale byte 0: ls 0 -> -32
  BlockMXFP4 m;
  m.e = 127 + 3;  // 2^3, halved against the doubled values
  for (int j = 0; j < 16; ++j) m.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  v = dequant(TensorType::MXFP4, &m, 32);
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 8 * fp4[j]) << j;
    EXPECT_EQ(v[16 + j], 8 * fp4[15 - j]) << j;
  }
  EXPECT_EQ(e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_half(254), std::ldexp(1.0f, 126));
}

// Every weight type: quantize random rows, dequantize, and the error stays
// within the type's resolution; the dot product with quantized activations
// equals the dot of the two dequantized rows up to float rounding (the
// integer part is exact).
struct TypeBound {
  TensorType type;
  double rel_rms;  // RMS error / RMS value of a Gaussian row
};

class TypeRoundTrip : public ::testing::TestWithParam<TypeBound> {};

TEST_P(TypeRoundTrip, QuantizeDequantizeAndDot) {
  const TypeBound tb = GetParam();
  const TypeOps* ops = scalar_type_ops(tb.type);
  ASSERT_NE(ops, nullptr);
  const TypeOps* act = scalar_type_ops(ops->vec_dot_type);
  ASSERT_NE(act, nullptr);
  ASSERT_NE(ops->vec_dot, nullptr);
  const int64_t n = 1024;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<float> x(n), y(n);
    const float shift = trial == 3 ? 0.7f : 0.0f;  // an off-centre row for the offset types
    for (auto& v : x) v = g(rng) + shift;
    for (auto& v : y) v = g(rng);
    x[5] = trial == 1 ? 0.0f : x[5];
    std::vector<uint8_t> wq(*row_bytes(tb.type, n)), aq(*row_bytes(act->type, n));
    ops->from_float(x.data(), wq.data(), n);
    std::vector<float> xr(n);
    ops->to_float(wq.data(), xr.data(), n);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (xr[i] - x[i]) * (xr[i] - x[i]);
      norm += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), tb.rel_rms) << type_info(tb.type).name << " trial " << trial;
    act_from_float(*act)(y.data(), aq.data(), n);
    std::vector<float> yr(n);
    act->to_float(aq.data(), yr.data(), n);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += (double)xr[i] * yr[i];
      mag += std::fabs((double)xr[i] * yr[i]);
    }
    // Q8_1 carries d * sum(q) as f16: the offset types' m * s term is off by
    // up to half an f16 step of s per block.
    double offset_slack = 0;
    if (act->type == TensorType::Q8_1) {
      const size_t wb = type_info(tb.type).block_bytes;
      for (int64_t b = 0; b < n / 32; ++b) {
        uint16_t m, sb;
        std::memcpy(&m, wq.data() + b * wb + 2, 2);  // d, then m in Q4_1 and Q5_1
        std::memcpy(&sb, aq.data() + b * sizeof(BlockQ8_1) + 2, 2);
        offset_slack += std::fabs(f16_to_f32(m) * f16_to_f32(sb)) * std::ldexp(1.0, -11);
      }
    }
    const float got = ops->vec_dot(n, wq.data(), aq.data());
    EXPECT_NEAR(got, want, 1e-5 * mag + 1e-6 + offset_slack) << type_info(tb.type).name << " trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TypeRoundTrip,
                         ::testing::Values(TypeBound{TensorType::Q4_1, 0.12}, TypeBound{TensorType::Q5_0, 0.07},
                                           TypeBound{TensorType::Q5_1, 0.06}, TypeBound{TensorType::IQ4_NL, 0.11},
                                           TypeBound{TensorType::MXFP4, 0.20}, TypeBound{TensorType::Q2_K, 0.45},
                                           TypeBound{TensorType::Q3_K, 0.22}, TypeBound{TensorType::Q5_K, 0.05},
                                           TypeBound{TensorType::IQ4_XS, 0.11}, TypeBound{TensorType::Q4_K, 0.11},
                                           TypeBound{TensorType::Q6_K, 0.03}, TypeBound{TensorType::Q4_0, 0.13},
                                           TypeBound{TensorType::Q8_0, 0.01}),
                         [](const auto& info) { return std::string(type_info(info.param.type).name); });

TEST(KnownBlocks, Q8_1CarriesTheScaledSum) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = (float)(j - 10);
  BlockQ8_1 b;
  scalar_type_ops(TensorType::Q8_1)->from_float(x.data(), &b, 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += b.qs[j];
  EXPECT_EQ(b.qs[31], 127);
  EXPECT_NEAR(f16_to_f32(b.s), sum * (21.0f / 127.0f), 0.0625);  // half an f16 step at 176
}

}  // namespace
}  // namespace cairn
