// tests/servable/repository_test.cpp — a servable repository run in process: configs
// loaded by the embedded Python, methods of Python and LLM stages, per-instance
// errors, deadlines, cancellation, version swaps, broken configs.
#include "servable/repository.h"

#include <gtest/gtest.h>

#include <future>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <thread>

#include "modelgen/demo_model.h"
#include "servable/llm_stage.h"
#include "test_util.h"

namespace cairn::servable {
namespace {

namespace fs = std::filesystem;
using values::Tensor;

class WaitSink final : public PredictSink {
 public:
  void on_text(size_t instance, const std::string& output, const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    streamed[instance] += text;
    (void)output;
  }
  void on_done(uint64_t v, std::vector<InstanceResult> r) override {
    std::lock_guard<std::mutex> lock(mu_);
    version = v;
    results = std::move(r);
    ++done;
    cv_.notify_all();
  }
  bool wait(double seconds = 60) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done > 0; });
  }
  uint64_t version = 0;
  std::vector<InstanceResult> results;
  std::map<size_t, std::string> streamed;
  int done = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

const char* kConfig = R"(
import time
import numpy as np
from mindspore_serving.server import register

model = register.declare_model(model_file="model.gguf", model_format="GGUF",
                               options={"max_tokens": 6, "temperature": 0.0})

def add(x1, x2):
    return x1 + x2

def fail(x):
    raise ValueError("bad x")

def spin(x):
    while True:
        pass

def wrap(text):
    return "[" + text + "]"

def call_model(text):
    return model.call(text, max_tokens=3)

def embedding_norm(text):
    vector = model.call(text, task="embed")
    return np.float32(np.linalg.norm(vector)), np.int32(vector.shape[0])

@register.register_method(output_names=["y"])
def add_common(x1, x2):
    return register.add_stage(add, x1, x2, outputs_count=1)

@register.register_method(output_names=["y"])
def failing(x):
    return register.add_stage(fail, x, outputs_count=1)

@register.register_method(output_names=["y"])
def spinning(x):
    return register.add_stage(spin, x, outputs_count=1)

@register.register_method(output_names=["text", "wrapped"])
def generate(prompt):
    text = register.add_stage(model, prompt, outputs_count=1)
    return text, register.add_stage(wrap, text, outputs_count=1)

@register.register_method(output_names=["text"])
def nested(prompt):
    return register.add_stage(call_model, prompt, outputs_count=1)

@register.register_method(output_names=["vector"])
def embed_stage(text):
    return register.add_stage(model, text, outputs_count=1, task="embed")

@register.register_method(output_names=["norm", "width"])
def embed_in_python(text):
    return register.add_stage(embedding_norm, text, outputs_count=2)
)";

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::temp_dir("servable-repo");
    auto demo = modelgen::ensure_demo_model(root_ / "cache");
    ASSERT_TRUE(demo.is_ok()) << demo.status().message();
    model_ = *demo;
    write(root_ / "s" / "main" / "servable_config.py", kConfig);
    fs::create_directories(root_ / "s" / "main" / "1");
    fs::copy_file(model_, root_ / "s" / "main" / "1" / "model.gguf");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<Repository> open(double timeout_s = 30) {
    RepositoryOptions o;
    o.dir = (root_ / "s").string();
    o.version.stage_timeout_s = timeout_s;
    o.version.llm.threads = 1;
    o.version.llm.n_ctx = 256;
    o.poll_seconds = 0;
    auto repo = Repository::open(o);
    EXPECT_TRUE(repo.is_ok()) << repo.status().message();
    if (!repo.is_ok()) return nullptr;
    Status s = (*repo)->load();
    EXPECT_TRUE(s.is_ok()) << s.message();
    return std::move(repo.value());
  }

  static std::shared_ptr<WaitSink> call(Repository& repo, const std::string& method,
                                        std::vector<Instance> instances, uint64_t version = 0,
                                        bool stream = false) {
    PredictCall c;
    c.servable = "main";
    c.method = method;
    c.version = version;
    c.instances = std::move(instances);
    c.stream = stream;
    auto sink = std::make_shared<WaitSink>();
    auto id = repo.predict(std::move(c), sink);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    if (id.is_ok()) {
      EXPECT_TRUE(sink->wait());
    }
    return sink;
  }

  fs::path root_;
  std::string model_;
};

TEST_F(RepositoryTest, PythonMethodAddsTensors) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto x = values::make_tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto sink = call(*repo, "add_common", {{{"x1", x}, {"x2", x}}, {{"x1", x}}});
  ASSERT_EQ(sink->results.size(), 2u);
  ASSERT_TRUE(sink->results[0].is_ok()) << sink->results[0].status().message();
  const auto& y = std::get<Tensor>(sink->results[0]->at("y"));
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(y.as<float>()[3], 8.0f);
  ASSERT_FALSE(sink->results[1].is_ok());
  EXPECT_NE(sink->results[1].status().message().find("'x2' is missing"), std::string::npos);
  EXPECT_EQ(sink->version, 1u);
}

TEST_F(RepositoryTest, RaisingStageFailsItsInstanceOnly) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto sink = call(*repo, "failing", {{{"x", int64_t(1)}}});
  ASSERT_FALSE(sink->results[0].is_ok());
  EXPECT_NE(sink->results[0].status().message().find("ValueError: bad x"), std::string::npos)
      << sink->results[0].status().message();
  auto x = values::make_tensor(std::vector<float>{1}, {1});
  auto ok = call(*repo, "add_common", {{{"x1", x}, {"x2", x}}});
  EXPECT_TRUE(ok->results[0].is_ok());
}

TEST_F(RepositoryTest, StagePastItsDeadlineIsInterrupted) {
  auto repo = open(/*timeout_s=*/0.5);
  ASSERT_TRUE(repo);
  const auto t0 = std::chrono::steady_clock::now();
  auto sink = call(*repo, "spinning", {{{"x", int64_t(1)}}});
  ASSERT_FALSE(sink->results[0].is_ok());
  EXPECT_EQ(sink->results[0].status().code(), StatusCode::DeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // The interpreter is free again: another Python stage runs at once.
  auto x = values::make_tensor(std::vector<float>{1}, {1});
  auto ok = call(*repo, "add_common", {{{"x1", x}, {"x2", x}}});
  EXPECT_TRUE(ok->results[0].is_ok()) << ok->results[0].status().message();
}

TEST_F(RepositoryTest, LlmStageMatchesTheBackendAndStreams) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto sink = call(*repo, "generate", {{{"prompt", std::string("Once upon a time")}}}, 0, true);
  ASSERT_TRUE(sink->results[0].is_ok()) << sink->results[0].status().message();
  const auto text = std::get<std::string>(sink->results[0]->at("text"));
  EXPECT_EQ(std::get<std::string>(sink->results[0]->at("wrapped")), "[" + text + "]");
  EXPECT_EQ(sink->streamed[0], text);
  // The same generation through the OpenAI-side backend.
  serving::GenerateRequest req;
  req.model = "main";
  req.prompt = std::string("Once upon a time");
  req.max_tokens = 6;
  req.sampling.temperature = 0;
  auto r = call_llm(repo->llm_backend(), req, 1, 60);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(std::get<std::string>(r->front()), text);
}

TEST_F(RepositoryTest, ModelCallFromPython) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto sink = call(*repo, "nested", {{{"prompt", std::string("Once upon a time")}}});
  ASSERT_TRUE(sink->results[0].is_ok()) << sink->results[0].status().message();
  EXPECT_FALSE(std::get<std::string>(sink->results[0]->at("text")).empty());
}

// The automatic `embed` method of a GGUF model, a stage with task="embed"
// and model.call(..., task="embed") all give the backend's embedding.
TEST_F(RepositoryTest, GgufModelsEmbed) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto sink = call(*repo, "embed",
                   {{{"text", std::string("Once upon a time")}}, {{"text", std::string("")}}});
  ASSERT_TRUE(sink->results[0].is_ok()) << sink->results[0].status().message();
  const auto& v = std::get<values::Tensor>(sink->results[0]->at("embedding"));
  ASSERT_EQ(v.dtype, values::DType::Float32);
  ASSERT_EQ(v.shape.size(), 1u);
  double norm = 0;
  for (int64_t i = 0; i < v.element_count(); ++i) norm += (double)v.as<float>()[i] * v.as<float>()[i];
  EXPECT_NEAR(norm, 1.0, 1e-4);
  ASSERT_FALSE(sink->results[1].is_ok());  // an empty text fails its instance only

  auto staged = call(*repo, "embed_stage", {{{"text", std::string("Once upon a time")}}});
  ASSERT_TRUE(staged->results[0].is_ok()) << staged->results[0].status().message();
  EXPECT_EQ(std::get<values::Tensor>(staged->results[0]->at("vector")), v);

  auto python = call(*repo, "embed_in_python", {{{"text", std::string("Once upon a time")}}});
  ASSERT_TRUE(python->results[0].is_ok()) << python->results[0].status().message();
  const auto& width = std::get<values::Tensor>(python->results[0]->at("width"));
  EXPECT_EQ(width.as<int32_t>()[0], v.element_count());

  // The same through the OpenAI-side backend.
  struct Wait final : serving::EmbedSink {
    std::promise<Result<serving::EmbedResult>> done;
    void on_done(serving::EmbedResult r) override { done.set_value(std::move(r)); }
    void on_error(const Status& e) override { done.set_value(e); }
  };
  auto wait = std::make_shared<Wait>();
  auto result = wait->done.get_future();
  serving::EmbedRequest req;
  req.model = "main";
  req.inputs.emplace_back(std::string("Once upon a time"));
  ASSERT_TRUE(repo->llm_backend().embed(req, wait).is_ok());
  auto r = result.get();
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ((int64_t)r->vectors.at(0).size(), v.element_count());
  for (int64_t i = 0; i < v.element_count(); ++i)
    EXPECT_FLOAT_EQ(r->vectors[0][(size_t)i], v.as<float>()[i]);
}

TEST_F(RepositoryTest, BadLlmInputsAreInstanceErrors) {
  auto repo = open();
  ASSERT_TRUE(repo);
  auto f = values::make_tensor(std::vector<float>{1, 2}, {2});
  auto sink = call(*repo, "generate", {{{"prompt", f}}, {{"prompt", std::string("")}}});
  ASSERT_FALSE(sink->results[0].is_ok());
  EXPECT_NE(sink->results[0].status().message().find("float32 tensor"), std::string::npos);
  ASSERT_FALSE(sink->results[1].is_ok());
}

TEST_F(RepositoryTest, UnknownNamesAreWholeCallErrors) {
  auto repo = open();
  ASSERT_TRUE(repo);
  PredictCall c;
  c.servable = "nope";
  c.method = "add_common";
  c.instances.resize(1);
  auto sink = std::make_shared<WaitSink>();
  EXPECT_EQ(repo->predict(c, sink).status().code(), StatusCode::NotFound);
  c.servable = "main";
  c.method = "nope";
  EXPECT_EQ(repo->predict(c, sink).status().code(), StatusCode::NotFound);
  c.method = "add_common";
  c.version = 9;
  EXPECT_EQ(repo->predict(c, sink).status().code(), StatusCode::NotFound);
  c.version = 0;
  c.instances.clear();
  EXPECT_EQ(repo->predict(c, sink).status().code(), StatusCode::InvalidArgument);
}

TEST_F(RepositoryTest, CancelEndsARunningCall) {
  auto repo = open(/*timeout_s=*/30);
  ASSERT_TRUE(repo);
  PredictCall c;
  c.servable = "main";
  c.method = "spinning";
  c.instances = {{{"x", int64_t(1)}}};
  auto sink = std::make_shared<WaitSink>();
  auto id = repo->predict(c, sink);
  ASSERT_TRUE(id.is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  repo->cancel(*id);
  ASSERT_TRUE(sink->wait(10));
  ASSERT_FALSE(sink->results[0].is_ok());
  EXPECT_EQ(sink->results[0].status().code(), StatusCode::Cancelled);
}

TEST_F(RepositoryTest, NewVersionIsServedAndOldCallsFinish) {
  auto repo = open();
  ASSERT_TRUE(repo);
  fs::create_directories(root_ / "s" / "main" / "2");
  fs::copy_file(model_, root_ / "s" / "main" / "2" / "model.gguf");
  repo->rescan();  // a new folder waits one scan, in case it is still being written
  EXPECT_EQ(repo->servables()[0].versions, (std::vector<uint64_t>{1}));
  repo->rescan();
  auto info = repo->servables();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].versions, (std::vector<uint64_t>{1, 2}));
  auto x = values::make_tensor(std::vector<float>{1}, {1});
  EXPECT_EQ(call(*repo, "add_common", {{{"x1", x}, {"x2", x}}})->version, 2u);
  EXPECT_EQ(call(*repo, "add_common", {{{"x1", x}, {"x2", x}}}, 1)->version, 1u);
  // A folder that goes takes its version with it.
  fs::remove_all(root_ / "s" / "main" / "1");
  repo->rescan();
  EXPECT_EQ(repo->servables()[0].versions, (std::vector<uint64_t>{2}));
}

TEST_F(RepositoryTest, FailedVersionIsRetriedWhenItsFolderChanges) {
  auto repo = open();
  ASSERT_TRUE(repo);
  const fs::path v2 = root_ / "s" / "main" / "2";
  write(v2 / "model.gguf", "not a gguf file");
  repo->rescan();
  repo->rescan();
  EXPECT_EQ(repo->servables()[0].versions, (std::vector<uint64_t>{1}));
  EXPECT_NE(repo->servables()[0].load_error.find("version 2"), std::string::npos)
      << repo->servables()[0].load_error;
  repo->rescan();  // unchanged: not tried again
  EXPECT_EQ(repo->servables()[0].versions, (std::vector<uint64_t>{1}));
  fs::remove(v2 / "model.gguf");
  fs::copy_file(model_, v2 / "model.gguf");
  repo->rescan();
  repo->rescan();
  EXPECT_EQ(repo->servables()[0].versions, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(repo->servables()[0].load_error, "");
}

TEST_F(RepositoryTest, BrokenConfigIsReportedAndOthersServe) {
  write(root_ / "s" / "bad" / "servable_config.py", "raise RuntimeError('broken on purpose')\n");
  fs::create_directories(root_ / "s" / "bad" / "1");
  write(root_ / "s" / "cycle" / "servable_config.py", R"(
from mindspore_serving.server import register
def f(x):
    return x
@register.register_method(output_names=["a", "b"])
def m(x):
    return register.add_stage(f, x, outputs_count=1)
)");
  fs::create_directories(root_ / "s" / "cycle" / "1");
  auto repo = open();
  ASSERT_TRUE(repo);
  auto errors = repo->load_errors();
  ASSERT_EQ(errors.size(), 2u);
  std::string all = errors[0] + "\n" + errors[1];
  EXPECT_NE(all.find("broken on purpose"), std::string::npos) << all;
  EXPECT_NE(all.find("'cycle'"), std::string::npos) << all;
  EXPECT_NE(all.find("'m'"), std::string::npos) << all;
  auto x = values::make_tensor(std::vector<float>{1}, {1});
  EXPECT_TRUE(call(*repo, "add_common", {{{"x1", x}, {"x2", x}}})->results[0].is_ok());
}

TEST(LlmRequest, OptionsAndPromptsAreChecked) {
  std::map<std::string, Value> defaults{{"max_tokens", int64_t(8)}, {"temperature", 0.5}};
  auto r = llm_request("m", {std::string("hi")}, defaults, {{"max_tokens", int64_t(3)}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->max_tokens, 3);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  auto ids = llm_request("m", {values::make_tensor(std::vector<int32_t>{1, 5, 9}, {3})}, {}, {});
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(std::get<std::vector<serving::Token>>(ids->prompt).size(), 3u);
  auto stop = llm_request("m", {std::string("hi")}, {}, {{"stop", std::string(R"(["a","b"])")}});
  ASSERT_TRUE(stop.is_ok());
  EXPECT_EQ(stop->stop.size(), 2u);
  EXPECT_TRUE(stop->speculative);
  auto plain = llm_request("m", {std::string("hi")}, {{"speculative", false}}, {});
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_FALSE(plain->speculative);
  EXPECT_FALSE(llm_request("m", {std::string("hi")}, {}, {{"speculative", int64_t(0)}}).is_ok());
  EXPECT_FALSE(llm_request("m", {std::string("hi")}, {}, {{"max_tokens", int64_t(0)}}).is_ok());
  EXPECT_FALSE(llm_request("m", {std::string("hi")}, {}, {{"temperature", std::string("x")}}).is_ok());
  EXPECT_FALSE(llm_request("m", {std::string("hi")}, {}, {{"colour", int64_t(1)}}).is_ok());
  EXPECT_FALSE(llm_request("m", {int64_t(1)}, {}, {}).is_ok());
  EXPECT_FALSE(llm_request("m", {std::string("a"), std::string("b")}, {}, {}).is_ok());
  EXPECT_FALSE(
      llm_request("m", {values::make_tensor(std::vector<int32_t>{-1}, {1})}, {}, {}).is_ok());
}

// Structured outputs by the OpenAI API's field names: the stage's own
// option replaces the model's default; two at once and bad ones are refused.
TEST(LlmRequest, StructuredOutputOptions) {
  const std::string schema = R"({"type": "object", "properties": {"zz": {"type": "integer"}, "aa": {"type": "boolean"}},
                                 "required": ["zz", "aa"]})";
  std::map<std::string, Value> defaults{{"response_format", std::string("json_object")}};
  auto d = llm_request("m", {std::string("hi")}, defaults, {});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_NE(d->grammar.find("json-object"), std::string::npos);
  auto own = llm_request("m", {std::string("hi")}, defaults,
                         {{"response_format", std::string(R"({"type": "json_schema", "json_schema": {"name": "n", "schema": )" +
                                                          schema + "}}")}});
  ASSERT_TRUE(own.is_ok()) << own.status().message();
  EXPECT_LT(own->grammar.find("zz"), own->grammar.find("aa"));  // the schema's order
  auto re = llm_request("m", {std::string("hi")}, {}, {{"guided_regex", std::string("[0-9]{3}")}});
  ASSERT_TRUE(re.is_ok()) << re.status().message();
  EXPECT_FALSE(re->grammar.empty());
  EXPECT_TRUE(llm_request("m", {std::string("hi")}, {}, {{"guided_choice", std::string(R"(["a", "b"])")}}).is_ok());
  EXPECT_TRUE(llm_request("m", {std::string("hi")}, {}, {{"grammar", std::string(R"(root ::= "x")")}}).is_ok());
  const auto refused = [](std::map<std::string, Value> kw, const std::string& says) {
    auto r = llm_request("m", {std::string("hi")}, {}, kw);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  };
  refused({{"guided_regex", std::string("a")}, {"grammar", std::string(R"(root ::= "x")")}}, "give one");
  refused({{"json_schema", std::string(R"({"type": "number", "multipleOf": 2})")}}, "multipleOf");
  refused({{"response_format", std::string("{not json")}}, "not JSON");
  refused({{"grammar", int64_t(3)}}, "must be a str");
}

}  // namespace
}  // namespace cairn::servable
