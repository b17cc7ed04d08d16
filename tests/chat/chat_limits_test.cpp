// Syntax errors, render errors, the bounds that keep untrusted templates from hanging
// or exhausting the process, and the serving-side helpers (context, ChatML).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "chat/chat_template.h"

namespace cairn::chat {
namespace {

using json = nlohmann::ordered_json;

std::string syntax_error(std::string_view src) {
  auto t = ChatTemplate::parse(src);
  EXPECT_FALSE(t.is_ok()) << "parsed: " << src;
  return t.is_ok() ? "" : t.status().message();
}

Result<std::string> render(std::string_view src, const json& ctx = json::object(),
                           RenderOptions opt = {}) {
  auto t = ChatTemplate::parse(src);
  if (!t) return t.status();
  return t->render(ctx, opt);
}

std::string render_error(std::string_view src, RenderOptions opt = {}) {
  auto r = render(src, json::object(), opt);
  EXPECT_FALSE(r.is_ok()) << "rendered: " << (r.is_ok() ? *r : "");
  return r.is_ok() ? "" : r.status().message();
}

TEST(ChatSyntax, ErrorsNameLineAndColumnOnOneLine) {
  std::string m = syntax_error("line one\nab {{ 1 + }}");
  EXPECT_EQ(m.rfind("template syntax error at line 2, column 11: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(
      syntax_error("{% if x %}never closed").find("unexpected end of template, expected 'elif'"),
      std::string::npos);
  EXPECT_NE(syntax_error("{% frobnicate %}").find("unknown tag 'frobnicate'"), std::string::npos);
  EXPECT_NE(syntax_error("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(syntax_error("{# open comment").find("missing end of comment"), std::string::npos);
  EXPECT_NE(syntax_error("{{ (1 }}").find("unexpected"), std::string::npos);
  EXPECT_NE(syntax_error("{{ ) }}").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(syntax_error("{{ x").find("unclosed"), std::string::npos);
  EXPECT_NE(syntax_error("{% break %}").find("outside of a loop"), std::string::npos);
  EXPECT_NE(syntax_error("{% for x in y %}{% endif %}").find("expected 'endfor'"),
            std::string::npos);
  EXPECT_NE(syntax_error("{{ }}").find("expected an expression"), std::string::npos);
  EXPECT_NE(syntax_error("{% set true = 1 %}").find("constant"), std::string::npos);
  EXPECT_NE(syntax_error("{% raw %}no end").find("missing end of raw"), std::string::npos);
  EXPECT_NE(syntax_error("{{ 1 is }}").find("expected a name"), std::string::npos);
  EXPECT_NE(syntax_error("{% macro m(a=1, b) %}{% endmacro %}").find("non-default"),
            std::string::npos);
}

TEST(ChatSyntax, DeepNestingIsAnErrorNotACrash) {
  std::string deep_parens =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(syntax_error(deep_parens).find("nested too deeply"), std::string::npos);
  std::string deep_lists = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  EXPECT_NE(syntax_error(deep_lists).find("nested too deeply"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if 1 %}";
  EXPECT_NE(syntax_error(deep_ifs).find("nested too deeply"), std::string::npos);
  std::string deep_nots = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 50000; ++i) deep_nots += "not ";
  EXPECT_NE(syntax_error(deep_nots + "1 }}").find("nested too deeply"), std::string::npos);
  std::string deep_neg = "{{ " + std::string(50000, '-') + "1 }}";
  EXPECT_NE(syntax_error(deep_neg).find("nested too deeply"), std::string::npos);
}

TEST(ChatSyntax, OversizedTemplateIsRefused) {
  EXPECT_NE(syntax_error(std::string(5u << 20, 'x')).find("bytes"), std::string::npos);
}

TEST(ChatRender, ErrorsCarryTheTemplateLine) {
  auto r = render("{% if true %}\n\n{{ missing + 1 }}{% endif %}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "UndefinedError: 'missing' is undefined (line 3)");
  // raise_exception() messages are meant for the user and stay clean.
  r = render("\n{{ raise_exception('Only user and assistant roles') }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "TemplateError: Only user and assistant roles");
}

TEST(ChatRender, ContextMustBeAnObject) {
  auto t = ChatTemplate::parse("x");
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->render(json::array()).is_ok());
}

TEST(ChatRender, TemplateIsReusableAndConstAcrossRenders) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ "
      "ns.n }}");
  ASSERT_TRUE(t.is_ok());
  for (int i = 0; i < 3; ++i) {
    auto r = t->render(json{{"messages", json::array({1, 2, 3})}});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(*r, "3");
  }
}

TEST(ChatLimits, LoopIterationsAreBounded) {
  auto start = std::chrono::steady_clock::now();
  RenderOptions opt;
  opt.limits.max_loop_iterations = 200000;
  std::string m = render_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", opt);
  EXPECT_NE(m.find("LimitError: template exceeded 200000 loop iterations"), std::string::npos) << m;
  // Loop filters count too: they run the condition once per item.
  m = render_error(
      "{% for i in range(100000) if i < 0 %}{% endfor %}{% for i in range(100000) if i < 0 %}{% "
      "endfor %}{% for i in range(100000) if i < 0 %}{% endfor %}",
      opt);
  EXPECT_NE(m.find("loop iterations"), std::string::npos) << m;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(ChatLimits, OutputSizeIsBounded) {
  RenderOptions opt;
  opt.limits.max_output_bytes = 1 << 20;
  std::string m = render_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", opt);
  EXPECT_NE(m.find("output exceeds 1048576 bytes"), std::string::npos) << m;
  // Huge repetitions and doubling are refused before anything is allocated.
  m = render_error("{{ 'x' * 1000000000000 }}", opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
  m = render_error("{{ [1, 2] * 1000000000000 }}", opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
  m = render_error(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}",
      opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
  m = render_error(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% "
      "endfor %}",
      opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
  m = render_error("{% set s %}{% for i in range(100000) %}{{ 'y' * 50 }}{% endfor %}{% endset %}",
                   opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
}

TEST(ChatLimits, RecursionIsBounded) {
  std::string m = render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_NE(m.find("RecursionError"), std::string::npos) << m;
  m = render_error(
      "{% macro f(n) %}{% for i in [1] %}{% call f(n) %}x{% endcall %}{% endfor %}{% endmacro %}{{ "
      "f(1) }}");
  EXPECT_NE(m.find("RecursionError"), std::string::npos) << m;
  RenderOptions opt;
  opt.limits.max_call_depth = 5;
  EXPECT_TRUE(render("{% macro f(k) %}{% if k %}{{ f(k - 1) }}{% endif %}{% endmacro %}{{ f(4) }}",
                     json::object(), opt)
                  .is_ok());
  EXPECT_FALSE(render("{% macro f(k) %}{% if k %}{{ f(k - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
                      json::object(), opt)
                   .is_ok());
}

TEST(ChatLimits, WorkIsBounded) {
  RenderOptions opt;
  opt.limits.max_steps = 10000;
  std::string m = render_error("{% for i in range(100000) %}{{ i }}{% endfor %}", opt);
  EXPECT_NE(m.find("work limit"), std::string::npos) << m;
  // Quadratic work on a small output (unique over a long list) is bounded too.
  opt.limits.max_steps = 200000;
  m = render_error("{{ range(100000)|unique|list|length }}", opt);
  EXPECT_NE(m.find("LimitError"), std::string::npos) << m;
}

TEST(ChatLimits, DeepContextJsonIsRefused) {
  json deep = json::array();
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  auto t = ChatTemplate::parse("{{ x|length }}");
  ASSERT_TRUE(t.is_ok());
  auto r = t->render(json{{"x", deep}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos);
}

TEST(ChatLimits, SelfContainingNamespaceDoesNotRecurseForever) {
  std::string m = render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_NE(m.find("RecursionError"), std::string::npos) << m;
}

// Random edits of a template that uses most of the language must parse or fail cleanly,
// and render or fail cleanly, within the limits. Run under ASan/UBSan in CI.
TEST(ChatLimits, MutatedTemplatesNeverCrash) {
  const std::string base =
      "{%- macro fmt(m, sep=': ') -%}{{ m.role|upper ~ sep ~ m.content|trim }}{%- endmacro -%}\n"
      "{% set ns = namespace(n=0, seen=[]) %}{{ bos_token }}\n"
      "{% for m in messages if m.role != 'x' %}{% set ns.n = ns.n + loop.index %}"
      "{% if loop.first and m.role == 'system' %}[SYS]{{ m.content }}{% elif m.role in ['user'] %}"
      "{{ fmt(m) }}{% else %}{{ m|tojson(indent=2) }}{% endif %}{% if loop.last %}{% break %}{% "
      "endif %}"
      "{% endfor %}{{ ns.n }}{{ messages|map(attribute='role')|unique|join(',') }}"
      "{% for k, v in {'a': [1, 2.5, none], 'b': 'x'}|items %}{{ k }}={{ v|string|replace('1', "
      "'2') }}{% endfor %}"
      "{{ 'abc'[::-1] }}{{ (3 * 7) // 2 }}{% raw %}{{ raw }}{% endraw %}{# c #}"
      "{% call fmt({'role': 'r', 'content': 'c'}) %}{% endcall %}{{ range(5)|select('odd')|list }}";
  json ctx = {{"bos_token", "<s>"},
              {"messages", json::array({json{{"role", "system"}, {"content", "s"}},
                                        json{{"role", "user"}, {"content", " hi "}},
                                        json{{"role", "assistant"}, {"content", "yo"}}})}};
  ASSERT_TRUE(render(base, ctx).is_ok()) << render(base, ctx).status().message();
  const std::string alphabet = "{}%#-+()[]|.,:'\"~=<>*/ \nabcxyz0123456789_!";
  std::mt19937 rng(1234);
  RenderOptions opt;
  opt.limits.max_steps = 200000;
  opt.limits.max_output_bytes = 1 << 16;
  int parsed = 0, rendered = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s.erase(pos, 1 + rng() % 4);
          break;
        case 1:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 2:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
        default: {
          size_t len = std::min<size_t>(1 + rng() % 30, s.size() - pos);
          s.insert(rng() % s.size(), s.substr(pos, len));
        }
      }
    }
    auto t = ChatTemplate::parse(s);
    if (!t) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++parsed;
    auto r = t->render(ctx, opt);
    if (r)
      ++rendered;
    else
      EXPECT_FALSE(r.status().message().empty());
  }
  // The mutations must exercise both paths, or this test proves little.
  EXPECT_GT(parsed, 300);
  EXPECT_GT(rendered, 100);
}

TEST(ChatHelpers, ChatMLForModelsWithoutATemplate) {
  std::vector<Message> msgs = {{"system", "Be brief.", ""}, {"user", "Hi", ""}};
  EXPECT_EQ(chatml(msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chatml(msgs, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatHelpers, BuildContextMergesExtraFieldsInOrder) {
  ChatInput in;
  in.messages = {
      {"user", "Weather?", ""},
      {"assistant", "",
       R"({"content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]})"},
      {"tool", "sunny", R"({"tool_call_id": "call_1"})"}};
  in.tools_json =
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  auto ctx = build_context(in);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  EXPECT_TRUE((*ctx)["messages"][1]["content"].is_null());
  EXPECT_EQ((*ctx)["messages"][2]["tool_call_id"], "call_1");
  EXPECT_EQ((*ctx)["tools"].dump(),
            in.tools_json.substr(0, 0) +
                R"([{"type":"function","function":{"name":"get_weather","parameters":{}}}])");
  EXPECT_EQ((*ctx)["add_generation_prompt"], true);
  EXPECT_EQ((*ctx)["bos_token"], "<s>");

  ChatInput no_tools;
  no_tools.messages = {{"user", "x", ""}};
  auto ctx2 = build_context(no_tools);
  ASSERT_TRUE(ctx2.is_ok());
  EXPECT_FALSE(ctx2->contains("tools"));  // undefined in the template, as Hugging Face leaves it

  ChatInput bad;
  bad.messages = {{"user", "x", "{not json"}};
  EXPECT_FALSE(build_context(bad).is_ok());
  bad.messages = {{"user", "x", "[1]"}};
  EXPECT_FALSE(build_context(bad).is_ok());
  bad.messages = {{"user", "x", ""}};
  bad.tools_json = "[";
  EXPECT_FALSE(build_context(bad).is_ok());
}

TEST(ChatHelpers, ApplyRendersAToolCallingConversation) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}<|{{ m.role }}|>{% if m.tool_calls %}{% for c in m.tool_calls %}"
      "{{ c.function.name }}{{ c.function.arguments }}{% endfor %}{% else %}{{ m.content }}{% "
      "endif %}"
      "{% endfor %}{% if tools %}[{{ "
      "tools|map(attribute='function')|map(attribute='name')|join(',') }}]{% endif %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ChatInput in;
  in.messages = {{"user", "Weather?", ""},
                 {"assistant", "",
                  R"({"tool_calls": [{"function": {"name": "get_weather", "arguments": "{}"}}]})"}};
  in.tools_json = R"([{"type": "function", "function": {"name": "get_weather"}}])";
  auto r = t->apply(in);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, "<|user|>Weather?<|assistant|>get_weather{}[get_weather]<|assistant|>");
}

TEST(ChatHelpers, StrftimeNowUsesTheGivenDayOrTheClock) {
  RenderOptions opt;
  std::tm day{};
  day.tm_year = 124;
  day.tm_mon = 6;
  day.tm_mday = 26;
  opt.now = day;
  auto r = render("{{ strftime_now('%d %b %Y') }}", json::object(), opt);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "26 Jul 2024");
  r = render("{{ strftime_now('%Y')|int > 2000 }}");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "True");
}

}  // namespace
}  // namespace cairn::chat

namespace cairn::chat {
namespace {

TEST(ChatRender, MessagesStayOnOneShortLine) {
  auto r = render("{{ raise_exception('first\nsecond ' ~ ('x' * 5000)) }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  EXPECT_LT(r.status().message().size(), 500u);
  EXPECT_EQ(r.status().message().rfind("TemplateError: first second xxx", 0), 0u);
  auto t = ChatTemplate::parse("{{ 1 'multi\nline' }}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace cairn::chat
