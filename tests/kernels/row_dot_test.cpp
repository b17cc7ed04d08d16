// The SIMD dot products against the scalar reference they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "kernels/row_dot.h"
#include "kernels/type_ops.h"

namespace cairn {
namespace {

using DotFn = float (*)(int64_t, const void*, const void*);

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Weights as raw random bytes (every code, every scale, -128 included), with the
// f16 block scales forced to sane finite values.
std::vector<unsigned char> random_blocks(TensorType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t bytes = *row_bytes(t, n);
  std::vector<unsigned char> v(bytes);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  const TypeInfo& info = type_info(t);
  std::uniform_real_distribution<float> d(-0.01f, 0.01f);
  for (size_t off = 0; off < bytes; off += info.block_bytes) {
    auto put = [&](size_t at) {
      const uint16_t h = f32_to_f16(d(rng));
      std::memcpy(&v[off + at], &h, 2);
    };
    switch (t) {
      case TensorType::Q4_K:
      case TensorType::Q5_K:
      case TensorType::Q4_1:
      case TensorType::Q5_1:
        put(0);  // d, then dmin / m
        put(2);
        break;
      case TensorType::Q6_K: put(208); break;
      case TensorType::Q3_K: put(108); break;
      case TensorType::Q2_K:
        put(80);
        put(82);
        break;
      case TensorType::MXFP4: v[off] = static_cast<unsigned char>(100 + rng() % 30); break;  // E8M0
      default: put(0);
    }
  }
  return v;
}

class SimdDot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!quant::avx2::supported()) GTEST_SKIP() << "skipped: this CPU lacks AVX2/FMA/F16C";
  }
};

TEST_F(SimdDot, InstalledInTheActiveTable) {
  if (!isa_enabled(Isa::Avx2)) {
    EXPECT_EQ(type_ops(TensorType::Q4_K)->vec_dot, &quant::q4_k_dot_q8_k);
    return;
  }
  // K-quants move on to AVX-512 VNNI kernels where allowed (row_dot_k_test.cpp).
  if (!isa_enabled(Isa::Avx512Vnni)) {
    EXPECT_EQ(type_ops(TensorType::Q4_K)->vec_dot, &quant::avx2::q4_k_dot_q8_k);
  }
  EXPECT_EQ(scalar_type_ops(TensorType::Q4_K)->vec_dot, &quant::q4_k_dot_q8_k);
}

TEST_F(SimdDot, QuantizedAreBitIdenticalToScalar) {
  struct Case {
    TensorType t;
    DotFn simd;
  };
  const Case cases[] = {
      {TensorType::Q8_0, quant::avx2::q8_0_dot_q8_0},
      {TensorType::Q4_0, quant::avx2::q4_0_dot_q8_0},
      {TensorType::Q4_K, quant::avx2::q4_k_dot_q8_k},
      {TensorType::Q6_K, quant::avx2::q6_k_dot_q8_k},
      {TensorType::Q4_1, quant::avx2::q4_1_dot_q8_1},
      {TensorType::Q5_0, quant::avx2::q5_0_dot_q8_0},
      {TensorType::Q5_1, quant::avx2::q5_1_dot_q8_1},
      {TensorType::IQ4_NL, quant::avx2::iq4_nl_dot_q8_0},
      {TensorType::MXFP4, quant::avx2::mxfp4_dot_q8_0},
      {TensorType::Q2_K, quant::avx2::q2_k_dot_q8_k},
      {TensorType::Q3_K, quant::avx2::q3_k_dot_q8_k},
      {TensorType::Q5_K, quant::avx2::q5_k_dot_q8_k},
      {TensorType::IQ4_XS, quant::avx2::iq4_xs_dot_q8_k},
  };
  for (const Case& c : cases) {
    const TypeOps* ops = scalar_type_ops(c.t);
    const TypeOps* act_ops = type_ops(ops->vec_dot_type);
    for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{256}, int64_t{768}, int64_t{4096}}) {
      if (n % type_info(c.t).block_elems != 0) continue;  // 32 and 96: the 32-element types only
      for (uint32_t seed = 0; seed < 8; ++seed) {
        std::vector<unsigned char> w;
        if (seed % 2 == 0) {
          w = random_blocks(c.t, n, seed);
        } else {
          const auto wf = random_vec(size_t(n), seed);
          w.resize(*row_bytes(c.t, n));
          ops->from_float(wf.data(), w.data(), n);
        }
        auto af = random_vec(size_t(n), 1000 + seed);
        if (seed == 3) {
          for (float& f : af) f = f > 0 ? 5.0f : -5.0f;  // saturated activations: q8 = +-127
        }
        std::vector<unsigned char> a(*row_bytes(act_ops->type, n));
        act_ops->from_float(af.data(), a.data(), n);
        const float want = ops->vec_dot(n, w.data(), a.data());
        const float got = c.simd(n, w.data(), a.data());
        ASSERT_EQ(got, want) << type_info(c.t).name << " n " << n << " seed " << seed;
      }
    }
  }
}

// The many-tokens entries (TypeOps::vec_dot_tokens) give every token the bits
// of the scalar single dot, for 1..kMaxDotTokens tokens, strided rows of both.
TEST_F(SimdDot, TokensEntriesGiveEachTokensScalarBits) {
  int checked = 0;
  for (const TypeOps& scalar : scalar_type_table()) {
    const TypeOps* ops = type_ops(scalar.type);
    if (!ops || !ops->vec_dot_tokens) continue;
    const TypeOps* act_ops = type_ops(ops->vec_dot_type);
    for (int64_t n : {int64_t{256}, int64_t{2048}}) {
      const auto wf = random_vec(size_t(n), 11);
      std::vector<unsigned char> w = random_blocks(scalar.type, n, 5);
      if (n == 2048) {
        w.resize(*row_bytes(scalar.type, n));
        scalar.from_float(wf.data(), w.data(), n);
      }
      const size_t stride = *row_bytes(act_ops->type, n) + 64;  // rows apart, as a batch's are
      std::vector<unsigned char> a(stride * kMaxDotTokens);
      for (int t = 0; t < kMaxDotTokens; ++t) {
        const auto af = random_vec(size_t(n), 100 + t);
        act_from_float(*act_ops)(af.data(), a.data() + t * stride, n);
      }
      for (int64_t nt = 1; nt <= kMaxDotTokens; ++nt) {
        float out[2 * kMaxDotTokens] = {};
        ops->vec_dot_tokens(n, w.data(), a.data(), stride, nt, out, 2);
        for (int64_t t = 0; t < nt; ++t)
          ASSERT_EQ(out[2 * t], scalar.vec_dot(n, w.data(), a.data() + t * stride))
              << type_info(scalar.type).name << " n " << n << " tokens " << nt << " token " << t;
        ++checked;
      }
    }
  }
  if (isa_enabled(Isa::Avx2)) {
    EXPECT_GT(checked, 0);
  }
}

// The many-rows entries of the integer types give each row the scalar bits
// (odd row counts included: the last row goes alone).
TEST_F(SimdDot, RowsEntriesGiveEachRowsScalarBits) {
  for (const TypeOps& scalar : scalar_type_table()) {
    const TypeOps* ops = type_ops(scalar.type);
    if (!ops || !ops->vec_dot_rows || scalar.type == TensorType::BF16) continue;
    const TypeOps* act_ops = type_ops(ops->vec_dot_type);
    const int64_t n = 512, rows = 5;
    const size_t rb = *row_bytes(scalar.type, n), stride = rb + 32;
    std::vector<unsigned char> w(stride * rows);
    for (int64_t r = 0; r < rows; ++r) {
      const auto blocks = random_blocks(scalar.type, n, 40 + (uint32_t)r);
      std::memcpy(w.data() + r * stride, blocks.data(), rb);
    }
    std::vector<unsigned char> a(*row_bytes(act_ops->type, n));
    const auto af = random_vec(size_t(n), 77);
    act_from_float(*act_ops)(af.data(), a.data(), n);
    for (int64_t nr = 1; nr <= rows; ++nr) {
      std::vector<float> out(nr);
      ops->vec_dot_rows(n, w.data(), stride, nr, a.data(), out.data());
      for (int64_t r = 0; r < nr; ++r)
        ASSERT_EQ(out[r], scalar.vec_dot(n, w.data() + r * stride, a.data()))
            << type_info(scalar.type).name << " rows " << nr << " row " << r;
    }
  }
}

TEST_F(SimdDot, FloatTypesAgreeToRounding) {
  for (int64_t n :
       {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{33}, int64_t{1000}, int64_t{4096}}) {
    const auto x = random_vec(size_t(n), uint32_t(n)), y = random_vec(size_t(n), uint32_t(n + 1));
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(x[i]) * y[i]);
    EXPECT_NEAR(quant::avx2::f32_dot(n, x.data(), y.data()),
                scalar_type_ops(TensorType::F32)->vec_dot(n, x.data(), y.data()), 1e-6 * mag)
        << n;
    std::vector<uint16_t> hx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) hx[size_t(i)] = f32_to_f16(x[size_t(i)]);
    EXPECT_NEAR(quant::avx2::f16_dot(n, hx.data(), y.data()),
                scalar_type_ops(TensorType::F16)->vec_dot(n, hx.data(), y.data()), 1e-6 * mag)
        << n;
  }
}

// BF16 x BF16: the SIMD forms sum exact products in float, the scalar
// reference in double; lengths with and without a ragged tail. Many rows give
// each row's single-row bits, and every form gives the first's (all replay
// vdpbf16ps; the inputs have no subnormals).
TEST_F(SimdDot, Bf16AgreesToRoundingAndRowsMatchTheSingleDot) {
  using RowsFn = void (*)(int64_t, const void*, size_t, int64_t, const void*, float*);
  struct Form {
    const char* name;
    DotFn dot;
    RowsFn rows;
  };
  std::vector<Form> forms = {{"avx2", quant::avx2::bf16_dot, quant::avx2::bf16_dot_rows}};
  if (isa_enabled(Isa::Avx512))
    forms.push_back({"avx512", quant::avx512::bf16_dot, quant::avx512::bf16_dot_rows});
  if (bf16_enabled())
    forms.push_back({"avx512bf16", quant::avx512bf16::bf16_dot, quant::avx512bf16::bf16_dot_rows});
  const DotFn scalar = scalar_type_ops(TensorType::BF16)->vec_dot;
  for (int64_t n : {1, 7, 16, 33, 64, 95, 1000, 4096}) {
    const int64_t n_rows = 7;  // a pass of four rows, then three alone
    const auto wf = random_vec(size_t(n * n_rows), uint32_t(n)), af = random_vec(size_t(n), 5);
    std::vector<uint16_t> w(wf.size()), a(af.size());
    for (size_t i = 0; i < wf.size(); ++i) w[i] = f32_to_bf16(wf[i]);
    for (size_t i = 0; i < af.size(); ++i) a[i] = f32_to_bf16(af[i]);
    std::vector<float> first_form;
    for (const Form& f : forms) {
      std::vector<float> rows((size_t)n_rows);
      f.rows(n, w.data(), size_t(n) * 2, n_rows, a.data(), rows.data());
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint16_t* row = w.data() + r * n;
        double mag = 0;
        for (int64_t i = 0; i < n; ++i)
          mag += std::fabs(double(bf16_to_f32(row[i])) * bf16_to_f32(a[size_t(i)]));
        const float one = f.dot(n, row, a.data());
        EXPECT_NEAR(one, scalar(n, row, a.data()), 1e-6 * mag) << f.name << " n " << n;
        EXPECT_EQ(rows[size_t(r)], one) << f.name << " n " << n << " row " << r;
      }
      if (first_form.empty()) first_form = rows;
      for (int64_t r = 0; r < n_rows; ++r)
        EXPECT_EQ(rows[size_t(r)], first_form[size_t(r)])
            << f.name << " against " << forms[0].name << " n " << n << " row " << r;
    }
  }
  if (isa_enabled(Isa::Avx2)) {
    EXPECT_EQ(type_ops(TensorType::BF16)->vec_dot, bf16_enabled() ? &quant::avx512bf16::bf16_dot
                                                   : isa_enabled(Isa::Avx512)
                                                       ? &quant::avx512::bf16_dot
                                                       : &quant::avx2::bf16_dot);
  } else {
    EXPECT_EQ(type_ops(TensorType::BF16)->vec_dot, scalar);
  }
}

// The F16C row conversion (every K/V write) gives f32_to_f16's bits for any
// float: random bit patterns, so NaNs, infinities, subnormals and the rounding
// boundaries all occur, at lengths with and without a tail.
TEST_F(SimdDot, F16ConversionIsBitIdenticalToScalar) {
  std::mt19937 rng(11);
  const float edges[] = {65504.0f,
                         65519.99f,
                         65520.0f,
                         6.1035156e-05f,
                         5.9604645e-08f,
                         2.9802322e-08f,
                         2.9802326e-08f,
                         -0.0f,
                         INFINITY,
                         -INFINITY,
                         NAN};
  for (int64_t n : {1, 7, 8, 9, 31, 256, 1000}) {
    std::vector<float> x((size_t)n);
    for (float& f : x) {
      const uint32_t bits = rng();
      std::memcpy(&f, &bits, 4);
      if (rng() % 4 == 0) f = edges[rng() % std::size(edges)];
      if (rng() % 4 == 0) f = std::ldexp((float)(rng() % 2048), -(int)(rng() % 40));
    }
    std::vector<uint16_t> simd((size_t)n), scalar((size_t)n);
    quant::avx2::f16_from_float(x.data(), simd.data(), n);
    for (int64_t i = 0; i < n; ++i) scalar[(size_t)i] = f32_to_f16(x[(size_t)i]);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(simd[(size_t)i], scalar[(size_t)i])
          << "n " << n << " element " << i << " = " << x[(size_t)i];
    }
  }
  if (isa_enabled(Isa::Avx2)) {
    EXPECT_EQ(type_ops(TensorType::F16)->from_float, &quant::avx2::f16_from_float);
  }
}

// ---- AVX-512 VNNI kernels of the types beyond Q4_K/Q6_K ----------------------
// Called directly (whatever CAIRN_ISA caps the table at) where the CPU has
// them: single dots, tokens and rows, bit for bit against the scalar
// reference, on ragged block counts (odd ones: the 32-element kernels step two
// blocks at a time), every code value, extreme scales and activations.

struct VnniCase {
  TensorType t;
  DotFn dot;
  void (*tokens)(int64_t, const void*, const void*, size_t, int64_t, float*, size_t);
  void (*rows)(int64_t, const void*, size_t, int64_t, const void*, float*);
};

std::vector<VnniCase> vnni_cases() {
  namespace v = quant::avx512vnni;
  return {
      {TensorType::Q4_1, v::q4_1_dot_q8_1, v::q4_1_dot_tokens, v::q4_1_dot_rows},
      {TensorType::Q5_0, v::q5_0_dot_q8_0, v::q5_0_dot_tokens, v::q5_0_dot_rows},
      {TensorType::Q5_1, v::q5_1_dot_q8_1, v::q5_1_dot_tokens, v::q5_1_dot_rows},
      {TensorType::IQ4_NL, v::iq4_nl_dot_q8_0, v::iq4_nl_dot_tokens, v::iq4_nl_dot_rows},
      {TensorType::MXFP4, v::mxfp4_dot_q8_0, v::mxfp4_dot_tokens, v::mxfp4_dot_rows},
      {TensorType::Q2_K, v::q2_k_dot_q8_k, v::q2_k_dot_tokens, v::q2_k_dot_rows},
      {TensorType::Q3_K, v::q3_k_dot_q8_k, v::q3_k_dot_tokens, v::q3_k_dot_rows},
      {TensorType::Q5_K, v::q5_k_dot_q8_k, v::q5_k_dot_tokens, v::q5_k_dot_rows},
      {TensorType::IQ4_XS, v::iq4_xs_dot_q8_k, v::iq4_xs_dot_tokens, v::iq4_xs_dot_rows},
  };
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Same bits (the extreme cases may overflow to inf; a NaN from inf - inf must
// be a NaN on both sides).
::testing::AssertionResult same_bits(float got, float want) {
  if (float_bits(got) == float_bits(want) || (std::isnan(got) && std::isnan(want)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " vs scalar " << want << " (bits " << float_bits(got)
                                       << " vs " << float_bits(want) << ")";
}

// Weight rows of four kinds: raw random bytes (every code and scale pattern,
// sane scales), Gaussian data with outliers through the quantizer, all bytes
// 0xFF with the largest scales (every code at its top, overflow), and all
// codes zero under all-ones scale bits.
std::vector<unsigned char> vnni_weights(TensorType t, int64_t n, int kind, uint32_t seed) {
  if (kind == 0) return random_blocks(t, n, seed);
  std::vector<unsigned char> w(*row_bytes(t, n));
  if (kind == 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = g(rng) * (rng() % 7 == 0 ? 50.0f : 1.0f);
    scalar_type_ops(t)->from_float(f.data(), w.data(), n);
    return w;
  }
  std::memset(w.data(), kind == 2 ? 0xFF : 0x00, w.size());
  const TypeInfo& info = type_info(t);
  const uint16_t big = f32_to_f16(65504.0f), neg_big = f32_to_f16(-65504.0f), small = f32_to_f16(0.5f);
  for (size_t off = 0; off < w.size(); off += info.block_bytes) {
    unsigned char* b = &w[off];
    auto put = [&](size_t at, uint16_t h) { std::memcpy(b + at, &h, 2); };
    const uint16_t d = kind == 2 ? big : small, m = kind == 2 ? neg_big : small;
    switch (t) {
      case TensorType::Q4_1:
      case TensorType::Q5_1: put(0, d); put(2, m); break;
      case TensorType::Q5_K: put(0, d); put(2, m); if (kind == 3) std::memset(b + 4, 0xFF, 12); break;
      case TensorType::Q2_K: put(80, d); put(82, m); if (kind == 3) std::memset(b, 0xFF, 16); break;
      case TensorType::Q3_K: put(108, d); if (kind == 3) std::memset(b + 96, 0xFF, 12); break;
      case TensorType::IQ4_XS: put(0, d); if (kind == 3) std::memset(b + 2, 0xFF, 6); break;
      case TensorType::MXFP4: b[0] = kind == 2 ? 0xFE : 127; break;
      default: put(0, d);
    }
  }
  return w;
}

// Activations through the scalar quantizer: Gaussian, saturated (codes +-127),
// one huge outlier per 256, or every other 256 zero.
std::vector<unsigned char> vnni_act(TensorType act_type, int64_t n, int variant, uint32_t seed) {
  std::vector<float> f = random_vec(size_t(n), seed);
  for (size_t i = 0; i < f.size(); ++i) {
    if (variant == 1) f[i] = f[i] > 0 ? 5.0f : -5.0f;
    if (variant == 2 && i % 256 == 17) f[i] = 1e6f;
    if (variant == 3 && (i / 256) % 2 == 0) f[i] = 0.0f;
  }
  std::vector<unsigned char> a(*row_bytes(act_type, n));
  act_from_float(*scalar_type_ops(act_type))(f.data(), a.data(), n);
  return a;
}

std::vector<int64_t> vnni_sizes(TensorType t) {
  if (type_info(t).block_elems == 32) return {32, 64, 96, 160, 2048, 5632 + 32};
  return {256, 512, 768, 1280, 5632};
}

class VnniDot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (detected_isa() < Isa::Avx512Vnni) GTEST_SKIP() << "skipped: this CPU lacks AVX-512 VNNI";
  }
};

TEST_F(VnniDot, SingleDotsAreBitIdenticalToScalar) {
  int checked = 0;
  for (const VnniCase& c : vnni_cases()) {
    const TypeOps* scalar = scalar_type_ops(c.t);
    for (int64_t n : vnni_sizes(c.t)) {
      for (int kind = 0; kind < 4; ++kind) {
        for (int variant = 0; variant < 4; ++variant) {
          const uint32_t seed = static_cast<uint32_t>(n * 16 + kind * 4 + variant);
          const auto w = vnni_weights(c.t, n, kind, seed);
          const auto a = vnni_act(scalar->vec_dot_type, n, variant, seed + 1);
          ASSERT_TRUE(same_bits(c.dot(n, w.data(), a.data()), scalar->vec_dot(n, w.data(), a.data())))
              << type_info(c.t).name << " n " << n << " kind " << kind << " act " << variant;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 9 * 6 * 16 - 4 * 16);  // 5 types x 6 sizes, 4 x 5, all kinds and activations
}

TEST_F(VnniDot, TokensGiveEachTokenTheScalarBits) {
  for (const VnniCase& c : vnni_cases()) {
    const TypeOps* scalar = scalar_type_ops(c.t);
    for (int64_t n : vnni_sizes(c.t)) {
      for (int kind = 0; kind < 4; ++kind) {
        const auto w = vnni_weights(c.t, n, kind, static_cast<uint32_t>(n + kind));
        const size_t stride = *row_bytes(scalar->vec_dot_type, n) + 48;  // rows apart, as a batch's are
        std::vector<unsigned char> a(stride * kMaxDotTokens);
        for (int t = 0; t < kMaxDotTokens; ++t) {
          const auto at = vnni_act(scalar->vec_dot_type, n, (t + kind) % 4, static_cast<uint32_t>(300 + t));
          std::memcpy(a.data() + t * stride, at.data(), at.size());
        }
        for (int64_t nt = 1; nt <= kMaxDotTokens; ++nt) {
          float out[3 * kMaxDotTokens + 1];
          for (float& o : out) o = -7.0f;
          c.tokens(n, w.data(), a.data(), stride, nt, out, 3);
          for (int64_t t = 0; t < nt; ++t)
            ASSERT_TRUE(same_bits(out[3 * t], scalar->vec_dot(n, w.data(), a.data() + t * stride)))
                << type_info(c.t).name << " n " << n << " kind " << kind << " tokens " << nt << " token " << t;
          for (int64_t k = 0; k < 3 * kMaxDotTokens + 1; ++k)
            if (k % 3 != 0 || k / 3 >= nt) {
              ASSERT_EQ(out[k], -7.0f) << "wrote outside the tokens' outputs";
            }
        }
      }
    }
  }
}

TEST_F(VnniDot, RowsGiveEachRowTheScalarBits) {
  for (const VnniCase& c : vnni_cases()) {
    const TypeOps* scalar = scalar_type_ops(c.t);
    for (int64_t n : vnni_sizes(c.t)) {
      // Ragged row counts around the two-row pairs, padded strides.
      for (int64_t n_rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{37}}) {
        const size_t rb = *row_bytes(c.t, n);
        const size_t stride = rb + (n_rows % 2 ? 0 : 40);
        std::vector<unsigned char> w(stride * static_cast<size_t>(n_rows), 0xAB);
        for (int64_t r = 0; r < n_rows; ++r) {
          const auto row = vnni_weights(c.t, n, static_cast<int>(r % 4), static_cast<uint32_t>(n * 64 + r));
          std::memcpy(&w[static_cast<size_t>(r) * stride], row.data(), rb);
        }
        const auto a = vnni_act(scalar->vec_dot_type, n, static_cast<int>(n_rows % 4), static_cast<uint32_t>(n));
        std::vector<float> out(static_cast<size_t>(n_rows) + 1, -7.0f);
        c.rows(n, w.data(), stride, n_rows, a.data(), out.data());
        for (int64_t r = 0; r < n_rows; ++r)
          ASSERT_TRUE(same_bits(out[static_cast<size_t>(r)],
                                scalar->vec_dot(n, &w[static_cast<size_t>(r) * stride], a.data())))
              << type_info(c.t).name << " n " << n << " rows " << n_rows << " row " << r;
        EXPECT_EQ(out.back(), -7.0f) << "wrote past n_rows";
      }
    }
  }
}

// The dispatched table under the CAIRN_ISA cap this process runs with (ctest
// runs the suite under each): VNNI entries only where allowed, AVX2 below,
// the scalar reference under CAIRN_ISA=scalar.
TEST(VnniTable, FollowsTheIsaCap) {
  for (const VnniCase& c : vnni_cases()) {
    const TypeOps* ops = type_ops(c.t);
    const TypeOps* scalar = scalar_type_ops(c.t);
    const std::string_view name = type_info(c.t).name;
    if (isa_enabled(Isa::Avx512Vnni) && c.t == TensorType::Q2_K) {
      // Only the many-token kernel pays off (type_ops.cpp); one token stays on AVX2's dot.
      EXPECT_EQ(ops->vec_dot, &quant::avx2::q2_k_dot_q8_k) << name;
      EXPECT_EQ(ops->vec_dot_tokens, c.tokens) << name;
      EXPECT_EQ(ops->vec_dot_rows, nullptr) << name;
    } else if (isa_enabled(Isa::Avx512Vnni)) {
      EXPECT_EQ(ops->vec_dot, c.dot) << name;
      EXPECT_EQ(ops->vec_dot_tokens, c.tokens) << name;
      EXPECT_EQ(ops->vec_dot_rows, c.rows) << name;
    } else if (isa_enabled(Isa::Avx2)) {
      EXPECT_NE(ops->vec_dot, c.dot) << name;
      EXPECT_NE(ops->vec_dot, scalar->vec_dot) << name;
      EXPECT_NE(ops->vec_dot_tokens, c.tokens) << name;
      EXPECT_NE(ops->vec_dot_rows, c.rows) << name;
    } else {
      EXPECT_EQ(ops->vec_dot, scalar->vec_dot) << name;
      EXPECT_EQ(ops->vec_dot_tokens, nullptr) << name;
      EXPECT_EQ(ops->vec_dot_rows, nullptr) << name;
    }
  }
}

}  // namespace
}  // namespace cairn
