// The Serving gRPC service in one process: over the FakeBackend for every
// input check, error code, cancel and deadline, over a FakeServableRuntime
// beside it for servables (tensors, per-instance errors, versions, streamed
// text and final replies, cancels), and over a LocalBackend (stories260K when
// ../shared exists, else the demo model) for real text.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/fake_backend.h"
#include "api/fake_servable_runtime.h"
#include "api/grpc_serving_service.h"
#include "cairn/v1/serving.grpc.pb.h"
#include "modelgen/demo_model.h"
#include "serving/local_backend.h"
#include "test_util.h"

namespace cairn::api {
namespace {

namespace v1 = cairn::v1;
using test::FakeBackend;
using Clock = std::chrono::system_clock;

// The service on a port-0 server of its own, and a stub to it.
class ServingServer {
 public:
  explicit ServingServer(serving::Backend& backend, servable::ServableRuntime* servables = nullptr)
      : service_(make_serving_service(backend, servables)) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    stub_ = v1::Serving::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                     grpc::InsecureChannelCredentials()));
  }
  ~ServingServer() {
    // Calls still running are cancelled after a short grace; the service's
    // reactors must all finish for Shutdown to return.
    server_->Shutdown(Clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  int port() const { return port_; }
  v1::Serving::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<v1::Serving::Stub> stub_;
};

void deadline(grpc::ClientContext& ctx, int seconds = 30) {
  ctx.set_deadline(Clock::now() + std::chrono::seconds(seconds));
}

v1::Value str(const std::string& s) {
  v1::Value v;
  v.set_string_value(s);
  return v;
}
v1::Value num(int64_t i) {
  v1::Value v;
  v.set_int_value(i);
  return v;
}
v1::Value dbl(double d) {
  v1::Value v;
  v.set_double_value(d);
  return v;
}
v1::Value boolean(bool b) {
  v1::Value v;
  v.set_bool_value(b);
  return v;
}

using Items = std::vector<std::pair<std::string, v1::Value>>;

v1::PredictRequest request(const std::string& servable, const std::string& method,
                           const std::vector<Items>& instances) {
  v1::PredictRequest req;
  req.mutable_servable_spec()->set_name(servable);
  req.mutable_servable_spec()->set_method_name(method);
  for (const auto& items : instances) {
    auto* m = req.add_instances()->mutable_items();
    for (const auto& [k, v] : items) (*m)[k] = v;
  }
  return req;
}

std::string out_str(const v1::Instance& inst, const std::string& name) {
  auto it = inst.items().find(name);
  return it == inst.items().end() ? "<missing>" : it->second.string_value();
}
int64_t out_int(const v1::Instance& inst, const std::string& name) {
  auto it = inst.items().find(name);
  return it == inst.items().end() ? -1 : it->second.int_value();
}

class GrpcServingFake : public ::testing::Test {
 protected:
  v1::PredictReply predict(const v1::PredictRequest& req) {
    grpc::ClientContext ctx;
    deadline(ctx);
    v1::PredictReply reply;
    grpc::Status st = server_.stub().Predict(&ctx, req, &reply);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return reply;
  }
  // The single error a one-instance (or whole-request) failure gives.
  std::pair<int, std::string> error_of(const v1::PredictRequest& req) {
    v1::PredictReply reply = predict(req);
    if (reply.error_msg_size() != 1)
      return {0, "expected one error, got " + std::to_string(reply.error_msg_size())};
    return {reply.error_msg(0).error_code(), reply.error_msg(0).error_msg()};
  }

  FakeBackend backend_;
  ServingServer server_{backend_};
};

TEST_F(GrpcServingFake, ListServablesNamesTheModelWithBothMethods) {
  grpc::ClientContext ctx;
  deadline(ctx);
  v1::ListServablesReply reply;
  ASSERT_TRUE(server_.stub().ListServables(&ctx, {}, &reply).ok());
  ASSERT_EQ(reply.servables_size(), 1);
  EXPECT_EQ(reply.servables(0).name(), "fake");
  EXPECT_EQ(reply.servables(0).n_ctx(), 128);
  ASSERT_EQ(reply.servables(0).methods_size(), 2);
  EXPECT_EQ(reply.servables(0).methods(0), "generate");
  EXPECT_EQ(reply.servables(0).methods(1), "chat");
}

TEST_F(GrpcServingFake, GenerateMapsEveryInputAndReturnsTextAndUsage) {
  auto reply = predict(request("fake", "generate",
                               {{{"prompt", str("Once")},
                                 {"max_tokens", num(7)},
                                 {"temperature", dbl(0.5)},
                                 {"top_p", dbl(0.9)},
                                 {"top_k", num(5)},
                                 {"min_p", dbl(0.1)},
                                 {"seed", num(42)},
                                 {"stop", str("[\"a\", \"b\"]")},
                                 {"ignore_eos", boolean(true)},
                                 {"speculative", boolean(false)},
                                 {"presence_penalty", dbl(0.25)},
                                 {"frequency_penalty", num(1)}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  ASSERT_EQ(reply.instances_size(), 1);
  EXPECT_EQ(out_str(reply.instances(0), "text"), "Hello world");
  EXPECT_EQ(out_str(reply.instances(0), "finish_reason"), "length");
  EXPECT_EQ(out_int(reply.instances(0), "prompt_tokens"), 3);
  EXPECT_EQ(out_int(reply.instances(0), "completion_tokens"), 2);
  EXPECT_EQ(reply.servable_spec().name(), "fake");
  EXPECT_EQ(reply.servable_spec().method_name(), "generate");

  auto r = backend_.last_request();
  EXPECT_EQ(std::get<std::string>(r.prompt), "Once");
  EXPECT_EQ(r.model, "fake");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_FALSE(r.speculative);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 1.0f);
}

TEST_F(GrpcServingFake, EmptyServableNameMeansTheOnlyModelAndStopMayBeAPlainString) {
  auto reply =
      predict(request("", "generate", {{{"prompt", str("x")}, {"stop", str("[not json")}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  EXPECT_EQ(reply.servable_spec().name(), "fake");
  auto r = backend_.last_request();
  EXPECT_EQ(r.stop, std::vector<std::string>{"[not json"});
  EXPECT_EQ(r.max_tokens, 16);  // generate's default
}

TEST_F(GrpcServingFake, ChatParsesMessages) {
  auto reply = predict(request(
      "fake", "chat",
      {{{"messages",
         str(R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])")}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  EXPECT_EQ(reply.servable_spec().method_name(), "chat");
  auto r = backend_.last_request();
  auto* msgs = std::get_if<std::vector<serving::ChatMessage>>(&r.prompt);
  ASSERT_NE(msgs, nullptr);
  ASSERT_EQ(msgs->size(), 2u);
  EXPECT_EQ((*msgs)[1].role, "user");
  EXPECT_EQ((*msgs)[1].content, "hi");
}

// Structured outputs and template variables travel as the OpenAI body
// holds them: JSON text for objects and lists, plain text for the rest.
TEST_F(GrpcServingFake, StructuredOutputInputs) {
  auto reply = predict(request(
      "fake", "chat",
      {{{"messages", str(R"([{"role":"user","content":"hi"}])")},
        {"response_format", str(R"({"type":"json_schema","json_schema":{"name":"n","schema":
            {"type":"object","properties":{"zz":{"type":"integer"},"aa":{"type":"integer"}},"required":["zz","aa"]}}})")},
        {"chat_template_kwargs", str(R"({"enable_thinking":false})")}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  auto r = backend_.last_request();
  EXPECT_LT(r.grammar.find("zz"), r.grammar.find("aa"));
  EXPECT_EQ(r.chat_template_kwargs_json, R"({"enable_thinking":false})");
  predict(request("fake", "generate", {{{"prompt", str("x")}, {"guided_regex", str("[0-9]+")}}}));
  EXPECT_FALSE(backend_.last_request().grammar.empty());
  auto bad = predict(request("fake", "generate", {{{"prompt", str("x")}, {"response_format", str("{nope")}}}));
  ASSERT_EQ(bad.error_msg_size(), 1);
  EXPECT_NE(bad.error_msg(0).error_msg().find("response_format"), std::string::npos);
}

TEST_F(GrpcServingFake, EveryBadInputIsA400NamingTheProblem) {
  struct Case {
    std::string method;
    Items items;
    std::string expect;  // a substring of the error
  };
  const std::vector<Case> cases = {
      {"generate", {{"prompt", str("x")}, {"bogus_input", num(1)}}, "bogus_input"},
      {"generate", {{"prompt", str("x")}, {"messages", str("[]")}}, "'messages'"},
      {"chat", {{"messages", str("[]")}, {"prompt", str("x")}}, "'prompt'"},
      {"generate", {{"max_tokens", num(4)}}, "'prompt' is required"},
      {"chat", {}, "'messages' is required"},
      {"generate", {{"prompt", num(5)}}, "'prompt' must be a string"},
      {"generate", {{"prompt", str("")}}, "empty"},
      {"generate", {{"prompt", str("x")}, {"temperature", str("hot")}}, "'temperature'"},
      {"generate", {{"prompt", str("x")}, {"temperature", dbl(3.0)}}, "temperature"},
      {"generate", {{"prompt", str("x")}, {"temperature", boolean(true)}}, "temperature"},
      {"generate", {{"prompt", str("x")}, {"top_p", dbl(1.5)}}, "top_p"},
      {"generate", {{"prompt", str("x")}, {"min_p", dbl(-0.5)}}, "min_p"},
      {"generate", {{"prompt", str("x")}, {"top_k", num(-2)}}, "top_k"},
      {"generate", {{"prompt", str("x")}, {"max_tokens", num(0)}}, "max_tokens"},
      {"generate", {{"prompt", str("x")}, {"max_tokens", dbl(2.5)}}, "max_tokens"},
      {"generate", {{"prompt", str("x")}, {"seed", dbl(0.5)}}, "seed"},
      {"generate", {{"prompt", str("x")}, {"ignore_eos", num(1)}}, "ignore_eos"},
      {"generate", {{"prompt", str("x")}, {"ignore_eos", str("yes")}}, "ignore_eos"},
      {"generate", {{"prompt", str("x")}, {"presence_penalty", dbl(9)}}, "presence_penalty"},
      {"generate", {{"prompt", str("x")}, {"frequency_penalty", dbl(-9)}}, "frequency_penalty"},
      {"generate", {{"prompt", str("x")}, {"stop", num(3)}}, "stop"},
      {"generate", {{"prompt", str("x")}, {"stop", str("[\"\"]")}}, "stop"},
      {"generate",
       {{"prompt", str("x")},
        {"stop",
         str(R"(["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])")}},
       "stop"},
      {"generate", {{"prompt", str("x")}, {"stop", str(R"(["a", 1])")}}, "stop"},
      {"chat", {{"messages", str("{not json")}}, "'messages'"},
      {"chat", {{"messages", str(R"({"role":"user"})")}}, "'messages'"},
      {"chat", {{"messages", str("[]")}}, "messages"},
      {"chat", {{"messages", str(R"([{"role":"wizard","content":"x"}])")}}, "role"},
      {"chat", {{"messages", str(R"([{"content":"x"}])")}}, "role"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.method + " expecting " + c.expect);
    auto [code, msg] = error_of(request("fake", c.method, {c.items}));
    EXPECT_EQ(code, 400) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
  // Values with no kind or of the bytes kind.
  v1::Value bytes;
  bytes.set_bytes_value("\x01\x02");
  auto [code1, msg1] =
      error_of(request("fake", "generate", {{{"prompt", str("x")}, {"seed", bytes}}}));
  EXPECT_EQ(code1, 400);
  EXPECT_NE(msg1.find("bytes"), std::string::npos) << msg1;
  auto [code2, msg2] =
      error_of(request("fake", "generate", {{{"prompt", str("x")}, {"seed", v1::Value()}}}));
  EXPECT_EQ(code2, 400);
  EXPECT_NE(msg2.find("no value"), std::string::npos) << msg2;
  // A huge unknown name is echoed cut short.
  auto [code3, msg3] = error_of(
      request("fake", "generate", {{{"prompt", str("x")}, {std::string(10000, 'n'), num(1)}}}));
  EXPECT_EQ(code3, 400);
  EXPECT_LT(msg3.size(), 1000u);
  EXPECT_EQ(backend_.submitted(), 0u);  // nothing bad reached the backend
}

TEST_F(GrpcServingFake, WholeRequestErrorsCarryOneEntry) {
  auto check = [&](const v1::PredictRequest& req, int code, const std::string& expect) {
    auto reply = predict(req);
    EXPECT_EQ(reply.instances_size(), 0);
    ASSERT_EQ(reply.error_msg_size(), 1);
    EXPECT_EQ(reply.error_msg(0).error_code(), code);
    EXPECT_NE(reply.error_msg(0).error_msg().find(expect), std::string::npos)
        << reply.error_msg(0).error_msg();
  };
  Items ok = {{"prompt", str("x")}};
  check(request("nope", "generate", {ok}), 404, "unknown servable 'nope'");
  check(request("fake", "translate", {ok}), 404, "unknown method 'translate'");
  check(request("fake", "", {ok}), 400, "method");
  auto v2 = request("fake", "generate", {ok});
  v2.mutable_servable_spec()->set_version_number(2);
  check(v2, 404, "version 2");
  check(request("fake", "generate", {}), 400, "no instances");
  check(request("fake", "generate", std::vector<Items>(kMaxServingInstances + 1, ok)), 400,
        "at most 64");
  EXPECT_EQ(backend_.submitted(), 0u);
}

TEST_F(GrpcServingFake, ManyInstancesReplyInOrderWithPerInstanceErrors) {
  auto reply = predict(request(
      "fake", "generate",
      {{{"prompt", str("a")}}, {{"prompt", str("b")}, {"top_p", dbl(7)}}, {{"prompt", str("c")}}}));
  ASSERT_EQ(reply.instances_size(), 3);
  ASSERT_EQ(reply.error_msg_size(), 3);
  EXPECT_EQ(reply.error_msg(0).error_code(), 0);
  EXPECT_EQ(reply.error_msg(1).error_code(), 400);
  EXPECT_NE(reply.error_msg(1).error_msg().find("instance 1"), std::string::npos);
  EXPECT_EQ(reply.error_msg(2).error_code(), 0);
  EXPECT_EQ(out_str(reply.instances(0), "text"), "Hello world");
  EXPECT_EQ(reply.instances(1).items_size(), 0);
  EXPECT_EQ(out_str(reply.instances(2), "text"), "Hello world");
  EXPECT_EQ(backend_.submitted(), 2u);

  auto all = predict(request("fake", "generate",
                             std::vector<Items>(kMaxServingInstances, {{"prompt", str("x")}})));
  EXPECT_EQ(all.error_msg_size(), 0);
  EXPECT_EQ(all.instances_size(), static_cast<int>(kMaxServingInstances));
}

TEST_F(GrpcServingFake, BusyBackendIs503) {
  backend_.set_mode(FakeBackend::Mode::Refuse);
  auto [code, msg] = error_of(request("fake", "generate", {{{"prompt", str("x")}}}));
  EXPECT_EQ(code, 503);
  EXPECT_EQ(msg, "queue full");
}

TEST_F(GrpcServingFake, StreamSendsOneReplyPerEventAndAFinalOnePerInstance) {
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader =
      server_.stub().PredictStream(&ctx, request("fake", "generate",
                                                 {{{"prompt", str("a")}},
                                                  {{"prompt", str("b")}, {"top_k", str("x")}},
                                                  {{"prompt", str("c")}}}));
  std::map<uint32_t, std::string> text;
  std::map<uint32_t, int> finals, errors, replies;
  v1::PredictReply r;
  while (reader->Read(&r)) {
    const uint32_t i = r.instance_index();
    ++replies[i];
    if (r.error_msg_size() > 0) {
      EXPECT_EQ(r.error_msg(0).error_code(), 400);
      ++errors[i];
      continue;
    }
    ASSERT_EQ(r.instances_size(), 1);
    EXPECT_EQ(finals[i], 0) << "a reply after the final one";
    text[i] += out_str(r.instances(0), "text");
    if (r.instances(0).items().count("finish_reason")) {
      ++finals[i];
      EXPECT_EQ(out_str(r.instances(0), "finish_reason"), "length");
      EXPECT_EQ(out_int(r.instances(0), "completion_tokens"), 2);
      EXPECT_EQ(out_int(r.instances(0), "prompt_tokens"), 3);
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text[0], "Hello world");
  EXPECT_EQ(text[2], "Hello world");
  EXPECT_EQ(replies[0], 3);  // two tokens, then the final reply
  EXPECT_EQ(finals[0], 1);
  EXPECT_EQ(finals[2], 1);
  EXPECT_EQ(errors[1], 1);
  EXPECT_EQ(replies[1], 1);
}

TEST_F(GrpcServingFake, StreamWholeRequestErrorIsTheStatus) {
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader =
      server_.stub().PredictStream(&ctx, request("nope", "generate", {{{"prompt", str("x")}}}));
  v1::PredictReply r;
  EXPECT_FALSE(reader->Read(&r));
  auto st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("nope"), std::string::npos);
}

// After text was streamed, a failure is in the instance's last reply and is
// also the call's status: a client reading only the status sees UNAVAILABLE.
TEST_F(GrpcServingFake, StreamFailingAfterTextEndsUnavailable) {
  backend_.set_mode(FakeBackend::Mode::Hold);
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader =
      server_.stub().PredictStream(&ctx, request("fake", "generate", {{{"prompt", str("a")}}}));
  ASSERT_TRUE(backend_.wait_held(1));
  backend_.fail_all_after_a_token();
  v1::PredictReply r;
  std::string text;
  int errors = 0;
  while (reader->Read(&r)) {
    if (r.error_msg_size() > 0) {
      EXPECT_EQ(r.error_msg(0).error_code(), 503);
      ++errors;
    } else if (r.instances_size() == 1) {
      text += out_str(r.instances(0), "text");
    }
  }
  auto st = reader->Finish();
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("worker lost"), std::string::npos);
}

TEST_F(GrpcServingFake, ClientCancelCancelsTheBackendRequests) {
  backend_.set_mode(FakeBackend::Mode::Hold);
  {
    grpc::ClientContext ctx;
    deadline(ctx);
    v1::PredictReply reply;
    grpc::Status st;
    std::thread t([&] {
      st = server_.stub().Predict(
          &ctx, request("fake", "generate", {{{"prompt", str("a")}}, {{"prompt", str("b")}}}),
          &reply);
    });
    ASSERT_TRUE(backend_.wait_held(2));
    ctx.TryCancel();
    t.join();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(backend_.wait_cancelled(2));
  }
  {
    grpc::ClientContext ctx;
    deadline(ctx);
    auto reader =
        server_.stub().PredictStream(&ctx, request("fake", "generate", {{{"prompt", str("c")}}}));
    ASSERT_TRUE(backend_.wait_held(1));
    ctx.TryCancel();
    v1::PredictReply r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(backend_.wait_cancelled(3));
  }
}

TEST_F(GrpcServingFake, PassedDeadlineCancelsTheBackendRequests) {
  backend_.set_mode(FakeBackend::Mode::Hold);
  grpc::ClientContext ctx;
  ctx.set_deadline(Clock::now() + std::chrono::milliseconds(300));
  v1::PredictReply reply;
  auto st =
      server_.stub().Predict(&ctx, request("fake", "generate", {{{"prompt", str("a")}}}), &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(backend_.wait_cancelled(1));

  grpc::ClientContext sctx;
  sctx.set_deadline(Clock::now() + std::chrono::milliseconds(300));
  auto reader =
      server_.stub().PredictStream(&sctx, request("fake", "generate", {{{"prompt", str("b")}}}));
  v1::PredictReply r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(backend_.wait_cancelled(2));
}

TEST_F(GrpcServingFake, ServerShutdownEndsHeldCalls) {
  FakeBackend backend;
  backend.set_mode(FakeBackend::Mode::Hold);
  auto server = std::make_unique<ServingServer>(backend);
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader =
      server->stub().PredictStream(&ctx, request("fake", "generate", {{{"prompt", str("a")}}}));
  ASSERT_TRUE(backend.wait_held(1));
  server.reset();  // must return: the held call is cancelled, not waited for
  EXPECT_TRUE(backend.wait_cancelled(1));
  v1::PredictReply r;
  while (reader->Read(&r)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
}

// ---- Servables (a FakeServableRuntime beside the FakeBackend) ----

v1::Value tensor(const values::Tensor& t) {
  v1::Value v;
  auto* m = v.mutable_tensor_value();
  m->set_dtype(values::dtype_name(t.dtype));
  for (auto d : t.shape) m->add_shape(d);
  m->set_data(t.data);
  return v;
}
v1::Value floats(std::vector<float> data, std::vector<int64_t> shape) {
  return tensor(values::make_tensor(data, std::move(shape)));
}
// An output tensor's floats, or an empty vector when it is not one.
std::vector<float> out_floats(const v1::Instance& inst, const std::string& name,
                              std::vector<int64_t>* shape = nullptr) {
  auto it = inst.items().find(name);
  if (it == inst.items().end() || !it->second.has_tensor_value()) return {};
  const auto& t = it->second.tensor_value();
  if (t.dtype() != "float32" || t.data().size() % 4 != 0) return {};
  if (shape) shape->assign(t.shape().begin(), t.shape().end());
  std::vector<float> out(t.data().size() / 4);
  std::memcpy(out.data(), t.data().data(), t.data().size());
  return out;
}

class GrpcServingServables : public GrpcServingFake {
 protected:
  test::FakeServableRuntime runtime_;
  ServingServer servable_server_{backend_, &runtime_};
  v1::Serving::Stub& stub() { return servable_server_.stub(); }
  v1::PredictReply predict(const v1::PredictRequest& req) {
    grpc::ClientContext ctx;
    deadline(ctx);
    v1::PredictReply reply;
    grpc::Status st = stub().Predict(&ctx, req, &reply);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return reply;
  }
};

TEST_F(GrpcServingServables, ListServablesListsModelsAndServables) {
  grpc::ClientContext ctx;
  deadline(ctx);
  v1::ListServablesReply reply;
  ASSERT_TRUE(stub().ListServables(&ctx, {}, &reply).ok());
  ASSERT_EQ(reply.servables_size(), 2);
  EXPECT_EQ(reply.servables(0).name(), "fake");
  EXPECT_EQ(reply.servables(0).n_ctx(), 128);
  const auto& s = reply.servables(1);
  EXPECT_EQ(s.name(), "calc");
  EXPECT_EQ(s.n_ctx(), 0);
  ASSERT_EQ(s.methods_size(), 4);
  EXPECT_EQ(s.methods(0), "add");
  EXPECT_EQ(s.methods(2), "stream");
  ASSERT_EQ(s.versions_size(), 2);
  EXPECT_EQ(s.versions(0), 1u);
  EXPECT_EQ(s.versions(1), 2u);
}

TEST_F(GrpcServingServables, PredictTakesAndReturnsTensorsAndNamesTheVersion) {
  auto reply = predict(
      request("calc", "add",
              {{{"x1", floats({1, 2, 3, 4}, {2, 2})}, {"x2", floats({10, 20, 30, 40}, {2, 2})}},
               {{"x1", floats({0.5f}, {})}, {"x2", floats({0.25f}, {})}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  EXPECT_EQ(reply.servable_spec().name(), "calc");
  EXPECT_EQ(reply.servable_spec().method_name(), "add");
  EXPECT_EQ(reply.servable_spec().version_number(), 2u);  // 0 asked: the newest
  ASSERT_EQ(reply.instances_size(), 2);
  std::vector<int64_t> shape;
  EXPECT_EQ(out_floats(reply.instances(0), "y", &shape), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(out_floats(reply.instances(1), "y", &shape), std::vector<float>{0.75f});
  EXPECT_TRUE(shape.empty());
  EXPECT_EQ(out_int(reply.instances(0), "version"), 2);
  EXPECT_EQ(runtime_.last_call().version, 0u);
  EXPECT_EQ(runtime_.last_call().instances.size(), 2u);
  EXPECT_FALSE(runtime_.last_call().stream);

  auto v1req = request("calc", "add", {{{"x1", floats({1}, {1})}, {"x2", floats({2}, {1})}}});
  v1req.mutable_servable_spec()->set_version_number(1);
  auto r1 = predict(v1req);
  EXPECT_EQ(r1.error_msg_size(), 0);
  EXPECT_EQ(r1.servable_spec().version_number(), 1u);
  EXPECT_EQ(out_int(r1.instances(0), "version"), 1);
  EXPECT_EQ(runtime_.last_call().version, 1u);
  EXPECT_EQ(backend_.submitted(), 0u);  // nothing went to the model
}

TEST_F(GrpcServingServables, EveryValueKindRoundTrips) {
  std::string raw("\0\x01\xff", 3);
  auto reply =
      predict(request("calc", "echo",
                      {{{"s", str("héllo")},
                        {"i", num(-3)},
                        {"d", dbl(0.5)},
                        {"b", boolean(true)},
                        {"raw",
                         [&] {
                           v1::Value v;
                           v.set_bytes_value(raw);
                           return v;
                         }()},
                        {"t", tensor(values::make_tensor(std::vector<int64_t>{7, -8}, {2}))}}}));
  ASSERT_EQ(reply.error_msg_size(), 0);
  ASSERT_EQ(reply.instances_size(), 1);
  const auto& items = reply.instances(0).items();
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items.at("s").string_value(), "héllo");
  EXPECT_EQ(items.at("i").int_value(), -3);
  EXPECT_EQ(items.at("d").double_value(), 0.5);
  EXPECT_TRUE(items.at("b").bool_value());
  EXPECT_EQ(items.at("raw").kind_case(), v1::Value::kBytesValue);
  EXPECT_EQ(items.at("raw").bytes_value(), raw);
  EXPECT_EQ(items.at("t").tensor_value().dtype(), "int64");
  EXPECT_EQ(items.at("t").tensor_value().data().size(), 16u);
}

TEST_F(GrpcServingServables, BadInstancesFailAloneTheOthersRun) {
  v1::Value bad_dtype = floats({1}, {1});
  bad_dtype.mutable_tensor_value()->set_dtype("float128");
  v1::Value bad_size = floats({1, 2}, {2});
  bad_size.mutable_tensor_value()->add_shape(2);  // [2, 2] with 2 elements
  auto reply = predict(request("calc", "add",
                               {{{"x1", floats({1}, {1})}, {"x2", floats({2}, {1})}},
                                {{"x1", bad_dtype}, {"x2", floats({2}, {1})}},
                                {{"x1", floats({1}, {1})}, {"x2", floats({2, 3}, {2})}},
                                {{"x1", floats({1}, {1})}, {"x2", bad_size}},
                                {{"x1", v1::Value()}, {"x2", floats({2}, {1})}}}));
  ASSERT_EQ(reply.instances_size(), 5);
  ASSERT_EQ(reply.error_msg_size(), 5);
  EXPECT_EQ(reply.error_msg(0).error_code(), 0);
  EXPECT_EQ(out_floats(reply.instances(0), "y"), std::vector<float>{3});
  EXPECT_EQ(reply.error_msg(1).error_code(), 400);
  EXPECT_EQ(reply.error_msg(1).error_msg().rfind("instance 1: input 'x1': unknown tensor dtype", 0),
            0u)
      << reply.error_msg(1).error_msg();
  // The runtime's own refusal of instance 2.
  EXPECT_EQ(reply.error_msg(2).error_code(), 400);
  EXPECT_EQ(reply.error_msg(2).error_msg(), "x1 and x2 must be float32 tensors of one shape");
  EXPECT_EQ(reply.instances(2).items_size(), 0);
  EXPECT_EQ(reply.error_msg(3).error_code(), 400);
  EXPECT_NE(reply.error_msg(3).error_msg().find("instance 3: input 'x2': a float32 tensor of 4 "
                                                "elements needs 16 bytes, got 8"),
            std::string::npos)
      << reply.error_msg(3).error_msg();
  EXPECT_NE(reply.error_msg(4).error_msg().find("instance 4: input 'x1': a value has no kind"),
            std::string::npos)
      << reply.error_msg(4).error_msg();
  // Only the instances that converted reached the runtime.
  EXPECT_EQ(runtime_.last_call().instances.size(), 2u);

  // None converts: no call at all, every instance has its error.
  const size_t calls = runtime_.calls();
  auto none = predict(request("calc", "add", {{{"x1", bad_dtype}}, {{"x2", bad_size}}}));
  ASSERT_EQ(none.error_msg_size(), 2);
  EXPECT_EQ(none.error_msg(0).error_code(), 400);
  EXPECT_EQ(none.error_msg(1).error_code(), 400);
  EXPECT_EQ(runtime_.calls(), calls);
}

TEST_F(GrpcServingServables, WholeCallErrorsCarryOneEntryAndModelsStillWork) {
  auto check = [&](const v1::PredictRequest& req, int code, const std::string& expect) {
    auto reply = predict(req);
    EXPECT_EQ(reply.instances_size(), 0);
    ASSERT_EQ(reply.error_msg_size(), 1);
    EXPECT_EQ(reply.error_msg(0).error_code(), code);
    EXPECT_NE(reply.error_msg(0).error_msg().find(expect), std::string::npos)
        << reply.error_msg(0).error_msg();
    EXPECT_EQ(reply.servable_spec().name(), req.servable_spec().name());
  };
  Items ok = {{"x1", floats({1}, {1})}, {"x2", floats({2}, {1})}};
  check(request("calc", "mul", {ok}), 404, "unknown method 'mul'");
  auto v3 = request("calc", "add", {ok});
  v3.mutable_servable_spec()->set_version_number(3);
  check(v3, 404, "version 3");
  check(request("calc", "add", {}), 400, "no instances");
  check(request("calc", "add", std::vector<Items>(servable::kMaxPredictInstances + 1, ok)), 400,
        "at most 1024");
  // A model's name still goes to the model, unchanged.
  auto reply = predict(request("fake", "generate", {{{"prompt", str("Once")}}}));
  EXPECT_EQ(reply.error_msg_size(), 0);
  EXPECT_EQ(out_str(reply.instances(0), "text"), "Hello world");
  EXPECT_EQ(reply.servable_spec().version_number(), 1u);
  check(request("nope", "add", {ok}), 404, "unknown servable 'nope'");
  // A model refuses tensors with a clear error.
  auto t =
      predict(request("fake", "generate", {{{"prompt", str("x")}, {"seed", floats({1}, {1})}}}));
  ASSERT_EQ(t.error_msg_size(), 1);
  EXPECT_NE(t.error_msg(0).error_msg().find("input 'seed' must not be a tensor"),
            std::string::npos);
}

TEST_F(GrpcServingServables, StreamSendsTextThenOneFinalReplyPerInstance) {
  grpc::ClientContext ctx;
  deadline(ctx);
  v1::Value bad;
  bad.mutable_tensor_value()->set_dtype("nope");
  auto reader = stub().PredictStream(
      &ctx, request("calc", "stream",
                    {{{"prompt", str("p")}}, {{"prompt", bad}}, {{"prompt", str("q")}}}));
  std::map<uint32_t, std::string> text;
  std::map<uint32_t, int> finals;
  std::map<uint32_t, v1::PredictReply> last;
  v1::PredictReply r;
  while (reader->Read(&r)) {
    const uint32_t i = r.instance_index();
    EXPECT_EQ(finals[i], 0) << "a reply after the final one";
    if (r.final()) {
      ++finals[i];
      last[i] = r;
      continue;
    }
    ASSERT_EQ(r.instances_size(), 1);
    ASSERT_EQ(r.error_msg_size(), 0);
    text[i] += out_str(r.instances(0), "text");
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text[0], "p-a-b");
  EXPECT_EQ(text[2], "q-a-b");
  EXPECT_EQ(text.count(1), 0u);
  for (uint32_t i : {0u, 1u, 2u}) EXPECT_EQ(finals[i], 1) << i;
  ASSERT_EQ(last[0].instances_size(), 1);
  EXPECT_EQ(out_str(last[0].instances(0), "text"), "p-a-b");
  EXPECT_EQ(last[0].servable_spec().version_number(), 2u);
  EXPECT_EQ(last[2].error_msg_size(), 0);
  ASSERT_EQ(last[1].error_msg_size(), 1);
  EXPECT_EQ(last[1].instances_size(), 0);
  EXPECT_EQ(last[1].error_msg(0).error_code(), 400);
  EXPECT_NE(last[1].error_msg(0).error_msg().find("instance 1: input 'prompt'"), std::string::npos);
  EXPECT_TRUE(runtime_.last_call().stream);
}

TEST_F(GrpcServingServables, StreamWholeCallErrorIsTheStatus) {
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader = stub().PredictStream(&ctx, request("calc", "mul", {{{"prompt", str("x")}}}));
  v1::PredictReply r;
  EXPECT_FALSE(reader->Read(&r));
  auto st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("unknown method 'mul'"), std::string::npos);
}

TEST_F(GrpcServingServables, ClientCancelAndDeadlineCancelTheRuntimeCall) {
  {
    grpc::ClientContext ctx;
    deadline(ctx);
    v1::PredictReply reply;
    grpc::Status st;
    std::thread t([&] {
      st =
          stub().Predict(&ctx, request("calc", "hold", {{{"a", num(1)}}, {{"a", num(2)}}}), &reply);
    });
    ASSERT_TRUE(runtime_.wait_held(1));
    ctx.TryCancel();
    t.join();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(runtime_.wait_cancelled(1));
  }
  {
    grpc::ClientContext ctx;
    deadline(ctx);
    auto reader = stub().PredictStream(&ctx, request("calc", "hold", {{{"a", num(1)}}}));
    ASSERT_TRUE(runtime_.wait_held(1));
    ctx.TryCancel();
    v1::PredictReply r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(runtime_.wait_cancelled(2));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Clock::now() + std::chrono::milliseconds(300));
    v1::PredictReply reply;
    auto st = stub().Predict(&ctx, request("calc", "hold", {{{"a", num(1)}}}), &reply);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(runtime_.wait_cancelled(3));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Clock::now() + std::chrono::milliseconds(300));
    auto reader = stub().PredictStream(&ctx, request("calc", "hold", {{{"a", num(1)}}}));
    v1::PredictReply r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(runtime_.wait_cancelled(4));
  }
}

TEST_F(GrpcServingServables, ServerShutdownEndsHeldServableCalls) {
  test::FakeServableRuntime runtime;
  auto server = std::make_unique<ServingServer>(backend_, &runtime);
  grpc::ClientContext ctx;
  deadline(ctx);
  auto reader = server->stub().PredictStream(&ctx, request("calc", "hold", {{{"a", num(1)}}}));
  ASSERT_TRUE(runtime.wait_held(1));
  server.reset();  // must return: the held call is cancelled, not waited for
  EXPECT_TRUE(runtime.wait_cancelled(1));
  v1::PredictReply r;
  while (reader->Read(&r)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
}

// Real generation: greedy text through Predict and PredictStream.
class GrpcServingModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    serving::LocalBackendOptions o;
    o.threads = 1;
    if (auto shared = ::cairn::test::shared_dir();
        shared && std::filesystem::exists(*shared / "golden" / "stories260K.json") &&
        std::filesystem::exists(*shared / "models" / "stories260K.gguf")) {
      o.model_path = (*shared / "models" / "stories260K.gguf").string();
      std::ifstream f(*shared / "golden" / "stories260K.json");
      golden_ = new nlohmann::json(nlohmann::json::parse(f));
    } else {
      auto path = modelgen::ensure_demo_model(::cairn::test::temp_dir("grpc-serving"));
      ASSERT_TRUE(path.is_ok()) << path.status().message();
      o.model_path = *path;
      o.n_ctx = 256;
    }
    auto b = serving::LocalBackend::create(o);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = b.value().release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete golden_;
    backend_ = nullptr;
    golden_ = nullptr;
  }
  static serving::LocalBackend* backend_;
  static nlohmann::json* golden_;  // null: the demo model, no golden text
};
serving::LocalBackend* GrpcServingModel::backend_ = nullptr;
nlohmann::json* GrpcServingModel::golden_ = nullptr;

TEST_F(GrpcServingModel, GreedyTextUnaryAndStreamedAgreeWithTheGolden) {
  ASSERT_NE(backend_, nullptr);
  ServingServer server(*backend_);
  std::string prompt = "Once upon a time";
  int n = 24;
  std::string expected;
  if (golden_) {
    prompt = (*golden_)["cases"][0]["prompt"];
    n = (*golden_)["cases"][0]["n_predict"];
    expected = (*golden_)["cases"][0]["text"];
  }
  Items items = {{"prompt", str(prompt)}, {"max_tokens", num(n)}, {"temperature", num(0)}};
  grpc::ClientContext ctx;
  deadline(ctx, 120);
  v1::PredictReply reply;
  ASSERT_TRUE(server.stub()
                  .Predict(&ctx, request(backend_->model_id(), "generate", {items, items}), &reply)
                  .ok());
  ASSERT_EQ(reply.error_msg_size(), 0) << reply.error_msg(0).error_msg();
  ASSERT_EQ(reply.instances_size(), 2);
  const std::string unary = out_str(reply.instances(0), "text");
  EXPECT_EQ(out_str(reply.instances(1), "text"), unary);
  if (golden_) {
    EXPECT_EQ(unary, expected);
    EXPECT_EQ(out_int(reply.instances(0), "completion_tokens"), n);
    EXPECT_EQ(out_int(reply.instances(0), "prompt_tokens"),
              static_cast<int64_t>((*golden_)["cases"][0]["prompt_tokens"].size()));
  }
  EXPECT_FALSE(unary.empty());

  grpc::ClientContext sctx;
  deadline(sctx, 120);
  auto reader = server.stub().PredictStream(&sctx, request("", "generate", {items}));
  std::string streamed;
  int replies = 0;
  v1::PredictReply r;
  while (reader->Read(&r)) {
    ++replies;
    ASSERT_EQ(r.error_msg_size(), 0);
    streamed += out_str(r.instances(0), "text");
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(streamed, unary);
  EXPECT_GT(replies, 2);
}

TEST_F(GrpcServingModel, ChatGeneratesAndAnUnfittablePromptIsA400) {
  ASSERT_NE(backend_, nullptr);
  ServingServer server(*backend_);
  grpc::ClientContext ctx;
  deadline(ctx, 120);
  v1::PredictReply reply;
  std::string huge;
  for (int i = 0; i < 3000; ++i) huge += "once upon a time ";
  auto req = request(
      "", "chat",
      {{{"messages", str(R"([{"role":"user","content":"Hello"}])")},
        {"max_tokens", num(8)},
        {"temperature", num(0)}},
       {{"messages", str(nlohmann::json::array({{{"role", "user"}, {"content", huge}}}).dump())}}});
  ASSERT_TRUE(server.stub().Predict(&ctx, req, &reply).ok());
  ASSERT_EQ(reply.instances_size(), 2);
  ASSERT_EQ(reply.error_msg_size(), 2);
  EXPECT_EQ(reply.error_msg(0).error_code(), 0);
  const std::string reason = out_str(reply.instances(0), "finish_reason");
  EXPECT_TRUE(reason == "length" || reason == "stop") << reason;
  EXPECT_LE(out_int(reply.instances(0), "completion_tokens"), 8);
  EXPECT_GE(out_int(reply.instances(0), "completion_tokens"), 0);
  EXPECT_GT(out_int(reply.instances(0), "prompt_tokens"), 0);
  EXPECT_EQ(reply.error_msg(1).error_code(), 400) << reply.error_msg(1).error_msg();
}

}  // namespace
}  // namespace cairn::api
