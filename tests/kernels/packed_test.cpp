// The packed kernels (AVX-512 VNNI; Q4_0 and Q8_0 also AVX2) must give the
// scalar functions' bits exactly.
#include "kernels/packed.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "kernels/kernels.h"
#include "kernels/type_ops.h"
#include "test_util.h"

namespace cairn::kernels {
namespace {

struct Case {
  TensorType type;
  int64_t rows, cols, tokens;
};

using test::random_normal;

void check_bit_identical(const Case& c, ThreadPool& pool) {
  const TypeOps* ops = scalar_type_ops(c.type);
  const TypeOps* act_ops = scalar_type_ops(ops->vec_dot_type);
  const size_t rb = *row_bytes(c.type, c.cols);
  const size_t ab = *row_bytes(act_ops->type, c.cols);
  const auto wf = random_normal((size_t)(c.rows * c.cols), 7 + (uint32_t)c.rows, 1.0f);
  std::vector<uint8_t> wq(rb * (size_t)c.rows);
  for (int64_t r = 0; r < c.rows; ++r)
    ops->from_float(wf.data() + r * c.cols, wq.data() + r * rb, c.cols);
  // Activations of mixed magnitudes, with an all-zero token (scale 0) and exact ties.
  auto x = random_normal((size_t)(c.tokens * c.cols), 99 + (uint32_t)c.tokens, 3.0f);
  if (c.tokens > 1) std::fill(x.begin() + c.cols, x.begin() + 2 * c.cols, 0.0f);
  if (c.tokens > 2) {
    for (int64_t i = 0; i < c.cols; ++i)
      x[(size_t)(2 * c.cols + i)] = (float)((i % 255) - 127) * 0.5f;
  }

  WeightMatrix w{c.type, wq.data(), c.rows, c.cols, rb, nullptr};
  prepare_weight(w);
  ASSERT_NE(w.packed, nullptr);
  std::vector<float> got((size_t)(c.tokens * c.rows));
  matmul(w, x.data(), c.tokens, got.data(), pool);

  std::vector<uint8_t> act(ab);
  const auto quantize = act_from_float(*act_ops);
  for (int64_t t = 0; t < c.tokens; ++t) {
    quantize(x.data() + t * c.cols, act.data(), c.cols);
    for (int64_t r = 0; r < c.rows; ++r) {
      const float want = ops->vec_dot(c.cols, wq.data() + r * rb, act.data());
      const float have = got[(size_t)(t * c.rows + r)];
      uint32_t a, b;
      std::memcpy(&a, &want, 4);
      std::memcpy(&b, &have, 4);
      ASSERT_EQ(a, b) << type_info(c.type).name << " rows " << c.rows << " cols " << c.cols
                      << " tokens " << c.tokens << ": token " << t << " row " << r << " want "
                      << want << " got " << have;
    }
  }
}

class PackedKernels : public ::testing::TestWithParam<TensorType> {
 protected:
  void SetUp() override {
    if (!isa_enabled(Isa::Avx2))
      GTEST_SKIP() << "packed Q4_0/Q8_0 kernels need AVX2 (absent here, or capped by CAIRN_ISA)";
  }
};

TEST_P(PackedKernels, BitIdenticalToScalarOnRaggedShapes) {
  ThreadPool pool(2);
  for (int64_t rows : {1, 15, 16, 17, 40}) {
    for (int64_t cols : {32, 96, 512}) {
      for (int64_t tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13})
        check_bit_identical({GetParam(), rows, cols, tokens}, pool);
    }
  }
  // More tokens than one activation chunk, and a model-sized width.
  check_bit_identical({GetParam(), 33, 2048, 70}, pool);
  check_bit_identical({GetParam(), 300, 256, 130}, pool);
  // Up to 24 tokens take the few-token kernels (tiles of up to 8 per slice:
  // 15, 16, 17, 24); more, the two-group tiles, range by range (see
  // tile2_ranges), Q4_0 split once per range: ranges ending in a pair, a lone
  // block (96 and 1056 columns: 3 and 33 blocks), a last range shorter than
  // the others, every size of the last tile (25..30), and pairs of groups
  // after the first (100 rows).
  for (int64_t cols : {96, 1056, 1536})
    for (int64_t tokens : {2, 4, 6, 15, 16, 17, 24, 25, 26, 27, 28, 29, 30, 64})
      for (int64_t rows : {40, 100}) check_bit_identical({GetParam(), rows, cols, tokens}, pool);
  // Decode-sized batches on enough groups (75) that shares finish at
  // different times and take chunks from each other's ranges; 3 threads so
  // one range can be robbed from both sides' neighbours.
  ThreadPool three(3);
  for (int64_t tokens : {1, 4, 64})
    for (int rep = 0; rep < 3; ++rep) check_bit_identical({GetParam(), 1200, 256, tokens}, three);
  // Rows wider than one chunk (64 blocks): stored chunk by chunk in runs of
  // four groups, with a short last chunk and a short last run (7 groups: a
  // run of 4 and one of 3; 17 rows: 2 groups, the second padded), threads
  // whose ranges split a run, and every tile width.
  for (int64_t cols : {2080, 4128, 5632}) {
    for (int64_t rows : {17, 100}) {
      for (int64_t tokens : {1, 2, 5, 8, 9, 70}) {
        check_bit_identical({GetParam(), rows, cols, tokens}, pool);
        check_bit_identical({GetParam(), rows, cols, tokens}, three);
      }
    }
  }
}

// Q4_K and Q6_K (packed_k_*.cpp): super-blocks of 256, tiles of up to 8
// tokens (Q6_K prompts: 6), token chunks of 64; a short last group, several threads, TinyLlama's
// widths.
class PackedKQuants : public ::testing::TestWithParam<TensorType> {
 protected:
  void SetUp() override {
    if (!isa_enabled(Isa::Avx2))
      GTEST_SKIP() << "packed K-quant kernels need AVX2 (absent here, or capped by CAIRN_ISA)";
  }
};

TEST_P(PackedKQuants, BitIdenticalToScalar) {
  ThreadPool pool(2), three(3);
  for (int64_t rows : {1, 16, 17, 40}) {
    for (int64_t cols : {256, 768}) {
      for (int64_t tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 30})
        check_bit_identical({GetParam(), rows, cols, tokens}, pool);
    }
  }
  for (int64_t tokens : {1, 4, 64, 70, 133}) {
    check_bit_identical({GetParam(), 100, 2048, tokens}, pool);
    check_bit_identical({GetParam(), 33, 5632, tokens}, three);
  }
}

// IQ4_NL, MXFP4, IQ4_XS, Q5_0, Q4_1 and Q5_1 (packed_lut*.cpp, AVX-512 VNNI only): Lanes8's
// order per row, tiles of 2 tokens (IQ4_XS: 3) and a shorter last one, a short
// last group, token chunks of 64, several threads, TinyLlama's widths;
// padding rows' scale 0.
class PackedLut : public ::testing::TestWithParam<TensorType> {
 protected:
  void SetUp() override {
    if (!isa_enabled(Isa::Avx512Vnni))
      GTEST_SKIP() << "packed IQ4_NL/MXFP4 kernels need AVX-512 VNNI (absent here, or capped by "
                      "CAIRN_ISA)";
  }
};

TEST_P(PackedLut, BitIdenticalToScalarOnRaggedShapes) {
  ThreadPool pool(2), three(3);
  const bool super = GetParam() == TensorType::IQ4_XS;  // 256-element blocks
  for (int64_t rows : {1, 15, 16, 17, 40}) {
    for (int64_t cols : super ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 512}) {
      for (int64_t tokens : {1, 2, 3, 4, 5, 6, 7, 9, 13})
        check_bit_identical({GetParam(), rows, cols, tokens}, pool);
    }
  }
  for (int64_t tokens : {1, 2, 3, 64, 65, 70}) {
    check_bit_identical({GetParam(), 100, 2048, tokens}, pool);
    check_bit_identical({GetParam(), 33, 5632, tokens}, three);
  }
  for (int64_t tokens : {1, 4, 64})
    for (int rep = 0; rep < 3; ++rep) check_bit_identical({GetParam(), 1200, 256, tokens}, three);
}

INSTANTIATE_TEST_SUITE_P(Types, PackedLut,
                         ::testing::Values(TensorType::IQ4_NL, TensorType::MXFP4,
                                           TensorType::IQ4_XS, TensorType::Q5_0,
                                           TensorType::Q4_1, TensorType::Q5_1),
                         [](const auto& info) { return std::string(type_info(info.param).name); });

INSTANTIATE_TEST_SUITE_P(Types, PackedKQuants,
                         ::testing::Values(TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(type_info(info.param).name); });

INSTANTIATE_TEST_SUITE_P(Types, PackedKernels,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q8_0),
                         [](const auto& info) { return std::string(type_info(info.param).name); });

// Fused jobs (one activation pass) give each matrix's own matmul bits, packed
// or not, and mixed types fall back to one matmul each.
TEST(MatmulMany, SameBitsAsSeparateMatmuls) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t cols = 256, tokens = 11;
  struct Mat {
    std::vector<uint8_t> bytes;
    WeightMatrix w;
  };
  std::vector<Mat> mats;
  const TensorType types[] = {TensorType::Q4_0, TensorType::Q4_0, TensorType::Q8_0};
  const int64_t rows[] = {48, 21, 33};
  for (int i = 0; i < 3; ++i) {
    const size_t rb = *row_bytes(types[i], cols);
    Mat m;
    m.bytes.resize(rb * (size_t)rows[i]);
    std::vector<float> f((size_t)cols);
    for (int64_t r = 0; r < rows[i]; ++r) {
      for (float& v : f) v = dist(rng);
      type_ops(types[i])->from_float(f.data(), m.bytes.data() + r * rb, cols);
    }
    mats.push_back(std::move(m));
    mats.back().w = {types[i], mats.back().bytes.data(), rows[i], cols, rb, nullptr};
    prepare_weight(mats.back().w);
  }
  std::vector<float> x((size_t)(tokens * cols));
  for (float& v : x) v = dist(rng);
  for (size_t n : {size_t{2}, size_t{3}}) {  // two compatible Q4_0; then with a Q8_0 too
    std::vector<std::vector<float>> fused(n), single(n);
    std::vector<MatmulJob> jobs;
    for (size_t i = 0; i < n; ++i) {
      fused[i].resize((size_t)(tokens * rows[i]));
      single[i].resize(fused[i].size());
      jobs.push_back({&mats[i].w, fused[i].data()});
      matmul(mats[i].w, x.data(), tokens, single[i].data(), pool);
    }
    matmul_many(jobs, x.data(), tokens, pool);
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(0, std::memcmp(fused[i].data(), single[i].data(), fused[i].size() * 4))
          << "job " << i;
  }
  // Naming the next call's weights (a memory hint) changes no bits, for one
  // token (the warming path) and many, whatever `next` holds: a short
  // matrix (fewer groups than shares), mixed types, nothing.
  const WeightMatrix* const next_all[] = {&mats[1].w, &mats[2].w, &mats[0].w};
  const WeightMatrix* const next_short[] = {&mats[1].w};
  for (const std::span<const WeightMatrix* const> next :
       {std::span<const WeightMatrix* const>(next_all),
        std::span<const WeightMatrix* const>(next_short), std::span<const WeightMatrix* const>()}) {
    for (int64_t t : {int64_t{1}, tokens}) {
      std::vector<float> a((size_t)(t * rows[0])), b((size_t)(t * rows[1]));
      std::vector<float> ref_a(a.size()), ref_b(b.size());
      matmul(mats[0].w, x.data(), t, ref_a.data(), pool);
      matmul(mats[1].w, x.data(), t, ref_b.data(), pool);
      const MatmulJob jobs[] = {{&mats[0].w, a.data()}, {&mats[1].w, b.data()}};
      for (int rep = 0; rep < 3; ++rep) {  // later calls run while workers still warm
        matmul_many(jobs, x.data(), t, pool, next);
        EXPECT_EQ(0, std::memcmp(a.data(), ref_a.data(), a.size() * 4)) << t << " tokens";
        EXPECT_EQ(0, std::memcmp(b.data(), ref_b.data(), b.size() * 4)) << t << " tokens";
      }
    }
  }
}

// Rows made as the kernels quantize them (RowMaker) give the bits of the
// same rows made into a matrix first, for every weight type (the float ones
// take the made matrix), for one token, a few and a batch; each row is made
// exactly once.
class ScaledRows final : public RowMaker {
 public:
  ScaledRows(const float* src, int64_t cols) : src_(src), cols_(cols) {}
  void make(int64_t t, float* row) const override {
    made_.fetch_add(1, std::memory_order_relaxed);
    for (int64_t i = 0; i < cols_; ++i) row[i] = src_[t * cols_ + i] * 0.75f + (float)(t % 3);
  }
  int64_t made() const { return made_.load(); }

 private:
  const float* src_;
  int64_t cols_;
  mutable std::atomic<int64_t> made_{0};
};

TEST(MatmulMany, MadeRowsGiveTheBitsOfMadeMatrix) {
  ThreadPool pool(2);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t cols = 512, max_tokens = 40;
  const int64_t rows[] = {48, 33};
  std::vector<float> src((size_t)(max_tokens * cols));
  for (float& v : src) v = dist(rng);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K,
                          TensorType::IQ4_NL, TensorType::MXFP4, TensorType::IQ4_XS,
                          TensorType::Q5_0, TensorType::Q4_1, TensorType::Q5_1,
                          TensorType::F16, TensorType::BF16, TensorType::F32}) {
    const size_t rb = *row_bytes(type, cols);
    std::vector<std::vector<uint8_t>> bytes(2);
    std::vector<WeightMatrix> w(2);
    std::vector<float> f((size_t)cols);
    for (int i = 0; i < 2; ++i) {
      bytes[i].resize(rb * (size_t)rows[i]);
      for (int64_t r = 0; r < rows[i]; ++r) {
        for (float& v : f) v = dist(rng);
        type_ops(type)->from_float(f.data(), bytes[i].data() + r * rb, cols);
      }
      w[i] = {type, bytes[i].data(), rows[i], cols, rb, nullptr};
      prepare_weight(w[i]);
    }
    for (int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{17}, max_tokens}) {
      const ScaledRows maker(src.data(), cols);
      std::vector<float> made_matrix((size_t)(tokens * cols)), scratch(made_matrix.size());
      for (int64_t t = 0; t < tokens; ++t) maker.make(t, made_matrix.data() + t * cols);
      std::vector<float> ref[2], out[2];
      std::vector<MatmulJob> ref_jobs, jobs;
      for (int i = 0; i < 2; ++i) {
        ref[i].resize((size_t)(tokens * rows[i]));
        out[i].resize(ref[i].size());
        ref_jobs.push_back({&w[i], ref[i].data()});
        jobs.push_back({&w[i], out[i].data()});
      }
      matmul_many(ref_jobs, made_matrix.data(), tokens, pool);
      const int64_t before = maker.made();
      matmul_many(jobs, maker, scratch.data(), tokens, pool);
      EXPECT_EQ(maker.made() - before, tokens)
          << type_info(type).name << ", " << tokens << " tokens";
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(0, std::memcmp(out[i].data(), ref[i].data(), out[i].size() * 4))
            << type_info(type).name << ", " << tokens << " tokens, job " << i;
    }
  }
}

TEST(PackedMatrixTest, OnlyForTypesWithAPackedKernel) {
  std::vector<uint8_t> data(1024);
  WeightMatrix f32{TensorType::F32, data.data(), 2, 128, 512, nullptr};
  EXPECT_EQ(pack_matrix(f32), nullptr);
  WeightMatrix q4{TensorType::Q4_0, data.data(), 2, 64, 36, nullptr};
  EXPECT_EQ(pack_matrix(q4) != nullptr, isa_enabled(Isa::Avx2));
  std::vector<uint8_t> k_data(2 * 144);
  WeightMatrix q4k{TensorType::Q4_K, k_data.data(), 2, 256, 144, nullptr};
  EXPECT_EQ(pack_matrix(q4k) != nullptr, isa_enabled(Isa::Avx2));
  // The lookup layouts have VNNI kernels only.
  WeightMatrix iq4{TensorType::IQ4_NL, data.data(), 2, 64, 36, nullptr};
  EXPECT_EQ(pack_matrix(iq4) != nullptr, isa_enabled(Isa::Avx512Vnni));
}

// ctest runs the packed tests and the model suite once more with
// CAIRN_AMX=emulate: the AMX kernel with its tile operations in plain C++.
// This says that run really takes it (or that nothing here can).
TEST(PackedTilePath, FollowsCairnAmxAndTheIsaLevel) {
  const std::string path = packed_tile_path();
  const char* env = std::getenv("CAIRN_AMX");
  const std::string want = env ? env : "";
  if (!isa_enabled(Isa::Avx512Vnni)) {
    EXPECT_EQ(path, isa_enabled(Isa::Avx2) ? "avx2" : "none");
  } else if (want == "emulate") {
    EXPECT_EQ(path, "amx-emulated");
  } else if (want == "off" || !isa_enabled(Isa::Amx)) {
    EXPECT_EQ(path, "avx512vnni");
  } else {
    // AMX present: used unless its self-check disagreed with the VNNI tiles.
    EXPECT_TRUE(path == "amx" || path == "avx512vnni") << path;
  }
  // Only the hardware tiles make 17 tokens cost as much as 32 (the engine's
  // prompt chunks fill them); emulated ones are a test path, not a cost.
  EXPECT_EQ(batch_token_granule(), path == "amx" ? 16 : 1);
}

TEST(WeightStream, IsThePackedCopyWhereThereIsOneElseTheStoredRows) {
  std::vector<uint8_t> data(4096);
  WeightMatrix f32{TensorType::F32, data.data(), 2, 128, 512, nullptr};
  prepare_weight(f32);
  EXPECT_EQ(weight_stream(f32).data(), data.data());
  EXPECT_EQ(weight_stream(f32).size(), 1024u);
  // 20 rows of Q4_0: two 16-row groups, the second padded with zero rows.
  WeightMatrix q4{TensorType::Q4_0, data.data(), 20, 64, 36, nullptr};
  prepare_weight(q4);
  const std::span<const uint8_t> s = weight_stream(q4);
  if (!q4.packed) {
    EXPECT_EQ(s.data(), data.data());
    EXPECT_EQ(s.size(), 20u * 36u);
    return;
  }
  EXPECT_EQ(s.data(), q4.packed->data);
  EXPECT_EQ(s.size(), 32u * 36u);  // 18 bytes per row and block, as stored
}

}  // namespace
}  // namespace cairn::kernels
