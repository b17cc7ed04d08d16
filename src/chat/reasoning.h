// chat/reasoning.h — a model's reasoning (`<think>…</think>`) apart from its answer.
// Owns splitting generated text into reasoning and the rest, whole or fed in
// deltas (any split, even inside the tags or a UTF-8 sequence), and the
// check of whether a rendered prompt already opened the reasoning. Knows
// nothing of tool calls: chat/tool_calls.h parses the rest.
#pragma once

#include <string>
#include <string_view>

namespace cairn::chat {

enum class ReasoningMode {
  Off,     // no reasoning tags are looked for: everything is the rest
  Split,   // `<think>…</think>` goes to reasoning, the tags dropped
  Inline,  // reasoning found as in Split, but handed back as it was written,
           // tags and all, for the content (`--reasoning-format none`); no
           // tool calls are looked for inside it
};

// The tags around reasoning: `<think>` `</think>` (Qwen3, DeepSeek-R1 and
// their distills), or Command R7B's `<|START_THINKING|>` `<|END_THINKING|>`.
struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};
// Command R7B's tags when the template writes them, else `<think>`'s.
ReasoningTags reasoning_tags_for_template(std::string_view template_text);

// Whether `prompt` (a rendered chat prompt) ends inside an open `<think>`
// (DeepSeek-R1's and some Qwen3 templates open it for the model): the output
// then starts inside the reasoning. Trailing whitespace is ignored.
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags = {});

// Splits a stream: `<think>` (or the other open tag) is recognized only at
// the start of the output (after whitespace), `</think>` ends the reasoning and everything after it
// is the rest. An output that never closes its reasoning is all reasoning.
// Whitespace at either end of the reasoning is dropped.
class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningMode mode, bool starts_in_reasoning, ReasoningTags tags = {});

  struct Delta {
    std::string reasoning;  // text to append to the reasoning (Inline: verbatim)
    std::string rest;       // text after it, for the content/tool-call parser
  };
  // Feeds the next piece of output; holds back only what could still be
  // the start of a tag (or an unfinished UTF-8 sequence, or reasoning's
  // trailing whitespace).
  Delta feed(std::string_view text);
  // The end of the output: everything held back is released.
  Delta finish();

 private:
  Delta step(bool final);
  enum class State { Start, Reasoning, Rest };
  ReasoningMode mode_;
  ReasoningTags tags_;
  State state_;
  std::string buf_;          // fed but not yet released
  std::string reasoning_ws_;  // whitespace inside the reasoning, held until text follows it
  bool reasoning_started_ = false;  // any non-whitespace reasoning released yet
};

}  // namespace cairn::chat
