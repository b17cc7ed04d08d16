// chat/chat_template.h — renders a model's chat template (Jinja2 subset) into a prompt.
// Owns the template engine (lexer, parser, interpreter in jinja_*.{h,cpp}) and the
// ChatML fallback for models without a template. Templates come from untrusted GGUF
// files: parsing and rendering must never crash, hang or throw; every failure is a
// Status, and rendering is bounded in output size, loop iterations, work and depth.
// Output matches Jinja2 3.1 configured as Hugging Face's apply_chat_template does
// (trim_blocks, lstrip_blocks, loopcontrols, tojson without HTML escaping, sandboxed).
#pragma once

#include <cstddef>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cairn::chat {

namespace jinja {
struct Program;
}

// Bounds for one render; exceeding one is a clear error, never a crash.
struct RenderLimits {
  size_t max_output_bytes = 8u << 20;      // also the largest string or list built
  size_t max_loop_iterations = 1'000'000;  // all loops of one render together
  size_t max_steps = 20'000'000;           // evaluation steps (bounds CPU time)
  int max_call_depth = 64;                 // macro / caller nesting
  int max_eval_depth = 400;                // nested expressions and statements
};

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now() sees, as local calendar time; unset: the current time.
  std::optional<std::tm> now;
};

// One chat message as the serving layer holds it: role and text, plus the raw JSON
// of any other fields (tool_calls, tool_call_id, name...), which are merged in; a
// "content" field in extra_json (e.g. null for tool-call turns) wins over `content`.
struct Message {
  std::string role;
  std::string content;
  std::string extra_json;
};

struct ChatInput {
  std::vector<Message> messages;
  std::string tools_json;  // OpenAI `tools` array as JSON; empty or "null": tools undefined
  // A JSON object whose keys become extra template variables (the request's
  // chat_template_kwargs, e.g. enable_thinking); empty: none. The variables
  // build_context sets itself cannot be replaced.
  std::string template_kwargs_json;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

// Builds the template context from serving-style messages: messages, tools (only when
// given), add_generation_prompt, bos_token, eos_token and the extra variables.
// Fails on malformed extra JSON or an extra variable that would replace one of those.
Result<nlohmann::ordered_json> build_context(const ChatInput& input);

// ChatML ("<|im_start|>role\ncontent<|im_end|>\n" ...) for models without a template.
std::string chatml(const std::vector<Message>& messages, bool add_generation_prompt);

class ChatTemplate {
 public:
  // Syntax errors come back as one line: "template syntax error at line L, column C: ...".
  static Result<ChatTemplate> parse(std::string_view source);

  // Const and self-contained: several threads may render one template at once.
  // The context's top-level keys become template variables. Objects keep their key
  // order (pass ordered_json: tojson output depends on it). A template's own error
  // (raise_exception) reads "TemplateError: <message>"; other failures read like
  // Jinja2's, e.g. "UndefinedError: 'x' is undefined (line 3)".
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;
  // Convenience: build_context(input) then render.
  Result<std::string> apply(const ChatInput& input, const RenderOptions& options = {}) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Program> program);
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace cairn::chat
