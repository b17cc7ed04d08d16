// The byte layouts of the quantized blocks, pinned by hand-built blocks
// through the scalar table (core/quant.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

}  // namespace
}  // namespace cairn
