// tests/rpc/convert_test.cpp — servable values to and from cairn.v1.Value: every kind and dtype,
// and the refusals (unknown dtype, shape and data that disagree, huge or deep shapes, no kind).
#include "rpc/convert.h"

#include <gtest/gtest.h>

namespace cairn::rpc {
namespace {

values::Tensor counting(values::DType dt, std::vector<int64_t> shape) {
  auto n = values::Tensor::count_of(dt, shape);
  EXPECT_TRUE(n.is_ok());
  std::string data(static_cast<size_t>(*n) * values::dtype_size(dt), '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 3 + 1);
  return *values::Tensor::make(dt, std::move(shape), std::move(data));
}

v1::Value tensor_msg(const std::string& dtype, std::vector<int64_t> shape, std::string data) {
  v1::Value v;
  auto* t = v.mutable_tensor_value();
  t->set_dtype(dtype);
  for (auto d : shape) t->add_shape(d);
  t->set_data(std::move(data));
  return v;
}

std::string error_of(const v1::Value& v) {
  auto r = from_proto(v);
  return r.is_ok() ? "<converted>" : r.status().message();
}

TEST(ValueConvert, EveryDtypeRoundTrips) {
  for (values::DType dt : values::kAllDTypes) {
    for (auto shape : std::vector<std::vector<int64_t>>{{}, {3}, {2, 2}, {0, 5}}) {
      values::Tensor t = counting(dt, shape);
      v1::Value m = to_proto(values::Value(t));
      ASSERT_EQ(m.kind_case(), v1::Value::kTensorValue);
      EXPECT_EQ(m.tensor_value().dtype(), values::dtype_name(dt));
      EXPECT_EQ(m.tensor_value().shape_size(), static_cast<int>(shape.size()));
      // Through the wire bytes, as a peer would see it.
      v1::Value wire;
      ASSERT_TRUE(wire.ParseFromString(m.SerializeAsString()));
      auto back = from_proto(wire);
      ASSERT_TRUE(back.is_ok()) << back.status().message();
      ASSERT_TRUE(std::holds_alternative<values::Tensor>(*back));
      EXPECT_EQ(std::get<values::Tensor>(*back), t) << values::dtype_name(dt);
    }
  }
}

TEST(ValueConvert, ScalarsStringsAndBytesRoundTrip) {
  const values::Value vals[] = {std::string("héllo"), values::Bytes{std::string("\0\xff", 2)}, true,
                                int64_t(-7), 2.5};
  for (const auto& v : vals) {
    auto back = from_proto(to_proto(v));
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(*back, v) << values::describe(v);
  }
  // str and bytes stay apart.
  EXPECT_EQ(to_proto(values::Value(values::Bytes{"x"})).kind_case(), v1::Value::kBytesValue);
  EXPECT_EQ(to_proto(values::Value(std::string("x"))).kind_case(), v1::Value::kStringValue);
}

TEST(ValueConvert, BadValuesAreClearErrors) {
  EXPECT_NE(error_of(v1::Value()).find("no kind"), std::string::npos);
  EXPECT_NE(error_of(tensor_msg("float128", {1}, std::string(16, '\0')))
                .find("unknown tensor dtype 'float128'"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_msg("", {1}, "x")).find("unknown tensor dtype"), std::string::npos);
  EXPECT_NE(
      error_of(tensor_msg("float32", {2, 2}, std::string(15, '\0'))).find("needs 16 bytes, got 15"),
      std::string::npos);
  EXPECT_NE(error_of(tensor_msg("int8", {}, "")).find("needs 1 bytes, got 0"), std::string::npos);
  EXPECT_NE(error_of(tensor_msg("float32", {2, -2}, "")).find("negative"), std::string::npos);
  EXPECT_NE(error_of(tensor_msg("float32", {1 << 30, 1 << 30, 1 << 30}, "")).find("larger than"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_msg("uint8", {INT64_MAX, INT64_MAX}, "")).find("larger than"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_msg("uint8", std::vector<int64_t>(33, 1), "x")).find("rank 33"),
            std::string::npos);
  auto long_name = error_of(tensor_msg(std::string(5000, 'q'), {1}, "x"));
  EXPECT_LT(long_name.size(), 200u);
}

TEST(ValueConvert, InstancesNameTheBadInput) {
  values::Instance inst{{"x", values::make_tensor(std::vector<float>{1, 2}, {2})},
                        {"s", std::string("a")}};
  auto back = from_proto(to_proto(inst));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, inst);

  v1::Instance bad;
  (*bad.mutable_items())["good"].set_int_value(1);
  (*bad.mutable_items())["img"] = tensor_msg("float32", {3}, "abc");
  auto r = from_proto(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(r.status().message().rfind("input 'img': ", 0), 0u) << r.status().message();
}

TEST(ModelInfoConvert, WhatTheModelIsTravels) {
  serving::ModelInfo m{"bge", 512, 30522, 17};
  m.n_ctx_train = 512;
  m.n_embd = 128;
  m.n_params = 123456789012;
  m.arch = "bert";
  m.generates = false;
  m.pooling = "rank";
  m.chat_template = "{{ messages }}";
  const serving::ModelInfo back = from_proto(to_proto(m));
  EXPECT_EQ(back.id, "bge");
  EXPECT_EQ(back.n_ctx, 512);
  EXPECT_EQ(back.n_vocab, 30522);
  EXPECT_EQ(back.n_ctx_train, 512);
  EXPECT_EQ(back.n_embd, 128);
  EXPECT_EQ(back.n_params, 123456789012);
  EXPECT_EQ(back.arch, "bert");
  EXPECT_FALSE(back.generates);
  EXPECT_EQ(back.pooling, "rank");
  EXPECT_EQ(back.chat_template, "{{ messages }}");
}

TEST(ModelInfoConvert, AnOlderWorkersModelStillGenerates) {
  v1::ModelInfo old;  // no embeddings_only field on the wire
  old.set_id("llama");
  old.set_n_ctx(4096);
  EXPECT_TRUE(from_proto(old).generates);
}

TEST(EmbedConvert, RequestAndResultRoundTrip) {
  serving::EmbedRequest req;
  req.model = "bge";
  req.inputs = {std::string("a"), std::vector<serving::Token>{1, 2, 3}};
  req.query = "q";
  req.normalize = false;
  auto back = from_proto(to_proto(req));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->model, "bge");
  EXPECT_EQ(back->inputs, req.inputs);
  EXPECT_EQ(back->query, req.query);
  EXPECT_FALSE(back->normalize);
  req.query.reset();
  EXPECT_FALSE(from_proto(to_proto(req))->query.has_value());

  serving::EmbedResult r{{{1.5f, -2.0f}, {}, {3.0f}}, 11};
  const serving::EmbedResult rb = from_proto(to_proto(r));
  EXPECT_EQ(rb.vectors, r.vectors);
  EXPECT_EQ(rb.prompt_tokens, 11);
}

TEST(EmbedConvert, BadRequestsAreClearErrors) {
  v1::EmbedRequest none;
  auto r = from_proto(none);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(r.status().message(), "the request has no inputs");

  v1::EmbedRequest blank;
  blank.add_inputs();
  blank.add_inputs();
  r = from_proto(blank);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "input 0 has neither text nor tokens");
  EXPECT_EQ(r.status().param(), "input");
}

}  // namespace
}  // namespace cairn::rpc

namespace cairn::rpc {
namespace {

// A request's speculative-decoding opt-out reaches the worker; a message
// without the field (an older controller) leaves speculation on.
TEST(GenerateConvert, SpeculativeOptOutTravels) {
  serving::GenerateRequest req;
  req.prompt = std::string("x");
  req.max_tokens = 4;
  EXPECT_TRUE(from_proto(to_proto(req, "a"))->speculative);
  req.speculative = false;
  const v1::GenerateRequest m = to_proto(req, "b");
  EXPECT_TRUE(m.no_speculation());
  EXPECT_FALSE(from_proto(m)->speculative);
}

}  // namespace
}  // namespace cairn::rpc
