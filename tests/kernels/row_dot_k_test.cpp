// The K-quant SIMD dot products (AVX2, AVX-512 VNNI; one row and many rows)
// against the scalar reference: bit-identical on random and extreme blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
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
using RowsFn = void (*)(int64_t, const void*, size_t, int64_t, const void*, float*);

struct Path {
  std::string name;
  bool available;  // what this CPU supports, whatever CAIRN_ISA caps the table at
  DotFn q4_k, q6_k;
  RowsFn q4_k_rows, q6_k_rows;  // nullptr: the path has none
};

std::vector<Path> paths() {
  return {
      {"avx2", detected_isa() >= Isa::Avx2, quant::avx2::q4_k_dot_q8_k, quant::avx2::q6_k_dot_q8_k, nullptr,
       nullptr},
      {"avx512vnni", detected_isa() >= Isa::Avx512Vnni, quant::avx512vnni::q4_k_dot_q8_k,
       quant::avx512vnni::q6_k_dot_q8_k, quant::avx512vnni::q4_k_dot_rows, quant::avx512vnni::q6_k_dot_rows},
  };
}

// How a weight row is made: raw random bytes (every code and scale bit
// pattern) with sane f16 scales, quantized Gaussian data, or extremes.
enum class WeightKind { RawBytes, Quantized, AllMax, AllZeroCodes };

void put_f16(unsigned char* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

std::vector<unsigned char> make_weights(TensorType t, int64_t n, WeightKind kind, std::mt19937& rng) {
  const size_t bytes = *row_bytes(t, n);
  std::vector<unsigned char> v(bytes);
  const size_t block = type_info(t).block_bytes;
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  switch (kind) {
    case WeightKind::Quantized: {
      std::normal_distribution<float> g(0.0f, 1.0f);
      std::vector<float> f(static_cast<size_t>(n));
      for (float& x : f) x = g(rng) * (rng() % 7 == 0 ? 50.0f : 1.0f);
      scalar_type_ops(t)->from_float(f.data(), v.data(), n);
      return v;
    }
    case WeightKind::RawBytes:
      for (auto& b : v) b = static_cast<unsigned char>(rng());
      break;
    case WeightKind::AllMax:
      std::memset(v.data(), 0xFF, bytes);
      break;
    case WeightKind::AllZeroCodes:
      std::memset(v.data(), 0, bytes);
      break;
  }
  for (size_t off = 0; off < bytes; off += block) {
    if (t == TensorType::Q4_K) {
      put_f16(&v[off], kind == WeightKind::AllMax ? 65504.0f : scale(rng));
      put_f16(&v[off + 2], kind == WeightKind::AllMax ? -65504.0f : scale(rng));
      if (kind == WeightKind::AllZeroCodes) std::memset(&v[off + 4], 0xFF, 12);  // all scales and mins 63
    } else {
      put_f16(&v[off + 208], kind == WeightKind::AllMax ? 1.0f : scale(rng));
      if (kind == WeightKind::AllZeroCodes) std::memset(&v[off + 192], 0x80, 16);  // scales -128
    }
  }
  return v;
}

// Activations through the real quantizer (so bsums are consistent): Gaussian,
// saturated +-5 (codes +-127), one huge outlier per block, or zero blocks.
std::vector<unsigned char> make_act(int64_t n, int variant, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n));
  for (size_t i = 0; i < f.size(); ++i) {
    float x = g(rng);
    if (variant == 1) x = x > 0 ? 5.0f : -5.0f;
    if (variant == 2 && i % 256 == 17) x = 1e6f;
    if (variant == 3 && (i / 256) % 2 == 0) x = 0.0f;
    f[i] = x;
  }
  const TypeOps* q8k = scalar_type_ops(TensorType::Q8_K);
  std::vector<unsigned char> a(*row_bytes(TensorType::Q8_K, n));
  q8k->from_float(f.data(), a.data(), n);
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const int64_t kSizes[] = {256, 512, 768, 2048, 5632, 4096 + 256};

TEST(KQuantSimd, OneRowBitIdenticalToScalar) {
  int checked = 0;
  for (const Path& p : paths()) {
    if (!p.available) {
      std::printf("[ skipped  ] %s: not supported by this CPU\n", p.name.c_str());
      continue;
    }
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K}) {
      const DotFn scalar = scalar_type_ops(t)->vec_dot;
      const DotFn simd = t == TensorType::Q4_K ? p.q4_k : p.q6_k;
      std::mt19937 rng(7);
      for (int64_t n : kSizes) {
        for (WeightKind kind :
             {WeightKind::RawBytes, WeightKind::Quantized, WeightKind::AllMax, WeightKind::AllZeroCodes}) {
          for (int variant = 0; variant < 4; ++variant) {
            const auto w = make_weights(t, n, kind, rng);
            const auto a = make_act(n, variant, rng);
            const float want = scalar(n, w.data(), a.data());
            const float got = simd(n, w.data(), a.data());
            ASSERT_EQ(bits(got), bits(want)) << p.name << " " << type_info(t).name << " n " << n << " kind "
                                             << int(kind) << " act " << variant << ": " << got << " vs " << want;
            ++checked;
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "skipped: this CPU has no SIMD K-quant path";
}

TEST(KQuantSimd, ManyRowsBitIdenticalToScalar) {
  int checked = 0;
  for (const Path& p : paths()) {
    if (!p.available || !p.q4_k_rows) continue;
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K}) {
      const DotFn scalar = scalar_type_ops(t)->vec_dot;
      const RowsFn rows = t == TensorType::Q4_K ? p.q4_k_rows : p.q6_k_rows;
      std::mt19937 rng(11);
      for (int64_t n : {int64_t{256}, int64_t{1280}, int64_t{5632}}) {
        // Ragged row counts around the kernel's row group, with padded strides.
        for (int64_t n_rows : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{37}}) {
          const size_t rb = *row_bytes(t, n);
          const size_t stride = rb + (n_rows % 2 ? 0 : 64);
          std::vector<unsigned char> w(stride * static_cast<size_t>(n_rows), 0xAB);
          for (int64_t r = 0; r < n_rows; ++r) {
            const auto row = make_weights(t, n, r % 3 == 0 ? WeightKind::RawBytes : WeightKind::Quantized, rng);
            std::memcpy(&w[static_cast<size_t>(r) * stride], row.data(), rb);
          }
          const auto a = make_act(n, static_cast<int>(n_rows % 4), rng);
          std::vector<float> out(static_cast<size_t>(n_rows) + 1, -7.0f);
          rows(n, w.data(), stride, n_rows, a.data(), out.data());
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want = scalar(n, &w[static_cast<size_t>(r) * stride], a.data());
            ASSERT_EQ(bits(out[static_cast<size_t>(r)]), bits(want))
                << p.name << " " << type_info(t).name << " n " << n << " rows " << n_rows << " row " << r;
            ++checked;
          }
          EXPECT_EQ(out.back(), -7.0f) << "wrote past n_rows";
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "skipped: this CPU has no many-rows K-quant path (AVX-512 VNNI)";
}

// The active table holds the best kernel CAIRN_ISA allows (the scalar one under
// CAIRN_ISA=scalar), and vec_dot_rows only where a kernel has one.
TEST(KQuantSimd, ActiveTableFollowsIsa) {
  const TypeOps* q4 = type_ops(TensorType::Q4_K);
  const TypeOps* q6 = type_ops(TensorType::Q6_K);
  if (isa_enabled(Isa::Avx512Vnni)) {
    EXPECT_EQ(q4->vec_dot, &quant::avx512vnni::q4_k_dot_q8_k);
    EXPECT_EQ(q6->vec_dot, &quant::avx512vnni::q6_k_dot_q8_k);
    EXPECT_EQ(q4->vec_dot_rows, &quant::avx512vnni::q4_k_dot_rows);
    EXPECT_EQ(q6->vec_dot_rows, &quant::avx512vnni::q6_k_dot_rows);
  } else if (isa_enabled(Isa::Avx2)) {
    EXPECT_EQ(q4->vec_dot, &quant::avx2::q4_k_dot_q8_k);
    EXPECT_EQ(q6->vec_dot, &quant::avx2::q6_k_dot_q8_k);
    EXPECT_EQ(q4->vec_dot_rows, nullptr);
  } else {
    EXPECT_EQ(q4->vec_dot, &quant::q4_k_dot_q8_k);
    EXPECT_EQ(q6->vec_dot, &quant::q6_k_dot_q8_k);
    EXPECT_EQ(q4->vec_dot_rows, nullptr);
  }
  EXPECT_EQ(scalar_type_ops(TensorType::Q4_K)->vec_dot, &quant::q4_k_dot_q8_k);
  EXPECT_EQ(scalar_type_ops(TensorType::Q4_K)->vec_dot_rows, nullptr);
}

}  // namespace
}  // namespace cairn
