// Request parsing: a table of bodies with the status, param and fields they
// must produce, plus the shapes of accepted requests.
#include "api/openai_request.h"

#include <gtest/gtest.h>

#include <cmath>

#include "api/openai_response.h"

namespace cairn::api {
namespace {

using nlohmann::json;

std::vector<serving::ModelInfo> one_model() {
  serving::ModelInfo m;
  m.id = "tiny";
  m.n_ctx = 256;
  m.n_vocab = 512;
  return {m};
}

struct BadCase {
  const char* name;
  Endpoint endpoint;
  const char* body;
  int status;
  const char* param;
};

const BadCase kBad[] = {
    {"prompt missing", Endpoint::Completions, R"({})", 400, "prompt"},
    {"prompt empty", Endpoint::Completions, R"({"prompt":""})", 400, "prompt"},
    {"prompt empty list", Endpoint::Completions, R"({"prompt":[]})", 400, "prompt"},
    {"prompt list with empty", Endpoint::Completions, R"({"prompt":["a",""]})", 400, "prompt"},
    {"prompt wrong type", Endpoint::Completions, R"({"prompt":5})", 400, "prompt"},
    {"prompt object", Endpoint::Completions, R"({"prompt":{"a":1}})", 400, "prompt"},
    {"token id negative", Endpoint::Completions, R"({"prompt":[1,-1]})", 400, "prompt"},
    {"token id beyond vocab", Endpoint::Completions, R"({"prompt":[1,512]})", 400, "prompt"},
    {"nested token beyond vocab", Endpoint::Completions, R"({"prompt":[[1],[9999]]})", 400, "prompt"},
    {"token id fractional", Endpoint::Completions, R"({"prompt":[1.5]})", 400, "prompt"},
    {"unknown model", Endpoint::Completions, R"({"model":"gpt-4","prompt":"a"})", 404, "model"},
    {"model wrong type", Endpoint::Completions, R"({"model":3,"prompt":"a"})", 400, "model"},
    {"max_tokens zero", Endpoint::Completions, R"({"prompt":"a","max_tokens":0})", 400, "max_tokens"},
    {"max_tokens negative", Endpoint::Completions, R"({"prompt":"a","max_tokens":-5})", 400, "max_tokens"},
    {"max_tokens string", Endpoint::Completions, R"({"prompt":"a","max_tokens":"5"})", 400, "max_tokens"},
    {"max_tokens huge", Endpoint::Completions, R"({"prompt":"a","max_tokens":1e30})", 400, "max_tokens"},
    {"max_completion_tokens 0", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0})", 400,
     "max_completion_tokens"},
    {"temperature negative", Endpoint::Completions, R"({"prompt":"a","temperature":-0.1})", 400, "temperature"},
    {"temperature too big", Endpoint::Completions, R"({"prompt":"a","temperature":3})", 400, "temperature"},
    {"temperature string", Endpoint::Completions, R"({"prompt":"a","temperature":"hot"})", 400, "temperature"},
    {"temperature bool", Endpoint::Completions, R"({"prompt":"a","temperature":true})", 400, "temperature"},
    {"top_p above 1", Endpoint::Completions, R"({"prompt":"a","top_p":1.5})", 400, "top_p"},
    {"min_p negative", Endpoint::Completions, R"({"prompt":"a","min_p":-1})", 400, "min_p"},
    {"top_k below -1", Endpoint::Completions, R"({"prompt":"a","top_k":-2})", 400, "top_k"},
    {"presence_penalty", Endpoint::Completions, R"({"prompt":"a","presence_penalty":5})", 400, "presence_penalty"},
    {"frequency_penalty", Endpoint::Completions, R"({"prompt":"a","frequency_penalty":-5})", 400, "frequency_penalty"},
    {"repetition_penalty zero", Endpoint::Completions, R"({"prompt":"a","repetition_penalty":0})", 400, "repetition_penalty"},
    {"n zero", Endpoint::Completions, R"({"prompt":"a","n":0})", 400, "n"},
    {"n too large", Endpoint::Completions, R"({"prompt":"a","n":1000})", 400, "n"},
    {"too many choices", Endpoint::Completions,
     R"({"prompt":["a","b","c","d","e","f","g","h","i"],"n":16})", 400, "n"},
    {"stop wrong type", Endpoint::Completions, R"({"prompt":"a","stop":5})", 400, "stop"},
    {"stop list wrong type", Endpoint::Completions, R"({"prompt":"a","stop":["x",1]})", 400, "stop"},
    {"stop empty string", Endpoint::Completions, R"({"prompt":"a","stop":""})", 400, "stop"},
    {"seed string", Endpoint::Completions, R"({"prompt":"a","seed":"x"})", 400, "seed"},
    {"logit_bias not object", Endpoint::Completions, R"({"prompt":"a","logit_bias":[1]})", 400, "logit_bias"},
    {"logit_bias bad key", Endpoint::Completions, R"({"prompt":"a","logit_bias":{"x":1}})", 400, "logit_bias"},
    {"logit_bias id beyond vocab", Endpoint::Completions, R"({"prompt":"a","logit_bias":{"600":1}})", 400, "logit_bias"},
    {"logit_bias value range", Endpoint::Completions, R"({"prompt":"a","logit_bias":{"5":1000}})", 400, "logit_bias"},
    {"logprobs too many", Endpoint::Completions, R"({"prompt":"a","logprobs":21})", 400, "logprobs"},
    {"logprobs negative", Endpoint::Completions, R"({"prompt":"a","logprobs":-1})", 400, "logprobs"},
    {"echo with logprobs", Endpoint::Completions, R"({"prompt":"a","echo":true,"logprobs":1})", 400, "echo"},
    {"echo not bool", Endpoint::Completions, R"({"prompt":"a","echo":1})", 400, "echo"},
    {"suffix unsupported", Endpoint::Completions, R"({"prompt":"a","suffix":"b"})", 400, "suffix"},
    {"best_of unsupported", Endpoint::Completions, R"({"prompt":"a","best_of":3})", 400, "best_of"},
    {"functions unsupported", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"functions":[]})", 400, "functions"},
    {"audio unsupported", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"audio":{"voice":"x"}})", 400, "audio"},
    {"stream not bool", Endpoint::Completions, R"({"prompt":"a","stream":"yes"})", 400, "stream"},
    {"stream_options type", Endpoint::Completions, R"({"prompt":"a","stream_options":1})", 400, "stream_options"},
    {"ignore_eos type", Endpoint::Completions, R"({"prompt":"a","ignore_eos":1})", 400, "ignore_eos"},
    {"user type", Endpoint::Completions, R"({"prompt":"a","user":1})", 400, "user"},
    {"messages missing", Endpoint::Chat, R"({})", 400, "messages"},
    {"messages empty", Endpoint::Chat, R"({"messages":[]})", 400, "messages"},
    {"messages not list", Endpoint::Chat, R"({"messages":"hi"})", 400, "messages"},
    {"message not object", Endpoint::Chat, R"({"messages":["hi"]})", 400, "messages"},
    {"message without role", Endpoint::Chat, R"({"messages":[{"content":"hi"}]})", 400, "messages"},
    {"message bad role", Endpoint::Chat, R"({"messages":[{"role":"wizard","content":"hi"}]})", 400, "messages"},
    {"message content type", Endpoint::Chat, R"({"messages":[{"role":"user","content":5}]})", 400, "messages"},
    {"image part", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", 400,
     "messages"},
    {"chat logprobs not bool", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"logprobs":3})", 400, "logprobs"},
    {"top_logprobs without logprobs", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":3})", 400, "top_logprobs"},
    {"top_logprobs too many", Endpoint::Chat,
     R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21})", 400,
     "top_logprobs"},
    {"tools not list", Endpoint::Chat, R"({"messages":[{"role":"user","content":"hi"}],"tools":{}})", 400, "tools"},
};

TEST(OpenAiRequest, BadInputTable) {
  for (const auto& c : kBad) {
    SCOPED_TRACE(c.name);
    auto body = parse_json_object(c.body);
    ASSERT_TRUE(body.is_ok());
    auto res = parse_generate(c.endpoint, *body, one_model());
    ASSERT_FALSE(res.is_ok());
    const Status& e = res.status();
    const HttpError h = to_http_error(e);
    EXPECT_EQ(h.status, c.status);
    EXPECT_EQ(e.param(), c.param);
    EXPECT_EQ(h.body["error"]["type"], "invalid_request_error");
    EXPECT_FALSE(e.message().empty());
    EXPECT_EQ(e.message().find('\n'), std::string::npos);
  }
}

TEST(OpenAiRequest, NonFiniteNumbersAreRefused) {
  // JSON has no NaN literal; a client that writes one sends malformed JSON.
  for (const char* body : {R"({"prompt":"a","temperature":NaN})",
                           R"({"prompt":"a","top_p":Infinity})"}) {
    auto res = parse_json_object(body);
    ASSERT_FALSE(res.is_ok()) << body;
    EXPECT_EQ(to_http_error(res.status()).status, 400);
  }
  // A value beyond double range parses to infinity in some parsers: still refused.
  auto big = parse_json_object(R"({"prompt":"a","temperature":1e400})");
  if (big.is_ok()) {
    auto res = parse_generate(Endpoint::Completions, *big, one_model());
    ASSERT_FALSE(res.is_ok());
    EXPECT_EQ(res.status().param(), "temperature");
  }
}

TEST(OpenAiRequest, BodyMustBeJsonObjectInUtf8) {
  const std::string cases[] = {"", "{", "[1,2]", "\"text\"", "42", "null",
                               std::string("{\"prompt\":\"\xff\xfe\"}")};
  for (const auto& body : cases) {
    auto res = parse_json_object(body);
    ASSERT_FALSE(res.is_ok()) << body;
    EXPECT_EQ(to_http_error(res.status()).status, 400);
  }
  EXPECT_TRUE((parse_json_object(R"({"prompt":"ok"})")).is_ok());
  // Deep nesting anywhere is refused by the parser, before anything copies
  // or prints it (both recurse).
  const std::string deep = R"({"prompt": "x", "tools": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto too_deep = parse_json_object(deep);
  ASSERT_FALSE(too_deep.is_ok());
  EXPECT_NE(too_deep.status().message().find("deeper than 256"), std::string::npos);
  const std::string fine = R"({"a": )" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_TRUE(parse_json_object(fine).is_ok());
}

TEST(OpenAiRequest, ErrorMessagesDoNotEchoTheRequest) {
  const std::string secret(5000, 'z');
  json body = {{"model", secret}, {"prompt", secret}};
  auto res = parse_generate(Endpoint::Completions, body, one_model());
  ASSERT_FALSE(res.is_ok());
  EXPECT_LT(res.status().message().size(), 200u);
}

TEST(OpenAiRequest, CompletionFieldsMapToTheRequest) {
  json body = json::parse(R"({
    "model": "tiny", "prompt": "Once upon", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "n": 2, "stop": ["\n", "END"], "seed": 42,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logit_bias": {"13": -100, "7": 2.5}, "logprobs": 3, "ignore_eos": true, "user": "u1",
    "stream": true, "stream_options": {"include_usage": true}, "some_unknown_field": [1, 2]
  })");
  auto res = parse_generate(Endpoint::Completions, body, one_model());
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  const auto& p = *res;
  EXPECT_EQ(p.model, "tiny");
  EXPECT_EQ(p.n, 2);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.logprobs);
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.choices(), 2);
  const auto& r = p.prompts[0];
  EXPECT_EQ(std::get<std::string>(r.prompt), "Once upon");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  ASSERT_TRUE(r.sampling.seed.has_value());
  EXPECT_EQ(*r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias.at(13), -100.f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.speculative);  // speculative decoding unless the request opts out
  EXPECT_EQ(r.user, "u1");
  body["speculative"] = false;
  auto off = parse_generate(Endpoint::Completions, body, one_model());
  ASSERT_TRUE(off.is_ok()) << off.status().message();
  EXPECT_FALSE(off->prompts[0].speculative);
  body["speculative"] = "no";
  EXPECT_FALSE(parse_generate(Endpoint::Completions, body, one_model()).is_ok());
}

TEST(OpenAiRequest, PromptShapes) {
  auto parse = [](const char* body) {
    return parse_generate(Endpoint::Completions, json::parse(body), one_model());
  };
  auto strings = parse(R"({"prompt":["a","b"]})");
  ASSERT_TRUE(strings.is_ok());
  EXPECT_EQ(strings->prompts.size(), 2u);
  auto ids = parse(R"({"prompt":[1,2,511]})");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(std::get<std::vector<serving::Token>>(ids->prompts[0].prompt),
            (std::vector<serving::Token>{1, 2, 511}));
  auto lists = parse(R"({"prompt":[[1,2],[3]], "n": 3})");
  ASSERT_TRUE(lists.is_ok());
  EXPECT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->choices(), 6);
  // Defaults: OpenAI's 16 tokens for completions, no limit for chat; top_k -1 means off.
  auto defaults = parse(R"({"prompt":"x","top_k":-1,"max_tokens":null})");
  ASSERT_TRUE(defaults.is_ok());
  const auto& d = defaults->prompts[0];
  EXPECT_EQ(d.max_tokens, 16);
  EXPECT_EQ(d.sampling.top_k, 0);
  EXPECT_EQ(d.top_logprobs, -1);
  EXPECT_FALSE(d.sampling.seed.has_value());
}

TEST(OpenAiRequest, ChatMessagesAndLogprobs) {
  json body = json::parse(R"({
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1"}]}
    ],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
    "tools": [{"type": "function", "function": {"name": "f"}}]
  })");
  auto res = parse_generate(Endpoint::Chat, body, one_model());
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  const auto& p = *res;
  ASSERT_EQ(p.prompts.size(), 1u);
  const auto& r = p.prompts[0];
  const auto& msgs = std::get<std::vector<serving::ChatMessage>>(r.prompt);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1].content, "hello");
  EXPECT_EQ(msgs[2].role, "assistant");
  EXPECT_NE(msgs[2].extra_json.find("tool_calls"), std::string::npos);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_NE(r.tools_json.find("\"f\""), std::string::npos);
  EXPECT_EQ(
      (parse_generate(Endpoint::Chat,
                      json::parse(R"({"messages":[{"role":"user","content":"x"}]})"), one_model()))
          ->prompts[0]
          .max_tokens,
      -1);
}

TEST(OpenAiRequest, ModelResolution) {
  auto models = one_model();
  serving::ModelInfo second;
  second.id = "other";
  second.n_vocab = 10;
  models.push_back(second);
  // With two models served the name is required; a served name picks it.
  auto missing = parse_generate(Endpoint::Completions, json::parse(R"({"prompt":"a"})"), models);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(to_http_error(missing.status()).status, 400);
  auto named = parse_generate(Endpoint::Completions,
                              json::parse(R"({"prompt":[11],"model":"other"})"), models);
  ASSERT_FALSE(named.is_ok());  // token 11 is beyond its 10-token vocab
  auto ok = parse_generate(Endpoint::Completions, json::parse(R"({"prompt":[9],"model":"other"})"),
                           models);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->model, "other");
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  auto t = parse_tokenize(json::parse(R"({"prompt":"hello","add_special":false})"), one_model());
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->text, "hello");
  EXPECT_FALSE(t->add_special);
  EXPECT_TRUE(t->parse_special);  // llama.cpp's server default
  EXPECT_FALSE(t->with_pieces);
  auto c = parse_tokenize(json::parse(R"({"content":"hi"})"), one_model());
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->text, "hi");
  auto p = parse_tokenize(
      json::parse(R"({"prompt":"<|im_start|>","parse_special":false,"with_pieces":true})"),
      one_model());
  ASSERT_TRUE(p.is_ok());
  EXPECT_FALSE(p->parse_special);
  EXPECT_TRUE(p->with_pieces);
  EXPECT_FALSE((parse_tokenize(json::parse(R"({"prompt":"a","parse_special":1})"), one_model()))
                   .is_ok());
  EXPECT_FALSE((parse_tokenize(json::parse(R"({"prompt":"a","with_pieces":"yes"})"), one_model()))
                   .is_ok());
  EXPECT_FALSE((parse_tokenize(json::parse(R"({"prompt":3})"), one_model())).is_ok());
  auto d = parse_detokenize(json::parse(R"({"tokens":[1,2,3]})"), one_model());
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->tokens.size(), 3u);
  auto bad = parse_detokenize(json::parse(R"({"tokens":[1,512]})"), one_model());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().param(), "tokens");
}

TEST(OpenAiRequest, BackendErrorsMapToStatus) {
  struct Row {
    StatusCode kind;
    int status;
    const char* type;
  };
  const Row rows[] = {{StatusCode::InvalidArgument, 400, "invalid_request_error"},
                      {StatusCode::NotFound, 404, "invalid_request_error"},
                      {StatusCode::Unavailable, 503, "server_error"},
                      {StatusCode::Internal, 500, "server_error"}};
  for (const auto& r : rows) {
    const HttpError a = to_http_error(Status::error(r.kind, "m", "p"));
    EXPECT_EQ(a.status, r.status);
    EXPECT_EQ(a.body["error"]["type"], r.type);
    EXPECT_EQ(a.body["error"]["param"], "p");
  }
}

}  // namespace
}  // namespace cairn::api

namespace cairn::api {
namespace {

// Structured outputs: each field's grammar, and the 400s that name the field.
TEST(OpenAiRequest, ConstraintsBecomeAGrammar) {
  const auto grammar_of = [](const std::string& extra) -> std::string {
    json body = json::parse(R"({"model": "tiny", "prompt": "x", )" + extra + "}");
    auto res = parse_generate(Endpoint::Completions, body, one_model());
    EXPECT_TRUE(res.is_ok()) << extra << ": " << res.status().message();
    return res.is_ok() ? res->prompts[0].grammar : std::string("<error>");
  };
  EXPECT_TRUE(grammar_of(R"("response_format": {"type": "text"})").empty());
  EXPECT_NE(grammar_of(R"("response_format": {"type": "json_object"})").find("json-object"), std::string::npos);
  EXPECT_NE(grammar_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n",
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}})")
                .find("\\\"a\\\""),
            std::string::npos);
  EXPECT_FALSE(grammar_of(R"("guided_json": "{\"type\": \"string\"}")").empty());
  EXPECT_FALSE(grammar_of(R"("json_schema": {"type": "boolean"})").empty());
  EXPECT_NE(grammar_of(R"("guided_choice": ["yes", "no \"quoted\""])").find(R"("no \"quoted\"")"), std::string::npos);
  EXPECT_FALSE(grammar_of(R"("guided_regex": "[0-9]+")").empty());
  EXPECT_EQ(grammar_of(R"("grammar": "root ::= \"a\"")"), "root ::= \"a\"");

  const auto refused = [](const std::string& extra, const std::string& param) {
    json body = json::parse(R"({"model": "tiny", "prompt": "x", )" + extra + "}");
    auto res = parse_generate(Endpoint::Completions, body, one_model());
    ASSERT_FALSE(res.is_ok()) << extra;
    EXPECT_EQ(res.status().param(), param) << extra << ": " << res.status().message();
    EXPECT_EQ(to_http_error(res.status()).status, 400);
  };
  refused(R"("response_format": {"type": "yaml"})", "response_format");
  refused(R"("response_format": {"type": "json_schema"})", "response_format");
  refused(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "format": "ipv6"}}})",
          "response_format");
  refused(R"("guided_regex": "(a)\\1")", "guided_regex");
  refused(R"("guided_choice": [])", "guided_choice");
  refused(R"("grammar": "root ::= missing")", "grammar");
  refused(R"("guided_json": "{not json")", "guided_json");
  refused(R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex");
}

}  // namespace
}  // namespace cairn::api

namespace cairn::api {
namespace {

// Tools, tool_choice, parallel_tool_calls and chat_template_kwargs, and the
// client's key order kept from the body to the request (templates print it).
TEST(OpenAiRequest, ToolFieldsKeepTheClientsKeyOrder) {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "description": "d",
           "parameters": {"type": "object", "properties": {"z": {"type": "string"},
           "a": {"type": "integer"}}, "required": ["z"]}}},
          {"type": "function", "function": {"name": "other"}}])";
  const auto parse = [&](const std::string& extra) {
    auto body = parse_json_object(R"({"messages": [{"role": "user", "content": "x",
        "name": "u", "extra": {"y": 1, "b": 2}}], "tools": )" + tools + extra + "}");
    EXPECT_TRUE(body.is_ok());
    return parse_generate(Endpoint::Chat, *body, one_model());
  };
  auto r = parse("");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const auto& req = r->prompts[0];
  // "type" before "function", "name" before "description", "z" before "a".
  EXPECT_LT(req.tools_json.find("\"type\""), req.tools_json.find("\"function\""));
  EXPECT_LT(req.tools_json.find("\"name\""), req.tools_json.find("\"description\""));
  EXPECT_LT(req.tools_json.find("\"z\""), req.tools_json.find("\"a\""));
  const auto& msgs = std::get<std::vector<serving::ChatMessage>>(req.prompt);
  EXPECT_LT(msgs[0].extra_json.find("\"y\""), msgs[0].extra_json.find("\"b\""));
  EXPECT_EQ(req.tool_choice, serving::ToolChoice::Auto);
  EXPECT_TRUE(req.parallel_tool_calls);

  auto named = parse(R"(, "tool_choice": {"type": "function", "function": {"name": "other"}},
                        "parallel_tool_calls": false, "chat_template_kwargs": {"enable_thinking": false})");
  ASSERT_TRUE(named.is_ok()) << named.status().message();
  EXPECT_EQ(named->prompts[0].tool_choice, serving::ToolChoice::Named);
  EXPECT_EQ(named->prompts[0].tool_choice_name, "other");
  EXPECT_FALSE(named->prompts[0].parallel_tool_calls);
  EXPECT_EQ(named->prompts[0].chat_template_kwargs_json, R"({"enable_thinking":false})");
  EXPECT_EQ(parse(R"(, "tool_choice": "required")")->prompts[0].tool_choice,
            serving::ToolChoice::Required);
  EXPECT_EQ(parse(R"(, "tool_choice": "none")")->prompts[0].tool_choice, serving::ToolChoice::None);

  // The schema of a response_format keeps its order into the grammar too.
  auto body = parse_json_object(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}}}})");
  ASSERT_TRUE(body.is_ok());
  auto g = parse_generate(Endpoint::Completions, *body, one_model());
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_LT(g->prompts[0].grammar.find("zeta"), g->prompts[0].grammar.find("alpha"));

  const auto refused = [&](const std::string& extra, const std::string& param) {
    auto res = parse(extra);
    ASSERT_FALSE(res.is_ok()) << extra;
    EXPECT_EQ(res.status().param(), param) << extra << ": " << res.status().message();
  };
  refused(R"(, "tool_choice": "sometimes")", "tool_choice");
  refused(R"(, "tool_choice": {"type": "function", "function": {"name": "missing"}})", "tool_choice");
  refused(R"(, "tool_choice": {"type": "function"})", "tool_choice");
  refused(R"(, "tool_choice": 3)", "tool_choice");
  refused(R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls");
  refused(R"(, "chat_template_kwargs": [1])", "chat_template_kwargs");
  refused(R"(, "tool_choice": "required", "response_format": {"type": "json_object"})", "tool_choice");
  const auto tools_refused = [](const std::string& t) {
    auto body = parse_json_object(R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + t + "}");
    ASSERT_TRUE(body.is_ok());
    auto res = parse_generate(Endpoint::Chat, *body, one_model());
    ASSERT_FALSE(res.is_ok()) << t;
    EXPECT_EQ(res.status().param(), "tools") << t;
  };
  tools_refused(R"({"type": "function"})");
  tools_refused(R"([{"type": "retrieval"}])");
  tools_refused(R"([{"type": "function", "function": {"description": "no name"}}])");
  tools_refused(R"([{"type": "function", "function": {"name": "f", "parameters": "str"}}])");
  auto none = parse_json_object(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})");
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(parse_generate(Endpoint::Chat, *none, one_model()).status().param(), "tool_choice");
}

TEST(OpenAiRequest, EchoKeepsThePrompt) {
  auto r = parse_generate(Endpoint::Completions,
                          RequestJson::parse(R"({"prompt":"a","echo":true,"best_of":1})"), one_model());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->echo);
}

std::vector<serving::ModelInfo> embedding_model() {
  auto m = one_model();
  m[0].n_embd = 8;
  return m;
}

TEST(OpenAiRequest, EmbeddingInputShapes) {
  auto parse = [](const char* body) {
    return parse_embeddings(RequestJson::parse(body), embedding_model());
  };
  auto one = parse(R"({"input":"hello"})");
  ASSERT_TRUE(one.is_ok());
  ASSERT_EQ(one->request.inputs.size(), 1u);
  EXPECT_EQ(std::get<std::string>(one->request.inputs[0]), "hello");
  EXPECT_FALSE(one->base64);
  EXPECT_TRUE(one->request.normalize);
  EXPECT_EQ(one->model, "tiny");

  auto ids = parse(R"({"input":[1,2,3],"encoding_format":"base64"})");
  ASSERT_TRUE(ids.is_ok());
  ASSERT_EQ(ids->request.inputs.size(), 1u);
  EXPECT_EQ(std::get<std::vector<serving::Token>>(ids->request.inputs[0]),
            (std::vector<serving::Token>{1, 2, 3}));
  EXPECT_TRUE(ids->base64);

  auto many = parse(R"({"input":["a",[4,5],"b"],"dimensions":8,"normalize":false})");
  ASSERT_TRUE(many.is_ok()) << many.status().message();
  ASSERT_EQ(many->request.inputs.size(), 3u);
  EXPECT_EQ(std::get<std::vector<serving::Token>>(many->request.inputs[1]),
            (std::vector<serving::Token>{4, 5}));
  EXPECT_FALSE(many->request.normalize);
  EXPECT_FALSE(many->request.query.has_value());
}

TEST(OpenAiRequest, BadEmbeddingRequests) {
  const std::pair<const char*, const char*> kCases[] = {
      {R"({})", "input"},
      {R"({"input":""})", "input"},
      {R"({"input":[]})", "input"},
      {R"({"input":["a",""]})", "input"},
      {R"({"input":5})", "input"},
      {R"({"input":[1,"a",{}]})", "input"},
      {R"({"input":[[1],[]]})", "input"},
      {R"({"input":[512]})", "input"},
      {R"({"input":[[1],[-1]]})", "input"},
      {R"({"input":"a","encoding_format":"int8"})", "encoding_format"},
      {R"({"input":"a","dimensions":4})", "dimensions"},
      {R"({"input":"a","dimensions":"8"})", "dimensions"},
      {R"({"input":"a","normalize":1})", "normalize"},
      {R"({"input":"a","user":1})", "user"},
      {R"({"input":"a","model":"other"})", "model"},
  };
  for (const auto& [body, param] : kCases) {
    auto r = parse_embeddings(RequestJson::parse(body), embedding_model());
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(r.status().param(), param) << body << ": " << r.status().message();
  }
  RequestJson big = {{"input", RequestJson::array()}};
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) big["input"].push_back("x");
  auto r = parse_embeddings(big, embedding_model());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().param(), "input");
}

TEST(OpenAiRequest, RerankRequests) {
  auto r = parse_rerank(
      RequestJson::parse(
          R"({"query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false})"),
      one_model());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r->request.query, "q");
  EXPECT_EQ(r->documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->request.inputs.size(), 2u);
  EXPECT_EQ(*r->top_n, 1);
  EXPECT_FALSE(r->return_documents);
  // llama.cpp's server calls them texts.
  EXPECT_TRUE(parse_rerank(RequestJson::parse(R"({"query":"q","texts":["a"]})"), one_model()).is_ok());
  const std::pair<const char*, const char*> kCases[] = {
      {R"({"documents":["a"]})", "query"},
      {R"({"query":1,"documents":["a"]})", "query"},
      {R"({"query":"q"})", "documents"},
      {R"({"query":"q","documents":[]})", "documents"},
      {R"({"query":"q","documents":[1]})", "documents"},
      {R"({"query":"q","documents":[{"txt":"a"}]})", "documents"},
      {R"({"query":"q","documents":["a"],"top_n":0})", "top_n"},
  };
  for (const auto& [body, param] : kCases) {
    auto bad = parse_rerank(RequestJson::parse(body), one_model());
    ASSERT_FALSE(bad.is_ok()) << body;
    EXPECT_EQ(bad.status().param(), param) << body;
  }
}

TEST(OpenAiResponse, EmbeddingsAndRerankShapes) {
  serving::EmbedResult result{{{1.0f, -2.5f}, {0.0f, 3.0f}}, 7};
  json plain = embeddings_response("m", result, false);
  EXPECT_EQ(plain["object"], "list");
  EXPECT_EQ(plain["model"], "m");
  EXPECT_EQ(plain["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(plain["usage"]["total_tokens"], 7);
  ASSERT_EQ(plain["data"].size(), 2u);
  EXPECT_EQ(plain["data"][1]["index"], 1);
  EXPECT_EQ(plain["data"][0]["embedding"], json::array({1.0, -2.5}));
  // base64 of little-endian float32: 1.0 = 00 00 80 3f, -2.5 = 00 00 20 c0.
  json b64 = embeddings_response("m", result, true);
  EXPECT_EQ(b64["data"][0]["embedding"], "AACAPwAAIMA=");

  RerankRequest req;
  req.model = "r";
  req.documents = {"a", "b", "c"};
  req.top_n = 2;
  serving::EmbedResult scores{{{0.1f}, {0.9f}, {0.5f}}, 12};
  json ranked = rerank_response(req, scores);
  ASSERT_EQ(ranked["results"].size(), 2u);
  EXPECT_EQ(ranked["results"][0]["index"], 1);
  EXPECT_EQ(ranked["results"][0]["document"]["text"], "b");
  EXPECT_EQ(ranked["results"][1]["index"], 2);
  EXPECT_EQ(ranked["usage"]["prompt_tokens"], 12);
}

}  // namespace
}  // namespace cairn::api
