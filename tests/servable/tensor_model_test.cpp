// tests/servable/tensor_model_test.cpp — the tensor-model batcher in process: instances
// merged along the batch dimension and split back, a fixed batch padded, a
// dynamic one capped, shared inputs that must agree, the queue delay, per-instance
// errors (before and during a forward), abandoned jobs, and the batching options.
#include "servable/tensor_model.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace cairn::servable {
namespace {

namespace fs = std::filesystem;
using values::DType;
using values::Tensor;
using values::Value;

// y = x + bias (bias a [4] initializer of 0, 10, 20, 30) times a shared
// `scale` [1]; x is [B, 4] (B fixed, or "batch" when batch <= 0).
std::string affine_model(int64_t batch) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("affine");
  auto* bias = g->add_initializer();
  bias->set_name("bias");
  bias->set_data_type(::onnx::TensorProto::FLOAT);
  bias->add_dims(4);
  for (float v : {0.f, 10.f, 20.f, 30.f}) bias->add_float_data(v);
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("bias");
  add->add_output("a");
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->add_input("a");
  mul->add_input("scale");
  mul->add_output("y");
  auto declare = [&](::onnx::ValueInfoProto* v, const char* name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) {
      auto* dim = t->mutable_shape()->add_dim();
      if (d > 0)
        dim->set_dim_value(d);
      else
        dim->set_dim_param("batch");
    }
  };
  declare(g->add_input(), "x", {batch, 4});
  declare(g->add_input(), "scale", {1});
  declare(g->add_output(), "y", {batch, 4});
  return m.SerializeAsString();
}

class TensorModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cairn-tensor-model-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    pool_ = std::make_shared<ThreadPool>(2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<TensorModel> load(int64_t batch, std::map<std::string, Value> options = {},
                                    bool with_batch_dim = true) {
    ModelDecl d;
    d.file = "affine.onnx";
    d.path = (dir_ / d.file).string();
    d.format = "ONNX";
    d.with_batch_dim = with_batch_dim;
    d.without_batch_dim_inputs = {1};
    d.options = std::move(options);
    std::ofstream(d.path, std::ios::binary) << affine_model(batch);
    auto m = TensorModel::load(d, pool_);
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    return m.is_ok() ? std::move(m.value()) : nullptr;
  }

  fs::path dir_;
  std::shared_ptr<ThreadPool> pool_;
};

Tensor row(float base) { return values::make_tensor(std::vector<float>{base, base + 1, base + 2, base + 3}, {4}); }
Tensor scale(float s) { return values::make_tensor(std::vector<float>{s}, {1}); }

// Jobs whose results are collected in order.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Result<std::vector<Value>>>> results;
  size_t done = 0;

  std::vector<TensorModel::Job> jobs(const std::vector<std::pair<Value, Value>>& args) {
    std::vector<TensorModel::Job> out;
    const size_t first = results.size();
    results.resize(first + args.size());
    for (size_t k = 0; k < args.size(); ++k) {
      TensorModel::Job j;
      j.args = {args[k].first, args[k].second};
      j.done = [this, i = first + k](Result<std::vector<Value>> r) {
        std::lock_guard<std::mutex> lock(mu);
        results[i] = std::move(r);
        ++done;
        cv.notify_all();
      };
      out.push_back(std::move(j));
    }
    return out;
  }
  bool wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return done >= n; });
  }
};

void expect_row(const Result<std::vector<Value>>& r, float base, float s) {
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  const Tensor& t = std::get<Tensor>(r->front());
  ASSERT_EQ(t.shape, std::vector<int64_t>{4});
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(t.as<float>()[i], (base + i + 10.f * i) * s) << i;
}

TEST_F(TensorModelTest, FixedBatchOfTwoTakesThreeInstancesInTwoForwardsOnePadded) {
  auto m = load(2);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->batch_limit(), 2);
  Collector c;
  m->submit(c.jobs({{row(0), scale(1)}, {row(100), scale(1)}, {row(200), scale(1)}}));
  ASSERT_TRUE(c.wait(3));
  expect_row(*c.results[0], 0, 1);
  expect_row(*c.results[1], 100, 1);
  expect_row(*c.results[2], 200, 1);
  const auto s = m->stats();
  EXPECT_EQ(s.runs, 2u);
  EXPECT_EQ(s.instances, 3u);
  EXPECT_EQ(s.padded, 1u);
}

TEST_F(TensorModelTest, DynamicBatchIsCappedAndSharedInputsMustAgree) {
  auto m = load(-1, {{"max_batch_size", int64_t(3)}});
  ASSERT_TRUE(m);
  Collector c;
  std::vector<std::pair<Value, Value>> args;
  // Seven instances with scale 2 and two with scale 3, interleaved: the
  // scale-3 ones may not ride in a scale-2 forward.
  for (int k = 0; k < 9; ++k) args.push_back({row(float(k) * 10), scale(k == 2 || k == 6 ? 3 : 2)});
  m->submit(c.jobs(args));
  ASSERT_TRUE(c.wait(9));
  for (int k = 0; k < 9; ++k) expect_row(*c.results[k], float(k) * 10, k == 2 || k == 6 ? 3 : 2);
  const auto s = m->stats();
  EXPECT_EQ(s.instances, 9u);
  EXPECT_EQ(s.padded, 0u);
  EXPECT_LE(s.largest_batch, 3u);
  EXPECT_GE(s.runs, 4u);  // at least 3 forwards for seven, one for the two others
}

TEST_F(TensorModelTest, QueueDelayGathersInstancesSubmittedApart) {
  auto m = load(-1, {{"max_batch_size", int64_t(8)}, {"max_queue_delay_microseconds", int64_t(500000)}});
  ASSERT_TRUE(m);
  Collector c;
  for (int k = 0; k < 4; ++k) {
    m->submit(c.jobs({{row(float(k)), scale(1)}}));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(c.wait(4));
  for (int k = 0; k < 4; ++k) expect_row(*c.results[k], float(k), 1);
  EXPECT_EQ(m->stats().runs, 1u);
  EXPECT_EQ(m->stats().largest_batch, 4u);
}

TEST_F(TensorModelTest, BadInstancesFailAloneWithTheirReason) {
  auto m = load(-1);
  ASSERT_TRUE(m);
  Collector c;
  m->submit(c.jobs({{row(0), scale(1)},
                    {values::make_tensor(std::vector<float>{1, 2, 3}, {3}), scale(1)},
                    {values::make_tensor(std::vector<int32_t>{1, 2, 3, 4}, {4}), scale(1)},
                    {std::string("text"), scale(1)},
                    {row(5), scale(1)}}));
  ASSERT_TRUE(c.wait(5));
  expect_row(*c.results[0], 0, 1);
  EXPECT_NE(c.results[1]->status().message().find("expected float32 [4] per instance, got float32 tensor [3]"),
            std::string::npos)
      << c.results[1]->status().message();
  EXPECT_NE(c.results[2]->status().message().find("int32"), std::string::npos);
  EXPECT_NE(c.results[3]->status().message().find("got str"), std::string::npos);
  expect_row(*c.results[4], 5, 1);
  // A wrong number of arguments.
  Collector c2;
  TensorModel::Job j;
  j.args = {Value(row(0))};
  j.done = [&](Result<std::vector<Value>> r) {
    std::lock_guard<std::mutex> lock(c2.mu);
    c2.results.push_back(std::move(r));
    ++c2.done;
    c2.cv.notify_all();
  };
  std::vector<TensorModel::Job> jobs;
  jobs.push_back(std::move(j));
  m->submit(std::move(jobs));
  ASSERT_TRUE(c2.wait(1));
  EXPECT_NE(c2.results[0]->status().message().find("takes 2 inputs (x, scale)"), std::string::npos);
}

TEST_F(TensorModelTest, BatchingOffRunsOneInstancePerForward) {
  auto m = load(-1, {{"batching", false}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->batch_limit(), 1);
  Collector c;
  m->submit(c.jobs({{row(0), scale(1)}, {row(1), scale(1)}, {row(2), scale(1)}}));
  ASSERT_TRUE(c.wait(3));
  for (int k = 0; k < 3; ++k) expect_row(*c.results[k], float(k), 1);
  EXPECT_EQ(m->stats().runs, 3u);
}

TEST_F(TensorModelTest, WithoutBatchDimTheInstanceIsTheWholeInput) {
  auto m = load(2, {}, /*with_batch_dim=*/false);
  ASSERT_TRUE(m);
  Collector c;
  auto x = values::make_tensor(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  m->submit(c.jobs({{x, scale(2)}, {row(0), scale(2)}}));
  ASSERT_TRUE(c.wait(2));
  ASSERT_TRUE(c.results[0]->is_ok()) << c.results[0]->status().message();
  const Tensor& y = std::get<Tensor>(c.results[0]->value().front());
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_FLOAT_EQ(y.as<float>()[5], (5 + 10) * 2.f);
  EXPECT_NE(c.results[1]->status().message().find("expected float32 [2, 4]"), std::string::npos);
}

TEST_F(TensorModelTest, AbandonedJobsAreDroppedUnrun) {
  auto m = load(-1, {{"max_queue_delay_microseconds", int64_t(200000)}});
  ASSERT_TRUE(m);
  Collector c;
  auto jobs = c.jobs({{row(0), scale(1)}, {row(1), scale(1)}});
  auto gone = std::make_shared<std::atomic<bool>>(true);
  jobs[0].abandoned = gone;
  m->submit(std::move(jobs));
  ASSERT_TRUE(c.wait(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(c.results[0].has_value());
  expect_row(*c.results[1], 1, 1);
  EXPECT_EQ(m->stats().instances, 1u);
}

TEST_F(TensorModelTest, OptionsAndDeclarationsAreChecked) {
  ModelDecl d;
  d.file = "affine.onnx";
  d.path = (dir_ / d.file).string();
  d.format = "ONNX";
  std::ofstream(d.path, std::ios::binary) << affine_model(-1);
  d.options = {{"max_batch_size", int64_t(0)}};
  EXPECT_NE(batch_settings(d).status().message().find("max_batch_size"), std::string::npos);
  d.options = {{"temperature", 0.5}};
  EXPECT_NE(batch_settings(d).status().message().find("'temperature' is not a tensor model's"),
            std::string::npos);
  d.options = {};
  d.without_batch_dim_inputs = {5};
  auto r = TensorModel::load(d, pool_);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("without_batch_dim_inputs names input 5"), std::string::npos);
  d.without_batch_dim_inputs = {};
  // Without the shared input, `scale` [1] is batched too, and its fixed
  // first dimension fixes the batch at 1.
  auto m = TensorModel::load(d, pool_);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->batch_limit(), 1);
  d.path = (dir_ / "missing.onnx").string();
  auto missing = TensorModel::load(d, pool_);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("model 'affine.onnx'"), std::string::npos);
}

}  // namespace
}  // namespace cairn::servable
