// tests/onnx/session_test.cpp — the planner and executor on fake operators:
// right numbers, plans per input shape, arena sharing, constant folding at
// load and at plan time, and refusals of bad inputs.
#include "onnx/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "onnx_test_models.h"

// Counts allocations on the thread that asks for it, to check that a planned
// forward allocates only its outputs.
namespace {
thread_local bool t_counting = false;
thread_local int t_allocs = 0;
}  // namespace

// GCC sees free() on what its own new returned; here both sides are malloc's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  if (t_counting) ++t_allocs;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
// Every form that pairs with the deletes above is replaced too, or a
// sanitizer's own nothrow/array new would be freed here (std::stable_sort
// takes its buffer with nothrow new).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (t_counting) ++t_allocs;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void* operator new[](size_t n) { return operator new(n); }
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace cairn::onnx {
namespace {

using test::floats;
using test::ModelBuilder;
using test::to_floats;
using TP = ::onnx::TensorProto;

std::unique_ptr<Session> load_ok(const ModelBuilder& b, SessionOptions o = test::fake_options()) {
  auto s = Session::load_bytes(b.bytes(), "", std::move(o));
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s ? std::move(*s) : nullptr;
}

Result<std::vector<values::Tensor>> run1(Session& s, const values::Tensor& x) {
  const values::Tensor* in[] = {&x};
  return s.run(in);
}

TEST(OnnxSession, SmallGraphGivesTheRightNumbers) {
  ModelBuilder b;
  b.input("x", {2, 3}).input("y", {2, 3}).output("z", {2, 3});
  b.init("c", {}, {10.0f});
  b.node("Add", {"x", "y"}, {"s"}, "add0");
  b.node("Add", {"s", "c"}, {"z"}, "add1");
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->inputs().size(), 2u);
  EXPECT_EQ(s->inputs()[0].name, "x");
  EXPECT_EQ(s->opset(), 13);
  auto x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  auto y = floats({0.5f, 0.5f, 0.5f, -1, -1, -1}, {2, 3});
  const values::Tensor* in[] = {&x, &y};
  auto out = s->run(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(to_floats((*out)[0]), (std::vector<float>{11.5f, 12.5f, 13.5f, 13, 14, 15}));
}

TEST(OnnxSession, DynamicBatchMakesOnePlanPerShapeAndReusesThem) {
  ModelBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2});
  b.node("Neg", {"x"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->inputs()[0].dims, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(s->inputs()[0].dim_names[0], "N");
  EXPECT_EQ(s->plans_cached(), 0);
  auto a = floats({1, 2}, {1, 2});
  auto c = floats({1, 2, 3, 4, 5, 6}, {3, 2});
  ASSERT_TRUE(run1(*s, a).is_ok());
  EXPECT_EQ(s->plans_cached(), 1);
  auto r = run1(*s, c);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(s->plans_cached(), 2);
  r = run1(*s, a);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2}));
  EXPECT_EQ(s->plans_cached(), 2);
}

TEST(OnnxSession, PlansAreDroppedLeastRecentlyUsedFirst) {
  ModelBuilder b;
  b.input("x", {-1}).output("y", {-1});
  b.node("Neg", {"x"}, {"y"});
  auto o = test::fake_options();
  o.max_plans = 2;
  auto s = load_ok(b, o);
  ASSERT_TRUE(s);
  for (int n : {1, 2, 3, 1, 4}) {
    auto x = floats(std::vector<float>(size_t(n), 1.0f), {n});
    auto r = run1(*s, x);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{n}));
    EXPECT_LE(s->plans_cached(), 2);
  }
  EXPECT_EQ(s->plans_cached(), 2);
}

TEST(OnnxSession, ArenaSharesBytesBetweenTensorsThatAreNotLiveTogether) {
  // x -> Neg -> Neg -> Neg -> Neg -> y: four 4 KiB tensors, at most two live.
  ModelBuilder b;
  b.input("x", {1024}).output("y", {1024});
  b.node("Neg", {"x"}, {"t1"});
  b.node("Neg", {"t1"}, {"t2"});
  b.node("Neg", {"t2"}, {"t3"});
  b.node("Neg", {"t3"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->arena_bytes(), 0u);
  std::vector<float> v(1024);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  auto x = floats(v, {1024});
  auto r = run1(*s, x);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), v);  // four negations
  // Two 4096-byte buffers in turn, plus the 100-byte scratch rounded to 128.
  EXPECT_EQ(s->arena_bytes(), 2u * 4096 + 128);
  EXPECT_LT(s->arena_bytes(), 4u * 4096);
}

TEST(OnnxSession, ArenaKeepsATensorUntilItsLastReader) {
  // a = -x, b = -a, c = -b, y = a + c = -2x: a is read last by the Add, so
  // neither b nor c may take its bytes (b written over a would give y = 0).
  ModelBuilder b;
  b.input("x", {64}).output("y", {64});
  b.node("Neg", {"x"}, {"a"});
  b.node("Neg", {"a"}, {"b"});
  b.node("Neg", {"b"}, {"c"});
  b.node("Add", {"a", "c"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) + 1;
  auto r = run1(*s, floats(v, {64}));
  ASSERT_TRUE(r.is_ok());
  std::vector<float> want(64);
  for (size_t i = 0; i < v.size(); ++i) want[i] = -2 * v[i];  // a = c = -x
  EXPECT_EQ(to_floats((*r)[0]), want);
  // a lives across all four steps; y reuses b's bytes (b is dead by then).
  EXPECT_EQ(s->arena_bytes(), 3u * 256 + 128);
}

TEST(OnnxSession, PlannedForwardAllocatesOnlyItsOutputs) {
  ModelBuilder b;
  b.input("x", {256}).output("y", {256}).output("z", {256});
  b.node("Neg", {"x"}, {"t1"});
  b.node("Identity", {"t1"}, {"t2"});
  b.node("Neg", {"t2"}, {"y"});
  b.node("Neg", {"t1"}, {"z"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats(std::vector<float>(256, 2.0f), {256});
  const values::Tensor* in[] = {&x};
  ASSERT_TRUE(s->run(in).is_ok());  // plans
  t_allocs = 0;
  t_counting = true;
  auto r = s->run(in);
  t_counting = false;
  ASSERT_TRUE(r.is_ok());
  // The result vector, and each output's shape and bytes.
  EXPECT_LE(t_allocs, 5);
  if (t_allocs == 0) GTEST_SKIP() << "operator new is not this file's here (valgrind replaces it)";
  EXPECT_EQ(to_floats((*r)[0]), std::vector<float>(256, 2.0f));
  EXPECT_EQ(to_floats((*r)[1]), std::vector<float>(256, 2.0f));
}

TEST(OnnxSession, ViewsAliasTheirInputAndGraphInputsPassThrough) {
  ModelBuilder b;
  b.input("x", {2, 2}).output("y", {2, 2}).output("x", {2, 2});
  b.node("Identity", {"x"}, {"v"});
  b.node("Neg", {"v"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 2, 3, 4}, {2, 2});
  auto r = run1(*s, x);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(to_floats((*r)[1]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(OnnxSession, ConstantsAreFoldedOnceAtLoad) {
  // y = x · Transpose(W): the Transpose runs at load, and MatMul's factory
  // sees a constant B.
  test::counters().reset();
  ModelBuilder b;
  b.input("x", {-1, 3}).output("y", {-1, 2});
  b.init("W", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.node("Transpose", {"W"}, {"WT"});
  b.node("MatMul", {"x", "WT"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  EXPECT_EQ(test::counters().transpose_runs, 1);
  EXPECT_TRUE(test::counters().matmul_saw_constant_b);
  auto x = floats({1, 0, 1, 0, 1, 0}, {2, 3});
  for (int i = 0; i < 2; ++i) {
    auto r = run1(*s, x);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{4, 10, 2, 5}));
  }
  EXPECT_EQ(test::counters().transpose_runs, 1);
}

TEST(OnnxSession, ConstantNodeAttributeTensorFolds) {
  ModelBuilder b;
  b.input("x", {3}).output("y", {3});
  auto& n = b.node("Constant", {}, {"c"});
  auto* a = n.add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(TP::FLOAT);
  a->mutable_t()->add_dims(3);
  for (float f : {1.0f, 2.0f, 3.0f}) a->mutable_t()->add_float_data(f);
  b.node("Add", {"x", "c"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 1, 1}, {3});
  auto r = run1(*s, x);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{2, 3, 4}));
}

TEST(OnnxSession, ShapeChainsAreEvaluatedAtPlanTime) {
  // Reshape(Neg(x), Shape(x)): Reshape needs its shape known when planning.
  test::counters().reset();
  ModelBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2});
  b.node("Neg", {"x"}, {"n"});
  b.node("Shape", {"x"}, {"s"});
  b.node("Reshape", {"n", "s"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 2, 3, 4}, {2, 2});
  for (int i = 0; i < 3; ++i) {
    auto r = run1(*s, x);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2, -3, -4}));
  }
  EXPECT_EQ(test::counters().shape_runs, 1);  // once, for the one plan
  EXPECT_EQ(test::counters().neg_runs, 3);
}

TEST(OnnxSession, SmallIntegerInputsThatDecideShapesKeyThePlan) {
  // Reshape's target comes from the caller (Reshape needs_value(1)): the
  // planner knows the small int64 input's values and keys plans on them.
  ModelBuilder b;
  b.input("x", {-1}).input("s", {2}, TP::INT64).output("y", {-1, -1});
  b.node("Neg", {"x"}, {"n"});
  b.node("Reshape", {"n", "s"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 2, 3, 4, 5, 6}, {6});
  auto run_with = [&](std::vector<int64_t> shape) {
    auto st = values::make_tensor(shape, {2});
    const values::Tensor* in[] = {&x, &st};
    return s->run(in);
  };
  auto r = run_with({2, 3});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  r = run_with({3, 2});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(s->plans_cached(), 2);
  r = run_with({2, 3});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s->plans_cached(), 2);
  r = run_with({4, 3});  // keyed now, so the error is about the value
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "node 'Reshape_1' (Reshape, opset 13): cannot reshape [6] to [4, 3]");

  // A float input never becomes a key: the error stays the planner's own.
  ModelBuilder c;
  c.input("x", {2}).input("s", {2}).output("y", {-1, -1});
  c.node("Reshape", {"x", "s"}, {"y"});
  s = load_ok(c);
  ASSERT_TRUE(s);
  auto fs = floats({1, 2}, {2});
  const values::Tensor* in[] = {&fs, &fs};
  r = s->run(in);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "node 'Reshape_0' (Reshape, opset 13): the shape input must be known before running");
}

TEST(OnnxSession, ValueKeysFollowTheChainButStopAtShape) {
  // s reaches Reshape's shape through an Identity: still keyed by value.
  ModelBuilder b;
  b.input("x", {6}).input("s", {2}, TP::INT64).output("y", {-1, -1});
  b.node("Identity", {"s"}, {"s2"});
  b.node("Reshape", {"x", "s2"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 2, 3, 4, 5, 6}, {6});
  auto a = values::make_tensor(std::vector<int64_t>{3, 2}, {2});
  const values::Tensor* in[] = {&x, &a};
  auto r = s->run(in);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{3, 2}));

  // idx feeds only Shape, which reads its shape: different values, one plan.
  ModelBuilder c;
  c.input("x", {2}).input("idx", {2}, TP::INT64).output("y", {2});
  c.node("Shape", {"idx"}, {"sh"});
  c.node("Reshape", {"x", "sh"}, {"y"});
  s = load_ok(c);
  ASSERT_TRUE(s);
  auto x2 = floats({1, 2}, {2});
  for (int64_t v : {1, 5, 9}) {
    auto idx = values::make_tensor(std::vector<int64_t>{v, v}, {2});
    const values::Tensor* in2[] = {&x2, &idx};
    ASSERT_TRUE(s->run(in2).is_ok());
  }
  EXPECT_EQ(s->plans_cached(), 1);
}

TEST(OnnxSession, RefusesBadInputs) {
  ModelBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2});
  b.node("Neg", {"x"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto good = floats({1, 2}, {1, 2});
  {
    std::vector<const values::Tensor*> none;
    auto r = s->run(none);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("takes 1 inputs (x), got 0"), std::string::npos) << r.status().message();
    const values::Tensor* two[] = {&good, &good};
    EXPECT_FALSE(s->run(two).is_ok());
  }
  {
    auto ints = values::make_tensor(std::vector<int64_t>{1, 2}, {1, 2});
    auto r = run1(*s, ints);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "input 'x' is int64, the model takes float32");
    EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  }
  {
    auto r = run1(*s, floats({1, 2, 3}, {1, 3}));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "input 'x' has shape [1, 3], the model takes [N, 2]");
    r = run1(*s, floats({1, 2}, {2}));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("[N, 2]"), std::string::npos);
  }
  {
    values::Tensor lying{values::DType::Float32, {4, 2}, std::string(8, '\0')};  // 2 floats' bytes
    auto r = run1(*s, lying);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("has 8 bytes"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(s->plans_cached(), 0);
  EXPECT_TRUE(run1(*s, good).is_ok());
}

TEST(OnnxSession, SharedDimensionNamesMustAgree) {
  ModelBuilder b;  // both inputs' first dimension is "N"
  b.input("x", {-1, 2}).input("y", {-1, 2}).output("z", {-1, 2});
  b.node("Add", {"x", "y"}, {"z"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto x = floats({1, 2}, {1, 2});
  auto y = floats({1, 2, 3, 4}, {2, 2});
  const values::Tensor* in[] = {&x, &y};
  auto r = s->run(in);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "input 'y' has N = 2 (dimension 0) but input 'x' has N = 1");
  const values::Tensor* same[] = {&y, &y};
  EXPECT_TRUE(s->run(same).is_ok());
}

TEST(OnnxSession, ErrorsNameTheNode) {
  {
    ModelBuilder b;
    b.input("x", {2}).input("y", {3}).output("z", {2});
    b.node("Add", {"x", "y"}, {"z"}, "add0");
    auto s = load_ok(b);
    ASSERT_TRUE(s);
    auto x = floats({1, 2}, {2});
    auto y = floats({1, 2, 3}, {3});
    const values::Tensor* in[] = {&x, &y};
    auto r = s->run(in);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "node 'add0' (Add, opset 13): shapes [2] and [3] differ");
    EXPECT_EQ(s->plans_cached(), 0);
  }
  {
    ModelBuilder b;
    b.input("x", {2}).output("z", {2});
    b.node("Fail", {"x"}, {"z"}, "gather7");
    auto s = load_ok(b);
    ASSERT_TRUE(s);
    auto r = run1(*s, floats({1, 2}, {2}));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), "node 'gather7' (Fail, opset 13): index 7 is out of range");
  }
  {
    // All-constant inputs: infer runs at load, so the load fails.
    ModelBuilder b(17);
    b.input("x", {2}).output("z", {2});
    b.init("c", {2}, {1, 2});
    b.node("BadInfer", {"c"}, {"d"});
    b.node("Add", {"x", "d"}, {"z"});
    auto s = Session::load_bytes(b.bytes(), "", test::fake_options());
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().message(), "node 'BadInfer_0' (BadInfer, opset 17): refused by infer");
  }
}

TEST(OnnxSession, UnsupportedOperatorNamesNodeOpAndOpset) {
  ModelBuilder b(15);
  b.input("x", {2}).output("y", {2});
  b.node("Neg", {"x"}, {"t"});
  b.node("Frobnicate", {"t"}, {"y"}, "frob");
  auto s = Session::load_bytes(b.bytes(), "", test::fake_options());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().message().rfind("node 'frob' (Frobnicate, opset 15): operator Frobnicate is not supported; "
                                       "cairn runs: ",
                                       0),
            0u)
      << s.status().message();
  // The real table, with no name in the file.
  ModelBuilder c;
  c.input("x", {2}).output("y", {2});
  c.node("Frobnicate", {"x"}, {"y"});
  s = Session::load_bytes(c.bytes(), "");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("node 'Frobnicate_0' (Frobnicate, opset 13)"), std::string::npos);
}

TEST(OnnxSession, InitializerListedAsInputStaysAConstant) {
  ModelBuilder b;
  b.input("x", {2}).input("c", {2}).output("y", {2});
  b.init("c", {2}, {5, 6});
  b.node("Add", {"x", "c"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->inputs().size(), 1u);
  auto r = run1(*s, floats({1, 1}, {2}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{6, 7}));
}

TEST(OnnxSession, OmittedOptionalOutputsStillGetBuffers) {
  ModelBuilder b;
  b.input("x", {2}).output("y", {2});
  b.node("Neg", {"x"}, {""});  // an output nobody reads
  b.node("Neg", {"x"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto r = run1(*s, floats({1, 2}, {2}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(to_floats((*r)[0]), (std::vector<float>{-1, -2}));
}

TEST(OnnxSession, EmptyBatchesConstantOutputsAndOmittedInputs) {
  ModelBuilder b;
  b.input("x", {-1, 2}).output("y", {-1, 2}).output("c", {2});
  b.init("c", {2}, {7, 8});
  b.node("Neg", {"x"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  auto r = run1(*s, floats({}, {0, 2}));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE((*r)[0].data.empty());
  EXPECT_EQ(to_floats((*r)[1]), (std::vector<float>{7, 8}));

  ModelBuilder o;  // "" marks an omitted input: infer() sees it as absent
  o.input("x", {2}).output("y", {2});
  o.node("Add", {"x", ""}, {"y"}, "add");
  s = load_ok(o);
  ASSERT_TRUE(s);
  r = run1(*s, floats({1, 2}, {2}));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "node 'add' (Add, opset 13): input 1 is required");
}

TEST(OnnxSession, ConcurrentRunsAreSerialised) {
  ModelBuilder b;
  b.input("x", {-1}).output("y", {-1});
  b.node("Neg", {"x"}, {"t"});
  b.node("Neg", {"t"}, {"u"});
  b.node("Neg", {"u"}, {"y"});
  auto s = load_ok(b);
  ASSERT_TRUE(s);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const int n = 1 + (t + i) % 5;
        auto x = floats(std::vector<float>(size_t(n), float(t * 100 + i)), {n});
        auto r = run1(*s, x);
        if (!r.is_ok() || to_floats((*r)[0]) != std::vector<float>(size_t(n), -float(t * 100 + i))) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace cairn::onnx
