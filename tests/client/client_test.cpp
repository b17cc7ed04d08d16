// cairn::Client against the Serving service in this process: FakeBackend for
// shapes, errors and deadlines; a LocalBackend (stories260K when ../shared
// exists, else the demo model) for the golden greedy text.
#include "client/client.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "api/fake_backend.h"
#include "api/fake_servable_runtime.h"
#include "api/grpc_serving_service.h"
#include "api/openai_response.h"
#include "modelgen/demo_model.h"
#include "serving/local_backend.h"
#include "test_util.h"

namespace cairn {
namespace {

using api::test::FakeBackend;
using namespace std::chrono_literals;

class ServingServer {
 public:
  explicit ServingServer(serving::Backend& backend, servable::ServableRuntime* servables = nullptr)
      : service_(api::make_serving_service(backend, servables)) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
  }
  ~ServingServer() {
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A loopback port nobody listens on (bound, then closed again).
int unused_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A failure's HTTP-like code, as `cairn client` shows it.
int code(const Status& s) { return api::to_http_error(s).status; }

template <typename T>
const T& ok_value(const ClientResult<T>& r) {
  static const T empty{};
  if (!r.is_ok()) {
    ADD_FAILURE() << "error " << code(r.status()) << ": " << r.status().message();
    return empty;
  }
  return *r;
}

class ClientFake : public ::testing::Test {
 protected:
  FakeBackend backend_;
  ServingServer server_{backend_};
};

TEST_F(ClientFake, InferReturnsOutputsInOrderWithPerInstanceErrors) {
  Client client(server_.address(), "fake", "generate");
  auto r = client.infer({{{"prompt", "a"}, {"max_tokens", 5}, {"temperature", 0.0}},
                         {{"prompt", "b"}, {"ignore_eos", "not a bool"}},
                         {{"prompt", "c"}, {"ignore_eos", true}}});
  const auto& out = ok_value(r);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].ok());
  EXPECT_EQ(out[0].text(), "Hello world");
  EXPECT_EQ(out[0].values.at("finish_reason").as_string(), "length");
  EXPECT_EQ(out[0].values.at("prompt_tokens").as_int(), 3);
  EXPECT_EQ(out[0].values.at("completion_tokens").as_int(), 2);
  ASSERT_FALSE(out[1].ok());
  EXPECT_EQ(code(*out[1].error), 400);
  EXPECT_NE(out[1].error->message().find("ignore_eos"), std::string::npos);
  EXPECT_TRUE(out[2].ok());
  EXPECT_TRUE(backend_.last_request().ignore_eos);
  EXPECT_EQ(backend_.submitted(), 2u);
}

TEST_F(ClientFake, WholeRequestErrorsAreTheResult) {
  auto bad_servable = Client(server_.address(), "nope", "generate").infer({{{"prompt", "x"}}});
  ASSERT_FALSE(bad_servable.is_ok());
  EXPECT_EQ(code(bad_servable.status()), 404);
  EXPECT_NE(bad_servable.status().message().find("nope"), std::string::npos);

  auto bad_method = Client(server_.address(), "fake", "embed").infer_stream({{{"prompt", "x"}}});
  ASSERT_FALSE(bad_method.is_ok());
  EXPECT_EQ(code(bad_method.status()), 404);
  EXPECT_NE(bad_method.status().message().find("embed"), std::string::npos);

  auto none = Client(server_.address(), "fake", "generate").infer({});
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(code(none.status()), 400);
}

TEST_F(ClientFake, StreamDeliversEventsAsTheyComeAndAssemblesOutputs) {
  Client client(server_.address(), "", "chat");
  std::vector<StreamEvent> events;
  auto r = client.infer_stream(
      {{{"messages", R"([{"role":"user","content":"hi"}])"}}, {{"messages", "[]"}}},
      [&](const StreamEvent& ev) { events.push_back(ev); });
  const auto& out = ok_value(r);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text(), "Hello world");
  EXPECT_EQ(out[0].values.at("completion_tokens").as_int(), 2);
  ASSERT_FALSE(out[1].ok());
  EXPECT_EQ(code(*out[1].error), 400);
  int lasts = 0;
  std::string text0;
  for (const auto& ev : events) {
    lasts += ev.last;
    if (ev.instance == 0) text0 += ev.text;
    if (ev.instance == 0 && ev.last) {
      EXPECT_EQ(ev.finish_reason, "length");
    }
  }
  EXPECT_EQ(lasts, 2);
  EXPECT_EQ(text0, "Hello world");
  EXPECT_EQ(events.size(), 4u);  // two tokens and a final for 0, an error for 1
}

TEST_F(ClientFake, ListServables) {
  auto r = Client(server_.address(), "", "").list_servables();
  const auto& list = ok_value(r);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "fake");
  EXPECT_EQ(list[0].methods, (std::vector<std::string>{"generate", "chat"}));
  EXPECT_EQ(list[0].n_ctx, 128);
}

TEST_F(ClientFake, DeadlineEndsTheCallAndCancelsTheRequest) {
  backend_.set_mode(FakeBackend::Mode::Hold);
  ClientOptions o;
  o.deadline = 300ms;
  Client client(server_.address(), "fake", "generate", o);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client.infer({{{"prompt", "x"}}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(code(r.status()), 504);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(backend_.wait_cancelled(1));

  client.set_deadline(300ms);
  auto s = client.infer_stream({{{"prompt", "y"}}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(code(s.status()), 504);
  EXPECT_TRUE(backend_.wait_cancelled(2));
}

// Servables: tensors and bytes both ways, versions, streamed text.
class ClientServables : public ::testing::Test {
 protected:
  FakeBackend backend_;
  api::test::FakeServableRuntime runtime_;
  ServingServer server_{backend_, &runtime_};
};

TEST_F(ClientServables, TensorsTravelBothWaysWithTheVersion) {
  Client client(server_.address(), "calc", "add");
  auto r = client.infer({{{"x1", values::make_tensor(std::vector<float>{1, 2, 3}, {3})},
                          {"x2", values::make_tensor(std::vector<float>{4, 5, 6}, {3})}},
                         {{"x1", values::make_tensor(std::vector<float>{1}, {1})},
                          {"x2", values::make_tensor(std::vector<int32_t>{1}, {1})}}});
  const auto& out = ok_value(r);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(out[0].version, 2u);
  const values::Tensor* y = out[0].values.at("y").as_tensor();
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(*y, values::make_tensor(std::vector<float>{5, 7, 9}, {3}));
  EXPECT_EQ(out[0].values.at("version").as_int(), 2);
  EXPECT_EQ(out[0].values.at("version").as_tensor(), nullptr);
  ASSERT_FALSE(out[1].ok());
  EXPECT_EQ(code(*out[1].error), 400);

  client.set_version(1);
  auto r1 = client.infer({{{"x1", values::make_tensor(std::vector<float>{1}, {1})},
                           {"x2", values::make_tensor(std::vector<float>{1}, {1})}}});
  EXPECT_EQ(ok_value(r1).at(0).version, 1u);
  EXPECT_EQ(runtime_.last_call().version, 1u);

  ClientOptions o;
  o.version = 3;
  auto missing = Client(server_.address(), "calc", "add", o).infer({{{"x1", 1}}});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(code(missing.status()), 404);
  EXPECT_NE(missing.status().message().find("version 3"), std::string::npos);
}

TEST_F(ClientServables, BytesStayBytesAndEveryKindRoundTrips) {
  Client client(server_.address(), "calc", "echo");
  const values::Bytes raw{std::string("\0\x01\xfe", 3)};
  const values::Tensor t = values::make_tensor(std::vector<int64_t>{1, -2, 3, -4}, {2, 2});
  InferInstance in{{"raw", raw}, {"t", t}, {"s", "str"}, {"i", 5}, {"d", 0.5}, {"b", true}};
  auto r = client.infer({in});
  const auto& out = ok_value(r);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].values, in);
  ASSERT_NE(out[0].values.at("raw").as_bytes(), nullptr);
  EXPECT_EQ(*out[0].values.at("raw").as_bytes(), raw);
  EXPECT_FALSE(out[0].values.at("raw").is_string());
  EXPECT_TRUE(out[0].values.at("t").is_tensor());
}

TEST_F(ClientServables, StreamDeliversTextPerOutputThenTheOutputs) {
  Client client(server_.address(), "calc", "stream");
  std::vector<StreamEvent> events;
  auto r = client.infer_stream({{{"prompt", "p"}}, {{"prompt", 3}}},
                               [&](const StreamEvent& ev) { events.push_back(ev); });
  const auto& out = ok_value(r);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].ok());
  EXPECT_EQ(out[0].text(), "p-a-b");
  EXPECT_EQ(out[0].version, 2u);
  ASSERT_FALSE(out[1].ok());
  EXPECT_EQ(code(*out[1].error), 400);
  std::string text0;
  int lasts = 0;
  for (const auto& ev : events) {
    if (ev.instance == 0 && !ev.last) {
      EXPECT_EQ(ev.output, "text");
      text0 += ev.text;
    }
    lasts += ev.last;
  }
  EXPECT_EQ(text0, "p-a-b");
  EXPECT_EQ(lasts, 2);
  EXPECT_EQ(events.size(), 4u);  // two texts and a final for 0, a final error for 1
}

TEST_F(ClientServables, ListServablesHasVersions) {
  auto r = Client(server_.address(), "", "").list_servables();
  const auto& list = ok_value(r);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].name, "calc");
  EXPECT_EQ(list[1].n_ctx, 0);
  EXPECT_EQ(list[1].versions, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(list[1].methods.at(0), "add");
  EXPECT_TRUE(list[0].versions.empty());
}

TEST(ClientDown, ServerDownIsAClearErrorWithinTheDeadline) {
  const int port = unused_port();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  ClientOptions o;
  o.deadline = 3s;
  Client client(address, "stories260K", "generate", o);
  for (int stream = 0; stream < 2; ++stream) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = stream ? client.infer_stream({{{"prompt", "x"}}}) : client.infer({{{"prompt", "x"}}});
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.is_ok());
    const Status& e = r.status();
    EXPECT_TRUE(code(e) == 503 || code(e) == 504) << code(e) << " " << e.message();
    EXPECT_NE(e.message().find(address), std::string::npos) << e.message();
    EXPECT_LT(took, 4s);
  }
  auto l = client.list_servables();
  ASSERT_FALSE(l.is_ok());
}

TEST(ClientModel, GoldenGreedyCompletionUnaryAndStreaming) {
  serving::LocalBackendOptions o;
  o.threads = 1;
  std::optional<nlohmann::json> golden;
  if (auto shared = test::shared_dir();
      shared && std::filesystem::exists(*shared / "golden" / "stories260K.json") &&
      std::filesystem::exists(*shared / "models" / "stories260K.gguf")) {
    o.model_path = (*shared / "models" / "stories260K.gguf").string();
    std::ifstream f(*shared / "golden" / "stories260K.json");
    golden = nlohmann::json::parse(f);
  } else {
    auto path = modelgen::ensure_demo_model(test::temp_dir("client-model"));
    ASSERT_TRUE(path.is_ok()) << path.status().message();
    o.model_path = *path;
    o.n_ctx = 256;
  }
  auto b = serving::LocalBackend::create(o);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  auto backend = std::move(b.value());
  ServingServer server(*backend);
  Client client(server.address(), backend->model_id(), "generate");
  std::vector<InferInstance> inputs;
  std::vector<std::string> expected;
  if (golden) {
    for (const auto& c : (*golden)["cases"]) {
      inputs.push_back({{"prompt", c["prompt"].get<std::string>()},
                        {"max_tokens", c["n_predict"].get<int>()},
                        {"temperature", 0}});
      expected.push_back(c["text"]);
    }
  } else {
    inputs.push_back({{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}});
  }
  auto unary = client.infer(inputs);
  const auto& u = ok_value(unary);
  ASSERT_EQ(u.size(), inputs.size());
  std::string streamed_live;
  auto stream = client.infer_stream(inputs, [&](const StreamEvent& ev) {
    if (ev.instance == 0) streamed_live += ev.text;
  });
  const auto& s = ok_value(stream);
  ASSERT_EQ(s.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(u[i].ok()) << u[i].error->message();
    ASSERT_TRUE(s[i].ok()) << s[i].error->message();
    EXPECT_EQ(s[i].text(), u[i].text());
    if (golden) {
      EXPECT_EQ(u[i].text(), expected[i]) << "case " << i;
    }
  }
  EXPECT_FALSE(u[0].text().empty());
  EXPECT_EQ(streamed_live, u[0].text());
}

}  // namespace
}  // namespace cairn
