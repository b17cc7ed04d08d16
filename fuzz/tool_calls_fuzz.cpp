// libFuzzer target: any bytes as a model's output, under every tool-call
// format and reasoning mode (picked by the first byte), must parse without
// crashing, and the streamed parse, split where the second byte says and
// again in 1..7-byte pieces, must give exactly the whole parse.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls.h"

namespace {

using namespace cairn::chat;

OutputParserOptions options(uint8_t pick) {
  static const ToolFormat formats[] = {ToolFormat::None,           ToolFormat::Hermes,         ToolFormat::Llama3Json,
                                       ToolFormat::Mistral,        ToolFormat::FireFunction,   ToolFormat::FunctionaryV31,
                                       ToolFormat::FunctionaryV32, ToolFormat::CommandR,       ToolFormat::DeepSeekR1};
  OutputParserOptions o;
  o.format = formats[pick % 9];
  o.reasoning = (pick / 9) % 3 == 0 ? ReasoningMode::Off : (pick / 9) % 3 == 1 ? ReasoningMode::Split : ReasoningMode::Inline;
  o.starts_in_reasoning = (pick / 27) % 2 == 1;
  o.ids = seeded_ids(1);
  return o;
}

void check_same(const ParsedOutput& a, const ParsedOutput& b) {
  if (a.content != b.content || a.reasoning_content != b.reasoning_content || a.tool_calls.size() != b.tool_calls.size())
    std::abort();
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].id != b.tool_calls[i].id || a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t pick = data[0], cut = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const ParsedOutput whole = parse_output(text, options(pick));
  {
    OutputParser p(options(pick));
    ParsedOutput out;
    const size_t at = text.empty() ? 0 : cut % (text.size() + 1);
    apply_deltas(out, p.feed(text.substr(0, at)));
    apply_deltas(out, p.feed(text.substr(at)));
    apply_deltas(out, p.finish());
    check_same(out, whole);
  }
  {
    OutputParser p(options(pick));
    ParsedOutput out;
    for (size_t at = 0, k = cut; at < text.size(); ++k) {
      const size_t len = 1 + k % 7;
      apply_deltas(out, p.feed(text.substr(at, len)));
      at += len;
    }
    apply_deltas(out, p.finish());
    check_same(out, whole);
  }
  return 0;
}
