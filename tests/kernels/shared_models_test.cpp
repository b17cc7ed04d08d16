// Reads tensors that llama.cpp quantized (../shared/models) with our block
// layouts: the dequantized weights must match the F32 originals as closely as
// each format allows, and our quantizers must do about as well as llama.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/quant.h"
#include "gguf/gguf.h"
#include "kernels/type_ops.h"
#include "test_util.h"

namespace cairn {
namespace {

double rel_rmse(const std::vector<float>& got, const float* want, size_t n) {
  double se = 0, ss = 0;
  for (size_t i = 0; i < n; ++i) {
    se += double(got[i] - want[i]) * (got[i] - want[i]);
    ss += double(want[i]) * want[i];
  }
  return ss > 0 ? std::sqrt(se / ss) : std::sqrt(se);
}

void check_model(const std::string& quantized) {
  const auto dir = *test::shared_dir() / "models";
  auto ref = gguf::File::open((dir / "syn-llama-gqa-f32.gguf").string());
  auto q = gguf::File::open((dir / quantized).string());
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  // Upper bounds of the relative RMS error of each format on these weights.
  const std::map<TensorType, double> bound = {
      {TensorType::F32, 0.0},   {TensorType::Q8_0, 0.006}, {TensorType::Q4_0, 0.10},
      {TensorType::Q4_K, 0.09}, {TensorType::Q6_K, 0.025},
  };
  std::map<TensorType, int> seen;
  for (const gguf::TensorInfo& t : (*q)->tensors()) {
    const gguf::TensorInfo* r = (*ref)->find_tensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    ASSERT_EQ(r->type, TensorType::F32) << t.name;
    ASSERT_EQ(r->n_elements, t.n_elements) << t.name;
    const TypeOps* ops = type_ops(t.type);
    ASSERT_NE(ops, nullptr) << t.name << " has type " << type_info(t.type).name;
    ASSERT_TRUE(bound.count(t.type)) << t.name << " " << type_info(t.type).name;
    const size_t n = t.n_elements;
    std::vector<float> theirs(n), ours_deq(n), want(n);
    std::memcpy(want.data(), r->data, n * sizeof(float));
    ops->to_float(t.data, theirs.data(), int64_t(n));
    const double err_theirs = rel_rmse(theirs, want.data(), n);
    EXPECT_LE(err_theirs, bound.at(t.type)) << t.name << " " << type_info(t.type).name;

    std::vector<unsigned char> ours(t.n_bytes);
    ops->from_float(want.data(), ours.data(), int64_t(n));
    ops->to_float(ours.data(), ours_deq.data(), int64_t(n));
    const double err_ours = rel_rmse(ours_deq, want.data(), n);
    EXPECT_LE(err_ours, err_theirs * 1.25 + 1e-7) << t.name << " " << type_info(t.type).name;
    if (t.type == TensorType::Q8_0 || t.type == TensorType::Q4_0) {
      // llama.cpp's reference quantizer for these is a closed formula: same bytes.
      EXPECT_EQ(std::memcmp(ours.data(), t.data, t.n_bytes), 0) << t.name;
    }
    ++seen[t.type];
  }
  EXPECT_FALSE(seen.empty());
}

// One case per file that llama.cpp quantized from syn-llama-gqa-f32.gguf.
struct SharedModel {
  const char* name;
  const char* file;
};

class SharedModels : public ::testing::TestWithParam<SharedModel> {};

TEST_P(SharedModels, TensorsMatchF32Originals) {
  const SharedModel& m = GetParam();
  CAIRN_REQUIRE_SHARED(std::string("models/") + m.file);
  check_model(m.file);
}

INSTANTIATE_TEST_SUITE_P(
    Types, SharedModels,
    ::testing::Values(SharedModel{"Q8_0", "syn-llama-gqa-q8_0.gguf"},
                      SharedModel{"Q4_0", "syn-llama-gqa-q4_0.gguf"},
                      SharedModel{"Q4_K_M", "syn-llama-gqa-q4_k_m.gguf"},
                      SharedModel{"Q6_K", "syn-llama-gqa-q6_k.gguf"}),
    [](const ::testing::TestParamInfo<SharedModel>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cairn
