// MindSpore Serving's REST shape for servables: JSON <-> values for every
// dtype, the /model/<servable>[/version/<n>]:<method> route (auth, errors,
// limits), and calls over a real HttpServer against a fake ServableRuntime
// (replies, per-instance errors, SSE streaming, cancel on disconnect, drain).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/http_routes.h"
#include "api/http_server.h"
#include "api/servable_json.h"
#include "core/half.h"
#include "fake_backend.h"

namespace cairn::api {
namespace {

using nlohmann::json;
using servable::InstanceResult;
using servable::PredictCall;
using servable::PredictSink;
using values::DType;
using values::Instance;
using values::Tensor;
using values::Value;

// ---------------------------------------------------------------------------
// A ServableRuntime with one servable, "add" (versions 1 and 2), and methods:
//   add_common  y = x1 + x2 (float32 tensors of one shape)
//   echo        returns its inputs
//   fail_odd    odd instances fail
//   stream      streams "Hel", "lo" as output "text" of each instance (from a thread)
//   slow        held until release_all() or cancel()
class FakeRuntime : public servable::ServableRuntime {
 public:
  ~FakeRuntime() override {
    for (auto& t : threads_) t.join();
  }

  bool has_servable(const std::string& name) const override { return name == "add"; }
  std::vector<servable::ServableInfo> servables() const override {
    servable::ServableInfo info;
    info.name = "add";
    info.versions = {1, 2};
    return {info};
  }

  Result<uint64_t> predict(PredictCall call, std::shared_ptr<PredictSink> sink) override {
    if (call.servable != "add")
      return Status::not_found("servable '" + call.servable + "' is not served");
    if (call.version != 0 && call.version != 1 && call.version != 2)
      return Status::not_found("version " + std::to_string(call.version) +
                               " of servable 'add' is not loaded");
    static const char* kMethods[] = {"add_common", "echo", "fail_odd", "stream", "slow"};
    bool known = false;
    for (const char* m : kMethods) known = known || call.method == m;
    if (!known) return Status::not_found("servable 'add' has no method '" + call.method + "'");
    if (call.instances.size() > servable::kMaxPredictInstances)
      return Status::invalid_argument("too many instances");
    const uint64_t version = call.version == 0 ? 2 : call.version;
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t id = ++next_id_;
    calls_.push_back(call);
    if (call.method == "slow") {
      held_[id] = {std::move(sink), std::move(call.instances)};
      cv_.notify_all();
      return id;
    }
    lock.unlock();
    if (call.method == "stream") {
      auto instances = std::move(call.instances);
      std::lock_guard<std::mutex> tl(threads_mu_);
      threads_.emplace_back([sink, version, n = instances.size()] {
        for (size_t i = 0; i < n; ++i) {
          sink->on_text(i, "text", "Hel");
          sink->on_text(i, "text", "lo");
        }
        std::vector<InstanceResult> results;
        for (size_t i = 0; i < n; ++i) results.push_back(Instance{{"text", std::string("Hello")}});
        sink->on_done(version, std::move(results));
      });
      return id;
    }
    std::vector<InstanceResult> results;
    for (size_t i = 0; i < call.instances.size(); ++i) {
      const Instance& in = call.instances[i];
      if (call.method == "echo") {
        results.push_back(in);
      } else if (call.method == "fail_odd") {
        if (i % 2)
          results.push_back(Status::invalid_argument("instance failed on purpose"));
        else
          results.push_back(in);
      } else {
        results.push_back(add(in));
      }
    }
    sink->on_done(version, std::move(results));  // synchronously, on the caller's thread
    return id;
  }

  void cancel(uint64_t id) override {
    Held h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(id);
      if (it == held_.end()) return;
      h = std::move(it->second);
      held_.erase(it);
      cancelled_.push_back(id);
      cv_.notify_all();
    }
    std::vector<InstanceResult> results;
    for (size_t i = 0; i < h.instances.size(); ++i)
      results.push_back(Status::error(StatusCode::Cancelled, "cancelled"));
    h.sink->on_done(2, std::move(results));
  }

  void release_all() {
    std::map<uint64_t, Held> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& [id, h] : held) {
      std::vector<InstanceResult> results(h.instances.begin(), h.instances.end());
      h.sink->on_done(2, std::move(results));
    }
  }
  bool wait_held(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_.size() >= n; });
  }
  bool wait_cancelled(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return cancelled_.size() >= n; });
  }
  size_t cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_.size();
  }
  PredictCall last_call() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.empty() ? PredictCall{} : calls_.back();
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }

 private:
  struct Held {
    std::shared_ptr<PredictSink> sink;
    std::vector<Instance> instances;
  };
  static InstanceResult add(const Instance& in) {
    auto a = in.find("x1"), b = in.find("x2");
    const Tensor* x = a == in.end() ? nullptr : std::get_if<Tensor>(&a->second);
    const Tensor* y = b == in.end() ? nullptr : std::get_if<Tensor>(&b->second);
    if (!x || !y || x->dtype != DType::Float32 || y->dtype != DType::Float32 ||
        x->shape != y->shape)
      return Status::invalid_argument("x1 and x2 must be float32 tensors of one shape");
    std::vector<float> sum(static_cast<size_t>(x->element_count()));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = x->as<float>()[i] + y->as<float>()[i];
    return Instance{{"y", values::make_tensor(sum, x->shape)}};
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 0;
  std::vector<PredictCall> calls_;
  std::map<uint64_t, Held> held_;
  std::vector<uint64_t> cancelled_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------
// JSON -> values

Instance parse_one(const std::string& body) {
  auto r = parse_predict_body(body);
  EXPECT_TRUE(r.is_ok()) << body << ": " << r.status().message();
  if (!r.is_ok() || r->instances.size() != 1) return {};
  return r->instances[0];
}

Status parse_error(const std::string& body, const ServableJsonLimits& limits = {}) {
  auto r = parse_predict_body(body, limits);
  return r.is_ok() ? Status::ok() : r.status();
}

Tensor tensor_of(const Value& v) {
  EXPECT_TRUE(std::holds_alternative<Tensor>(v)) << values::describe(v);
  return std::holds_alternative<Tensor>(v) ? std::get<Tensor>(v) : Tensor{};
}

template <typename T>
std::vector<T> elements(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.element_count()));
  if (!out.empty()) std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

TEST(ServableJson, ScalarsStringsAndBytes) {
  Instance in = parse_one(
      R"({"instances":[{"s":"text","b":{"b64":"aGVsbG8="},"i":-3,"f":2.5,"t":true,"big":9000000000}]})");
  ASSERT_EQ(in.size(), 6u);
  EXPECT_EQ(std::get<std::string>(in["s"]), "text");
  EXPECT_EQ(std::get<values::Bytes>(in["b"]).data, "hello");
  EXPECT_EQ(std::get<int64_t>(in["i"]), -3);
  EXPECT_EQ(std::get<double>(in["f"]), 2.5);
  EXPECT_EQ(std::get<bool>(in["t"]), true);
  EXPECT_EQ(std::get<int64_t>(in["big"]), 9000000000);
  // One object under "instances" is one instance, as MindSpore allows.
  auto one = parse_predict_body(R"({"instances":{"s":"x"},"stream":true})");
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(one->instances.size(), 1u);
  EXPECT_TRUE(one->stream);
  // Several instances keep their order.
  auto many = parse_predict_body(R"({"instances":[{"a":1},{"a":2},{"a":3}]})");
  ASSERT_TRUE(many.is_ok());
  ASSERT_EQ(many->instances.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(many->instances[2]["a"]), 3);
  EXPECT_FALSE(many->stream);
}

TEST(ServableJson, NestedListsBecomeTensors) {
  Instance in = parse_one(R"({"instances":[{
      "i":[[1,2,3],[4,5,6]], "f":[1, 2.5], "b":[[true],[false]], "wide":[1, 3000000000],
      "neg":[-2147483648], "e":[], "e2":[[],[]], "one":["only"], "ob":[{"b64":"AAE="}],
      "deep":[[[[[7]]]]]}]})");
  Tensor i = tensor_of(in["i"]);
  EXPECT_EQ(i.dtype, DType::Int32);
  EXPECT_EQ(i.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(elements<int32_t>(i), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  Tensor f = tensor_of(in["f"]);
  EXPECT_EQ(f.dtype, DType::Float32);  // any float makes the list float32
  EXPECT_EQ(elements<float>(f), (std::vector<float>{1.0f, 2.5f}));
  Tensor b = tensor_of(in["b"]);
  EXPECT_EQ(b.dtype, DType::Bool);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(b.data, std::string("\x01\x00", 2));
  Tensor w = tensor_of(in["wide"]);
  EXPECT_EQ(w.dtype, DType::Int64);  // a value past int32's range widens the list
  EXPECT_EQ(elements<int64_t>(w), (std::vector<int64_t>{1, 3000000000}));
  EXPECT_EQ(tensor_of(in["neg"]).dtype, DType::Int32);
  Tensor e = tensor_of(in["e"]);
  EXPECT_EQ(e.dtype, DType::Float32);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0}));
  EXPECT_EQ(tensor_of(in["e2"]).shape, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(std::get<std::string>(in["one"]), "only");
  EXPECT_EQ(std::get<values::Bytes>(in["ob"]).data, std::string("\x00\x01", 2));
  Tensor d = tensor_of(in["deep"]);
  EXPECT_EQ(d.shape, (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(elements<int32_t>(d), std::vector<int32_t>{7});
}

// Six elements of `dtype` with values 1..6 (true/false alternating for bool).
std::string six_elements(DType dtype) {
  std::string data;
  for (int k = 1; k <= 6; ++k) {
    char buf[8] = {};
    switch (dtype) {
      case DType::Bool:
        buf[0] = k % 2;
        break;
      case DType::Int8:
      case DType::UInt8:
        buf[0] = static_cast<char>(k);
        break;
      case DType::Int16:
      case DType::UInt16: {
        uint16_t v = uint16_t(k);
        std::memcpy(buf, &v, 2);
        break;
      }
      case DType::Int32:
      case DType::UInt32: {
        uint32_t v = uint32_t(k);
        std::memcpy(buf, &v, 4);
        break;
      }
      case DType::Int64:
      case DType::UInt64: {
        uint64_t v = uint64_t(k);
        std::memcpy(buf, &v, 8);
        break;
      }
      case DType::Float16: {
        uint16_t v = f32_to_f16(float(k) / 2);
        std::memcpy(buf, &v, 2);
        break;
      }
      case DType::BFloat16: {
        uint16_t v = f32_to_bf16(float(k) / 2);
        std::memcpy(buf, &v, 2);
        break;
      }
      case DType::Float32: {
        float v = float(k) / 2;
        std::memcpy(buf, &v, 4);
        break;
      }
      case DType::Float64: {
        double v = double(k) / 2;
        std::memcpy(buf, &v, 8);
        break;
      }
    }
    data.append(buf, values::dtype_size(dtype));
  }
  return data;
}

TEST(ServableJson, TypedBase64EveryDtypeBothWays) {
  for (DType t : values::kAllDTypes) {
    SCOPED_TRACE(values::dtype_name(t));
    const std::string data = six_elements(t);
    json body = {
        {"instances",
         {{{"x",
            {{"type", values::dtype_name(t)}, {"shape", {2, 3}}, {"b64", base64_encode(data)}}}}}}};
    Instance in = parse_one(body.dump());
    Tensor x = tensor_of(in["x"]);
    EXPECT_EQ(x.dtype, t);
    EXPECT_EQ(x.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(x.data, data);
    // Out: nested lists of numbers (bools as true/false).
    json j = value_to_json(x);
    ASSERT_TRUE(j.is_array() && j.size() == 2 && j[0].size() == 3) << j.dump();
    for (int k = 1; k <= 6; ++k) {
      const json& e = j[(k - 1) / 3][(k - 1) % 3];
      if (t == DType::Bool) {
        EXPECT_EQ(e, json(k % 2 == 1)) << j.dump();
      } else if (t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
                 t == DType::Float64) {
        EXPECT_TRUE(e.is_number_float()) << j.dump();
        EXPECT_EQ(e.get<double>(), double(k) / 2) << j.dump();
      } else {
        EXPECT_TRUE(e.is_number_integer()) << j.dump();
        EXPECT_EQ(e.get<int64_t>(), k) << j.dump();
      }
    }
  }
}

TEST(ServableJson, TypedBase64AliasesAndScalars) {
  const float f = 1.5f;
  const std::string one(reinterpret_cast<const char*>(&f), 4);
  // MindSpore's names; no shape is a 0-d tensor; "str" and "bytes" are not tensors.
  Instance in = parse_one(json{{"instances",
                                {{{"a", {{"type", "fp32"}, {"b64", base64_encode(one)}}},
                                  {"h", {{"type", "fp16"}, {"shape", {1}}, {"b64", "AD4="}}},
                                  {"d", {{"type", "fp64"}, {"shape", {0}}, {"b64", ""}}},
                                  {"s", {{"type", "str"}, {"b64", base64_encode("héllo")}}},
                                  {"y", {{"type", "bytes"}, {"shape", {1}}, {"b64", "/w=="}}}}}}}
                              .dump());
  Tensor a = tensor_of(in["a"]);
  EXPECT_EQ(a.dtype, DType::Float32);
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(value_to_json(a), json(1.5));  // a 0-d tensor goes back as a scalar
  Tensor h = tensor_of(in["h"]);
  EXPECT_EQ(h.dtype, DType::Float16);
  EXPECT_EQ(value_to_json(h), json::parse("[1.5]"));
  EXPECT_EQ(tensor_of(in["d"]).dtype, DType::Float64);
  EXPECT_EQ(tensor_of(in["d"]).element_count(), 0);
  EXPECT_EQ(std::get<std::string>(in["s"]), "héllo");
  EXPECT_EQ(std::get<values::Bytes>(in["y"]).data, "\xff");
}

TEST(ServableJson, ValuesToJson) {
  EXPECT_EQ(value_to_json(Value(std::string("hi"))), json("hi"));
  EXPECT_EQ(value_to_json(Value(values::Bytes{std::string("\x00\xff", 2)})),
            json({{"b64", "AP8="}}));
  EXPECT_EQ(value_to_json(Value(true)), json(true));
  EXPECT_EQ(value_to_json(Value(int64_t(-7))), json(-7));
  EXPECT_EQ(value_to_json(Value(0.25)), json(0.25));
  EXPECT_TRUE(value_to_json(Value(std::nan(""))).is_null());  // JSON has no NaN
  // float32 prints as its shortest decimal, not as the widened double.
  EXPECT_EQ(dump_json(value_to_json(values::make_tensor(std::vector<float>{0.1f, 3.0f}, {2}))),
            "[0.1,3.0]");
  // float16 and bfloat16 likewise: 0.1 rounds to 0.0999755859375 in float16.
  uint16_t h = f32_to_f16(0.1f), bf = f32_to_bf16(0.1f);
  auto half = Tensor::make(DType::Float16, {}, std::string(reinterpret_cast<char*>(&h), 2));
  auto bhalf = Tensor::make(DType::BFloat16, {1}, std::string(reinterpret_cast<char*>(&bf), 2));
  ASSERT_TRUE(half.is_ok() && bhalf.is_ok());
  EXPECT_EQ(dump_json(value_to_json(*half)), "0.1");
  EXPECT_EQ(dump_json(value_to_json(*bhalf)), "[0.1]");
  const float inf = INFINITY;
  EXPECT_EQ(dump_json(value_to_json(values::make_tensor(std::vector<float>{inf}, {1}))), "[null]");
  // Zero-sized dimensions give empty lists.
  EXPECT_EQ(dump_json(value_to_json(values::make_tensor(std::vector<float>{}, {2, 0}))), "[[],[]]");
  EXPECT_EQ(dump_json(value_to_json(values::make_tensor(std::vector<int32_t>{}, {0, 3}))), "[]");
  // uint8 tensors are numbers, as MindSpore sends them.
  auto u8 = Tensor::make(DType::UInt8, {2}, std::string("\x01\xff", 2));
  ASSERT_TRUE(u8.is_ok());
  EXPECT_EQ(dump_json(value_to_json(*u8)), "[1,255]");
}

TEST(ServableJson, ReplyWithPerInstanceErrors) {
  std::vector<InstanceResult> results;
  results.push_back(Instance{{"y", values::make_tensor(std::vector<int32_t>{1, 2}, {2})},
                             {"s", std::string("ok")}});
  results.push_back(Status::invalid_argument("bad input 'x'"));
  Tensor broken;  // data does not match its shape: a runtime bug, not a crash
  broken.dtype = DType::Float32;
  broken.shape = {4};
  broken.data = "abc";
  results.push_back(Instance{{"z", broken}});
  json j = predict_reply_json(results);
  EXPECT_EQ(j, json::parse(R"({"instances":[{"s":"ok","y":[1,2]},{"error_msg":"bad input 'x'"},
                              {"error_msg":"output 'z' is a malformed tensor"}]})"));
  EXPECT_EQ(servable_error_json(Status::not_found("no such servable")),
            json::parse(R"({"error_msg":"no such servable"})"));
  EXPECT_EQ(stream_text_json(1, "text", "Hel"),
            json::parse(R"({"instance":1,"output":"text","text":"Hel"})"));
}

TEST(ServableJson, BadRequestsAreClearErrors) {
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"inst":[]})", "needs 'instances'"},
      {R"({"instances":3})", "must be a list of objects"},
      {R"({"instances":"x"})", "must be a list of objects"},
      {R"({"instances":[]})", "'instances' is empty"},
      {R"({"instances":[1]})", "instance 0 is not an object"},
      {R"({"instances":[{"a":1},{}]})", "instance 1 has no inputs"},
      {R"({"instances":[{"":1}]})", "an input name is empty"},
      {R"({"instances":[{"a":1}],"stream":"yes"})", "'stream' must be a boolean"},
      {R"({"instances":[{"x":[[1,2],[3]]}]})", "input 'x' is not a rectangular list"},
      {R"({"instances":[{"x":[[1,2],3]}]})", "input 'x' is not a rectangular list"},
      {R"({"instances":[{"x":[1,[2]]}]})", "input 'x' is not a rectangular list"},
      {R"({"instances":[{"x":[[],[1]]}]})", "input 'x' is not a rectangular list"},
      {R"({"instances":[{"x":[true,1]}]})", "mixes booleans and numbers"},
      {R"({"instances":[{"x":["a","b"]}]})", "a list of strings or objects is not supported"},
      {R"({"instances":[{"x":[1,"b"]}]})", "a list of strings or objects is not supported"},
      {R"({"instances":[{"x":[1,null]}]})", "null"},
      {R"({"instances":[{"x":null}]})", "null"},
      {R"({"instances":[{"x":[18446744073709551615]}]})", "outside int64's range"},
      {R"({"instances":[{"x":18446744073709551615}]})", "outside int64's range"},
      {R"({"instances":[{"x":[1e300]}]})", "outside float32's range"},
      {R"({"instances":[{"x":{"type":"int32","shape":[2],"b64":"AAAAAA=="}}]})",
       "the b64 data has 4 bytes, but a int32 tensor of 2 elements needs 8"},
      {R"({"instances":[{"x":{"type":"complex64","b64":""}}]})", "unknown type 'complex64'"},
      {R"({"instances":[{"x":{"type":7,"b64":""}}]})", "'type' must be a string"},
      {R"({"instances":[{"x":{"b64":"@@@@"}}]})", "not valid base64"},
      {R"({"instances":[{"x":{"b64":"AAAAA"}}]})", "not valid base64"},
      {R"({"instances":[{"x":{"b64":7}}]})", "'b64' must be a string"},
      {R"({"instances":[{"x":{"type":"int8"}}]})", "needs a 'b64' string"},
      {R"({"instances":[{"x":{"b64":"","dtype":"int8"}}]})", "unknown key 'dtype'"},
      {R"({"instances":[{"x":{"type":"int8","shape":[-1],"b64":""}}]})", "non-negative integers"},
      {R"({"instances":[{"x":{"type":"int8","shape":[1.5],"b64":""}}]})", "non-negative integers"},
      {R"({"instances":[{"x":{"type":"int8","shape":2,"b64":""}}]})", "non-negative integers"},
      {R"({"instances":[{"x":{"type":"str","shape":[2],"b64":""}}]})", "must describe one"},
      {R"({"instances":[{"x":{"type":"str","b64":"/w=="}}]})", "not valid UTF-8"},
      {R"({"instances":[{"x":[{"type":"int8","b64":"AA=="}]}]})", "must be of type str or bytes"},
      {R"({"instances":[{"x":{"type":"uint8","shape":[4294967296,4294967296],"b64":""}}]})",
       "larger than"},
  };
  for (const auto& [body, want] : cases) {
    Status s = parse_error(body);
    EXPECT_FALSE(s.is_ok()) << body;
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << body;
    EXPECT_NE(s.message().find(want), std::string::npos) << body << " -> " << s.message();
  }
  // The instance at fault is named.
  EXPECT_NE(
      parse_error(R"({"instances":[{"a":1},{"x":[[1],[2,3]]}]})").message().find("instance 1: "),
      std::string::npos);
}

TEST(ServableJson, LimitsAreCheckedBeforeAllocating) {
  // Nesting deeper than a tensor's rank limit.
  std::string deep = std::string(33, '[') + "1" + std::string(33, ']');
  Status s = parse_error(R"({"instances":[{"x":)" + deep + "}]}");
  EXPECT_NE(s.message().find("input 'x' is nested deeper than 32 levels"), std::string::npos)
      << s.message();
  std::string ok = std::string(32, '[') + "1" + std::string(32, ']');
  EXPECT_TRUE(parse_error(R"({"instances":[{"x":)" + ok + "}]}").is_ok());
  // Very deep JSON anywhere is refused without recursing into it.
  std::string very_deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(parse_error(R"({"instances":[{"x":)" + very_deep + "}]}").is_ok());
  // Too many instances.
  std::string many = R"({"instances":[)";
  for (size_t i = 0; i <= servable::kMaxPredictInstances; ++i)
    many += (i ? "," : "") + std::string(R"({"a":1})");
  s = parse_error(many + "]}");
  EXPECT_NE(s.message().find("1025 instances, at most 1024"), std::string::npos) << s.message();
  // Too many elements in one list (a lowered limit).
  ServableJsonLimits small;
  small.max_elements = 5;
  s = parse_error(R"({"instances":[{"x":[[1,2,3],[4,5,6]]}]})", small);
  EXPECT_NE(s.message().find("more than 5 elements"), std::string::npos) << s.message();
  EXPECT_TRUE(parse_error(R"({"instances":[{"x":[[1,2],[4,5]]}]})", small).is_ok());
  small.max_instances = 2;
  EXPECT_FALSE(parse_error(R"({"instances":[{"a":1},{"a":1},{"a":1}]})", small).is_ok());
}

TEST(ServableJson, Base64) {
  const std::string samples[] = {"",     "f",     "fo",     "foo",
                                 "foob", "fooba", "foobar", std::string("\x00\xff\x10\x80", 4)};
  for (const auto& s : samples) {
    auto back = base64_decode(base64_encode(s));
    ASSERT_TRUE(back.is_ok()) << s;
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(*base64_decode("Zm8"), "fo");  // padding may be omitted
  EXPECT_FALSE(base64_decode("Zm8==").is_ok());
  EXPECT_FALSE(base64_decode("Z===").is_ok());
  EXPECT_FALSE(base64_decode("Zm=8").is_ok());
  EXPECT_FALSE(base64_decode("Zm 8").is_ok());
}

TEST(ServableJson, ModelPaths) {
  auto p = parse_model_path("/model/add:add_common");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->servable, "add");
  EXPECT_EQ(p->version, 0u);
  EXPECT_EQ(p->method, "add_common");
  p = parse_model_path("/model/res-net_50.v2/version/12:predict");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->servable, "res-net_50.v2");
  EXPECT_EQ(p->version, 12u);
  EXPECT_EQ(p->method, "predict");
  const std::pair<const char*, const char*> bad[] = {
      {"/model/add", "names no method"},
      {"/model/add:", "method name is empty"},
      {"/model/:m", "servable name is empty"},
      {"/model/add/version/:m", "bad version number ''"},
      {"/model/add/version/x1:m", "bad version number 'x1'"},
      {"/model/add/version/-1:m", "bad version number '-1'"},
      {"/model/add/version/99999999999999999999:m", "bad version number"},
      {"/model/a/b:m", "malformed servable name 'a/b'"},
      {"/model/add:m/x", "malformed method name"},
      {"/other/add:m", "malformed path"},
  };
  for (const auto& [path, want] : bad) {
    auto r = parse_model_path(path);
    ASSERT_FALSE(r.is_ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << path << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find("/model/<servable>[/version/<n>]:<method>"),
              std::string::npos);
  }
}

// ---------------------------------------------------------------------------
// The route, without a network

HttpRequest post_req(const std::string& target, const std::string& body,
                     const std::string& auth = "") {
  HttpRequest r;
  r.method = "POST";
  r.target = target;
  r.body = body;
  r.authorization = auth;
  return r;
}

json error_body(const HttpRoutes::Outcome& o, int status) {
  const auto* r = std::get_if<HttpResponse>(&o);
  EXPECT_TRUE(r) << "expected a response";
  if (!r) return {};
  EXPECT_EQ(r->status, status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.size() == 1 && j["error_msg"].is_string()) << r->body;
  return j;
}

TEST(ServableRoutes, PredictJobWithAndWithoutVersion) {
  test::FakeBackend backend;
  FakeRuntime runtime;
  HttpRoutes routes(backend, {}, &runtime);
  auto o = routes.handle(
      post_req("/model/add:add_common?x=1", R"({"instances":[{"x1":[1.0],"x2":[2.0]}]})"));
  auto* job = std::get_if<PredictJob>(&o);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->route, "/model");
  EXPECT_EQ(job->call.servable, "add");
  EXPECT_EQ(job->call.version, 0u);
  EXPECT_EQ(job->call.method, "add_common");
  ASSERT_EQ(job->call.instances.size(), 1u);
  EXPECT_FALSE(job->call.stream);
  o = routes.handle(
      post_req("/model/add/version/2:echo", R"({"instances":{"s":"x"},"stream":true})"));
  job = std::get_if<PredictJob>(&o);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->call.version, 2u);
  EXPECT_EQ(job->call.method, "echo");
  EXPECT_TRUE(job->call.stream);
  EXPECT_EQ(HttpRoutes::route_name("/model/add/version/2:echo"), "/model");
  EXPECT_EQ(HttpRoutes::route_name("/modelx/add:echo"), "other");
  EXPECT_EQ(HttpRoutes::route_name("/v1/models"), "/v1/models");
}

TEST(ServableRoutes, ErrorsAreErrorMsgBodies) {
  test::FakeBackend backend;
  FakeRuntime runtime;
  HttpRoutesOptions opt;
  opt.api_key = "sekret";
  HttpRoutes routes(backend, opt, &runtime);
  const std::string key = "Bearer sekret";
  const std::string ok_body = R"({"instances":[{"a":1}]})";
  auto e = error_body(routes.handle(post_req("/model/add:echo", ok_body)), 401);
  EXPECT_EQ(e["error_msg"], "missing or invalid API key");
  EXPECT_TRUE(
      std::holds_alternative<PredictJob>(routes.handle(post_req("/model/add:echo", ok_body, key))));
  e = error_body(routes.handle(post_req("/model/nope:echo", ok_body, key)), 404);
  EXPECT_EQ(e["error_msg"], "servable 'nope' is not served");
  e = error_body(routes.handle(post_req("/model/add/version/v2:echo", ok_body, key)), 400);
  EXPECT_NE(e["error_msg"].get<std::string>().find("bad version number 'v2'"), std::string::npos);
  e = error_body(routes.handle(post_req("/model/add", ok_body, key)), 400);
  EXPECT_NE(e["error_msg"].get<std::string>().find("names no method"), std::string::npos);
  e = error_body(routes.handle(post_req("/model", ok_body, key)), 400);
  e = error_body(
      routes.handle(post_req("/model/add:echo", R"({"instances":[{"x":[[1],[2,3]]}]})", key)), 400);
  EXPECT_EQ(e["error_msg"], "instance 0: input 'x' is not a rectangular list");
  HttpRequest get = post_req("/model/add:echo", "", key);
  get.method = "GET";
  auto o = routes.handle(get);
  error_body(o, 405);
  EXPECT_EQ(std::get<HttpResponse>(o).headers.back(),
            (std::pair<std::string, std::string>{"Allow", "POST"}));
  // The OpenAI routes keep their own error shape.
  auto openai = routes.handle(post_req("/v1/completions", "{", key));
  EXPECT_TRUE(json::parse(std::get<HttpResponse>(openai).body).contains("error"));
  routes.set_draining();
  o = routes.handle(post_req("/model/add:echo", ok_body, key));
  error_body(o, 503);
  bool retry = false;
  for (const auto& [k, v] : std::get<HttpResponse>(o).headers) retry = retry || k == "Retry-After";
  EXPECT_TRUE(retry);
  EXPECT_EQ(runtime.calls(), 0u) << "routes never call the runtime themselves";
}

TEST(ServableRoutes, HealthListsServablesAndCorsPreflightWorks) {
  test::FakeBackend backend;
  FakeRuntime runtime;
  HttpRoutesOptions opt;
  opt.cors_origin = "*";
  HttpRoutes routes(backend, opt, &runtime);
  HttpRequest health;
  health.method = "GET";
  health.target = "/health";
  auto o = routes.handle(health);
  ASSERT_EQ(std::get<HttpResponse>(o).status, 200);
  EXPECT_EQ(json::parse(std::get<HttpResponse>(o).body)["servables"],
            json::parse(R"([{"name":"add","versions":[1,2]}])"));
  HttpRequest pre;
  pre.method = "OPTIONS";
  pre.target = "/model/add:echo";
  pre.origin = "https://a.example";
  o = routes.handle(pre);
  const auto& r = std::get<HttpResponse>(o);
  EXPECT_EQ(r.status, 204);
  bool allow = false;
  for (const auto& [k, v] : r.headers)
    allow = allow || (k == "Access-Control-Allow-Origin" && v == "*");
  EXPECT_TRUE(allow);
}

TEST(ServableRoutes, NoRuntimeMeansNoServables) {
  test::FakeBackend backend;
  HttpRoutes routes(backend, {});
  auto e =
      error_body(routes.handle(post_req("/model/add:echo", R"({"instances":[{"a":1}]})")), 404);
  EXPECT_EQ(e["error_msg"], "no servables are served");
}

// ---------------------------------------------------------------------------
// Over a real server

class Socket {
 public:
  explicit Socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  bool ok() const { return ok_; }
  void send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // One complete response (Content-Length or chunked), or what came before the timeout.
  std::string response(int timeout_ms = 10000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (length(buf_) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            until - std::chrono::steady_clock::now())
                            .count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char tmp[65536];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) break;
      buf_.append(tmp, static_cast<size_t>(n));
    }
    size_t len = length(buf_);
    if (len == std::string::npos) len = buf_.size();
    std::string r = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }

 private:
  static size_t length(const std::string& b) {
    size_t h = b.find("\r\n\r\n");
    if (h == std::string::npos) return std::string::npos;
    std::string head = b.substr(0, h);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto cl = head.find("content-length: ");
    if (cl != std::string::npos) {
      size_t n = std::stoul(head.substr(cl + 16));
      return b.size() >= h + 4 + n ? h + 4 + n : std::string::npos;
    }
    auto end = b.find("\r\n0\r\n\r\n", h);
    return end == std::string::npos ? std::string::npos : end + 7;
  }
  int fd_ = -1;
  bool ok_ = false;
  std::string buf_;
};

int status_of(const std::string& r) { return r.size() > 12 ? std::atoi(r.c_str() + 9) : 0; }
std::string body_of(const std::string& r) {
  auto h = r.find("\r\n\r\n");
  return h == std::string::npos ? "" : r.substr(h + 4);
}
std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
// The data lines of a chunked SSE body, chunk framing removed.
std::vector<std::string> sse_events(const std::string& response) {
  std::string body = body_of(response), plain;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    plain += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  std::vector<std::string> events;
  for (size_t p = 0; (p = plain.find("data: ", p)) != std::string::npos;) {
    size_t end = plain.find("\n\n", p);
    events.push_back(plain.substr(p + 6, end - p - 6));
    p = end;
  }
  return events;
}

class ServableServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    o.port = 0;
    o.threads = 2;
    auto s = HttpServer::start(backend, std::move(o), &runtime);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    server = std::move(s.value());
  }
  std::string exchange(const std::string& request) {
    Socket s(server->port());
    EXPECT_TRUE(s.ok());
    s.send(request);
    return s.response();
  }
  bool wait_idle() {
    for (int i = 0; i < 250 && server->active_requests() != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return server->active_requests() == 0;
  }
  // Declared before the server, so destroyed after it.
  test::FakeBackend backend;
  FakeRuntime runtime;
  std::unique_ptr<HttpServer> server;
};

TEST_F(ServableServerTest, AddCommonReplies) {
  start();
  auto r = exchange(post("/model/add:add_common",
                         R"({"instances":[{"x1":[[1.0,2.0],[3.0,4.0]],"x2":[[1.0,2.0],[3.0,4.0]]},
                                          {"x1":[[1.0]],"x2":[[0.5]]}]})"));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r)),
            json::parse(R"({"instances":[{"y":[[2.0,4.0],[6.0,8.0]]},{"y":[[1.5]]}]})"));
  // Typed b64 in, the same values out; a version in the path reaches the runtime.
  const std::vector<float> x = {0.5f, 1.5f};
  const std::string b64 = base64_encode(std::string(reinterpret_cast<const char*>(x.data()), 8));
  r = exchange(post(
      "/model/add/version/1:add_common",
      R"({"instances":{"x1":{"type":"float32","shape":[2],"b64":")" + b64 + R"("},"x2":[1,1]}})"));
  // [1,1] is an int32 list: the runtime refuses that instance, the request succeeds.
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(
      json::parse(body_of(r)),
      json::parse(
          R"({"instances":[{"error_msg":"x1 and x2 must be float32 tensors of one shape"}]})"));
  EXPECT_EQ(runtime.last_call().version, 1u);
  EXPECT_NE(r.find("X-Servable-Version: 1\r\n"), std::string::npos) << r;
  r = exchange(post("/model/add/version/1:add_common",
                    R"({"instances":{"x1":{"type":"float32","shape":[2],"b64":")" + b64 +
                        R"("},"x2":[1.0,1.0]}})"));
  EXPECT_EQ(json::parse(body_of(r)), json::parse(R"({"instances":[{"y":[1.5,2.5]}]})")) << r;
}

TEST_F(ServableServerTest, EchoKeepsEveryKindOfValue) {
  start();
  const std::string body =
      R"({"instances":[{"s":"héllo","b":{"b64":"AP8="},"i":7,"f":0.5,"t":false,
          "u8":{"type":"uint8","shape":[3],"b64":"AQID"},"h":{"type":"float16","shape":[1],"b64":"AD4="},
          "l":[[true,false]],"z":{"type":"int64","b64":"KgAAAAAAAAA="}}]})";
  auto r = exchange(post("/model/add:echo", body));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r)),
            json::parse(R"({"instances":[{"s":"héllo","b":{"b64":"AP8="},"i":7,"f":0.5,"t":false,
                "u8":[1,2,3],"h":[1.5],"l":[[true,false]],"z":42}]})"));
}

TEST_F(ServableServerTest, PerInstanceErrorsAndWholeRequestErrors) {
  start();
  auto r = exchange(post("/model/add:fail_odd", R"({"instances":[{"a":1},{"a":2},{"a":3}]})"));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(
      json::parse(body_of(r)),
      json::parse(R"({"instances":[{"a":1},{"error_msg":"instance failed on purpose"},{"a":3}]})"));
  // The runtime's NotFound for a version or method it does not have.
  r = exchange(post("/model/add/version/3:echo", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(r), 404) << r;
  EXPECT_EQ(json::parse(body_of(r)),
            json::parse(R"({"error_msg":"version 3 of servable 'add' is not loaded"})"));
  r = exchange(post("/model/add:nope", R"({"instances":[{"a":1}],"stream":true})"));
  EXPECT_EQ(status_of(r), 404) << r;  // an ordinary JSON error, not a stream
  EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos);
  EXPECT_EQ(json::parse(body_of(r))["error_msg"], "servable 'add' has no method 'nope'");
  r = exchange(post("/model/nope:echo", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(r), 404) << r;
  r = exchange(post("/model/add:echo", R"({"instances":[{"x":[1,[2]]}]})"));
  EXPECT_EQ(status_of(r), 400) << r;
  EXPECT_EQ(json::parse(body_of(r)),
            json::parse(R"({"error_msg":"instance 0: input 'x' is not a rectangular list"})"));
  // A body over the limit is refused in the route's shape too.
  ServerOptions small;
  small.max_body_bytes = 64;
  server.reset();
  start(small);
  r = exchange(
      post("/model/add:echo", R"({"instances":[{"a":")" + std::string(100, 'x') + R"("}]})"));
  EXPECT_EQ(status_of(r), 413) << r;
  EXPECT_TRUE(json::parse(body_of(r)).contains("error_msg")) << r;
}

TEST_F(ServableServerTest, ApiKeyAndMetrics) {
  ServerOptions o;
  o.routes.api_key = "k1";
  start(o);
  auto r = exchange(post("/model/add:echo", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(r), 401) << r;
  EXPECT_EQ(json::parse(body_of(r))["error_msg"], "missing or invalid API key");
  r = exchange(
      post("/model/add:echo", R"({"instances":[{"a":1}]})", "Authorization: Bearer k1\r\n"));
  EXPECT_EQ(status_of(r), 200) << r;
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    metrics = exchange("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n");
    if (metrics.find("route=\"/model\",status=\"200\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(metrics.find("cairn_http_requests_total{route=\"/model\",status=\"200\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("cairn_http_requests_total{route=\"/model\",status=\"401\"} 1"),
            std::string::npos)
      << metrics;
}

TEST_F(ServableServerTest, StreamingIsSse) {
  start();
  auto r =
      exchange(post("/model/add:stream", R"({"instances":[{"p":"a"},{"p":"b"}],"stream":true})"));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Content-Type: text/event-stream"), std::string::npos);
  auto events = sse_events(r);
  ASSERT_EQ(events.size(), 6u) << r;
  std::map<int, std::string> text;
  for (size_t i = 0; i < 4; ++i) {
    json e = json::parse(events[i]);
    EXPECT_EQ(e["output"], "text");
    text[e["instance"].get<int>()] += e["text"].get<std::string>();
  }
  EXPECT_EQ(text[0], "Hello");
  EXPECT_EQ(text[1], "Hello");
  EXPECT_EQ(json::parse(events[4]),
            json::parse(R"({"instances":[{"text":"Hello"},{"text":"Hello"}]})"));
  EXPECT_EQ(events[5], "[DONE]");
  EXPECT_TRUE(runtime.last_call().stream);
  // The same method unstreamed: only the final reply.
  r = exchange(post("/model/add:stream", R"({"instances":[{"p":"a"}]})"));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r)), json::parse(R"({"instances":[{"text":"Hello"}]})"));
}

TEST_F(ServableServerTest, KeepAliveAcrossCalls) {
  start();
  Socket s(server->port());
  for (int i = 0; i < 3; ++i) {
    s.send(post("/model/add:echo", R"({"instances":[{"a":)" + std::to_string(i) + "}]}"));
    auto r = s.response();
    ASSERT_EQ(status_of(r), 200) << r;
    EXPECT_EQ(json::parse(body_of(r))["instances"][0]["a"], i);
  }
  s.send(post("/model/add:stream", R"({"instances":[{"p":"a"}],"stream":true})"));
  EXPECT_EQ(sse_events(s.response()).back(), "[DONE]");
  s.send(post("/v1/completions", R"({"prompt":"hi"})"));
  EXPECT_EQ(status_of(s.response()), 200);
}

TEST_F(ServableServerTest, DisconnectCancelsTheCall) {
  start();
  {
    Socket s(server->port());
    s.send(post("/model/add:slow", R"({"instances":[{"a":1}]})"));
    ASSERT_TRUE(runtime.wait_held(1));
  }
  EXPECT_TRUE(runtime.wait_cancelled(1)) << "client went away, no cancel";
  {
    Socket s(server->port());
    s.send(post("/model/add:slow", R"({"instances":[{"a":1}],"stream":true})"));
    ASSERT_TRUE(runtime.wait_held(1));
  }
  EXPECT_TRUE(runtime.wait_cancelled(2)) << "streaming client went away, no cancel";
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServableServerTest, SlowCallTimesOut) {
  ServerOptions o;
  o.request_timeout_s = 0.3;
  start(o);
  auto r = exchange(post("/model/add:slow", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(r), 504) << r;
  EXPECT_EQ(json::parse(body_of(r))["error_msg"], "the request did not finish in time");
  EXPECT_TRUE(runtime.wait_cancelled(1));
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServableServerTest, DrainWaitsForRunningCalls) {
  ServerOptions o;
  o.drain_seconds = 20;
  start(o);
  Socket slow(server->port());
  slow.send(post("/model/add:slow", R"({"instances":[{"a":5}]})"));
  ASSERT_TRUE(runtime.wait_held(1));
  EXPECT_EQ(server->active_requests(), 1);
  server->drain();
  auto refused = exchange(post("/model/add:echo", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(refused), 503) << refused;
  EXPECT_TRUE(json::parse(body_of(refused)).contains("error_msg"));
  runtime.release_all();
  auto r = slow.response();
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(json::parse(body_of(r)), json::parse(R"({"instances":[{"a":5}]})"));
  auto t0 = std::chrono::steady_clock::now();
  server->wait();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(runtime.cancelled(), 0u);
}

TEST_F(ServableServerTest, ShutdownCancelsRunningCalls) {
  ServerOptions o;
  o.drain_seconds = 0.3;
  start(o);
  Socket slow(server->port());
  slow.send(post("/model/add:slow", R"({"instances":[{"a":5}]})"));
  ASSERT_TRUE(runtime.wait_held(1));
  server->drain();
  server->wait();
  server.reset();  // a connection cut at the deadline cancels its call; the late on_done is dropped
  EXPECT_EQ(runtime.cancelled(), 1u);
}

TEST_F(ServableServerTest, WithoutARuntime) {
  ServerOptions o;
  o.port = 0;
  auto s = HttpServer::start(backend, o);
  ASSERT_TRUE(s.is_ok());
  server = std::move(s.value());
  auto r = exchange(post("/model/add:echo", R"({"instances":[{"a":1}]})"));
  EXPECT_EQ(status_of(r), 404) << r;
  EXPECT_EQ(json::parse(body_of(r))["error_msg"], "no servables are served");
}

}  // namespace
}  // namespace cairn::api
