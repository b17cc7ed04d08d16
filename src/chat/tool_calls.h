// chat/tool_calls.h — OpenAI tool calls and reasoning out of a model's generated text.
// Owns the tool-call formats chat models are trained to write, picking one
// from a chat template's text, parsing an output into content, reasoning and
// tool calls (whole, or streamed as OpenAI chunk deltas that add up to the
// whole parse), call ids, and the GBNF that forces a format's call for
// tool_choice "required" or a named function. Never loses model text: what
// looks like a call but does not parse stays content. Never throws.
//
// Detection (detect_tool_format), first marker found in the template wins:
//   `<｜tool▁calls▁begin｜>`                  deepseek_r1
//   `[TOOL_CALLS]`                              mistral
//   `functools`                                 firefunction
//   `<function=`                                functionary_v3_1
//   `>>>` with `recipient` or `>>>all`          functionary_v3_2
//   `<tool_call>`                               hermes (Hermes 2 Pro/3, Qwen2.5, Qwen3)
//   `<|START_ACTION|>`, or `Action:` with `tool_name`   command_r
//   `<|python_tag|>`, or `ipython` with `"parameters"`  llama3_json
//   otherwise                                    none
//
// What each format parses (ws: optional whitespace):
//   hermes            <tool_call> {"name": N, "arguments": {..}} </tool_call>, repeated
//                     (a call left open by the next <tool_call> counts)
//   llama3_json       {"name": N, "parameters"|"arguments": {..}} at the start of the
//                     output or after <|python_tag|>; several joined by `;`
//   mistral           [TOOL_CALLS] [{"name": N, "arguments": {..}}, ...]  or
//                     [TOOL_CALLS]N[ARGS]{..} (and [TOOL_CALLS]N[CALL_ID]id[ARGS]{..})
//   firefunction      functools[{"name": N, "arguments": {..}}, ...]
//   functionary_v3_1  <function=N>{..}</function>;  <|python_tag|>code (to "python")
//   functionary_v3_2  N\n{..} (the prompt ends with `>>>`), >>>N\n{..}; `all\n` and
//                     `>>>all\n` open plain content
//   command_r         Action: ```json [{"tool_name": N, "parameters": {..}}, ...] ```
//                     or <|START_ACTION|>[...]<|END_ACTION|> (R7B, whose
//                     <|START_RESPONSE|> <|END_RESPONSE|> are dropped from content)
//   deepseek_r1       <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//                     ```json {..} ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                     (also V3.1's <｜tool▁call▁begin｜>N<｜tool▁sep｜>{..}<｜tool▁call▁end｜>)
// Arguments given as a JSON string holding an object are accepted too. A
// closing marker (</tool_call>, </function>, <|END_ACTION|>, DeepSeek's ends)
// may be missing at the very end of the output, nowhere else.
// Markers that are special tokens (`[TOOL_CALLS]`, `<|python_tag|>`, the
// DeepSeek ones) must be in the text handed here: detokenize them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning.h"
#include "core/status.h"

namespace cairn::chat {

enum class ToolFormat {
  None,
  Hermes,
  Llama3Json,
  Mistral,
  FireFunction,
  FunctionaryV31,
  FunctionaryV32,
  CommandR,
  DeepSeekR1,
};

// The names `--tool-parser` takes: none, hermes, llama3_json, mistral,
// firefunction, functionary_v3_1, functionary_v3_2, command_r, deepseek_r1.
const std::vector<std::string>& tool_format_names();
std::string_view tool_format_name(ToolFormat f);
// By name; an unknown name is InvalidArgument listing the valid ones.
Result<ToolFormat> tool_format_from_name(std::string_view name);
// From a chat template's source text (table above).
ToolFormat detect_tool_format(std::string_view template_text);
// `--tool-parser`: empty or "auto" detects from the template, else by name.
Result<ToolFormat> resolve_tool_format(std::string_view flag, std::string_view template_text);

struct ToolCall {
  std::string id;         // "call_" + 24 letters and digits
  std::string name;
  std::string arguments;  // a JSON object, compact
};

// A whole output, parsed. Content is the text outside calls (and outside
// the reasoning), whitespace at its two ends dropped; an empty string is
// the caller's to turn into null.
struct ParsedOutput {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
};

// One streamed event, in OpenAI chunk terms.
struct OutputDelta {
  enum class Kind {
    Content,        // text: appended to content
    Reasoning,      // text: appended to reasoning_content
    ToolCallBegin,  // index, id, name: a new call (its arguments follow)
    ToolCallArgs,   // index, text: appended to that call's arguments
  };
  Kind kind = Kind::Content;
  std::string text;
  size_t index = 0;
  std::string id, name;
};

// Call ids: "call_" + 24 characters of [A-Za-z0-9] drawn from `next`.
// Default: a random_device-seeded generator; tests inject a seeded one.
using IdSource = std::function<uint64_t()>;
IdSource seeded_ids(uint64_t seed);
std::string make_call_id(const IdSource& next);

struct OutputParserOptions {
  ToolFormat format = ToolFormat::None;  // None: no tool calls are looked for
  ReasoningMode reasoning = ReasoningMode::Off;
  bool starts_in_reasoning = false;  // prompt_opens_reasoning(rendered prompt)
  IdSource ids;                      // empty: random ids
  ReasoningTags reasoning_tags;      // reasoning_tags_for_template(template)
};

// The streaming parser: reasoning first, then content and tool calls from
// the rest. Feed it deltas split anywhere (inside markers, inside UTF-8
// sequences); it holds back only text that could still start a marker, an
// unfinished call, an unfinished character, or whitespace whose fate (inner
// or trailing) is not known yet. A call is released once it is complete
// and its arguments parse: ToolCallBegin, then its arguments in one
// ToolCallArgs. The deltas of any split add up to parse_output's result.
class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  std::vector<OutputDelta> feed(std::string_view text);
  std::vector<OutputDelta> finish();  // the end of the output
  size_t n_tool_calls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The whole output at once (the non-streaming response).
ParsedOutput parse_output(std::string_view text, OutputParserOptions options);
// Adds streamed deltas to `out` (what a client does with the chunks).
void apply_deltas(ParsedOutput& out, const std::vector<OutputDelta>& deltas);

// tool_choice that the grammar must enforce.
struct ToolChoice {
  enum class Kind { Required, Named } kind = Kind::Required;
  std::string name;  // Named: the function
};

// What a tool_choice grammar lets the model write before its call: nothing,
// an optional `<think>…</think>` (Qwen3 opens its own), or the rest of a
// reasoning the prompt already opened (prompt_opens_reasoning: DeepSeek-R1);
// the reasoning is free text up to the first `</think>`, then up to 4
// whitespace characters.
enum class GrammarReasoning { None, Optional, Open };

// The GBNF (root rule `root`) of the format's wrapper around one call (or
// several, when `parallel_tool_calls`) whose name is one of `tools` (an array
// of OpenAI tool objects, {"type": "function", "function": {"name", "parameters"}}),
// or only `choice.name`, with arguments following that tool's parameters
// schema, in the format's canonical spelling (command_r: R+'s `Action:`
// form). The text starts at the first generated byte, with `reasoning`
// before the call. Errors: format None, a malformed tool, an unknown named
// function, a schema json_schema_rules refuses.
Result<std::string> tool_call_grammar(ToolFormat format, const nlohmann::ordered_json& tools,
                                      const ToolChoice& choice, bool parallel_tool_calls,
                                      GrammarReasoning reasoning = GrammarReasoning::None);

}  // namespace cairn::chat
