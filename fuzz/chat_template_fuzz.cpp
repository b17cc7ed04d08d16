// libFuzzer target: any bytes as a chat template must parse or fail with a Status, and
// any parsed template must render or fail with a Status within the render limits.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi \u4f60\u597d"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}]})");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = cairn::chat::ChatTemplate::parse(source);
  if (!tmpl) return 0;
  cairn::chat::RenderOptions opt;
  opt.limits.max_output_bytes = 1 << 16;
  opt.limits.max_loop_iterations = 10000;
  opt.limits.max_steps = 200000;
  std::tm day{};
  day.tm_year = 126;
  day.tm_mday = 15;
  opt.now = day;
  auto out = tmpl->render(context(), opt);
  if (!out && out.status().message().empty()) __builtin_trap();
  if (out && out->size() > (1u << 16)) __builtin_trap();
  return 0;
}
