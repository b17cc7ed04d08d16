// chat/chat_template.cpp — ChatTemplate: parses a model's template once and renders conversations with it.
#include "chat/chat_template.h"

#include <new>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"

namespace cairn::chat {

namespace {

// Real chat templates are tens of kilobytes; anything far beyond is not a template.
constexpr size_t kMaxTemplateBytes = 4u << 20;

// Messages reach API clients: keep them on one line and short, whatever a template or
// its data put into them.
std::string one_line(std::string m) {
  constexpr size_t kMaxMessage = 400;
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';
  if (m.size() > kMaxMessage) {
    size_t cut = kMaxMessage;
    while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xc0) == 0x80) --cut;  // whole UTF-8
    m = m.substr(0, cut) + "...";
  }
  return m;
}

Status to_status(const jinja::Failure& f) {
  std::string message = one_line(f.message);
  // A template's own raise_exception() is meant for the user; keep it clean.
  if (f.line > 0 && message.rfind("TemplateError: ", 0) != 0)
    message += " (line " + std::to_string(f.line) + ")";
  return Status::error(std::move(message));
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Program> program)
    : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (source.size() > kMaxTemplateBytes)
    return Status::error("chat template is " + std::to_string(source.size()) +
                         " bytes, more than the " + std::to_string(kMaxTemplateBytes) + " allowed");
  try {
    std::shared_ptr<const jinja::Program> program = jinja::parse_template(source);
    return ChatTemplate(std::move(program));
  } catch (const jinja::Failure& f) {
    return Status::error(one_line(f.message));
  } catch (const std::bad_alloc&) {
    return Status::error("chat template too large to parse");
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const RenderOptions& options) const {
  if (!context.is_object()) return Status::error("template context must be a JSON object");
  try {
    jinja::Value ctx = jinja::from_json(context);
    jinja::Interpreter interpreter(options, ctx);
    return interpreter.render(*program_);
  } catch (const jinja::Failure& f) {
    return to_status(f);
  } catch (const std::bad_alloc&) {
    return Status::error("LimitError: template rendering ran out of memory");
  } catch (const std::exception& e) {
    return Status::error(std::string("template rendering failed: ") + e.what());
  }
}

Result<std::string> ChatTemplate::apply(const ChatInput& input,
                                        const RenderOptions& options) const {
  Result<nlohmann::ordered_json> ctx = build_context(input);
  if (!ctx) return ctx.status();
  return render(*ctx, options);
}

Result<nlohmann::ordered_json> build_context(const ChatInput& input) {
  using json = nlohmann::ordered_json;
  json ctx = json::object();
  json messages = json::array();
  for (size_t i = 0; i < input.messages.size(); ++i) {
    const Message& m = input.messages[i];
    json msg = json::object();
    msg["role"] = m.role;
    msg["content"] = m.content;
    if (!m.extra_json.empty()) {
      json extra = json::parse(m.extra_json, nullptr, /*allow_exceptions=*/false);
      if (extra.is_discarded() || !extra.is_object())
        return Status::error("messages[" + std::to_string(i) +
                             "]: extra fields are not a JSON object");
      for (auto it = extra.begin(); it != extra.end(); ++it) msg[it.key()] = it.value();
    }
    messages.push_back(std::move(msg));
  }
  ctx["messages"] = std::move(messages);
  if (!input.tools_json.empty()) {
    json tools = json::parse(input.tools_json, nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) return Status::error("tools: not valid JSON");
    if (!tools.is_null()) ctx["tools"] = std::move(tools);
  }
  ctx["add_generation_prompt"] = input.add_generation_prompt;
  ctx["bos_token"] = input.bos_token;
  ctx["eos_token"] = input.eos_token;
  if (!input.template_kwargs_json.empty()) {
    json kwargs = json::parse(input.template_kwargs_json, nullptr, /*allow_exceptions=*/false);
    if (kwargs.is_discarded() || !kwargs.is_object())
      return Status::error("chat_template_kwargs: not a JSON object");
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      const std::string& k = it.key();
      if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "bos_token" ||
          k == "eos_token")
        return Status::error("chat_template_kwargs: '" + it.key() +
                             "' is set by the server and cannot be replaced");
      ctx[it.key()] = it.value();
    }
  }
  return ctx;
}

std::string chatml(const std::vector<Message>& messages, bool add_generation_prompt) {
  std::string out;
  for (const Message& m : messages)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace cairn::chat
