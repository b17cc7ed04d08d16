// servable/llm_stage.cpp — stage values to a generation and its events back to values.
#include "servable/llm_stage.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "grammar/output_constraints.h"

namespace cairn::servable {
namespace {

using values::DType;
using values::Tensor;
using values::Value;

Status bad(const std::string& stage, const std::string& what) {
  return Status::invalid_argument("stage '" + stage + "': " + what);
}

Result<double> number_of(const std::string& stage, const std::string& name, const Value& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* t = std::get_if<Tensor>(&v); t && t->element_count() == 1) {
    switch (t->dtype) {
      case DType::Float32: return static_cast<double>(*t->as<float>());
      case DType::Float64: return *t->as<double>();
      case DType::Int32: return static_cast<double>(*t->as<int32_t>());
      case DType::Int64: return static_cast<double>(*t->as<int64_t>());
      default: break;
    }
  }
  return bad(stage, "option '" + name + "' must be a number, got " + values::describe(v));
}

Result<int64_t> integer_of(const std::string& stage, const std::string& name, const Value& v) {
  auto d = number_of(stage, name, v);
  if (!d.is_ok()) return d.status();
  if (!std::isfinite(*d) || *d != std::floor(*d) || std::fabs(*d) > 9.0e15)
    return bad(stage, "option '" + name + "' must be an integer");
  return static_cast<int64_t>(*d);
}

Status in_range(const std::string& stage, const std::string& name, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    return bad(stage, "option '" + name + "' must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi));
  return Status::ok();
}

bool is_constraint_option(const std::string& name) {
  for (const char* n : {"response_format", "guided_json", "json_schema", "guided_regex", "guided_choice",
                        "guided_grammar", "grammar"})
    if (name == n) return true;
  return false;
}

Status apply_option(const std::string& stage, const std::string& name, const Value& v,
                    serving::GenerateRequest& req) {
  auto& s = req.sampling;
  auto num = [&](double lo, double hi) -> Result<double> {
    auto d = number_of(stage, name, v);
    if (!d.is_ok()) return d.status();
    CAIRN_RETURN_IF_ERROR(in_range(stage, name, *d, lo, hi));
    return *d;
  };
  if (name == "max_tokens") {
    CAIRN_ASSIGN_OR_RETURN(int64_t n, integer_of(stage, name, v));
    CAIRN_RETURN_IF_ERROR(in_range(stage, name, static_cast<double>(n), 1,
                                   std::numeric_limits<int32_t>::max()));
    req.max_tokens = static_cast<int32_t>(n);
  } else if (name == "temperature") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(0, 100));
    s.temperature = static_cast<float>(d);
  } else if (name == "top_p") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(0, 1));
    s.top_p = static_cast<float>(d);
  } else if (name == "min_p") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(0, 1));
    s.min_p = static_cast<float>(d);
  } else if (name == "top_k") {
    CAIRN_ASSIGN_OR_RETURN(int64_t k, integer_of(stage, name, v));
    CAIRN_RETURN_IF_ERROR(in_range(stage, name, static_cast<double>(k), 0, 1 << 20));
    s.top_k = static_cast<int32_t>(k);
  } else if (name == "seed") {
    CAIRN_ASSIGN_OR_RETURN(int64_t seed, integer_of(stage, name, v));
    s.seed = static_cast<uint64_t>(seed);
  } else if (name == "presence_penalty") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(-2, 2));
    s.presence_penalty = static_cast<float>(d);
  } else if (name == "frequency_penalty") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(-2, 2));
    s.frequency_penalty = static_cast<float>(d);
  } else if (name == "repetition_penalty") {
    CAIRN_ASSIGN_OR_RETURN(double d, num(0.01, 10));
    s.repetition_penalty = static_cast<float>(d);
  } else if (name == "ignore_eos") {
    const bool* b = std::get_if<bool>(&v);
    if (!b) return bad(stage, "option 'ignore_eos' must be a bool, got " + values::describe(v));
    req.ignore_eos = *b;
  } else if (name == "speculative") {
    const bool* b = std::get_if<bool>(&v);
    if (!b) return bad(stage, "option 'speculative' must be a bool, got " + values::describe(v));
    req.speculative = *b;
  } else if (name == "stop") {
    const auto* str = std::get_if<std::string>(&v);
    if (!str) return bad(stage, "option 'stop' must be a str, got " + values::describe(v));
    req.stop.clear();
    // A JSON array of strings gives several; any other text is one stop string.
    auto arr = nlohmann::json::parse(*str, nullptr, /*allow_exceptions=*/false);
    if (!str->empty() && str->front() == '[' && !arr.is_discarded() && arr.is_array()) {
      if (arr.size() > 16) return bad(stage, "option 'stop' has more than 16 strings");
      for (const auto& e : arr) {
        if (!e.is_string() || e.get<std::string>().empty())
          return bad(stage, "option 'stop' must hold non-empty strings");
        req.stop.push_back(e.get<std::string>());
      }
    } else if (!str->empty()) {
      req.stop.push_back(*str);
    }
  } else if (name == "task") {
    const auto* t = std::get_if<std::string>(&v);
    if (!t || (*t != "generate" && *t != "embed"))
      return bad(stage, "option 'task' must be \"generate\" or \"embed\"");
  } else {
    return bad(stage,
               "unknown option '" + name +
                   "' (options: max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
                   "ignore_eos, speculative, presence_penalty, frequency_penalty, "
                   "repetition_penalty, "
                   "response_format, guided_json, json_schema, guided_regex, guided_choice, "
                   "guided_grammar, grammar, task)");
  }
  return Status::ok();
}

Result<std::vector<serving::Token>> token_ids(const std::string& stage, const Tensor& t) {
  if (t.shape.size() > 1 || (t.dtype != DType::Int32 && t.dtype != DType::Int64))
    return bad(stage, "the prompt must be a str or a 1-d int32/int64 tensor of token ids, got " +
                          values::describe(t));
  std::vector<serving::Token> ids;
  const int64_t n = t.element_count();
  ids.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = t.dtype == DType::Int32 ? t.as<int32_t>()[i] : t.as<int64_t>()[i];
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad(stage, "token id " + std::to_string(id) + " is out of range");
    ids.push_back(static_cast<serving::Token>(id));
  }
  if (ids.empty()) return bad(stage, "the prompt has no tokens");
  return ids;
}

Value ids_tensor(const std::vector<serving::Token>& ids) {
  return values::make_tensor(std::vector<int32_t>(ids.begin(), ids.end()),
                             {static_cast<int64_t>(ids.size())});
}

std::vector<Value> outputs_of(std::string text, const std::vector<serving::Token>& ids,
                              const std::string& reason, int outputs_count) {
  std::vector<Value> out;
  out.emplace_back(std::move(text));
  if (outputs_count >= 2) out.push_back(ids_tensor(ids));
  if (outputs_count >= 3) out.emplace_back(reason);
  return out;
}

// Collects one generation's events for run_llm.
class LlmSink final : public serving::EventSink {
 public:
  LlmSink(int outputs_count, LlmCallbacks cb) : outputs_count_(outputs_count), cb_(std::move(cb)) {}
  void on_token(const serving::TokenEvent& ev) override {
    ids_.push_back(ev.id);
    if (ev.text.empty()) return;
    text_ += ev.text;
    if (cb_.on_text) cb_.on_text(ev.text);
  }
  void on_finish(const serving::FinishEvent& ev) override {
    if (!ev.text.empty()) {
      text_ += ev.text;
      if (cb_.on_text) cb_.on_text(ev.text);
    }
    if (ev.reason == "cancelled") {
      done(Status::error(StatusCode::Cancelled, "the generation was cancelled"));
      return;
    }
    done(outputs_of(std::move(text_), ids_, ev.reason, outputs_count_));
  }
  void on_error(const Status& err) override { done(err); }

 private:
  void done(Result<std::vector<Value>> r) {
    if (done_) return;
    done_ = true;
    cb_.on_done(std::move(r));
  }
  int outputs_count_;
  LlmCallbacks cb_;
  std::string text_;
  std::vector<serving::Token> ids_;
  bool done_ = false;
};

}  // namespace

Result<serving::GenerateRequest> llm_request(const std::string& stage,
                                             const std::vector<Value>& args,
                                             const std::map<std::string, Value>& defaults,
                                             const std::map<std::string, Value>& kwargs) {
  if (args.size() != 1)
    return bad(stage, "an LLM stage takes one argument (the prompt), got " +
                          std::to_string(args.size()));
  serving::GenerateRequest req;
  const Value& p = args.front();
  if (const auto* s = std::get_if<std::string>(&p)) {
    if (s->empty()) return bad(stage, "the prompt is empty");
    req.prompt = *s;
  } else if (const auto* t = std::get_if<Tensor>(&p)) {
    CAIRN_ASSIGN_OR_RETURN(auto ids, token_ids(stage, *t));
    req.prompt = std::move(ids);
  } else {
    return bad(stage, "the prompt must be a str or a 1-d int32/int64 tensor of token ids, got " +
                          values::describe(p));
  }
  // Structured-output options are read as the OpenAI API reads them (the
  // stage's own kwargs replace the model's defaults), the rest one by one.
  nlohmann::ordered_json constraints = nlohmann::ordered_json::object();
  bool own = false;
  for (const auto* options : {&defaults, &kwargs})
    for (const auto& [name, v] : *options) {
      if (!is_constraint_option(name)) {
        CAIRN_RETURN_IF_ERROR(apply_option(stage, name, v, req));
        continue;
      }
      const auto* text = std::get_if<std::string>(&v);
      if (!text) return bad(stage, "option '" + name + "' must be a str, got " + values::describe(v));
      if (options == &kwargs && !own) {  // the stage's own replace the model's defaults
        constraints = nlohmann::ordered_json::object();
        own = true;
      }
      if (name == "response_format" || name == "guided_choice") {
        // JSON text of the object (or list); "json_object" alone is accepted too.
        auto j = *text == "json_object" ? nlohmann::ordered_json{{"type", "json_object"}}
                                        : nlohmann::ordered_json::parse(*text, nullptr, false);
        if (j.is_discarded()) return bad(stage, "option '" + name + "' is not JSON");
        constraints[name] = std::move(j);
      } else {
        constraints[name] = *text;
      }
    }
  auto grammar = grammar::output_constraint_gbnf(constraints);
  if (!grammar.is_ok()) return bad(stage, grammar.status().message());
  req.grammar = std::move(*grammar);
  return req;
}

serving::RequestId run_llm(serving::Backend& backend, serving::GenerateRequest req,
                           int outputs_count, LlmCallbacks callbacks) {
  auto on_done = callbacks.on_done;
  auto sink = std::make_shared<LlmSink>(outputs_count, std::move(callbacks));
  auto id = backend.submit(std::move(req), sink);
  if (!id.is_ok()) {
    on_done(id.status());
    return 0;
  }
  return *id;
}

bool is_embed_task(const std::map<std::string, Value>& kwargs) {
  const auto it = kwargs.find("task");
  if (it == kwargs.end()) return false;
  const auto* s = std::get_if<std::string>(&it->second);
  return s && *s == "embed";
}

Result<serving::EmbedRequest> llm_embed_request(const std::string& stage,
                                                const std::vector<Value>& args,
                                                const std::map<std::string, Value>& kwargs) {
  if (args.size() != 1)
    return bad(stage, "an embedding stage takes one argument (the text), got " +
                          std::to_string(args.size()));
  for (const auto& [name, v] : kwargs)
    if (name != "task") return bad(stage, "an embedding stage takes no option '" + name + "'");
  serving::EmbedRequest req;
  const Value& p = args.front();
  if (const auto* s = std::get_if<std::string>(&p)) {
    if (s->empty()) return bad(stage, "the text is empty");
    req.inputs.emplace_back(*s);
  } else if (const auto* t = std::get_if<Tensor>(&p)) {
    CAIRN_ASSIGN_OR_RETURN(auto ids, token_ids(stage, *t));
    req.inputs.emplace_back(std::move(ids));
  } else {
    return bad(stage, "the text must be a str or a 1-d int32/int64 tensor of token ids, got " +
                          values::describe(p));
  }
  return req;
}

namespace {

class LlmEmbedSink final : public serving::EmbedSink {
 public:
  explicit LlmEmbedSink(LlmCallbacks cb) : cb_(std::move(cb)) {}
  void on_done(serving::EmbedResult result) override {
    if (result.vectors.size() != 1) return cb_.on_done(Status::internal("no embedding came back"));
    const auto n = static_cast<int64_t>(result.vectors[0].size());
    std::vector<Value> out;
    out.emplace_back(values::make_tensor(result.vectors[0], {n}));
    cb_.on_done(std::move(out));
  }
  void on_error(const Status& err) override { cb_.on_done(err); }

 private:
  LlmCallbacks cb_;
};

}  // namespace

serving::RequestId run_llm_embed(serving::Backend& backend, serving::EmbedRequest req,
                                 LlmCallbacks callbacks) {
  auto on_done = callbacks.on_done;
  auto id = backend.embed(std::move(req), std::make_shared<LlmEmbedSink>(std::move(callbacks)));
  if (!id.is_ok()) {
    on_done(id.status());
    return 0;
  }
  return *id;
}

Result<std::vector<Value>> call_llm(serving::Backend& backend, serving::GenerateRequest req,
                                    int outputs_count, double timeout_s) {
  return wait_for_llm(
      backend,
      [&](LlmCallbacks cb) { return run_llm(backend, std::move(req), outputs_count, std::move(cb)); },
      timeout_s);
}

Result<std::vector<Value>> call_llm_embed(serving::Backend& backend, serving::EmbedRequest req,
                                          double timeout_s) {
  return wait_for_llm(
      backend, [&](LlmCallbacks cb) { return run_llm_embed(backend, std::move(req), std::move(cb)); },
      timeout_s);
}

Result<std::vector<Value>> wait_for_llm(serving::Backend& backend,
                                        const std::function<serving::RequestId(LlmCallbacks)>& start,
                                        double timeout_s) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Result<std::vector<Value>> result = Status::internal("no result");
  };
  auto w = std::make_shared<Wait>();
  LlmCallbacks cb;
  cb.on_done = [w](Result<std::vector<Value>> r) {
    std::lock_guard<std::mutex> lock(w->mu);
    w->result = std::move(r);
    w->done = true;
    w->cv.notify_all();
  };
  const auto id = start(std::move(cb));
  std::unique_lock<std::mutex> lock(w->mu);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  if (!w->cv.wait_until(lock, deadline, [&] { return w->done; })) {
    lock.unlock();
    if (id != 0) backend.cancel(id);
    return Status::error(StatusCode::DeadlineExceeded,
                         "the model call ran past the " + std::to_string(int(timeout_s)) +
                             " s stage timeout");
  }
  return std::move(w->result);
}

}  // namespace cairn::servable
