// Tool calls and reasoning out of generated text: format names and detection
// (every template in ../shared/templates, and markers alone), the whole parse
// of each format, look-alikes that stay content, the streaming parser against
// the whole parse at every split, reasoning, call ids, and the tool_choice
// grammars checked with the grammar layer's matcher.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "test_util.h"

namespace cairn::chat {
namespace {

using Json = nlohmann::ordered_json;

using test::read_file;

TEST(ToolFormat, NamesRoundTripAndUnknownListsValid) {
  for (const std::string& n : tool_format_names()) {
    auto f = tool_format_from_name(n);
    ASSERT_TRUE(f) << n;
    EXPECT_EQ(tool_format_name(*f), n);
  }
  EXPECT_EQ(tool_format_names().size(), 9u);
  auto bad = tool_format_from_name("qwen");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.status().message().find("'qwen'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("hermes, llama3_json, mistral"), std::string::npos);
}

TEST(ToolFormat, DetectsFromEveryTemplate) {
  CAIRN_REQUIRE_SHARED("templates");
  const std::map<std::string, ToolFormat> want = {
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolFormat::CommandR},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolFormat::CommandR},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFormat::Hermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::Hermes},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolFormat::DeepSeekR1},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolFormat::DeepSeekR1},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ToolFormat::FireFunction},
      {"google-gemma-2-2b-it.jinja", ToolFormat::None},
      {"llama-cpp-deepseek-r1.jinja", ToolFormat::DeepSeekR1},
      {"meetkai-functionary-medium-v3.1.jinja", ToolFormat::FunctionaryV31},
      {"meetkai-functionary-medium-v3.2.jinja", ToolFormat::FunctionaryV32},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::Llama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::Llama3Json},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolFormat::None},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::Mistral},
  };
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(*test::shared_dir() / "templates")) {
    const std::string file = e.path().filename().string();
    const auto it = want.find(file);
    if (it == want.end()) {
      ADD_FAILURE() << "a template this test does not know: " << file << " (detected "
                    << tool_format_name(detect_tool_format(read_file(e.path()))) << ")";
      continue;
    }
    EXPECT_EQ(tool_format_name(detect_tool_format(read_file(e.path()))), tool_format_name(it->second)) << file;
    ++seen;
  }
  EXPECT_EQ(seen, want.size());
}

// Templates not in ../shared: the markers alone decide.
TEST(ToolFormat, DetectsByMarkersAlone) {
  // Qwen3's tool instructions.
  EXPECT_EQ(detect_tool_format("{{- \"For each function call, return a json object with function name and arguments "
                               "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
                               "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call>\" }}"),
            ToolFormat::Hermes);
  EXPECT_EQ(detect_tool_format("{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}"), ToolFormat::Mistral);
  EXPECT_EQ(detect_tool_format("{{ '<|python_tag|>' }}"), ToolFormat::Llama3Json);
  EXPECT_EQ(detect_tool_format("{{ '<|START_ACTION|>' }}"), ToolFormat::CommandR);
  EXPECT_EQ(detect_tool_format("{{ '<｜tool▁call▁begin｜>' }}"), ToolFormat::DeepSeekR1);
  EXPECT_EQ(detect_tool_format("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolFormat::None);
  // --tool-parser: auto (or nothing) detects, a name overrides, a wrong name fails.
  EXPECT_EQ(*resolve_tool_format("", "<tool_call>"), ToolFormat::Hermes);
  EXPECT_EQ(*resolve_tool_format("auto", "[TOOL_CALLS]"), ToolFormat::Mistral);
  EXPECT_EQ(*resolve_tool_format("none", "<tool_call>"), ToolFormat::None);
  EXPECT_FALSE(resolve_tool_format("hermes2", "<tool_call>"));
}

struct Call {
  std::string name, arguments;
};
struct Case {
  ToolFormat format;
  std::string text;
  std::string content;
  std::vector<Call> calls;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // hermes: one, several, with text before, arguments as a string, a look-alike.
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "", {{"get_weather", R"({"city":"Paris"})"}}},
      {ToolFormat::Hermes,
       "Let me check both. 😀\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2, {\"y\": \"}\"}]}}\n</tool_call>\n"
       "<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>",
       "Let me check both. 😀", {{"a", R"({"x":[1,2,{"y":"}"}]})"}, {"b", "{}"}}},
      {ToolFormat::Hermes, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>", "",
       {{"s", R"({"q":1})"}}},
      {ToolFormat::Hermes, "I would write <tool_call> here, but no.", "I would write <tool_call> here, but no.", {}},
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>", {}},
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", {}},
      // The closing tag may be cut by the end of the output, nothing else.
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", "", {{"f", "{}"}}},
      {ToolFormat::Hermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
       "", {{"f", "{}"}, {"g", "{}"}}},
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} and more",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} and more", {}},
      {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"", {}},
      {ToolFormat::Hermes, "Text only, ending in <tool_", "Text only, ending in <tool_", {}},
      // llama3_json
      {ToolFormat::Llama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {ToolFormat::Llama3Json,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"arguments\": {}}", "",
       {{"a", R"({"n":1})"}, {"b", "{}"}}},
      {ToolFormat::Llama3Json, "{\"name\": \"x\", \"parameters\": {}};", ";", {{"x", "{}"}}},
      {ToolFormat::Llama3Json, "Here is JSON: {\"name\": \"x\", \"parameters\": {}}",
       "Here is JSON: {\"name\": \"x\", \"parameters\": {}}", {}},
      {ToolFormat::Llama3Json, "{\"name\": \"Bob\", \"age\": 3}", "{\"name\": \"Bob\", \"age\": 3}", {}},
      {ToolFormat::Llama3Json, "<|python_tag|>brave_search.call(query=\"x\")",
       "<|python_tag|>brave_search.call(query=\"x\")", {}},
      // mistral: the array form and the name[ARGS] form.
      {ToolFormat::Mistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}, \"id\": \"abcdefghi\"}, {\"name\": \"b\", \"arguments\": {}}]",
       "", {{"a", R"({"k":"v"})"}, {"b", "{}"}}},
      {ToolFormat::Mistral, "Sure.[TOOL_CALLS]get_time[ARGS]{\"tz\": \"UTC\"}[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{}",
       "Sure.", {{"get_time", R"({"tz":"UTC"})"}, {"f", "{}"}}},
      {ToolFormat::Mistral, "[TOOL_CALLS] nothing", "[TOOL_CALLS] nothing", {}},
      // firefunction
      {ToolFormat::FireFunction,
       " functools[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {\"y\": \"z\"}}]", "",
       {{"a", R"({"x":1})"}, {"b", R"({"y":"z"})"}}},
      {ToolFormat::FireFunction, "functools are nice", "functools are nice", {}},
      // functionary v3.1
      {ToolFormat::FunctionaryV31, "Calling.<function=get_weather>{\"city\": \"Rome\"}</function><function=b>{}</function>",
       "Calling.", {{"get_weather", R"({"city":"Rome"})"}, {"b", "{}"}}},
      {ToolFormat::FunctionaryV31, "<|python_tag|>print(1 + 1)\n", "", {{"python", R"j({"code":"print(1 + 1)"})j"}}},
      {ToolFormat::FunctionaryV31, "a <function=x> b", "a <function=x> b", {}},
      // functionary v3.2 (the prompt ends with `>>>`)
      {ToolFormat::FunctionaryV32, "get_weather\n{\"city\": \"Lima\"}>>>b\n{}", "",
       {{"get_weather", R"({"city":"Lima"})"}, {"b", "{}"}}},
      {ToolFormat::FunctionaryV32, "all\nHello there.>>>f\n{\"a\": 1}", "Hello there.", {{"f", R"({"a":1})"}}},
      {ToolFormat::FunctionaryV32, "all\nx >>> y", "x >>> y", {}},
      // command_r
      {ToolFormat::CommandR,
       "I will search.\nAction: ```json\n[\n    {\n        \"tool_name\": \"internet_search\",\n        \"parameters\": "
       "{\"query\": \"q\"}\n    }\n]\n```",
       "I will search.", {{"internet_search", R"({"query":"q"})"}}},
      {ToolFormat::CommandR, "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]<|END_ACTION|>",
       "", {{"f", "{}"}}},
      {ToolFormat::CommandR, "Action: nothing to do", "Action: nothing to do", {}},
      {ToolFormat::CommandR, "<|START_RESPONSE|>Hello!<|END_RESPONSE|>", "Hello!", {}},
      // deepseek_r1
      {ToolFormat::DeepSeekR1,
       "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
       "\"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```<｜tool▁call▁end｜><"
       "｜tool▁calls▁end｜>",
       "Let me look.", {{"get_weather", R"({"city":"Tokyo"})"}, {"b", "{}"}}},
      {ToolFormat::DeepSeekR1, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{\"a\": \"ü\"}<｜tool▁call▁end｜>", "",
       {{"f", R"({"a":"ü"})"}}},
      {ToolFormat::DeepSeekR1,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"UTC\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "",
       {{"get_time", R"({"tz":"UTC"})"}}},
      // none: everything is content, trimmed.
      {ToolFormat::None, "  <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> \n",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", {}},
  };
  return all;
}

void expect_calls(const ParsedOutput& got, const std::vector<Call>& want) {
  ASSERT_EQ(got.tool_calls.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, want[i].name);
    EXPECT_EQ(got.tool_calls[i].arguments, want[i].arguments);
    EXPECT_EQ(got.tool_calls[i].id.size(), 29u);
  }
}

OutputParserOptions options(ToolFormat f, uint64_t seed = 7) {
  OutputParserOptions o;
  o.format = f;
  o.ids = seeded_ids(seed);
  return o;
}

TEST(ToolCalls, WholeOutputOfEveryFormat) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(tool_format_name(c.format)) + ": " + c.text);
    const ParsedOutput got = parse_output(c.text, options(c.format));
    EXPECT_EQ(got.content, c.content);
    EXPECT_TRUE(got.reasoning_content.empty());
    expect_calls(got, c.calls);
  }
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = (unsigned char)s[i];
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Feeds `pieces` and checks the chunk rules on the way: text deltas are
// whole characters, a call's Begin comes before its arguments, indices count up.
ParsedOutput stream(const std::vector<std::string_view>& pieces, OutputParserOptions o) {
  OutputParser p(std::move(o));
  ParsedOutput out;
  size_t begun = 0;
  const auto take = [&](const std::vector<OutputDelta>& ds) {
    for (const OutputDelta& d : ds) {
      if (d.kind == OutputDelta::Kind::ToolCallBegin) {
        EXPECT_EQ(d.index, begun);
        ++begun;
      } else if (d.kind == OutputDelta::Kind::ToolCallArgs) {
        EXPECT_LT(d.index, begun);
      } else {
        EXPECT_FALSE(d.text.empty());
        EXPECT_TRUE(valid_utf8(d.text)) << d.text;
      }
    }
    apply_deltas(out, ds);
  };
  for (std::string_view s : pieces) take(p.feed(s));
  take(p.finish());
  EXPECT_EQ(p.n_tool_calls(), begun);
  return out;
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b) {
  EXPECT_EQ(a.content, b.content);
  EXPECT_EQ(a.reasoning_content, b.reasoning_content);
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].id, b.tool_calls[i].id);
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
}

TEST(ToolCalls, StreamingMatchesWholeAtEverySplit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(tool_format_name(c.format)) + ": " + c.text);
    const ParsedOutput whole = parse_output(c.text, options(c.format));
    const std::string_view t = c.text;
    for (size_t i = 0; i <= t.size(); ++i) {
      SCOPED_TRACE("split at " + std::to_string(i));
      expect_same(stream({t.substr(0, i), t.substr(i)}, options(c.format)), whole);
      if (::testing::Test::HasFailure()) return;
    }
    // And byte by byte, as a tokenizer of single bytes would give it.
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
    expect_same(stream(bytes, options(c.format)), whole);
  }
}

// Random texts made of the formats' pieces (markers, their prefixes, call
// objects, broken JSON, separators, multi-byte characters), fed in random
// pieces: the deltas always add up to the whole parse, and no text is lost.
TEST(ToolCalls, RandomTextsStreamLikeTheWhole) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "<tool_", "<|python_tag|>", "<|python", "[TOOL_CALLS]", "[TOOL_", "[ARGS]",
      "[CALL_ID]", "functools", " functools[", "<function=", "</function>", ">>>", "all\n", "f\n", "Action:",
      "```json\n", "```", "<|START_ACTION|>", "<|END_ACTION|>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
      "function<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool▁", "<think>", "</think>", "</thi",
      "{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}", "{\"name\": \"g\", \"parameters\": {}}",
      "[{\"name\": \"h\", \"arguments\": {}}]", "[{\"tool_name\": \"t\", \"parameters\": {\"x\": 1}}]",
      "{\"a\": 1}", "{", "}", "[", "]", "\"", "\\", ";", " ", "\n", "word", "é", "😀", "天", "get_weather", "<", ">"};
  std::mt19937 rng(1234);
  const std::vector<ToolFormat> formats = {ToolFormat::None,         ToolFormat::Hermes,         ToolFormat::Llama3Json,
                                           ToolFormat::Mistral,      ToolFormat::FireFunction,   ToolFormat::FunctionaryV31,
                                           ToolFormat::FunctionaryV32, ToolFormat::CommandR,   ToolFormat::DeepSeekR1};
  // Whole calls of each format, so that many texts hold some.
  const std::map<ToolFormat, std::vector<std::string>> calls = {
      {ToolFormat::None, {"<tool_call>{\"name\": \"f\"}</tool_call>"}},
      {ToolFormat::Hermes, {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"}},
      {ToolFormat::Llama3Json, {"{\"name\": \"g\", \"parameters\": {\"b\": \"é\"}}", "<|python_tag|>{\"name\": \"g\", \"parameters\": {}}", "; "}},
      {ToolFormat::Mistral, {"[TOOL_CALLS][{\"name\": \"h\", \"arguments\": {}}]", "[TOOL_CALLS]f[ARGS]{\"a\": 1}"}},
      {ToolFormat::FireFunction, {" functools[{\"name\": \"h\", \"arguments\": {\"x\": []}}]"}},
      {ToolFormat::FunctionaryV31, {"<function=f>{\"a\": 1}</function>", "<|python_tag|>x = 1"}},
      {ToolFormat::FunctionaryV32, {">>>f\n{\"a\": 1}", ">>>all\nhi ", "f\n{}", "all\n"}},
      {ToolFormat::CommandR, {"Action: ```json\n[{\"tool_name\": \"t\", \"parameters\": {}}]\n```",
                              "<|START_ACTION|>[{\"tool_name\": \"t\", \"parameters\": {}}]<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"}},
      {ToolFormat::DeepSeekR1, {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                                "<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n{\"a\": 2}<｜tool▁call▁end｜>",
                                "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜>"}},
  };
  size_t calls_seen = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const ToolFormat f = formats[iter % formats.size()];
    const auto& own = calls.at(f);
    std::string text;
    const int n = 1 + (int)(rng() % 12);
    for (int k = 0; k < n; ++k) text += rng() % 3 == 0 ? own[rng() % own.size()] : pieces[rng() % pieces.size()];
    OutputParserOptions o = options(f);
    o.reasoning = iter % 3 == 0 ? ReasoningMode::Split : iter % 3 == 1 ? ReasoningMode::Inline : ReasoningMode::Off;
    o.starts_in_reasoning = iter % 6 == 0;
    const ParsedOutput whole = parse_output(text, o);
    calls_seen += whole.tool_calls.size();
    // Nothing lost: with no call found and no reasoning split off, the content
    // is the text, trimmed (but functionary v3.2 drops its `all\n` headers, command_r
    // its response tags).
    if (whole.tool_calls.empty() && o.reasoning != ReasoningMode::Split && f != ToolFormat::FunctionaryV32 &&
        f != ToolFormat::CommandR) {
      size_t lead = 0, end = text.size();
      while (lead < end && std::isspace((unsigned char)text[lead])) ++lead;
      while (end > lead && std::isspace((unsigned char)text[end - 1])) --end;
      EXPECT_EQ(whole.content, text.substr(lead, end - lead)) << text;
    }
    std::vector<std::string_view> split;
    const std::string_view t = text;
    size_t at = 0;
    while (at < t.size()) {
      const size_t len = 1 + rng() % 7;
      split.push_back(t.substr(at, len));
      at += len;
    }
    SCOPED_TRACE(std::string(tool_format_name(f)) + ": " + text);
    OutputParserOptions so = options(f);
    so.reasoning = o.reasoning;
    so.starts_in_reasoning = o.starts_in_reasoning;
    expect_same(stream(split, so), whole);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(calls_seen, 300u) << "the random texts should hold calls too";
}

// Content flows as it comes: text that cannot start a marker is not held.
TEST(ToolCalls, StreamingReleasesContentEarly) {
  OutputParser p(options(ToolFormat::Hermes));
  auto d = p.feed("Hello wor");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "Hello wor");
  d = p.feed("ld <tool");  // "<tool" may start <tool_call>; the space may be trailing
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "ld");
  d = p.feed("_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].kind, OutputDelta::Kind::ToolCallBegin);
  EXPECT_EQ(d[0].name, "f");
  EXPECT_EQ(d[1].kind, OutputDelta::Kind::ToolCallArgs);
  EXPECT_EQ(d[1].text, R"({"a":1})");
  EXPECT_TRUE(p.finish().empty());
}

// A long call streamed in small pieces costs its length, not its square:
// the bracket scan resumes where it stopped (a quadratic rescan of these
// 600 KB would take minutes).
TEST(ToolCalls, LongCallStreamsInLinearTime) {
  std::string body(600'000, 'x');
  for (size_t i = 0; i < body.size(); i += 97) body[i] = '{';  // brackets inside a string do not count
  const std::string text = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"" + body + "\"}}\n</tool_call>";
  OutputParser p(options(ToolFormat::Hermes));
  ParsedOutput out;
  for (size_t i = 0; i < text.size(); i += 3) apply_deltas(out, p.feed(std::string_view(text).substr(i, 3)));
  apply_deltas(out, p.finish());
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"text\":\"" + body + "\"}");
  EXPECT_EQ(out.content, "");
}

TEST(ToolCalls, CallIds) {
  const IdSource a = seeded_ids(1), b = seeded_ids(1), c = seeded_ids(2);
  const std::string id = make_call_id(a);
  EXPECT_EQ(id, make_call_id(b));
  EXPECT_NE(id, make_call_id(c));
  ASSERT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  for (char ch : id.substr(5)) EXPECT_TRUE(std::isalnum((unsigned char)ch)) << id;
  // Without a source the ids are random, and differ.
  const auto x = parse_output("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
                              "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                              [] {
                                OutputParserOptions o;
                                o.format = ToolFormat::Hermes;
                                return o;
                              }());
  ASSERT_EQ(x.tool_calls.size(), 2u);
  EXPECT_NE(x.tool_calls[0].id, x.tool_calls[1].id);
}

// ---- reasoning

struct ReasoningCase {
  ReasoningMode mode;
  bool starts_in_reasoning;
  ToolFormat format;
  std::string text, reasoning, content;
  size_t n_calls;
};

TEST(Reasoning, SplitInlineAndWithToolCalls) {
  const std::vector<ReasoningCase> rc = {
      {ReasoningMode::Split, false, ToolFormat::None, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.", "Hmm, 2+2.", "It is 4.", 0},
      {ReasoningMode::Split, true, ToolFormat::None, "Hmm, 2+2.\n</think>\n\nIt is 4.", "Hmm, 2+2.", "It is 4.", 0},
      {ReasoningMode::Split, true, ToolFormat::None, "Still thinking when cut off", "Still thinking when cut off", "", 0},
      {ReasoningMode::Split, false, ToolFormat::None, "No reasoning <think>here</think>.",
       "", "No reasoning <think>here</think>.", 0},
      {ReasoningMode::Split, false, ToolFormat::None, "<think></think>Direct.", "", "Direct.", 0},
      {ReasoningMode::Split, false, ToolFormat::None, "<thin", "", "<thin", 0},
      {ReasoningMode::Inline, true, ToolFormat::None, "Hmm.</think>It is 4.", "", "Hmm.</think>It is 4.", 0},
      {ReasoningMode::Inline, false, ToolFormat::None, "<think>Hmm.</think>It is 4.", "", "<think>Hmm.</think>It is 4.", 0},
      {ReasoningMode::Off, false, ToolFormat::None, "<think>Hmm.</think>It is 4.", "", "<think>Hmm.</think>It is 4.", 0},
      // Inline: the reasoning is content as written, and a call in it is not a call.
      {ReasoningMode::Inline, false, ToolFormat::Hermes,
       " <think>\nUse <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?\n</think>\n"
       "<tool_call>{\"name\": \"w\", \"arguments\": {}}</tool_call>",
       "", "<think>\nUse <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>?\n</think>", 1},
      // Qwen3: reasoning, then a call; a <tool_call> inside the reasoning is not a call.
      {ReasoningMode::Split, false, ToolFormat::Hermes,
       "<think>\nI could use <tool_call> for the 天气.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
       "I could use <tool_call> for the 天气.", "", 1},
      // DeepSeek-R1: the prompt opened <think>.
      {ReasoningMode::Split, true, ToolFormat::DeepSeekR1,
       "Need the weather.</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>w\n```json\n{}\n```"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Need the weather.", "", 1},
  };
  for (const auto& c : rc) {
    SCOPED_TRACE(c.text);
    OutputParserOptions o = options(c.format);
    o.reasoning = c.mode;
    o.starts_in_reasoning = c.starts_in_reasoning;
    const ParsedOutput whole = parse_output(c.text, o);
    EXPECT_EQ(whole.reasoning_content, c.reasoning);
    EXPECT_EQ(whole.content, c.content);
    EXPECT_EQ(whole.tool_calls.size(), c.n_calls);
    const std::string_view t = c.text;
    for (size_t i = 0; i <= t.size(); ++i) {
      SCOPED_TRACE("split at " + std::to_string(i));
      OutputParserOptions so = options(c.format);
      so.reasoning = c.mode;
      so.starts_in_reasoning = c.starts_in_reasoning;
      expect_same(stream({t.substr(0, i), t.substr(i)}, so), whole);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Command R7B: its own thinking tags, then an action or a response.
TEST(Reasoning, CommandR7BTags) {
  CAIRN_REQUIRE_SHARED("templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja");
  const std::string tmpl = read_file(*test::shared_dir() / "templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja");
  OutputParserOptions o = options(detect_tool_format(tmpl));
  o.reasoning = ReasoningMode::Split;
  o.reasoning_tags = reasoning_tags_for_template(tmpl);
  EXPECT_EQ(o.reasoning_tags.open, "<|START_THINKING|>");
  const std::string text =
      "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
      "\"tool_name\": \"search\", \"parameters\": {\"q\": \"x\"}}\n]<|END_ACTION|>";
  const ParsedOutput whole = parse_output(text, o);
  EXPECT_EQ(whole.reasoning_content, "I will search.");
  EXPECT_EQ(whole.content, "");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"q":"x"})");
  for (size_t i = 0; i <= text.size(); ++i) {
    OutputParserOptions so = o;
    so.ids = seeded_ids(7);
    expect_same(stream({std::string_view(text).substr(0, i), std::string_view(text).substr(i)}, so), whole);
  }
  EXPECT_EQ(reasoning_tags_for_template("{{ '<think>' }}").open, "<think>");
}

TEST(Reasoning, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning(""));
}

TEST(Reasoning, DeepSeekTemplateOpensIt) {
  CAIRN_REQUIRE_SHARED("templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
  auto tmpl = ChatTemplate::parse(read_file(*test::shared_dir() / "templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"));
  ASSERT_TRUE(tmpl) << tmpl.status().message();
  auto prompt = tmpl->render(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "add_generation_prompt": true, "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"})"));
  ASSERT_TRUE(prompt) << prompt.status().message();
  EXPECT_TRUE(prompt_opens_reasoning(*prompt)) << *prompt;
}

// ---- grammars

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "d",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                   "required": ["tz"]}}},
  {"type": "function", "function": {"name": "ping"}},
  {"type": "function", "function": {"name": "echo", "parameters": {}}}
])";

std::shared_ptr<const grammar::Grammar> compile(ToolFormat f, const ToolChoice& choice, bool parallel) {
  auto text = tool_call_grammar(f, Json::parse(kTools), choice, parallel);
  EXPECT_TRUE(text) << text.status().message();
  if (!text) return nullptr;
  auto g = grammar::parse_gbnf(*text);
  EXPECT_TRUE(g) << g.status().message() << "\n" << *text;
  if (!g) return nullptr;
  // Grammar::make re-checks the compiled rules (references, left recursion).
  auto again = grammar::Grammar::make(g->rules(), g->root());
  EXPECT_TRUE(again) << again.status().message();
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, std::string_view s) {
  grammar::Matcher m(g);
  return m.accept(s) && m.can_end();
}

// One call written the way the format's grammar forces it.
std::string write_call(ToolFormat f, const std::string& name, const std::string& args, bool first) {
  switch (f) {
    case ToolFormat::Hermes: return "{\"name\": \"" + name + "\", \"arguments\": " + args + "}";
    case ToolFormat::Mistral:
    case ToolFormat::FireFunction: return "{\"name\": \"" + name + "\", \"arguments\": " + args + "}";
    case ToolFormat::Llama3Json: return "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
    case ToolFormat::CommandR: return "{\"tool_name\": \"" + name + "\", \"parameters\": " + args + "}";
    case ToolFormat::FunctionaryV31: return "<function=" + name + ">" + args + "</function>";
    case ToolFormat::FunctionaryV32: return (first ? "" : ">>>") + name + "\n" + args;
    case ToolFormat::DeepSeekR1:
      return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
    case ToolFormat::None: break;
  }
  return {};
}

std::string write_calls(ToolFormat f, const std::vector<Call>& calls) {
  std::string open, between, close;
  switch (f) {
    case ToolFormat::Hermes: open = "<tool_call>\n"; between = "\n</tool_call>\n<tool_call>\n"; close = "\n</tool_call>"; break;
    case ToolFormat::Llama3Json: between = "; "; break;
    case ToolFormat::Mistral: open = "[TOOL_CALLS]["; between = ", "; close = "]"; break;
    case ToolFormat::FireFunction: open = " functools["; between = ", "; close = "]"; break;
    case ToolFormat::CommandR: open = "Action:\n```json\n["; between = ", "; close = "]\n```"; break;
    case ToolFormat::DeepSeekR1: open = "<｜tool▁calls▁begin｜>"; close = "<｜tool▁calls▁end｜>"; break;
    default: break;
  }
  std::string s = open;
  for (size_t i = 0; i < calls.size(); ++i)
    s += (i ? between : "") + write_call(f, calls[i].name, calls[i].arguments, i == 0);
  return s + close;
}

TEST(ToolCallGrammar, EveryFormatForcesItsCallsAndParsesBack) {
  const std::vector<ToolFormat> formats = {ToolFormat::Hermes,         ToolFormat::Llama3Json,     ToolFormat::Mistral,
                                           ToolFormat::FireFunction,   ToolFormat::FunctionaryV31, ToolFormat::FunctionaryV32,
                                           ToolFormat::CommandR,       ToolFormat::DeepSeekR1};
  const Call weather{"get_weather", R"({"city": "Paris", "days": 3})"};
  const Call time{"get_time", R"({"tz": "UTC"})"};
  const Call ping{"ping", R"({"any": [1]})"};
  for (ToolFormat f : formats) {
    SCOPED_TRACE(std::string(tool_format_name(f)));
    auto required = compile(f, {ToolChoice::Kind::Required, {}}, false);
    auto parallel = compile(f, {ToolChoice::Kind::Required, {}}, true);
    auto named = compile(f, {ToolChoice::Kind::Named, "get_time"}, false);
    ASSERT_TRUE(required && parallel && named);
    const std::string one = write_calls(f, {weather});
    const std::string two = write_calls(f, {weather, time, ping});
    EXPECT_TRUE(accepts(required, one)) << one;
    EXPECT_FALSE(accepts(required, two)) << two;
    EXPECT_TRUE(accepts(parallel, one)) << one;
    EXPECT_TRUE(accepts(parallel, two)) << two;
    EXPECT_TRUE(accepts(named, write_calls(f, {time})));
    EXPECT_FALSE(accepts(named, one)) << "a tool other than the named one";
    EXPECT_FALSE(accepts(required, write_calls(f, {{"get_wether", weather.arguments}}))) << "an unknown name";
    EXPECT_FALSE(accepts(required, write_calls(f, {{"get_weather", R"({"city": 5})"}}))) << "arguments off schema";
    EXPECT_FALSE(accepts(required, write_calls(f, {{"get_weather", R"({"days": 5})"}}))) << "a required property missing";
    EXPECT_FALSE(accepts(named, write_calls(f, {{"get_time", R"({"tz": "PST"})"}}))) << "outside the enum";
    EXPECT_FALSE(accepts(required, "Sure, " + one)) << "text before the call";
    EXPECT_TRUE(accepts(required, write_calls(f, {{"echo", R"({"s": "x"})"}})));
    EXPECT_FALSE(accepts(required, write_calls(f, {{"echo", "[1]"}}))) << "arguments are an object";
    // What the grammar lets through, the parser takes back as the same calls.
    std::string text = two;
    const ParsedOutput got = parse_output(text, options(f));
    EXPECT_EQ(got.content, "");
    ASSERT_EQ(got.tool_calls.size(), 3u) << text;
    EXPECT_EQ(got.tool_calls[0].name, "get_weather");
    EXPECT_EQ(got.tool_calls[0].arguments, R"({"city":"Paris","days":3})");
    EXPECT_EQ(got.tool_calls[1].arguments, R"({"tz":"UTC"})");
    EXPECT_EQ(got.tool_calls[2].name, "ping");
  }
}

// Reasoning before the call: Qwen3 may open <think> itself, DeepSeek-R1's
// prompt opened it; the reasoning is anything up to the first </think>.
TEST(ToolCallGrammar, ReasoningBeforeTheCall) {
  const Json tools = Json::parse(kTools);
  const auto make = [&](ToolFormat f, GrammarReasoning r) {
    auto text = tool_call_grammar(f, tools, {ToolChoice::Kind::Named, "get_time"}, false, r);
    EXPECT_TRUE(text) << text.status().message();
    auto g = grammar::parse_gbnf(text ? *text : "");
    EXPECT_TRUE(g) << g.status().message();
    return g ? std::make_shared<const grammar::Grammar>(std::move(*g)) : nullptr;
  };
  const std::string call = write_calls(ToolFormat::Hermes, {{"get_time", R"({"tz": "CET"})"}});
  auto optional = make(ToolFormat::Hermes, GrammarReasoning::Optional);
  ASSERT_TRUE(optional);
  EXPECT_TRUE(accepts(optional, call));
  EXPECT_TRUE(accepts(optional, "<think>\nIt asks <the> time; </thin </th 時間.\n</think>\n\n" + call));
  EXPECT_FALSE(accepts(optional, "<think>a</think>b</think>" + call)) << "the first </think> ends it";
  EXPECT_FALSE(accepts(optional, "<think>a</think>\n\n\n\n\n" + call)) << "at most 4 whitespace";
  EXPECT_FALSE(accepts(optional, "Sure." + call));
  // A long reasoning keeps the matcher small (the rules are right-recursive).
  grammar::Matcher m(optional);
  ASSERT_TRUE(m.accept("<think>"));
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.accept("step <x> </t </thi. "));
  EXPECT_LT(m.n_stacks(), 8u);
  EXPECT_TRUE(m.accept("</think>" + call) && m.can_end());

  const std::string ds = write_calls(ToolFormat::DeepSeekR1, {{"get_time", R"({"tz": "UTC"})"}});
  auto open = make(ToolFormat::DeepSeekR1, GrammarReasoning::Open);
  ASSERT_TRUE(open);
  EXPECT_TRUE(accepts(open, "Need the time.\n</think>\n\n" + ds));
  EXPECT_FALSE(accepts(open, ds)) << "the open reasoning must be closed first";
  // And the parser, told the prompt opened it, takes the same text apart.
  OutputParserOptions o = options(ToolFormat::DeepSeekR1);
  o.reasoning = ReasoningMode::Split;
  o.starts_in_reasoning = true;
  const ParsedOutput got = parse_output("Need the time.\n</think>\n\n" + ds, o);
  EXPECT_EQ(got.reasoning_content, "Need the time.");
  ASSERT_EQ(got.tool_calls.size(), 1u);
  EXPECT_EQ(got.tool_calls[0].arguments, R"({"tz":"UTC"})");
}

TEST(ToolCallGrammar, Errors) {
  const Json tools = Json::parse(kTools);
  auto none = tool_call_grammar(ToolFormat::None, tools, {}, false);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().param(), "tool_choice");
  auto unknown = tool_call_grammar(ToolFormat::Hermes, tools, {ToolChoice::Kind::Named, "nope"}, false);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("'nope'"), std::string::npos);
  EXPECT_FALSE(tool_call_grammar(ToolFormat::Hermes, Json::array(), {}, false));
  EXPECT_FALSE(tool_call_grammar(ToolFormat::Hermes, Json::parse(R"([{"type": "function"}])"), {}, false));
  auto bad_schema = tool_call_grammar(
      ToolFormat::Hermes, Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}])"),
      {}, false);
  ASSERT_FALSE(bad_schema);
  EXPECT_NE(bad_schema.status().message().find("tools[0].function.parameters"), std::string::npos)
      << bad_schema.status().message();
}

}  // namespace
}  // namespace cairn::chat
