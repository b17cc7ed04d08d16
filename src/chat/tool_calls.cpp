// chat/tool_calls.cpp — tool-call formats: detection, the streaming parser, grammars.
//
// One engine serves every format: at each point of the output it looks for
// the earliest place a call could start (a marker, or the end of the text
// being the start of one), releases the text before it as content, and asks
// the format's region parser about the text from there: a complete call
// region (released as calls), not decidable yet (held), or not a call (its
// first piece released as content, the scan goes on after it). A decision
// taken on a prefix never changes when more text comes, so any split of the
// output gives the whole parse.
#include "chat/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>

#include "chat/stream_text.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace cairn::chat {
namespace {

using Json = nlohmann::ordered_json;
using detail::is_space;

constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

struct FormatName {
  ToolFormat format;
  const char* name;
};
constexpr FormatName kFormats[] = {
    {ToolFormat::None, "none"},
    {ToolFormat::Hermes, "hermes"},
    {ToolFormat::Llama3Json, "llama3_json"},
    {ToolFormat::Mistral, "mistral"},
    {ToolFormat::FireFunction, "firefunction"},
    {ToolFormat::FunctionaryV31, "functionary_v3_1"},
    {ToolFormat::FunctionaryV32, "functionary_v3_2"},
    {ToolFormat::CommandR, "command_r"},
    {ToolFormat::DeepSeekR1, "deepseek_r1"},
};

// Where a call region may begin, per format.
std::vector<std::string_view> markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::None: return {};
    case ToolFormat::Hermes: return {"<tool_call>"};
    case ToolFormat::Llama3Json: return {kPythonTag};
    case ToolFormat::Mistral: return {"[TOOL_CALLS]"};
    case ToolFormat::FireFunction: return {"functools"};
    case ToolFormat::FunctionaryV31: return {"<function=", kPythonTag};
    case ToolFormat::FunctionaryV32: return {">>>"};
    case ToolFormat::CommandR: return {"Action:", "<|START_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"};
    case ToolFormat::DeepSeekR1: return {kDsCallsBegin, kDsCallBegin};
  }
  return {};
}

// ---- reading a region: every step is Ok, More (the text so far is a
// prefix of something that may still match) or Fail.

enum class St { Ok, More, Fail };

struct RawCall {
  std::string name, arguments;
};

// The arguments as a compact JSON object: an object, or a string holding one.
std::optional<std::string> arguments_of(const Json& v) {
  try {
    if (v.is_object()) return v.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (v.is_string()) {
      Json inner = Json::parse(v.get<std::string>(), nullptr, false);
      if (!inner.is_discarded() && inner.is_object())
        return inner.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  } catch (...) {
  }
  return std::nullopt;
}

// A call object {name_key: "N", one of arg_keys: {...}}; without any of
// the argument keys, `{}` when `args_optional`.
bool call_from(const Json& v, const char* name_key, std::initializer_list<const char*> arg_keys,
               bool args_optional, RawCall& out) {
  if (!v.is_object()) return false;
  const auto n = v.find(name_key);
  if (n == v.end() || !n->is_string() || n->get<std::string>().empty()) return false;
  out.name = n->get<std::string>();
  for (const char* k : arg_keys) {
    const auto a = v.find(k);
    if (a == v.end()) continue;
    auto args = arguments_of(*a);
    if (!args) return false;
    out.arguments = std::move(*args);
    return true;
  }
  if (!args_optional) return false;
  out.arguments = "{}";
  return true;
}

// Where a bracket scan of an unfinished JSON value stopped, so that the next
// delta resumes it instead of rescanning the call from its start (a long
// call streamed token by token would otherwise cost its length squared).
struct JsonScan {
  bool valid = false;
  size_t start = 0, upto = 0;
  std::string stack;
  bool in_string = false, escape = false;
};

struct Cursor {
  std::string_view s;
  size_t p = 0;
  bool final = false;
  JsonScan* cache = nullptr;  // the stream's, or none

  bool at_end() const { return p >= s.size(); }
  St more() const { return final ? St::Fail : St::More; }
  void ws() {
    while (p < s.size() && is_space(s[p])) ++p;
  }
  St lit(std::string_view m) {
    const size_t avail = s.size() - p;
    if (avail >= m.size()) {
      if (s.substr(p, m.size()) != m) return St::Fail;
      p += m.size();
      return St::Ok;
    }
    return s.substr(p) == m.substr(0, avail) ? more() : St::Fail;
  }
  // A closing marker, which the end of the whole output may stand for.
  St lit_or_end(std::string_view m) {
    if (final && at_end()) return St::Ok;
    return lit(m);
  }
  // A function name: letters, digits, _ . - (and : /), up to 128 of them.
  St name(std::string& out) {
    const size_t start = p;
    while (p < s.size() && (std::isalnum((unsigned char)s[p]) || (s[p] != '\0' && std::strchr("_.-:/", s[p])))) {
      if (p - start >= 128) return St::Fail;
      ++p;
    }
    if (p == s.size()) return more();
    if (p == start) return St::Fail;
    out.assign(s.substr(start, p - start));
    return St::Ok;
  }
  // A JSON object or array, found by its brackets, then parsed.
  St json(Json& out) {
    if (at_end()) return more();
    if (s[p] != '{' && s[p] != '[') return St::Fail;
    std::string stack;
    bool in_string = false, escape = false;
    size_t i = p;
    if (cache && cache->valid && cache->start == p && cache->upto <= s.size()) {
      stack = cache->stack;
      in_string = cache->in_string;
      escape = cache->escape;
      i = cache->upto;
    }
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (in_string) {
        if (escape) escape = false;
        else if (c == '\\') escape = true;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        if (stack.size() >= 256) return St::Fail;
        stack += c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (stack.back() != c) return St::Fail;
        stack.pop_back();
        if (stack.empty()) break;
      }
    }
    if (i == s.size()) {
      if (cache) *cache = {true, p, i, stack, in_string, escape};
      return more();
    }
    try {
      out = Json::parse(s.substr(p, i + 1 - p), nullptr, false);
    } catch (...) {
      return St::Fail;
    }
    if (out.is_discarded()) return St::Fail;
    p = i + 1;
    return St::Ok;
  }
  // An optional part: tries `f` from here; on Fail the cursor stays put.
  template <typename F>
  St optional(F&& f) {
    const size_t saved = p;
    const St st = f();
    if (st != St::Ok) p = saved;
    return st == St::Fail ? St::Ok : st;
  }
};

#define TRY(expr)                          \
  do {                                     \
    const St st_ = (expr);                 \
    if (st_ != St::Ok) return st_;         \
  } while (0)

// A JSON object as a call's arguments (arguments_of's rules).
St call_arguments(Cursor& c, std::string& out) {
  Json v;
  TRY(c.json(v));
  auto args = arguments_of(v);
  if (!args) return St::Fail;
  out = std::move(*args);
  return St::Ok;
}

// A JSON array of at least one call object.
St call_array(Cursor& c, const char* name_key, std::initializer_list<const char*> arg_keys,
              std::vector<RawCall>& calls) {
  Json v;
  TRY(c.json(v));
  if (!v.is_array() || v.empty()) return St::Fail;
  for (const Json& e : v) {
    RawCall call;
    if (!call_from(e, name_key, arg_keys, true, call)) return St::Fail;
    calls.push_back(std::move(call));
  }
  return St::Ok;
}

St call_object(Cursor& c, std::initializer_list<const char*> arg_keys, bool args_optional,
               std::vector<RawCall>& calls) {
  Json v;
  TRY(c.json(v));
  RawCall call;
  if (!call_from(v, "name", arg_keys, args_optional, call)) return St::Fail;
  calls.push_back(std::move(call));
  return St::Ok;
}

St hermes(Cursor& c, std::vector<RawCall>& calls) {
  TRY(c.lit("<tool_call>"));
  c.ws();
  TRY(call_object(c, {"arguments", "parameters"}, true, calls));
  c.ws();
  const size_t end = c.p;
  const St close = c.lit_or_end("</tool_call>");
  if (close != St::Fail) return close;
  // Models sometimes open the next call without closing this one: the next
  // <tool_call> ends it too (and starts its own region).
  const St next = c.lit("<tool_call>");
  c.p = end;
  return next;
}

// Llama 3.x: objects joined by `;`, after <|python_tag|> or alone.
St llama3(Cursor& c, std::vector<RawCall>& calls) {
  if (c.s.substr(c.p, 1) != "{") {
    TRY(c.lit(kPythonTag));
    c.ws();
  }
  TRY(call_object(c, {"parameters", "arguments"}, false, calls));
  for (;;) {
    const size_t before = calls.size();
    TRY(c.optional([&] {
      c.ws();
      TRY(c.lit(";"));
      c.ws();
      return call_object(c, {"parameters", "arguments"}, false, calls);
    }));
    if (calls.size() == before) return St::Ok;
  }
}

St mistral(Cursor& c, std::vector<RawCall>& calls) {
  TRY(c.lit("[TOOL_CALLS]"));
  const size_t after = c.p;
  c.ws();
  if (c.at_end()) return c.more();
  if (c.s[c.p] == '[') return call_array(c, "name", {"arguments", "parameters"}, calls);
  c.p = after;  // the newer form: name[ARGS]{...}, maybe with [CALL_ID]id before [ARGS]
  RawCall call;
  TRY(c.name(call.name));
  if (c.s.substr(c.p, 2) == "[C") {
    TRY(c.lit("[CALL_ID]"));
    std::string id;
    TRY(c.name(id));
  }
  TRY(c.lit("[ARGS]"));
  TRY(call_arguments(c, call.arguments));
  calls.push_back(std::move(call));
  return St::Ok;
}

St firefunction(Cursor& c, std::vector<RawCall>& calls) {
  TRY(c.lit("functools"));
  return call_array(c, "name", {"arguments", "parameters"}, calls);
}

St functionary_v31(Cursor& c, std::vector<RawCall>& calls) {
  if (c.s.substr(c.p, 1) == "<" && c.s.substr(c.p, 2) == "<|") {
    // <|python_tag|>code: the rest of the output is code for "python".
    TRY(c.lit(kPythonTag));
    if (!c.final) return St::More;
    std::string_view code = c.s.substr(c.p);
    while (!code.empty() && is_space(code.front())) code.remove_prefix(1);
    while (!code.empty() && is_space(code.back())) code.remove_suffix(1);
    if (code.empty()) return St::Fail;
    calls.push_back({"python", Json{{"code", std::string(code)}}.dump(-1, ' ', false, Json::error_handler_t::replace)});
    c.p = c.s.size();
    return St::Ok;
  }
  TRY(c.lit("<function="));
  RawCall call;
  TRY(c.name(call.name));
  TRY(c.lit(">"));
  TRY(call_arguments(c, call.arguments));
  c.ws();
  TRY(c.lit_or_end("</function>"));
  calls.push_back(std::move(call));
  return St::Ok;
}

// >>>name\n{...}; the output's first header has its `>>>` in the prompt.
St functionary_v32(Cursor& c, bool implicit_marker, std::vector<RawCall>& calls) {
  if (!implicit_marker) TRY(c.lit(">>>"));
  RawCall call;
  TRY(c.name(call.name));
  TRY(c.lit("\n"));
  if (call.name == "all") return St::Ok;  // plain content follows
  TRY(call_arguments(c, call.arguments));
  calls.push_back(std::move(call));
  return St::Ok;
}

St command_r(Cursor& c, std::vector<RawCall>& calls) {
  // R7B wraps its answer in these: they are not content.
  for (std::string_view m : {"<|START_RESPONSE|>", "<|END_RESPONSE|>"}) {
    const St st = c.lit(m);
    if (st != St::Fail) return st;
  }
  if (c.s.substr(c.p, 1) == "<") {
    TRY(c.lit("<|START_ACTION|>"));
    c.ws();
    TRY(call_array(c, "tool_name", {"parameters", "arguments"}, calls));
    c.ws();
    return c.lit_or_end("<|END_ACTION|>");
  }
  TRY(c.lit("Action:"));
  c.ws();
  if (c.at_end()) return c.more();
  const bool fenced = c.s[c.p] == '`';
  if (fenced) {
    TRY(c.lit("```json"));
    c.ws();
  }
  TRY(call_array(c, "tool_name", {"parameters", "arguments"}, calls));
  if (fenced) {
    return c.optional([&] {
      c.ws();
      return c.lit("```");
    });
  }
  return St::Ok;
}

St deepseek_one(Cursor& c, std::vector<RawCall>& calls) {
  TRY(c.lit(kDsCallBegin));
  std::string first;
  TRY(c.name(first));
  TRY(c.lit(kDsSep));
  RawCall call;
  // R1 and V3 write the type first (function<sep>name\n```json ...);
  // V3.1 writes the name and the arguments straight after it (name<sep>{...}).
  if (c.at_end()) return c.more();
  if (c.s[c.p] == '{') {
    call.name = std::move(first);
  } else {
    TRY(c.name(call.name));
  }
  c.ws();
  const bool fenced = !c.at_end() && c.s[c.p] == '`';
  if (fenced) {
    TRY(c.lit("```json"));
    c.ws();
  }
  TRY(call_arguments(c, call.arguments));
  c.ws();
  if (fenced) {
    TRY(c.lit("```"));
    c.ws();
  }
  TRY(c.lit_or_end(kDsCallEnd));
  calls.push_back(std::move(call));
  return St::Ok;
}

St deepseek(Cursor& c, std::vector<RawCall>& calls) {
  const St head = c.lit(kDsCallsBegin);
  if (head == St::More) return St::More;
  // A lone <｜tool▁call▁begin｜> (distills sometimes drop the outer one).
  if (head == St::Fail) return deepseek_one(c, calls);
  c.ws();
  TRY(deepseek_one(c, calls));
  for (;;) {
    const size_t before = calls.size();
    TRY(c.optional([&] {
      c.ws();
      return deepseek_one(c, calls);
    }));
    if (calls.size() == before) break;
  }
  c.ws();
  return c.lit_or_end(kDsCallsEnd);
}

#undef TRY

St parse_region(ToolFormat f, Cursor& c, bool implicit_marker, std::vector<RawCall>& calls) {
  switch (f) {
    case ToolFormat::None: return St::Fail;
    case ToolFormat::Hermes: return hermes(c, calls);
    case ToolFormat::Llama3Json: return llama3(c, calls);
    case ToolFormat::Mistral: return mistral(c, calls);
    case ToolFormat::FireFunction: return firefunction(c, calls);
    case ToolFormat::FunctionaryV31: return functionary_v31(c, calls);
    case ToolFormat::FunctionaryV32: return functionary_v32(c, implicit_marker, calls);
    case ToolFormat::CommandR: return command_r(c, calls);
    case ToolFormat::DeepSeekR1: return deepseek(c, calls);
  }
  return St::Fail;
}

IdSource random_ids() {
  auto gen = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [gen] { return (*gen)(); };
}

}  // namespace

// ---- names and detection

const std::vector<std::string>& tool_format_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : kFormats) v.emplace_back(f.name);
    return v;
  }();
  return names;
}

std::string_view tool_format_name(ToolFormat f) {
  for (const auto& n : kFormats)
    if (n.format == f) return n.name;
  return "none";
}

Result<ToolFormat> tool_format_from_name(std::string_view name) {
  std::string valid;
  for (const auto& n : kFormats) {
    if (name == n.name) return n.format;
    valid += (valid.empty() ? "" : ", ") + std::string(n.name);
  }
  return Status::invalid_argument("unknown tool parser '" + std::string(name) + "' (valid: " + valid + ")",
                                  "tool-parser");
}

ToolFormat detect_tool_format(std::string_view t) {
  const auto has = [&](std::string_view m) { return t.find(m) != std::string_view::npos; };
  if (has(kDsCallsBegin) || has(kDsCallBegin)) return ToolFormat::DeepSeekR1;
  if (has("[TOOL_CALLS]")) return ToolFormat::Mistral;
  if (has("functools")) return ToolFormat::FireFunction;
  if (has("<function=")) return ToolFormat::FunctionaryV31;
  if (has(">>>") && (has("recipient") || has(">>>all"))) return ToolFormat::FunctionaryV32;
  if (has("<tool_call>")) return ToolFormat::Hermes;
  if (has("<|START_ACTION|>") || (has("Action:") && has("tool_name"))) return ToolFormat::CommandR;
  if (has(kPythonTag) || (has("ipython") && has("\"parameters\""))) return ToolFormat::Llama3Json;
  return ToolFormat::None;
}

Result<ToolFormat> resolve_tool_format(std::string_view flag, std::string_view template_text) {
  if (flag.empty() || flag == "auto") return detect_tool_format(template_text);
  return tool_format_from_name(flag);
}

// ---- ids

IdSource seeded_ids(uint64_t seed) {
  auto gen = std::make_shared<std::mt19937_64>(seed);
  return [gen] { return (*gen)(); };
}

std::string make_call_id(const IdSource& next) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[next() % 62];
  return id;
}

// ---- the streaming parser

struct OutputParser::Impl {
  OutputParserOptions opt;
  ReasoningSplitter reasoning;
  std::string buf;           // rest text not yet decided
  bool consumed_any = false;  // any rest text decided yet (functionary v3.2's implicit `>>>`)
  bool content_started = false;  // non-whitespace content released
  std::string pending_ws;    // content whitespace held until more content shows it is inner
  size_t n_calls = 0;
  JsonScan scan;             // of the region held at the start of buf
  bool pending = false;      // a region starts at buf[0] and waits for more text
  bool pending_implicit = false;

  explicit Impl(OutputParserOptions o)
      : opt(std::move(o)), reasoning(opt.reasoning, opt.starts_in_reasoning, opt.reasoning_tags) {
    if (!opt.ids) opt.ids = random_ids();
  }

  void content(std::string_view s, std::vector<OutputDelta>& out) {
    if (s.empty()) return;
    if (!content_started) {
      size_t i = 0;
      while (i < s.size() && is_space(s[i])) ++i;
      s.remove_prefix(i);
      if (s.empty()) return;
      content_started = true;
    }
    size_t end = s.size();
    while (end > 0 && is_space(s[end - 1])) --end;
    if (end == 0) {
      pending_ws.append(s);
      return;
    }
    std::string text = std::move(pending_ws);
    pending_ws.clear();
    text.append(s.substr(0, end));
    pending_ws.assign(s.substr(end));
    if (!out.empty() && out.back().kind == OutputDelta::Kind::Content) {
      out.back().text += text;
    } else {
      OutputDelta d;
      d.text = std::move(text);
      out.push_back(std::move(d));
    }
  }

  void calls(std::vector<RawCall>& raw, std::vector<OutputDelta>& out) {
    for (RawCall& c : raw) {
      OutputDelta begin;
      begin.kind = OutputDelta::Kind::ToolCallBegin;
      begin.index = n_calls;
      begin.id = make_call_id(opt.ids);
      begin.name = std::move(c.name);
      out.push_back(std::move(begin));
      OutputDelta args;
      args.kind = OutputDelta::Kind::ToolCallArgs;
      args.index = n_calls;
      args.text = std::move(c.arguments);
      out.push_back(std::move(args));
      ++n_calls;
    }
  }

  // The earliest place in buf a region may start; npos: none.
  size_t candidate(bool& implicit_marker) const {
    implicit_marker = false;
    const ToolFormat f = opt.format;
    if (f == ToolFormat::FunctionaryV32 && !consumed_any) {
      implicit_marker = true;
      return 0;
    }
    size_t best = std::string::npos;
    for (std::string_view m : markers(f)) {
      const size_t at = buf.find(m);
      best = std::min(best, at);
      const size_t part = detail::marker_prefix_at_end(buf, m);
      if (part > 0) best = std::min(best, buf.size() - part);
    }
    // Llama 3.x writes a bare call as its whole output.
    if (f == ToolFormat::Llama3Json && !content_started) {
      size_t i = 0;
      while (i < buf.size() && is_space(buf[i])) ++i;
      if (i < buf.size() && buf[i] == '{') best = std::min(best, i);
    }
    return best;
  }

  void consume(size_t n) {
    buf.erase(0, n);
    consumed_any = true;
    scan.valid = false;
    pending = false;
  }

  void step(bool final, std::vector<OutputDelta>& out) {
    while (!buf.empty()) {
      bool implicit = pending_implicit;
      // A held region still starts at 0: appending cannot move the earliest
      // candidate, and a marker prefix that stopped being one fails there.
      const size_t at = pending ? 0 : candidate(implicit);
      if (at == std::string::npos || at > 0) {
        size_t n = at == std::string::npos ? buf.size() : at;
        if (!final) n = detail::complete_utf8_prefix(std::string_view(buf).substr(0, n));
        if (n == 0) return;
        content(std::string_view(buf).substr(0, n), out);
        consume(n);
        continue;
      }
      Cursor c{buf, 0, final, &scan};
      std::vector<RawCall> raw;
      const St st = parse_region(opt.format, c, implicit, raw);
      if (st == St::More) {
        pending = true;
        pending_implicit = implicit;
        return;
      }
      if (st == St::Ok && c.p > 0) {
        calls(raw, out);
        consume(c.p);
        continue;
      }
      // Not a call: its first piece is content and the scan goes on after it.
      if (implicit) {
        consume(0);
        continue;
      }
      size_t n = 1;
      for (std::string_view m : markers(opt.format))
        if (std::string_view(buf).substr(0, m.size()) == m) n = std::max(n, m.size());
      content(std::string_view(buf).substr(0, n), out);
      consume(n);
    }
  }

  std::vector<OutputDelta> run(ReasoningSplitter::Delta d, bool final) {
    std::vector<OutputDelta> out;
    if (opt.reasoning == ReasoningMode::Inline) {
      content(d.reasoning, out);  // as written, and never searched for calls
    } else if (!d.reasoning.empty()) {
      OutputDelta r;
      r.kind = OutputDelta::Kind::Reasoning;
      r.text = std::move(d.reasoning);
      out.push_back(std::move(r));
    }
    buf += d.rest;
    step(final, out);
    if (final) pending_ws.clear();
    return out;
  }
};

OutputParser::OutputParser(OutputParserOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

std::vector<OutputDelta> OutputParser::feed(std::string_view text) {
  return impl_->run(impl_->reasoning.feed(text), false);
}

std::vector<OutputDelta> OutputParser::finish() { return impl_->run(impl_->reasoning.finish(), true); }

size_t OutputParser::n_tool_calls() const { return impl_->n_calls; }

void apply_deltas(ParsedOutput& out, const std::vector<OutputDelta>& deltas) {
  for (const OutputDelta& d : deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::Content: out.content += d.text; break;
      case OutputDelta::Kind::Reasoning: out.reasoning_content += d.text; break;
      case OutputDelta::Kind::ToolCallBegin:
        if (out.tool_calls.size() <= d.index) out.tool_calls.resize(d.index + 1);
        out.tool_calls[d.index].id = d.id;
        out.tool_calls[d.index].name = d.name;
        break;
      case OutputDelta::Kind::ToolCallArgs:
        if (out.tool_calls.size() <= d.index) out.tool_calls.resize(d.index + 1);
        out.tool_calls[d.index].arguments += d.text;
        break;
    }
  }
}

ParsedOutput parse_output(std::string_view text, OutputParserOptions options) {
  OutputParser p(std::move(options));
  ParsedOutput out;
  apply_deltas(out, p.feed(text));
  apply_deltas(out, p.finish());
  return out;
}

// ---- grammars for tool_choice

using grammar::gbnf_literal;

// Free text up to and including the first `</think>`: one rule per state of
// the match so far (think-k: k characters of the tag matched), so the text
// can hold anything but the tag, `<` and `</thin` included.
std::string think_rules() {
  static constexpr std::string_view tag = "</think>";
  std::string out = "think-0 ::= [^<] think-0 | \"<\" think-1\n";
  for (size_t k = 1; k < tag.size(); ++k) {
    const std::string c(1, tag[k]);
    const std::string next = k + 1 == tag.size() ? "" : " think-" + std::to_string(k + 1);
    out += "think-" + std::to_string(k) + " ::= \"" + c + "\"" + next + " | \"<\" think-1 | [^" + c +
           "<] think-0\n";
  }
  return out + "think-ws ::= [ \t\n]{0,4}\n";
}

Result<std::string> tool_call_grammar(ToolFormat format, const nlohmann::ordered_json& tools,
                                      const ToolChoice& choice, bool parallel_tool_calls,
                                      GrammarReasoning reasoning) {
  if (format == ToolFormat::None)
    return Status::invalid_argument("tool_choice needs a tool-call format, and this model has none (--tool-parser)",
                                    "tool_choice");
  if (!tools.is_array() || tools.empty())
    return Status::invalid_argument("tool_choice needs a non-empty tools array", "tools");
  std::string rules, call_alts;
  bool named_found = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      return Status::invalid_argument(where + " is not a function tool with a name", "tools");
    const Json& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (choice.kind == ToolChoice::Kind::Named && name != choice.name) continue;
    named_found = true;
    const std::string prefix = "t" + std::to_string(i) + "-";
    std::string args_rule = prefix + "value";
    // No schema, or the empty one: any object (arguments are always objects).
    const bool any = !fn.contains("parameters") || fn["parameters"].is_null() ||
                     (fn["parameters"].is_object() && fn["parameters"].empty());
    if (!any) {
      auto r = grammar::json_schema_rules(fn["parameters"], prefix);
      if (!r) return r.status().with_context(where + ".function.parameters").with_param("tools");
      rules += *r;
    } else {
      rules += args_rule + " ::= json-object\n";  // no schema: any object
    }
    // Names go in as JSON strings inside the JSON formats, bare in the others.
    const std::string json_name = Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
    std::string call;
    const auto L = [](std::string_view s) { return gbnf_literal(s); };
    switch (format) {
      case ToolFormat::Hermes:
      case ToolFormat::Mistral:
      case ToolFormat::FireFunction:
        call = L("{\"name\": " + json_name + ", \"arguments\": ") + " " + args_rule + " " + L("}");
        break;
      case ToolFormat::Llama3Json:
        call = L("{\"name\": " + json_name + ", \"parameters\": ") + " " + args_rule + " " + L("}");
        break;
      case ToolFormat::CommandR:
        call = L("{\"tool_name\": " + json_name + ", \"parameters\": ") + " " + args_rule + " " + L("}");
        break;
      case ToolFormat::FunctionaryV31:
        call = L("<function=" + name + ">") + " " + args_rule + " " + L("</function>");
        break;
      case ToolFormat::FunctionaryV32:
        call = L(name + "\n") + " " + args_rule;
        break;
      case ToolFormat::DeepSeekR1:
        call = L(std::string(kDsCallBegin) + "function" + std::string(kDsSep) + name + "\n```json\n") + " " +
               args_rule + " " + L("\n```" + std::string(kDsCallEnd));
        break;
      case ToolFormat::None: break;
    }
    call_alts += (call_alts.empty() ? "" : " | ") + call;
  }
  if (!named_found)
    return Status::invalid_argument("tool_choice names the function '" + choice.name + "', which is not in tools",
                                    "tool_choice");
  std::string open, between, close;
  switch (format) {
    case ToolFormat::Hermes: open = "<tool_call>\n"; between = "\n</tool_call>\n<tool_call>\n"; close = "\n</tool_call>"; break;
    case ToolFormat::Llama3Json: between = "; "; break;
    case ToolFormat::Mistral: open = "[TOOL_CALLS]["; between = ", "; close = "]"; break;
    case ToolFormat::FireFunction: open = " functools["; between = ", "; close = "]"; break;
    case ToolFormat::FunctionaryV31: break;
    case ToolFormat::FunctionaryV32: between = ">>>"; break;  // the prompt wrote the first `>>>`
    case ToolFormat::CommandR: open = "Action:\n```json\n["; between = ", "; close = "]\n```"; break;
    case ToolFormat::DeepSeekR1: open = std::string(kDsCallsBegin); close = std::string(kDsCallsEnd); break;
    case ToolFormat::None: break;
  }
  const auto lit_sp = [](const std::string& s) { return s.empty() ? std::string() : gbnf_literal(s) + " "; };
  std::string root = "root ::= ";
  if (reasoning == GrammarReasoning::Optional) root += "( \"<think>\" think-0 think-ws )? ";
  if (reasoning == GrammarReasoning::Open) root += "think-0 think-ws ";
  root += lit_sp(open) + "call";
  if (parallel_tool_calls) root += " ( " + lit_sp(between) + "call )*";
  root += close.empty() ? "" : " " + gbnf_literal(close);
  if (reasoning != GrammarReasoning::None) root += "\n" + think_rules();
  return root + "\ncall ::= " + call_alts + "\n" + rules + grammar::json_primitives_gbnf();
}

}  // namespace cairn::chat
