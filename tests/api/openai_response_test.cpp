// Response shapes as OpenAI clients parse them, SSE framing, the Generation
// state machine and the Prometheus text.
#include "api/openai_response.h"

#include <gtest/gtest.h>

#include "api/generation.h"
#include "api/http_routes.h"

namespace cairn::api {
namespace {

using nlohmann::json;

serving::TokenEvent tok(int id, std::string text, float lp = -0.5f) {
  serving::TokenEvent ev;
  ev.id = id;
  ev.text = std::move(text);
  ev.logprob = lp;
  return ev;
}

serving::FinishEvent fin(std::string reason, int prompt, int completion, std::string text = {}) {
  serving::FinishEvent f;
  f.reason = std::move(reason);
  f.text = std::move(text);
  f.usage.prompt_tokens = prompt;
  f.usage.completion_tokens = completion;
  return f;
}

ParsedGenerate request(Endpoint e, int prompts, int n, bool stream, bool usage, bool logprobs) {
  ParsedGenerate p;
  p.endpoint = e;
  p.model = "tiny";
  p.n = n;
  p.stream = stream;
  p.include_usage = usage;
  p.logprobs = logprobs;
  p.prompts.resize(static_cast<size_t>(prompts));
  return p;
}

ResponseMeta meta_for(const ParsedGenerate& p) {
  ResponseMeta m;
  m.endpoint = p.endpoint;
  m.id = new_response_id(p.endpoint);
  m.created = 1700000000;
  m.model = p.model;
  m.logprobs = p.logprobs;
  return m;
}

// Splits an SSE body into its data payloads, checking the framing on the way.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    EXPECT_EQ(ev.find('\n'), std::string::npos) << "one line per event";
    out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiResponse, ErrorShape) {
  const HttpError e = to_http_error(Status::invalid_argument("'n' is too large", "n"));
  EXPECT_EQ(e.status, 400);
  const json& j = e.body;
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "'n' is too large");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(OpenAiResponse, SseFramingAndInvalidUtf8) {
  std::string s = sse_data(json{{"text", std::string("a\nb\xff")}});
  EXPECT_EQ(s.rfind("data: {", 0), 0u);
  EXPECT_EQ(s.substr(s.size() - 2), "\n\n");
  EXPECT_EQ(s.find('\n'), s.size() - 2);  // the newline in the text is escaped
  EXPECT_NE(s.find("\\n"), std::string::npos);
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos);  // replacement character
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_NE(new_response_id(Endpoint::Chat), new_response_id(Endpoint::Chat));
  EXPECT_EQ(new_response_id(Endpoint::Chat).rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(new_response_id(Endpoint::Completions).rfind("cmpl-", 0), 0u);
}

TEST(Generation, CompletionNonStreamingWithNAndLogprobs) {
  auto p = request(Endpoint::Completions, 1, 2, false, false, true);
  Generation g(p, meta_for(p));
  EXPECT_EQ(g.opening(), "");
  auto t = tok(5, "Hel", -0.25f);
  t.top = {{5, "Hel", -0.25f}, {6, "Hi", -1.5f}};
  EXPECT_EQ(g.on_event(0, t), "");
  EXPECT_EQ(g.on_event(1, tok(7, "Yo")), "");
  EXPECT_EQ(g.on_event(0, tok(8, "lo", -0.75f)), "");
  EXPECT_FALSE(g.done());
  g.on_event(0, fin("length", 4, 2));
  EXPECT_FALSE(g.done());
  g.on_event(1, fin("stop", 4, 1, "!"));
  ASSERT_TRUE(g.done());
  EXPECT_EQ(g.status(), 200);
  json j = json::parse(g.closing());
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["text"], "Yo!");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"Hel", "lo"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.25, -0.75}));
  EXPECT_EQ(lp["text_offset"], json({0, 3}));
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0]["Hi"].get<double>(), -1.5);
  // n = 2 of one prompt: the prompt counts once.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
}

TEST(Generation, ChatStreamingChunksAndUsage) {
  auto p = request(Endpoint::Chat, 1, 1, true, true, false);
  Generation g(p, meta_for(p));
  auto opening = sse_payloads(g.opening());
  ASSERT_EQ(opening.size(), 1u);
  json role = json::parse(opening[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  auto c1 = sse_payloads(g.on_event(0, tok(1, "Hi")));
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(json::parse(c1[0])["choices"][0]["delta"]["content"], "Hi");
  // A token whose text is held back sends nothing without logprobs.
  EXPECT_EQ(g.on_event(0, tok(2, "")), "");
  auto last = sse_payloads(g.on_event(0, fin("stop", 3, 2, " there")));
  ASSERT_EQ(last.size(), 2u);
  json f = json::parse(last[0]);
  EXPECT_EQ(f["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(f["choices"][0]["delta"]["content"], " there");
  json u = json::parse(last[1]);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  ASSERT_TRUE(g.done());
  EXPECT_EQ(g.closing(), "data: [DONE]\n\n");
  // All chunks of one response share its id.
  EXPECT_EQ(role["id"], f["id"]);
  EXPECT_EQ(role["id"], u["id"]);
}

TEST(Generation, ChatLogprobsShape) {
  auto p = request(Endpoint::Chat, 1, 1, false, false, true);
  Generation g(p, meta_for(p));
  auto t = tok(9, "é", -0.1f);
  t.top = {{9, "é", -0.1f}, {10, "e", -2.f}};
  g.on_event(0, t);
  g.on_event(0, fin("length", 1, 1));
  json j = json::parse(g.closing());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "é");
  const json& c = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["token"], "é");
  EXPECT_EQ(c[0]["bytes"], json({0xC3, 0xA9}));
  ASSERT_EQ(c[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c[0]["top_logprobs"][1]["token"], "e");
}

TEST(Generation, CompletionStreamingWithoutUsageEndsWithDone) {
  auto p = request(Endpoint::Completions, 2, 1, true, false, false);
  Generation g(p, meta_for(p));
  EXPECT_EQ(g.opening(), "");  // completions have no role chunk
  auto a = sse_payloads(g.on_event(1, tok(1, "x")));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(json::parse(a[0])["choices"][0]["index"], 1);
  EXPECT_EQ(json::parse(a[0])["choices"][0]["text"], "x");
  auto b = sse_payloads(g.on_event(1, fin("length", 2, 1)));
  ASSERT_EQ(b.size(), 1u);  // no usage chunk unless asked for
  g.on_event(0, fin("stop", 2, 0));
  ASSERT_TRUE(g.done());
  EXPECT_EQ(g.closing(), "data: [DONE]\n\n");
}

TEST(Generation, ErrorEndsTheResponse) {
  auto p = request(Endpoint::Completions, 1, 2, false, false, false);
  Generation g(p, meta_for(p));
  g.on_event(0, tok(1, "x"));
  g.on_event(1, Status::error(StatusCode::InvalidArgument, "prompt too long", "prompt"));
  ASSERT_TRUE(g.done());
  EXPECT_EQ(g.status(), 400);
  json j = json::parse(g.closing());
  EXPECT_EQ(j["error"]["message"], "prompt too long");
  EXPECT_EQ(j["error"]["param"], "prompt");
  // Streaming: an error event, then [DONE].
  auto ps = request(Endpoint::Chat, 1, 1, true, false, false);
  Generation gs(ps, meta_for(ps));
  gs.on_event(0, Status::error(StatusCode::Unavailable, "busy"));
  auto ev = sse_payloads(gs.closing());
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(json::parse(ev[0])["error"]["type"], "server_error");
  EXPECT_EQ(ev[1], "[DONE]");
}

TEST(Metrics, PrometheusText) {
  serving::BackendStats s;
  s.prompt_tokens_total = 120;
  s.generated_tokens_total = 64;
  s.running = 2;
  s.waiting = 1;
  s.kv_blocks_used = 7;
  s.kv_blocks_total = 100;
  s.prefix_cache_queries = 50;
  s.prefix_cache_hits = 32;
  s.spec_draft_tokens_total = 40;
  s.spec_accepted_tokens_total = 25;
  s.time_to_first_token_s.bounds = {0.1, 1.0};
  s.time_to_first_token_s.counts = {3, 1, 1};
  s.time_to_first_token_s.sum = 4.5;
  s.time_to_first_token_s.count = 5;
  RequestCounts counts{{{"/v1/completions", 200}, 3}, {{"/v1/completions", 400}, 1}};
  std::string t = metrics_text(s, counts, "tiny");
  auto has = [&](const std::string& line) {
    return t.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("cairn_http_requests_total{route=\"/v1/completions\",status=\"200\"} 3"));
  EXPECT_TRUE(has("cairn_http_requests_total{route=\"/v1/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has("cairn_prompt_tokens_total{model=\"tiny\"} 120"));
  EXPECT_TRUE(has("cairn_generation_tokens_total{model=\"tiny\"} 64"));
  EXPECT_TRUE(has("cairn_spec_draft_tokens_total{model=\"tiny\"} 40"));
  EXPECT_TRUE(has("cairn_spec_accepted_tokens_total{model=\"tiny\"} 25"));
  EXPECT_TRUE(has("cairn_requests_running{model=\"tiny\"} 2"));
  EXPECT_TRUE(has("cairn_requests_waiting{model=\"tiny\"} 1"));
  EXPECT_TRUE(has("cairn_kv_blocks_used{model=\"tiny\"} 7"));
  EXPECT_TRUE(has("cairn_kv_blocks_total{model=\"tiny\"} 100"));
  EXPECT_TRUE(has("cairn_prefix_cache_hits_total{model=\"tiny\"} 32"));
  EXPECT_TRUE(has("cairn_prefix_cache_queries_total{model=\"tiny\"} 50"));
  // Buckets are cumulative and end at +Inf = count.
  EXPECT_TRUE(has("cairn_time_to_first_token_seconds_bucket{model=\"tiny\",le=\"0.1\"} 3"));
  EXPECT_TRUE(has("cairn_time_to_first_token_seconds_bucket{model=\"tiny\",le=\"1\"} 4"));
  EXPECT_TRUE(has("cairn_time_to_first_token_seconds_bucket{model=\"tiny\",le=\"+Inf\"} 5"));
  EXPECT_TRUE(has("cairn_time_to_first_token_seconds_sum{model=\"tiny\"} 4.5"));
  EXPECT_TRUE(has("cairn_time_to_first_token_seconds_count{model=\"tiny\"} 5"));
  EXPECT_TRUE(has("# TYPE cairn_inter_token_latency_seconds histogram"));
  EXPECT_TRUE(has("# TYPE cairn_request_queue_time_seconds histogram"));
  EXPECT_TRUE(has("# TYPE cairn_e2e_request_latency_seconds histogram"));
}

TEST(HttpRoutes, SecretCompare) {
  EXPECT_TRUE(secret_equal("abc", "abc"));
  EXPECT_FALSE(secret_equal("abc", "abd"));
  EXPECT_FALSE(secret_equal("abc", "abcd"));
  EXPECT_FALSE(secret_equal("", "a"));
  EXPECT_TRUE(secret_equal("", ""));
}

}  // namespace
}  // namespace cairn::api

namespace cairn::api {
namespace {

serving::OutputSyntax hermes_syntax(bool reasoning = false, bool starts_in = false) {
  return serving::OutputSyntax{"hermes", reasoning ? "<think>" : "", reasoning ? "</think>" : "", starts_in};
}

const char* kCallText =
    "<think>weather?</think>Let me look.\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

// A chat output with reasoning and a Hermes tool call, whole: message
// fields as OpenAI sends them and finish_reason tool_calls.
TEST(Generation, ChatToolCallsAndReasoningWhole) {
  auto p = request(Endpoint::Chat, 1, 1, false, false, false);
  Generation g(p, meta_for(p));
  EXPECT_EQ(g.on_event(0, hermes_syntax(true)), "");
  const std::string text = kCallText;
  for (size_t i = 0; i < text.size(); i += 7) g.on_event(0, tok(1, text.substr(i, 7)));
  g.on_event(0, fin("stop", 3, 9));
  ASSERT_TRUE(g.done());
  json j = json::parse(g.closing());
  const json& c = j["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["content"], "Let me look.");
  EXPECT_EQ(c["message"]["reasoning_content"], "weather?");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  const json& call = c["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));

  // No syntax event (a completion-style or plain chat output): content as is.
  Generation plain(p, meta_for(p));
  plain.on_event(0, tok(1, kCallText));
  plain.on_event(0, fin("stop", 3, 9));
  json pj = json::parse(plain.closing());
  EXPECT_EQ(pj["choices"][0]["message"]["content"], kCallText);
  EXPECT_EQ(pj["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(pj["choices"][0]["message"].contains("tool_calls"));
}

// Streamed: reasoning deltas, content deltas, then the call's id and name
// first and its arguments after, as OpenAI's chunks carry them; whatever
// the token split, the chunks add up to the whole parse.
TEST(Generation, ChatToolCallsStreamedAsOpenAiDeltas) {
  const std::string text = kCallText;
  for (size_t step : {1, 3, 1000}) {
    auto p = request(Endpoint::Chat, 1, 1, true, false, false);
    Generation g(p, meta_for(p));
    g.opening();
    g.on_event(0, hermes_syntax(true));
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size(); i += step)
      for (auto& s : sse_payloads(g.on_event(0, tok(1, text.substr(i, step))))) chunks.push_back(s);
    for (auto& s : sse_payloads(g.on_event(0, fin("stop", 3, 9)))) chunks.push_back(s);
    std::string content, reasoning, args, id, name, finish;
    int begins = 0;
    for (const auto& s : chunks) {
      json ch = json::parse(s)["choices"][0];
      const json& d = ch["delta"];
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls")) {
        const json& tc = d["tool_calls"][0];
        EXPECT_EQ(tc["index"], 0);
        if (tc.contains("id")) {
          ++begins;
          EXPECT_TRUE(args.empty()) << "the name comes before any argument";
          id = tc["id"];
          name = tc["function"]["name"];
        }
        args += tc["function"]["arguments"].get<std::string>();
      }
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(content, "Let me look.") << step;
    EXPECT_EQ(reasoning, "weather?") << step;
    EXPECT_EQ(begins, 1) << step;
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(json::parse(args), json({{"city", "Paris"}})) << step;
    EXPECT_EQ(finish, "tool_calls");
  }
}

// Cut short by max_tokens: an unfinished call stays text and the reason is
// length; a prompt that opened <think> puts the output's start in reasoning.
TEST(Generation, ChatUnfinishedCallIsContentAndReasoningMayStartOpen) {
  auto p = request(Endpoint::Chat, 1, 1, false, false, false);
  Generation g(p, meta_for(p));
  g.on_event(0, hermes_syntax(true, /*starts_in=*/true));
  g.on_event(0, tok(1, "hmm</think>ok <tool_call>\n{\"name\": \"f\", \"argu"));
  g.on_event(0, fin("length", 3, 9));
  json c = json::parse(g.closing())["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["message"]["reasoning_content"], "hmm");
  EXPECT_EQ(c["message"]["content"], "ok <tool_call>\n{\"name\": \"f\", \"argu");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
}

}  // namespace
}  // namespace cairn::api
