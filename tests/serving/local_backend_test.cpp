// LocalBackend: validation before anything is queued, chat rendering, events,
// statistics, cancellation, draining, and golden text through the whole stack.
#include "serving/local_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/generator.h"
#include "modelgen/demo_model.h"
#include "serving_test_util.h"
#include "test_util.h"

namespace cairn::serving {
namespace {

using cairn::test::RecordingSink;

const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}";

// The demo model, and a copy of it whose file carries a chat template.
struct Models {
  std::string plain;
  std::string templated;
};
const Models& models() {
  static Models m = [] {
    Models out;
    auto dir = test::temp_dir("serving-models");
    auto path = modelgen::ensure_demo_model(dir);
    EXPECT_TRUE(path.is_ok()) << path.status().message();
    out.plain = path.is_ok() ? *path : "";
    modelgen::VocabSource vocab = modelgen::demo_vocab();
    auto write = vocab.write_metadata;
    vocab.write_metadata = [write](gguf::Writer& w) {
      write(w);
      w.set_string("tokenizer.chat_template", kTemplate);
    };
    out.templated = (dir / "templated.gguf").string();
    auto built = modelgen::write_random_model(modelgen::demo_spec(), vocab, out.templated);
    EXPECT_TRUE(built.is_ok()) << built.status().message();
    return out;
  }();
  return m;
}

std::unique_ptr<LocalBackend> make(LocalBackendOptions o = {}) {
  if (o.model_path.empty()) o.model_path = models().plain;
  if (o.n_ctx == 0) o.n_ctx = 128;
  o.threads = 2;
  auto b = LocalBackend::create(o);
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  return b.is_ok() ? std::move(*b) : nullptr;
}

GenerateRequest greedy(std::string prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

std::shared_ptr<RecordingSink> run(Backend& b, GenerateRequest r) {
  auto sink = std::make_shared<RecordingSink>();
  auto id = b.submit(std::move(r), sink);
  if (!id.is_ok()) {
    ADD_FAILURE() << "submit failed: " << id.status().message();
    return sink;
  }
  EXPECT_TRUE(sink->wait());
  return sink;
}

template <typename Pred>
bool eventually(const Backend& b, Pred pred, double seconds = 30) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (pred(b.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred(b.stats());
}

TEST(LocalBackend, CompletesTextLikeTheGeneratorAndReportsUsage) {
  auto b = make();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->model_id(), std::filesystem::path(models().plain).stem().string());
  EXPECT_GT(b->kv_pool_bytes(), 0);
  auto s = run(*b, greedy("the little dog", 16));
  ASSERT_FALSE(s->error) << s->error->message();
  ASSERT_TRUE(s->finish);
  EXPECT_EQ(s->finish->reason, "length");
  EXPECT_EQ(s->finish->usage.completion_tokens, 16);
  const auto prompt = b->tokenizer().encode("the little dog", true);
  EXPECT_EQ(s->finish->usage.prompt_tokens, (int32_t)prompt.size());
  EXPECT_EQ(s->tokens.size(), 16u);

  auto loaded = model::load_model(models().plain);
  ASSERT_TRUE(loaded.is_ok());
  engine::Generator gen(*loaded->model, *loaded->tokenizer);
  engine::GenerateOptions o;
  o.max_tokens = 16;
  o.ignore_eos = true;
  o.sampling.temperature = 0;
  auto want = gen.generate("the little dog", o);
  ASSERT_TRUE(want.is_ok());
  EXPECT_EQ(s->text, want->text);
  for (size_t i = 0; i < s->tokens.size(); ++i) EXPECT_EQ(s->tokens[i].id, want->tokens[i]);
  EXPECT_TRUE(s->tokens[0].top.empty());  // no logprobs unless asked
}

TEST(LocalBackend, RejectsBadRequestsBeforeQueueing) {
  auto b = make();
  ASSERT_TRUE(b);
  struct Case {
    const char* name;
    std::function<void(GenerateRequest&)> edit;
    StatusCode kind;
    const char* param;
    const char* says;
  };
  const int32_t vocab = b->tokenizer().vocab_size();
  const std::vector<Case> cases = {
      {"unknown model", [](auto& r) { r.model = "gpt-9"; }, StatusCode::NotFound, "model", "gpt-9"},
      {"empty text", [](auto& r) { r.prompt = std::string(); }, StatusCode::InvalidArgument,
       "prompt", "empty"},
      {"empty ids", [](auto& r) { r.prompt = std::vector<Token>{}; }, StatusCode::InvalidArgument,
       "prompt", "empty"},
      {"id beyond vocab",
       [&](auto& r) {
         r.prompt = std::vector<Token>{1, vocab};
       },
       StatusCode::InvalidArgument, "prompt", std::to_string(vocab).c_str()},
      {"negative id", [](auto& r) { r.prompt = std::vector<Token>{-1}; },
       StatusCode::InvalidArgument, "prompt", "-1"},
      {"max_tokens 0", [](auto& r) { r.max_tokens = 0; }, StatusCode::InvalidArgument, "max_tokens",
       "max_tokens"},
      {"max_tokens -5", [](auto& r) { r.max_tokens = -5; }, StatusCode::InvalidArgument,
       "max_tokens", "-5"},
      {"beyond context", [](auto& r) { r.max_tokens = 126; }, StatusCode::InvalidArgument,
       "max_tokens", "126"},
      {"prompt fills context", [](auto& r) { r.prompt = std::vector<Token>(128, 5); },
       StatusCode::InvalidArgument, "prompt", "128"},
      {"temperature NaN", [](auto& r) { r.sampling.temperature = std::nanf(""); },
       StatusCode::InvalidArgument, "temperature", "temperature"},
      {"top_p 2", [](auto& r) { r.sampling.top_p = 2; }, StatusCode::InvalidArgument, "top_p",
       "top_p"},
      {"top_p inf", [](auto& r) { r.sampling.top_p = INFINITY; }, StatusCode::InvalidArgument,
       "top_p", "top_p"},
      {"presence 3", [](auto& r) { r.sampling.presence_penalty = 3; }, StatusCode::InvalidArgument,
       "presence_penalty", "presence_penalty"},
      {"bias token", [](auto& r) { r.sampling.logit_bias[99999] = 1; }, StatusCode::InvalidArgument,
       "logit_bias", "99999"},
      {"top_logprobs 21", [](auto& r) { r.top_logprobs = 21; }, StatusCode::InvalidArgument,
       "top_logprobs", "top_logprobs"},
      {"too many stops", [](auto& r) { r.stop.assign(17, "x"); }, StatusCode::InvalidArgument,
       "stop", "stop"},
      {"empty messages", [](auto& r) { r.prompt = std::vector<ChatMessage>{}; },
       StatusCode::InvalidArgument, "messages", "empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    GenerateRequest r = greedy("the little dog", 4);
    c.edit(r);
    auto sink = std::make_shared<RecordingSink>();
    auto res = b->submit(std::move(r), sink);
    const Status* err = res.is_ok() ? nullptr : &res.status();
    ASSERT_TRUE(err);
    EXPECT_EQ(err->code(), c.kind);
    EXPECT_EQ(err->param(), c.param);
    EXPECT_EQ(err->message().find('\n'), std::string::npos);
    EXPECT_EQ(sink->ends, 0);
  }
  // The context error names both counts.
  auto res = b->submit(greedy("the little dog", 126), std::make_shared<RecordingSink>());
  const std::string msg = res.status().message();
  EXPECT_NE(msg.find("126"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(b->tokenizer().encode("the little dog", true).size())),
            std::string::npos)
      << msg;
  // A prompt of n_ctx - 1 with one new token still works.
  GenerateRequest edge = greedy("", 1);
  edge.prompt = std::vector<Token>(127, 5);
  auto s = run(*b, edge);
  EXPECT_FALSE(s->error);
  EXPECT_EQ(s->tokens.size(), 1u);
  // After all that, a valid request succeeds and nothing leaked.
  auto ok = run(*b, greedy("the little dog", 4));
  EXPECT_EQ(ok->tokens.size(), 4u);
  EXPECT_TRUE(eventually(*b, [](const BackendStats& st) {
    return st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0;
  }));
}

TEST(LocalBackend, QueueLimitAndDrainingAnswerUnavailable) {
  LocalBackendOptions o;
  o.max_seqs = 1;
  o.max_queue = 1;
  auto b = make(o);
  ASSERT_TRUE(b);
  auto first = std::make_shared<RecordingSink>();
  auto id1 = b->submit(greedy("the little dog", 100), first);
  ASSERT_TRUE(id1.is_ok());
  ASSERT_TRUE(first->wait_tokens(1));  // running: the queue is empty again
  auto second = std::make_shared<RecordingSink>();
  auto id2 = b->submit(greedy("the little dog", 100), second);
  ASSERT_TRUE(id2.is_ok());
  auto third = b->submit(greedy("the little dog", 4), std::make_shared<RecordingSink>());
  ASSERT_FALSE(third.is_ok());
  EXPECT_EQ(third.status().code(), StatusCode::Unavailable);
  EXPECT_NE(third.status().message().find("queue"), std::string::npos);

  b->start_draining();
  EXPECT_EQ(b->health().state, HealthState::Draining);
  auto fourth = b->submit(greedy("the little dog", 4), std::make_shared<RecordingSink>());
  ASSERT_FALSE(fourth.is_ok());
  EXPECT_EQ(fourth.status().code(), StatusCode::Unavailable);
  // Requests already accepted still finish.
  ASSERT_TRUE(first->wait());
  ASSERT_TRUE(second->wait());
  EXPECT_EQ(first->finish->usage.completion_tokens, 100);
  EXPECT_EQ(second->finish->usage.completion_tokens, 100);
}

TEST(LocalBackend, CancelFreesBlocksAndEndsWithCancelled) {
  auto b = make();
  ASSERT_TRUE(b);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<RequestId> ids;
  for (int i = 0; i < 8; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = b->submit(greedy("once upon a time", -1), sinks.back());
    ASSERT_TRUE(id.is_ok());
    ids.push_back(*id);
  }
  ASSERT_TRUE(sinks[0]->wait_tokens(2));
  for (RequestId id : ids) b->cancel(id);
  for (auto& s : sinks) {
    ASSERT_TRUE(s->wait());
    ASSERT_TRUE(s->finish);
    EXPECT_EQ(s->finish->reason, "cancelled");
  }
  EXPECT_TRUE(eventually(*b, [](const BackendStats& st) {
    return st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0;
  }));
  b->cancel(ids[0]);  // idempotent
}

TEST(LocalBackend, StatsCountTokensLatenciesAndPrefixHits) {
  auto b = make();
  ASSERT_TRUE(b);
  std::string text;
  for (int i = 0; i < 6; ++i) text += "the little dog ran home to his house ";
  auto a = run(*b, greedy(text, 8));
  auto c = run(*b, greedy(text, 8));
  EXPECT_EQ(a->text, c->text);
  EXPECT_GT(c->finish->usage.cached_prompt_tokens, 0);
  EXPECT_TRUE(eventually(*b, [](const BackendStats& st) { return st.kv_blocks_used == 0; }));
  const BackendStats st = b->stats();
  EXPECT_EQ(st.generated_tokens_total, 16u);
  EXPECT_EQ(st.prompt_tokens_total, 2u * (uint64_t)a->finish->usage.prompt_tokens);
  EXPECT_GT(st.prefix_cache_hits, 0u);
  EXPECT_GE(st.prefix_cache_queries, st.prefix_cache_hits);
  EXPECT_GT(st.kv_blocks_total, 0);
  EXPECT_EQ(st.time_to_first_token_s.count, 2u);
  EXPECT_EQ(st.inter_token_latency_s.count, 14u);
  EXPECT_EQ(st.e2e_latency_s.count, 2u);
  EXPECT_EQ(st.queue_time_s.count, 2u);
  EXPECT_EQ(st.e2e_latency_s.counts.size(), st.e2e_latency_s.bounds.size() + 1);
  uint64_t n = 0;
  for (auto k : st.e2e_latency_s.counts) n += k;
  EXPECT_EQ(n, 2u);
}

TEST(LocalBackend, LogprobsCarryTokenTexts) {
  auto b = make();
  ASSERT_TRUE(b);
  auto r = greedy("the little dog", 5);
  r.top_logprobs = 3;
  auto s = run(*b, r);
  ASSERT_EQ(s->tokens.size(), 5u);
  for (const auto& t : s->tokens) {
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy: the chosen token is the most likely
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_EQ(t.top[0].text, b->tokenizer().token_to_piece(t.id, true));
    EXPECT_LT(t.logprob, 0.0f);
  }
}

TEST(LocalBackend, StopStringsSplitAcrossTokensAreNeverSent) {
  auto b = make();
  ASSERT_TRUE(b);
  auto free_run = run(*b, greedy("the little dog", 24));
  const std::string full = free_run->text;
  ASSERT_GT(full.size(), 12u);
  size_t boundary = 0;
  for (size_t i = 0; i + 1 < free_run->tokens.size() && boundary < full.size() / 2; ++i)
    boundary += free_run->tokens[i].text.size();
  const std::string stop = full.substr(boundary - 1, 3);
  auto r = greedy("the little dog", 24);
  r.stop = {"never appears", stop};
  auto s = run(*b, r);
  EXPECT_EQ(s->finish->reason, "stop");
  EXPECT_EQ(s->text, full.substr(0, full.find(stop)));
}

TEST(LocalBackend, ChatUsesTheModelsTemplateElseChatML) {
  GenerateRequest r;
  r.prompt = std::vector<ChatMessage>{{"system", "be brief", ""}, {"user", "hello there", ""}};
  r.max_tokens = 4;
  r.ignore_eos = true;
  r.sampling.temperature = 0;

  auto plain = make();
  ASSERT_TRUE(plain);
  auto chatml = plain->render_chat(r);
  ASSERT_TRUE(chatml.is_ok());
  EXPECT_EQ(*chatml,
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n"
            "<|im_start|>assistant\n");

  LocalBackendOptions o;
  o.model_path = models().templated;
  o.model_name = "templated-demo";
  auto templated = make(o);
  ASSERT_TRUE(templated);
  EXPECT_EQ(templated->models()[0].id, "templated-demo");
  auto rendered = templated->render_chat(r);
  ASSERT_TRUE(rendered.is_ok());
  const std::string want = "<s>[system] be brief\n[user] hello there\n[assistant] ";
  EXPECT_EQ(*rendered, want);
  r.model = "templated-demo";
  auto s = run(*templated, r);
  ASSERT_TRUE(s->finish);
  // The template's own <s> is the only BOS.
  const auto ids = templated->tokenizer().encode(want, false);
  EXPECT_EQ(s->finish->usage.prompt_tokens, (int32_t)ids.size());
  EXPECT_EQ(ids[0], templated->tokenizer().bos());
  EXPECT_NE(ids[1], templated->tokenizer().bos());
}

TEST(LocalBackend, ModelsHealthTokenizeDetokenize) {
  auto b = make();
  ASSERT_TRUE(b);
  auto ms = b->models();
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].n_ctx, 128);
  EXPECT_EQ(ms[0].n_vocab, b->tokenizer().vocab_size());
  EXPECT_GT(ms[0].created, 0);
  EXPECT_EQ(b->health().state, HealthState::Ready);
  auto ids = b->tokenize("", "the little dog", true);
  ASSERT_TRUE(ids.is_ok());
  auto text = b->detokenize(ms[0].id, *ids);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "the little dog");
  EXPECT_FALSE((b->tokenize("nope", "x", true)).is_ok());
  auto bad = b->detokenize("", {1, 1 << 20});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::InvalidArgument);
}

TEST(LocalBackend, CreateRejectsBadOptions) {
  LocalBackendOptions o;
  o.model_path = "/nonexistent/model.gguf";
  auto missing = LocalBackend::create(o);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  o.model_path = models().plain;
  o.n_ctx = 4096;
  o.kv_pool_bytes = 1 << 16;  // far too small for one context
  auto small = LocalBackend::create(o);
  ASSERT_FALSE(small.is_ok());
  o.kv_pool_bytes = 0;
  o.max_seqs = 0;
  EXPECT_FALSE(LocalBackend::create(o).is_ok());
}

TEST(LocalBackendGolden, StoriesTextAloneAndAmongThirtyTwo) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const auto shared = *test::shared_dir();
  LocalBackendOptions o;
  o.model_path = (shared / "models" / "stories260K.gguf").string();
  o.n_ctx = 128;  // the model's whole context
  o.max_batch_tokens = 96;
  auto b = make(o);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->model_id(), "stories260K");
  std::ifstream f(shared / "golden" / "stories260K.json");
  auto doc = nlohmann::json::parse(f);
  std::vector<GenerateRequest> reqs;
  for (const auto& c : doc["cases"]) {
    GenerateRequest r = greedy(c["prompt"].get<std::string>(), c["n_predict"].get<int32_t>());
    r.ignore_eos = false;
    r.model = "stories260K";
    reqs.push_back(r);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto s = run(*b, reqs[i]);
    EXPECT_EQ(s->text, doc["cases"][i]["text"].get<std::string>()) << "case " << i;
  }
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int k = 0; k < 33; ++k) {
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = b->submit(reqs[(size_t)k % reqs.size()], sinks.back());
    ASSERT_TRUE(id.is_ok());
  }
  for (size_t k = 0; k < sinks.size(); ++k) {
    ASSERT_TRUE(sinks[k]->wait());
    EXPECT_EQ(sinks[k]->text, doc["cases"][k % reqs.size()]["text"].get<std::string>())
        << "request " << k;
  }
  EXPECT_TRUE(eventually(*b, [](const BackendStats& st) {
    return st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0;
  }));
}

// --draft-model: a draft of another vocabulary stops start-up naming the
// token; stories260K drafting for itself gives the golden text, counted in
// the speculative counters (nearly all accepted); a request that opts out
// drafts nothing.
TEST(LocalBackendGolden, DraftModelCheckedAtLoadAndCounted) {
  CAIRN_REQUIRE_SHARED("models/aidreams260K.gguf");
  const auto shared = *test::shared_dir();
  LocalBackendOptions o;
  o.model_path = (shared / "models" / "stories260K.gguf").string();
  o.n_ctx = 128;
  o.threads = 2;
  o.draft_model_path = (shared / "models" / "aidreams260K.gguf").string();
  auto refused = LocalBackend::create(o);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--draft-model"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("vocabulary differs"), std::string::npos)
      << refused.status().message();
  o.draft_model_path = o.model_path;
  o.spec_draft_max = 6;
  auto b = make(o);
  ASSERT_TRUE(b);
  std::ifstream f(shared / "golden" / "stories260K.json");
  auto doc = nlohmann::json::parse(f);
  const auto& c = doc["cases"][0];
  GenerateRequest r = greedy(c["prompt"].get<std::string>(), c["n_predict"].get<int32_t>());
  r.ignore_eos = false;
  r.speculative = false;
  EXPECT_EQ(run(*b, r)->text, c["text"].get<std::string>());
  EXPECT_EQ(b->stats().spec_draft_tokens_total, 0u);
  r.speculative = true;
  EXPECT_EQ(run(*b, r)->text, c["text"].get<std::string>());
  const BackendStats st = b->stats();
  EXPECT_GT(st.spec_draft_tokens_total, 0u);
  EXPECT_GT((double)st.spec_accepted_tokens_total, 0.9 * (double)st.spec_draft_tokens_total);
}

}  // namespace
}  // namespace cairn::serving

namespace cairn::serving {
namespace {

// A Hermes-style template (tools as JSON, <tool_call> in the assistant turn),
// with an optional variable only chat_template_kwargs sets.
const char* kToolTemplate =
    "{% if tools %}[tools] {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}"
    "{% if m.tool_calls %}<tool_call>{{ m.tool_calls | tojson }}</tool_call>{% endif %}\n"
    "{% endfor %}{% if flavor is defined %}[flavor] {{ flavor }}\n{% endif %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}";

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}}}])";

GenerateRequest tool_request(ToolChoice choice, uint64_t seed) {
  GenerateRequest r;
  r.prompt = std::vector<ChatMessage>{{"user", "weather in Paris?", ""}};
  r.tools_json = kTools;
  r.tool_choice = choice;
  r.max_tokens = 120;
  r.sampling.temperature = 1;
  r.sampling.seed = seed;
  return r;
}

TEST(LocalBackend, ToolChoiceRequiredAndNamedForceValidCalls) {
  LocalBackendOptions o;
  o.chat_template = kToolTemplate;
  o.n_ctx = 1024;
  auto b = make(o);
  ASSERT_TRUE(b);
  int finished = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const bool named = seed % 2 == 0;
    GenerateRequest r = tool_request(named ? ToolChoice::Named : ToolChoice::Required, seed);
    if (named) r.tool_choice_name = "get_time";
    // Parallel calls go on while the model likes; one call must end.
    r.parallel_tool_calls = seed == 5;
    auto s = run(*b, r);
    ASSERT_TRUE(s->finish) << s->reason();
    ASSERT_TRUE(s->syntax);
    EXPECT_EQ(s->syntax->tool_format, "hermes");
    EXPECT_EQ(s->tokens_before_start, 0u);
    if (s->finish->reason != "stop") continue;  // cut by max_tokens: nothing to check
    ++finished;
    chat::OutputParserOptions po;
    po.format = chat::ToolFormat::Hermes;
    const chat::ParsedOutput out = chat::parse_output(s->text, po);
    ASSERT_GE(out.tool_calls.size(), 1u) << s->text;
    if (!r.parallel_tool_calls) {
      EXPECT_EQ(out.tool_calls.size(), 1u) << s->text;
    }
    EXPECT_EQ(out.content, "") << s->text;
    for (const auto& call : out.tool_calls) {
      auto args = nlohmann::json::parse(call.arguments);
      if (named) {
        EXPECT_EQ(call.name, "get_time") << s->text;
      }
      if (call.name == "get_weather") {
        ASSERT_TRUE(args["city"].is_string()) << s->text;
        const std::string city = args["city"];  // maxLength counts code points
        EXPECT_LE(std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; }),
                  12);
        ASSERT_TRUE(args["days"].is_number_integer()) << s->text;
        EXPECT_GE(args["days"].get<int>(), 1);
        EXPECT_LE(args["days"].get<int>(), 7);
      } else {
        ASSERT_EQ(call.name, "get_time") << s->text;
        EXPECT_TRUE(args["zone"] == "utc" || args["zone"] == "local") << s->text;
      }
    }
  }
  EXPECT_GE(finished, 3);

  // Required without a known format is refused with what to do.
  LocalBackendOptions po;
  po.n_ctx = 1024;
  auto plain = make(po);
  ASSERT_TRUE(plain);
  auto refused = plain->submit(tool_request(ToolChoice::Required, 1),
                               std::make_shared<test::RecordingSink>());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--tool-parser"), std::string::npos);
}

TEST(LocalBackend, ToolChoiceNoneKwargsAndOutputSyntax) {
  LocalBackendOptions o;
  o.chat_template = kToolTemplate;
  o.n_ctx = 1024;
  auto b = make(o);
  ASSERT_TRUE(b);
  GenerateRequest r = tool_request(ToolChoice::Auto, 1);
  auto with_tools = b->render_chat(r);
  ASSERT_TRUE(with_tools.is_ok()) << with_tools.status().message();
  EXPECT_NE(with_tools->find("[tools] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            std::string::npos)
      << *with_tools;
  r.tool_choice = ToolChoice::None;
  r.chat_template_kwargs_json = R"({"flavor": "plain"})";
  auto none = b->render_chat(r);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->find("[tools]"), std::string::npos);
  EXPECT_NE(none->find("[flavor] plain\n[assistant] "), std::string::npos) << *none;
  r.max_tokens = 4;
  auto s = run(*b, r);
  ASSERT_TRUE(s->syntax);
  EXPECT_EQ(s->syntax->tool_format, "");  // none: calls are not looked for
  EXPECT_EQ(s->syntax->reasoning_open, "");  // the template knows no reasoning tags
  EXPECT_FALSE(s->syntax->starts_in_reasoning);

  r.chat_template_kwargs_json = R"({"messages": []})";
  auto bad = b->submit(r, std::make_shared<test::RecordingSink>());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.status().message().find("messages"), std::string::npos);

  // A prompt that opens <think> starts the output inside the reasoning;
  // --reasoning-format none leaves it to the content.
  LocalBackendOptions think = o;
  think.chat_template = std::string(kToolTemplate) + "<think>\n";
  auto tb = make(think);
  ASSERT_TRUE(tb);
  auto ts = run(*tb, r = tool_request(ToolChoice::Auto, 2));
  ASSERT_TRUE(ts->syntax);
  EXPECT_EQ(ts->syntax->reasoning_open, "<think>");
  EXPECT_EQ(ts->syntax->reasoning_close, "</think>");
  EXPECT_TRUE(ts->syntax->starts_in_reasoning);
  think.reasoning_format = "none";
  auto inline_b = make(think);
  ASSERT_TRUE(inline_b);
  r.max_tokens = 2;
  auto is = run(*inline_b, r);
  ASSERT_TRUE(is->syntax);
  EXPECT_EQ(is->syntax->reasoning_open, "");

  // Bad options fail creation, naming them.
  LocalBackendOptions bad_parser = o;
  bad_parser.model_path = models().plain;
  bad_parser.tool_parser = "xml-ish";
  EXPECT_FALSE(LocalBackend::create(bad_parser).is_ok());
  LocalBackendOptions bad_template = bad_parser;
  bad_template.tool_parser = "";
  bad_template.chat_template = "{% for %}";
  auto bt = LocalBackend::create(bad_template);
  ASSERT_FALSE(bt.is_ok());
  EXPECT_NE(bt.status().message().find("--chat-template"), std::string::npos);
}

// --kv-type q8_0: the same pool bytes hold ~1.88x the blocks (the
// allocator's own count), the geometry a handoff carries says q8_0, and the
// backend generates; a distributed model refuses the flag.
TEST(LocalBackend, Q8KvCacheHoldsAboutTwiceTheTokens) {
  LocalBackendOptions o;
  o.kv_pool_bytes = int64_t{8} << 20;
  auto f16 = make(o);
  o.kv_type = TensorType::Q8_0;
  auto q8 = make(o);
  ASSERT_TRUE(f16 && q8);
  EXPECT_GE((double)q8->kv_blocks(), 1.85 * (double)f16->kv_blocks());
  EXPECT_LE(q8->kv_pool_bytes(), o.kv_pool_bytes);
  // Bytes per token from the allocator's accounting.
  const double per_token_f16 = (double)f16->kv_pool_bytes() / (16.0 * f16->kv_blocks());
  const double per_token_q8 = (double)q8->kv_pool_bytes() / (16.0 * q8->kv_blocks());
  EXPECT_LE(per_token_q8, 0.55 * per_token_f16);
  auto g = q8->kv_geometry("");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g->dtype, TensorType::Q8_0);
  EXPECT_EQ(f16->kv_geometry("")->dtype, TensorType::F16);
  auto s = run(*q8, greedy("the little dog", 8));
  ASSERT_TRUE(s->finish.has_value());
  EXPECT_FALSE(s->tokens.empty());

  LocalBackendOptions remote = o;
  remote.model_path = models().plain;
  remote.remote_model = [](const model::HParams&) -> Result<std::unique_ptr<model::Model>> {
    return Status::error("not reached");
  };
  auto refused = LocalBackend::create(remote);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--kv-type q8_0"), std::string::npos);
}

TEST(LocalBackend, KvGeometryAndHandoffChecks) {
  auto b = make();
  ASSERT_NE(b, nullptr);
  auto g = b->kv_geometry("");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto loaded = model::load_model(models().plain, {});
  ASSERT_TRUE(loaded.is_ok());
  const kv::KvShape shape = loaded->model->hparams().kv_shape();
  EXPECT_EQ(g->n_layer, shape.n_layer);
  EXPECT_EQ(g->row_elems, shape.row_elems);
  EXPECT_EQ(g->elem_bytes, 2);
  EXPECT_EQ(g->block_tokens, 16);
  EXPECT_EQ(g->version, kv::kTransferVersion);
  EXPECT_EQ(b->kv_geometry("nope").status().code(), StatusCode::NotFound);

  auto sink = std::make_shared<RecordingSink>();
  GenerateRequest r = greedy("hello", 4);
  r.resume = GenerateRequest::Resume{};
  EXPECT_EQ(b->submit(r, sink).status().code(), StatusCode::InvalidArgument);  // no forced
  r.resume->forced = {1, 2, 3, 4};
  EXPECT_EQ(b->submit(r, sink).status().code(), StatusCode::InvalidArgument);  // >= max_tokens
  r.resume->forced = {-1};
  EXPECT_EQ(b->submit(r, sink).status().code(), StatusCode::InvalidArgument);
  r.resume->forced = {1};
  r.handoff = GenerateRequest::Handoff{"127.0.0.1:1", "x"};
  EXPECT_EQ(b->submit(r, sink).status().code(), StatusCode::InvalidArgument);  // both
  r.resume.reset();
  r.handoff->peer.clear();
  EXPECT_EQ(b->submit(r, sink).status().code(), StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace cairn::serving
