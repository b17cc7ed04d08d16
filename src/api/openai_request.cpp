// api/openai_request.cpp — OpenAI request bodies parsed and validated into GenerateRequests.
// Validation order follows the body's fields; the first problem found is
// reported, naming the field in `param` so clients can point at it.
#include "api/openai_request.h"

#include "grammar/output_constraints.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace cairn::api {

using json = RequestJson;
using serving::GenerateRequest;
using serving::Token;

namespace {

Status bad_request(std::string message, std::string param = {}) {
  return Status::invalid_argument(std::move(message), std::move(param));
}

// A field that is absent or null counts as "not given", as OpenAI treats it.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

Status type_error(const char* name, const char* expected) {
  return bad_request(std::string("'") + name + "' must be " + expected, name);
}

// Integers may arrive as 3 or 3.0; 3.5, booleans and strings are refused.
bool as_int64(const json& v, int64_t& out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return false;
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

Status get_int(const json& body, const char* name, int64_t lo, int64_t hi,
               std::optional<int64_t>& out) {
  const json* v = field(body, name);
  if (!v) return Status::ok();
  int64_t x = 0;
  if (!as_int64(*v, x)) return type_error(name, "an integer");
  if (x < lo || x > hi)
    return bad_request(std::string("'") + name + "' is " + std::to_string(x) + ", must be in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]",
                       name);
  out = x;
  return Status::ok();
}

Status get_bool(const json& body, const char* name, bool& out) {
  const json* v = field(body, name);
  if (!v) return Status::ok();
  if (!v->is_boolean()) return type_error(name, "a boolean");
  out = v->get<bool>();
  return Status::ok();
}

// Float sampling parameters: one row per field, range inclusive.
struct FloatField {
  const char* name;
  double lo, hi;
  float serving::SamplingOptions::*member;
};
constexpr FloatField kFloatFields[] = {
    {"temperature", 0.0, 2.0, &serving::SamplingOptions::temperature},
    {"top_p", 0.0, 1.0, &serving::SamplingOptions::top_p},
    {"min_p", 0.0, 1.0, &serving::SamplingOptions::min_p},
    {"presence_penalty", -2.0, 2.0, &serving::SamplingOptions::presence_penalty},
    {"frequency_penalty", -2.0, 2.0, &serving::SamplingOptions::frequency_penalty},
    {"repetition_penalty", 0.01, 10.0, &serving::SamplingOptions::repetition_penalty},
};

Status parse_sampling(const json& body, const serving::ModelInfo& model, const ParseLimits& limits,
                      serving::SamplingOptions& s) {
  for (const auto& f : kFloatFields) {
    const json* v = field(body, f.name);
    if (!v) continue;
    if (!v->is_number()) return type_error(f.name, "a number");
    double d = v->get<double>();
    if (!std::isfinite(d) || d < f.lo || d > f.hi)
      return bad_request(std::string("'") + f.name + "' must be a finite number in [" +
                             json(f.lo).dump() + ", " + json(f.hi).dump() + "]",
                         f.name);
    s.*f.member = static_cast<float>(d);
  }
  std::optional<int64_t> top_k;
  CAIRN_RETURN_IF_ERROR(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) s.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);  // -1: off, as vLLM
  if (const json* v = field(body, "seed")) {
    int64_t seed = 0;
    if (!as_int64(*v, seed)) return type_error("seed", "an integer");
    s.seed = static_cast<uint64_t>(seed);
  }
  if (const json* v = field(body, "logit_bias")) {
    if (!v->is_object()) return type_error("logit_bias", "an object of token id -> bias");
    if (v->size() > limits.max_logit_bias)
      return bad_request("'logit_bias' has too many entries (at most " +
                             std::to_string(limits.max_logit_bias) + ")",
                         "logit_bias");
    for (const auto& [key, bias] : v->items()) {
      char* end = nullptr;
      errno = 0;
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || key.size() > 12 || *end != '\0' || errno != 0)
        return bad_request("'logit_bias' keys must be token ids", "logit_bias");
      if (id < 0 || id >= model.n_vocab)
        return bad_request("'logit_bias' token id " + std::to_string(id) +
                               " is outside the vocabulary (size " +
                               std::to_string(model.n_vocab) + ")",
                           "logit_bias");
      if (!bias.is_number() || !std::isfinite(bias.get<double>()) ||
          std::fabs(bias.get<double>()) > 100.0)
        return bad_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      s.logit_bias[static_cast<Token>(id)] = bias.get<float>();
    }
  }
  return Status::ok();
}

Status parse_stop(const json& body, const ParseLimits& limits, std::vector<std::string>& stop) {
  const json* v = field(body, "stop");
  if (!v) return Status::ok();
  auto add = [&](const json& s) -> Status {
    if (!s.is_string()) return type_error("stop", "a string or a list of strings");
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) return bad_request("'stop' strings must not be empty", "stop");
    if (str.size() > limits.max_stop_bytes)
      return bad_request("'stop' strings must be at most " + std::to_string(limits.max_stop_bytes) +
                             " bytes",
                         "stop");
    stop.push_back(str);
    return Status::ok();
  };
  if (v->is_string()) return add(*v);
  if (!v->is_array()) return type_error("stop", "a string or a list of strings");
  if (static_cast<int64_t>(v->size()) > limits.max_stop)
    return bad_request("'stop' has more than " + std::to_string(limits.max_stop) + " strings",
                       "stop");
  for (const auto& s : *v) CAIRN_RETURN_IF_ERROR(add(s));
  return Status::ok();
}

Status token_list(const json& arr, const serving::ModelInfo& model, std::vector<Token>& out) {
  if (arr.empty()) return bad_request("'prompt' must not be empty", "prompt");
  out.reserve(arr.size());
  for (const auto& t : arr) {
    int64_t id = 0;
    if (!as_int64(t, id)) return type_error("prompt", "a string, a list of strings, or token ids");
    if (id < 0 || id >= model.n_vocab)
      return bad_request("prompt token id " + std::to_string(id) +
                             " is outside the vocabulary (size " + std::to_string(model.n_vocab) +
                             ")",
                         "prompt");
    out.push_back(static_cast<Token>(id));
  }
  return Status::ok();
}

using Prompt = decltype(GenerateRequest::prompt);

Status parse_prompts(const json& body, const serving::ModelInfo& model,
                     std::vector<Prompt>& prompts) {
  const json* v = field(body, "prompt");
  if (!v) return bad_request("'prompt' is required", "prompt");
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty())
      return bad_request("'prompt' must not be empty", "prompt");
    prompts.emplace_back(v->get<std::string>());
    return Status::ok();
  }
  if (!v->is_array()) return type_error("prompt", "a string, a list of strings, or token ids");
  if (v->empty()) return bad_request("'prompt' must not be empty", "prompt");
  const json& first = v->front();
  if (first.is_number()) {
    std::vector<Token> ids;
    CAIRN_RETURN_IF_ERROR(token_list(*v, model, ids));
    prompts.emplace_back(std::move(ids));
    return Status::ok();
  }
  for (const auto& p : *v) {
    if (p.is_string()) {
      if (p.get_ref<const std::string&>().empty())
        return bad_request("'prompt' must not contain empty strings", "prompt");
      prompts.emplace_back(p.get<std::string>());
    } else if (p.is_array()) {
      std::vector<Token> ids;
      CAIRN_RETURN_IF_ERROR(token_list(p, model, ids));
      prompts.emplace_back(std::move(ids));
    } else {
      return type_error("prompt", "a string, a list of strings, or token ids");
    }
  }
  return Status::ok();
}

constexpr const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", "function"};

Status parse_messages(const json& body, std::vector<serving::ChatMessage>& out) {
  const json* v = field(body, "messages");
  if (!v) return bad_request("'messages' is required", "messages");
  if (!v->is_array()) return type_error("messages", "a list of message objects");
  if (v->empty()) return bad_request("'messages' must not be empty", "messages");
  for (const auto& m : *v) {
    if (!m.is_object()) return type_error("messages", "a list of message objects");
    const json* role = field(m, "role");
    if (!role || !role->is_string()) return type_error("messages", "objects with a string 'role'");
    bool known = false;
    for (const char* r : kRoles) known = known || *role == r;
    if (!known) return bad_request("unknown message role in 'messages'", "messages");
    serving::ChatMessage msg;
    msg.role = role->get<std::string>();
    if (const json* c = field(m, "content")) {
      if (c->is_string()) {
        msg.content = c->get<std::string>();
      } else if (c->is_array()) {
        // Content parts: only text parts are understood by a text model.
        for (const auto& part : *c) {
          if (!part.is_object()) return type_error("messages", "content parts that are objects");
          const json* type = field(part, "type");
          const json* text = field(part, "text");
          if (!type || *type != "text" || !text || !text->is_string())
            return bad_request("only text content parts are supported", "messages");
          msg.content += text->get<std::string>();
        }
      } else {
        return type_error("messages", "messages whose 'content' is a string or a list of parts");
      }
    }
    json extra = m;
    extra.erase("role");
    extra.erase("content");
    if (!extra.empty()) msg.extra_json = extra.dump();
    out.push_back(std::move(msg));
  }
  return Status::ok();
}

}  // namespace

Result<serving::ModelInfo> resolve_model(const json& body,
                                         const std::vector<serving::ModelInfo>& models) {
  const json* v = field(body, "model");
  if (v && !v->is_string()) return type_error("model", "a string");
  if (!v || v->get_ref<const std::string&>().empty()) {
    if (models.size() == 1) return models.front();
    return bad_request("'model' is required when several models are served", "model");
  }
  for (const auto& m : models)
    if (m.id == *v) return m;
  const auto& name = v->get_ref<const std::string&>();
  return Status::not_found(
      "the model '" + (name.size() > 64 ? name.substr(0, 64) + "..." : name) + "' does not exist",
      "model");
}

// tools, tool_choice, parallel_tool_calls and chat_template_kwargs of a chat
// request. Tools keep the client's key order: templates print them.
Status parse_tools(const json& body, GenerateRequest& out) {
  std::vector<std::string> names;
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) return type_error("tools", "a list of tool objects");
    for (const json& t : *tools) {
      if (!t.is_object()) return type_error("tools", "a list of tool objects");
      const json* type = field(t, "type");
      if (!type || *type != "function")
        return bad_request("only tools of type 'function' are supported", "tools");
      const json* fn = field(t, "function");
      if (!fn || !fn->is_object()) return type_error("tools", "tools with a 'function' object");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
        return type_error("tools", "functions with a non-empty string 'name'");
      const json* params = field(*fn, "parameters");
      if (params && !params->is_object())
        return type_error("tools", "functions whose 'parameters' is a JSON schema object");
      names.push_back(name->get<std::string>());
    }
    if (!tools->empty()) out.tools_json = tools->dump();
  }
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      const auto& s = choice->get_ref<const std::string&>();
      if (s == "auto")
        out.tool_choice = serving::ToolChoice::Auto;
      else if (s == "none")
        out.tool_choice = serving::ToolChoice::None;
      else if (s == "required")
        out.tool_choice = serving::ToolChoice::Required;
      else
        return bad_request("'tool_choice' must be 'none', 'auto', 'required' or a function",
                           "tool_choice");
    } else if (choice->is_object()) {
      const json* fn = field(*choice, "function");
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        return type_error("tool_choice", "{\"type\": \"function\", \"function\": {\"name\": ...}}");
      out.tool_choice = serving::ToolChoice::Named;
      out.tool_choice_name = name->get<std::string>();
      if (std::find(names.begin(), names.end(), out.tool_choice_name) == names.end())
        return bad_request("'tool_choice' names a function that is not in 'tools'", "tool_choice");
    } else {
      return type_error("tool_choice", "a string or a function object");
    }
    if (out.tool_choice == serving::ToolChoice::Required && names.empty())
      return bad_request("'tool_choice' is 'required' but no 'tools' are given", "tool_choice");
  }
  CAIRN_RETURN_IF_ERROR(get_bool(body, "parallel_tool_calls", out.parallel_tool_calls));
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object");
    if (!kw->empty()) out.chat_template_kwargs_json = kw->dump();
  }
  return Status::ok();
}

Result<ParsedGenerate> parse_generate(Endpoint endpoint, const json& body,
                                      const std::vector<serving::ModelInfo>& models,
                                      const ParseLimits& limits) {
  CAIRN_ASSIGN_OR_RETURN(const serving::ModelInfo info, resolve_model(body, models));

  ParsedGenerate out;
  out.endpoint = endpoint;
  out.model = info.id;
  GenerateRequest base;
  base.model = info.id;

  std::vector<Prompt> prompts;
  if (endpoint == Endpoint::Chat) {
    std::vector<serving::ChatMessage> msgs;
    CAIRN_RETURN_IF_ERROR(parse_messages(body, msgs));
    prompts.emplace_back(std::move(msgs));
    CAIRN_RETURN_IF_ERROR(parse_tools(body, base));
  } else {
    CAIRN_RETURN_IF_ERROR(parse_prompts(body, info, prompts));
  }

  const int64_t max_tok = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens, n;
  CAIRN_RETURN_IF_ERROR(get_int(body, "max_tokens", 1, max_tok, max_tokens));
  if (endpoint == Endpoint::Chat)
    CAIRN_RETURN_IF_ERROR(get_int(body, "max_completion_tokens", 1, max_tok, max_tokens));
  base.max_tokens = max_tokens ? static_cast<int32_t>(*max_tokens)
                               : (endpoint == Endpoint::Completions ? 16 : -1);  // OpenAI's defaults
  CAIRN_RETURN_IF_ERROR(get_int(body, "n", 1, limits.max_n, n));
  out.n = n ? static_cast<int32_t>(*n) : 1;
  if (static_cast<int64_t>(prompts.size()) * out.n > limits.max_choices)
    return bad_request("too many choices: prompts x n must be at most " +
                           std::to_string(limits.max_choices),
                       "n");

  CAIRN_RETURN_IF_ERROR(parse_sampling(body, info, limits, base.sampling));
  CAIRN_RETURN_IF_ERROR(parse_stop(body, limits, base.stop));
  CAIRN_ASSIGN_OR_RETURN(base.grammar, grammar::output_constraint_gbnf(body));
  if (!base.grammar.empty() && (base.tool_choice == serving::ToolChoice::Required ||
                                base.tool_choice == serving::ToolChoice::Named))
    return bad_request("'tool_choice' that forces a call cannot be combined with a structured "
                       "output format",
                       "tool_choice");
  CAIRN_RETURN_IF_ERROR(get_bool(body, "ignore_eos", base.ignore_eos));
  CAIRN_RETURN_IF_ERROR(get_bool(body, "speculative", base.speculative));
  CAIRN_RETURN_IF_ERROR(get_bool(body, "stream", out.stream));
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object");
    if (Status e = get_bool(*so, "include_usage", out.include_usage); !e.is_ok())
      return e.with_param("stream_options");
  }
  if (const json* u = field(body, "user")) {
    if (!u->is_string()) return type_error("user", "a string");
    base.user = u->get<std::string>();
  }
  if (endpoint == Endpoint::Chat) {
    bool want = false;
    CAIRN_RETURN_IF_ERROR(get_bool(body, "logprobs", want));
    std::optional<int64_t> top;
    CAIRN_RETURN_IF_ERROR(get_int(body, "top_logprobs", 0, limits.max_top_logprobs, top));
    if (top && !want)
      return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
    if (want) base.top_logprobs = top ? static_cast<int32_t>(*top) : 0;
  } else {
    const json* lp = field(body, "logprobs");
    if (lp && lp->is_boolean()) {  // some clients send a flag here; false means none
      if (lp->get<bool>()) base.top_logprobs = 0;
    } else {
      std::optional<int64_t> top;
      CAIRN_RETURN_IF_ERROR(get_int(body, "logprobs", 0, limits.max_top_logprobs, top));
      if (top) base.top_logprobs = static_cast<int32_t>(*top);
    }
    CAIRN_RETURN_IF_ERROR(get_bool(body, "echo", out.echo));
    // The prompt's own log-probabilities would need a forward that keeps
    // every prompt row's logits; refused rather than answered without them.
    if (out.echo && base.top_logprobs >= 0)
      return bad_request("'echo' together with 'logprobs' is not supported", "echo");
  }
  // Fields of OpenAI's API that cairn does not do: refused by name rather
  // than ignored, so a client never takes the answer for what it asked.
  for (const char* name : {"suffix", "functions", "function_call", "audio", "modalities",
                           "prediction", "web_search_options"})
    if (field(body, name))
      return bad_request(std::string("'") + name + "' is not supported", name);
  std::optional<int64_t> best_of;
  CAIRN_RETURN_IF_ERROR(get_int(body, "best_of", 1, 1 << 20, best_of));
  if (best_of && *best_of != out.n)
    return bad_request("'best_of' other than n is not supported", "best_of");
  out.logprobs = base.top_logprobs >= 0;

  for (auto& p : prompts) {
    GenerateRequest r = base;
    r.prompt = std::move(p);
    out.prompts.push_back(std::move(r));
  }
  return out;
}

Result<TokenizeRequest> parse_tokenize(const json& body,
                                       const std::vector<serving::ModelInfo>& models) {
  CAIRN_ASSIGN_OR_RETURN(const serving::ModelInfo info, resolve_model(body, models));
  TokenizeRequest out;
  out.model = info.id;
  const char* key = field(body, "prompt") ? "prompt" : "content";  // vLLM / llama.cpp names
  const json* v = field(body, key);
  if (!v) return bad_request("'prompt' is required", "prompt");
  if (!v->is_string()) return type_error(key, "a string");
  out.text = v->get<std::string>();
  CAIRN_RETURN_IF_ERROR(get_bool(body, "add_special", out.add_special));
  CAIRN_RETURN_IF_ERROR(get_bool(body, "parse_special", out.parse_special));
  CAIRN_RETURN_IF_ERROR(get_bool(body, "with_pieces", out.with_pieces));
  return out;
}

Result<DetokenizeRequest> parse_detokenize(const json& body,
                                           const std::vector<serving::ModelInfo>& models) {
  CAIRN_ASSIGN_OR_RETURN(const serving::ModelInfo info, resolve_model(body, models));
  DetokenizeRequest out;
  out.model = info.id;
  const json* v = field(body, "tokens");
  if (!v) return bad_request("'tokens' is required", "tokens");
  if (!v->is_array()) return type_error("tokens", "a list of token ids");
  for (const auto& t : *v) {
    int64_t id = 0;
    if (!as_int64(t, id)) return type_error("tokens", "a list of token ids");
    if (id < 0 || id >= info.n_vocab)
      return bad_request("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                             std::to_string(info.n_vocab) + ")",
                         "tokens");
    out.tokens.push_back(static_cast<Token>(id));
  }
  return out;
}

namespace {

// A token-id list of `v`, each inside the vocabulary; false when v is not one.
Result<bool> token_list(const json& v, const serving::ModelInfo& info, const char* name,
                        std::vector<serving::Token>& out) {
  if (!v.is_array() || v.empty()) return false;
  out.clear();
  out.reserve(v.size());
  for (const auto& t : v) {
    int64_t id = 0;
    if (!as_int64(t, id)) return false;
    if (id < 0 || id >= info.n_vocab)
      return bad_request("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                             std::to_string(info.n_vocab) + ")",
                         name);
    out.push_back(static_cast<serving::Token>(id));
  }
  return true;
}

}  // namespace

Result<EmbeddingsRequest> parse_embeddings(const json& body,
                                           const std::vector<serving::ModelInfo>& models) {
  CAIRN_ASSIGN_OR_RETURN(const serving::ModelInfo info, resolve_model(body, models));
  EmbeddingsRequest out;
  out.model = info.id;
  out.request.model = info.id;
  const json* input = field(body, "input");
  if (!input) return bad_request("'input' is required", "input");
  constexpr const char* kShape =
      "a string, a list of strings, a list of token ids or a list of token-id lists";
  auto& inputs = out.request.inputs;
  std::vector<serving::Token> ids;
  if (input->is_string()) {
    inputs.emplace_back(input->get<std::string>());
  } else if (!input->is_array() || input->empty()) {
    return type_error("input", kShape);
  } else {
    CAIRN_ASSIGN_OR_RETURN(const bool one_list, token_list(*input, info, "input", ids));
    if (one_list) {
      inputs.emplace_back(std::move(ids));
    } else {
      if (input->size() > kMaxEmbeddingInputs)
        return bad_request("'input' has " + std::to_string(input->size()) + " items; at most " +
                               std::to_string(kMaxEmbeddingInputs) + " are allowed",
                           "input");
      for (const auto& item : *input) {
        if (item.is_string()) {
          inputs.emplace_back(item.get<std::string>());
          continue;
        }
        CAIRN_ASSIGN_OR_RETURN(const bool list, token_list(item, info, "input", ids));
        if (!list) return type_error("input", kShape);
        inputs.emplace_back(std::move(ids));
      }
    }
  }
  for (const auto& in : inputs)
    if (const auto* text = std::get_if<std::string>(&in); text && text->empty())
      return bad_request("'input' must not contain an empty string", "input");
  if (const json* f = field(body, "encoding_format")) {
    if (*f == "base64")
      out.base64 = true;
    else if (*f != "float")
      return bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  }
  std::optional<int64_t> dims;
  CAIRN_RETURN_IF_ERROR(get_int(body, "dimensions", 1, std::numeric_limits<int32_t>::max(), dims));
  if (dims && *dims != info.n_embd)
    return bad_request("the model '" + info.id.substr(0, 64) + "' makes " +
                           std::to_string(info.n_embd) +
                           "-dimensional embeddings and cannot shorten them: 'dimensions' may "
                           "only be " + std::to_string(info.n_embd),
                       "dimensions");
  CAIRN_RETURN_IF_ERROR(get_bool(body, "normalize", out.request.normalize));
  if (const json* u = field(body, "user"); u && !u->is_string()) return type_error("user", "a string");
  return out;
}

Result<RerankRequest> parse_rerank(const json& body,
                                   const std::vector<serving::ModelInfo>& models) {
  CAIRN_ASSIGN_OR_RETURN(const serving::ModelInfo info, resolve_model(body, models));
  RerankRequest out;
  out.model = info.id;
  out.request.model = info.id;
  const json* query = field(body, "query");
  if (!query) return bad_request("'query' is required", "query");
  if (!query->is_string()) return type_error("query", "a string");
  out.request.query = query->get<std::string>();
  // llama.cpp's server also takes "texts".
  const char* name = field(body, "documents") ? "documents" : "texts";
  const json* docs = field(body, name);
  if (!docs) return bad_request("'documents' is required", "documents");
  if (!docs->is_array() || docs->empty())
    return type_error(name, "a non-empty list of strings or {\"text\": ...} objects");
  if (docs->size() > kMaxEmbeddingInputs)
    return bad_request("at most " + std::to_string(kMaxEmbeddingInputs) + " documents are allowed",
                       name);
  for (const auto& d : *docs) {
    const json* text = d.is_object() ? field(d, "text") : &d;
    if (!text || !text->is_string())
      return type_error(name, "a non-empty list of strings or {\"text\": ...} objects");
    out.documents.push_back(text->get<std::string>());
    out.request.inputs.emplace_back(text->get<std::string>());
  }
  std::optional<int64_t> top_n;
  CAIRN_RETURN_IF_ERROR(get_int(body, "top_n", 1, std::numeric_limits<int32_t>::max(), top_n));
  out.top_n = top_n;
  CAIRN_RETURN_IF_ERROR(get_bool(body, "return_documents", out.return_documents));
  return out;
}

}  // namespace cairn::api
