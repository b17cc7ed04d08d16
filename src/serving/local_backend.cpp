// serving/local_backend.cpp — the in-process Backend: validation, chat rendering, the engine.
#include "serving/local_backend.h"

#include "engine/draft_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

namespace cairn::serving {

namespace {

constexpr int32_t kDefaultCtx = 4096;
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 512;

Status invalid(std::string message, std::string param = {}) {
  return Status::invalid_argument(std::move(message), std::move(param));
}

// Engine events in the serving vocabulary; token texts for top log-probabilities.
class SinkAdapter final : public engine::SequenceSink {
 public:
  SinkAdapter(std::shared_ptr<EventSink> sink, const Tokenizer& tok, bool logprobs)
      : sink_(std::move(sink)), tok_(tok), logprobs_(logprobs) {}

  void on_token(const engine::TokenOutput& out) override {
    TokenEvent ev;
    ev.id = out.id;
    ev.text = out.text;
    if (logprobs_) {
      ev.logprob = out.sample.logprob;
      ev.top.reserve(out.sample.top.size());
      for (const auto& t : out.sample.top)
        ev.top.push_back({t.token, tok_.token_to_piece(t.token, true), t.logprob});
    }
    sink_->on_token(ev);
  }
  void on_end(const engine::EndOutput& out) override {
    FinishEvent ev;
    ev.reason = engine::end_reason_name(out.reason);
    ev.text = out.text;
    ev.usage = {out.prompt_tokens, out.completion_tokens, out.cached_prompt_tokens};
    sink_->on_finish(ev);
  }
  void on_error(const Status& error) override { sink_->on_error(error); }
  void on_kv(kv::KvRun run) override { sink_->on_kv(std::move(run)); }

 private:
  std::shared_ptr<EventSink> sink_;
  const Tokenizer& tok_;
  bool logprobs_;
};

// "invalid sampling parameter top_p: must be in (0, 1]" -> "top_p".
std::string sampling_param(const std::string& message) {
  static constexpr std::string_view kPrefix = "invalid sampling parameter ";
  if (message.rfind(kPrefix, 0) != 0) return {};
  const size_t end = message.find(':', kPrefix.size());
  return message.substr(kPrefix.size(), end == std::string::npos ? end : end - kPrefix.size());
}

// Turns the engine's pooled rows into the API's answer: unit length when
// asked (rerank scores are left as the head made them).
class EmbedSinkAdapter final : public engine::EmbedSink {
 public:
  EmbedSinkAdapter(std::shared_ptr<serving::EmbedSink> sink, bool normalize)
      : sink_(std::move(sink)), normalize_(normalize) {}
  void on_embeddings(std::vector<std::vector<float>> vectors, int32_t n_tokens) override {
    if (normalize_)
      for (auto& v : vectors) {
        double sum = 0;
        for (float x : v) sum += (double)x * x;
        const double norm = std::sqrt(sum);
        if (norm > 0)
          for (float& x : v) x = (float)(x / norm);
      }
    sink_->on_done(EmbedResult{std::move(vectors), n_tokens});
  }
  void on_error(const Status& error) override { sink_->on_error(error); }

 private:
  std::shared_ptr<serving::EmbedSink> sink_;
  bool normalize_;
};

const char* pooling_name(model::Pooling p) {
  switch (p) {
    case model::Pooling::Mean: return "mean";
    case model::Pooling::Cls: return "cls";
    case model::Pooling::Last: return "last";
    case model::Pooling::Rank: return "rank";
    default: return "none";
  }
}

}  // namespace

Result<LocalBackend::KvPlan> LocalBackend::kv_plan(const LocalBackendOptions& options,
                                                   const model::HParams& hp) {
  const int64_t train = hp.n_ctx_train > 0 ? hp.n_ctx_train : INT32_MAX;
  if (options.n_ctx > train)
    return Status::error("n_ctx " + std::to_string(options.n_ctx) +
                         " exceeds the model's context of " + std::to_string(train) + " tokens");
  CAIRN_RETURN_IF_ERROR(kv::check_kv_type(options.kv_type, hp.kv_row_elems(), hp.head_dim));
  KvPlan p;
  p.n_ctx = static_cast<int32_t>(options.n_ctx > 0 ? options.n_ctx
                                                   : std::min<int64_t>(kDefaultCtx, train));
  kv::KvShape shape = hp.kv_shape();
  shape.dtype = options.kv_type;
  p.pool_bytes =
      options.kv_pool_bytes > 0 ? options.kv_pool_bytes : kv::default_pool_bytes(shape, p.n_ctx);
  const int64_t bb = kv::PagedKvCache::block_bytes(shape);
  p.blocks = bb > 0 ? static_cast<int32_t>(std::min<int64_t>(p.pool_bytes / bb, INT32_MAX)) : 0;
  return p;
}

Result<std::unique_ptr<LocalBackend>> LocalBackend::create(const LocalBackendOptions& options) {
  if (options.max_batch_tokens < 1) return Status::error("max_batch_tokens must be >= 1");
  if (options.max_seqs < 1) return Status::error("max_seqs must be >= 1");
  if (options.max_queue < 1) return Status::error("max_queue must be >= 1");
  if (options.n_ctx < 0) return Status::error("n_ctx must be >= 0 (0: the model's)");
  if (options.kv_pool_bytes < 0) return Status::error("the KV pool size must be >= 0 (0: default)");
  if (options.remote_model && options.kv_type != TensorType::F16)
    return Status::invalid_argument(
        "--kv-type " + std::string(type_info(options.kv_type).name) +
        " is not supported for a distributed model (its agents keep K/V in f16)");

  std::unique_ptr<LocalBackend> b(new LocalBackend());
  b->options_ = options;
  auto loaded =
      model::load_model(options.model_path,
                        // The context it will serve (kv_plan's, clamped to the model's by
                        // the loader): LongRoPE models choose their factors by it.
                        model::LoadOptions{options.threads, {},
                                           options.n_ctx > 0 ? options.n_ctx : kDefaultCtx},
                        options.remote_model, options.adapters);
  if (!loaded.is_ok()) return loaded.status();
  b->loaded_ = std::move(*loaded);
  b->model_id_ = options.model_name.empty()
                     ? std::filesystem::path(options.model_path).stem().string()
                     : options.model_name;
  for (const auto& a : b->loaded_.adapters)
    if (a->name == b->model_id_)
      return Status::invalid_argument("the LoRA adapter '" + a->name +
                                      "' has the model's own name: name it otherwise");
  b->created_ = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();

  std::string template_text = options.chat_template;
  if (template_text.empty()) {
    auto source = b->loaded_.file->get_string("tokenizer.chat_template");
    if (source.is_ok() && source->has_value()) template_text = **source;
  }
  if (!template_text.empty()) {
    auto tmpl = chat::ChatTemplate::parse(template_text);
    if (tmpl.is_ok())
      b->template_.emplace(std::move(*tmpl));
    else if (!options.chat_template.empty())
      return Status::invalid_argument("--chat-template: " + tmpl.status().message());
    else  // a broken template should not keep the model from serving completions
      spdlog::warn("{}: chat template unusable ({}); chat requests use ChatML", b->model_id_,
                   tmpl.status().message());
  }
  if (!b->template_) template_text.clear();  // ChatML: no format, no reasoning tags
  CAIRN_ASSIGN_OR_RETURN(b->tool_format_,
                         chat::resolve_tool_format(options.tool_parser, template_text));
  b->reasoning_tags_ = chat::reasoning_tags_for_template(template_text);
  b->template_reasons_ = template_text.find(b->reasoning_tags_.open) != std::string::npos ||
                         template_text.find(b->reasoning_tags_.close) != std::string::npos;
  if (options.reasoning_format == "auto")
    b->split_reasoning_ = b->template_reasons_;
  else if (options.reasoning_format == "deepseek")
    b->split_reasoning_ = true;
  else if (options.reasoning_format != "none")
    return Status::invalid_argument("--reasoning-format must be auto, deepseek or none (got '" +
                                    options.reasoning_format + "')");

  const model::HParams& hp = b->loaded_.model->hparams();
  b->template_text_ = template_text;
  b->generates_ = hp.has_lm_head && !options.embeddings_only;
  if (options.pooling.empty())
    b->pooling_ = hp.pooling == model::Pooling::Unspecified || hp.pooling == model::Pooling::None
                      ? model::Pooling::Last
                      : hp.pooling;
  else if (options.pooling == "mean")
    b->pooling_ = model::Pooling::Mean;
  else if (options.pooling == "cls")
    b->pooling_ = model::Pooling::Cls;
  else if (options.pooling == "last")
    b->pooling_ = model::Pooling::Last;
  else if (options.pooling == "rank")
    b->pooling_ = model::Pooling::Rank;
  else
    return Status::invalid_argument("--pooling must be mean, cls, last or rank (got '" +
                                    options.pooling.substr(0, 64) + "')");
  if (b->pooling_ == model::Pooling::Rank && hp.n_cls_out <= 0)
    return Status::invalid_argument("--pooling rank needs a reranker's classification head (cls.output), which " +
                                    b->model_id_ + " lacks");
  for (const auto& t : b->loaded_.file->tensors()) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    b->n_params_ += n;
  }
  CAIRN_ASSIGN_OR_RETURN(KvPlan plan, kv_plan(options, hp));
  // Embeddings never use the paged cache (each forward has its own scratch
  // K/V): one context's blocks keep the cache valid without the memory.
  // Agents keep every position of every layer (one block table).
  kv::KvShape shape = options.remote_model ? hp.kv_shape() : hp.paged_kv_shape();
  shape.dtype = options.kv_type;
  if (!b->generates_)
    plan.pool_bytes = kv::PagedKvCache::block_bytes(shape) * ((plan.n_ctx + 15) / 16);
  const int32_t n_ctx = plan.n_ctx;
  kv::KvConfig kv_config{plan.pool_bytes, 16, true};
  kv_config.tables_only = static_cast<bool>(options.remote_model);
  kv_config.storage_generation = options.kv_generation;
  auto cache = kv::PagedKvCache::create(shape, kv_config);
  if (!cache.is_ok()) return cache.status().with_context("KV cache");
  b->kv_ = std::move(*cache);
  const int32_t blocks = b->kv_->stats().blocks_total;
  b->kv_pool_bytes_ = static_cast<int64_t>(blocks) * kv::PagedKvCache::block_bytes(shape);
  if (b->kv_->blocks_for(n_ctx) > blocks)
    return Status::error("the KV pool (" + std::to_string(blocks) + " blocks of 16 tokens) " +
                         "cannot hold one full context of " + std::to_string(n_ctx) + " tokens");
  spdlog::info(
      "{}: KV cache {:.1f} MiB of {} rows ({} blocks of 16 tokens, {} tokens{}), context {}",
      b->model_id_, b->kv_pool_bytes_ / 1048576.0, type_info(shape.dtype).name, blocks, blocks * 16,
      options.remote_model ? "; the agents hold it, each its share" : "", n_ctx);
  b->kv_blocks_ = blocks;

  engine::EngineConfig ec{options.max_batch_tokens, options.max_seqs, n_ctx, options.max_step_ms};
  ec.spec_lookup_max = options.spec_lookup_max;
  if (!options.draft_model_path.empty() && b->generates_) {
    if (options.remote_model)
      return Status::invalid_argument("--draft-model needs a model computed in this process "
                                      "(a distributed model's K/V rows are held by its agents)");
    engine::DraftModelConfig dc;
    dc.n_ctx = n_ctx;
    dc.max_seqs = options.max_seqs;
    dc.p_min = options.draft_p_min;
    auto draft = engine::DraftModel::load(options.draft_model_path, options.threads,
                                          *b->loaded_.tokenizer, hp.n_vocab, dc);
    if (!draft.is_ok()) return draft.status();
    spdlog::info("{}: draft model {} ({} layers, K/V {:.1f} MiB), up to {} drafts per step",
                 b->model_id_, options.draft_model_path, (*draft)->model_hparams().n_layer,
                 (*draft)->kv().stats().blocks_total *
                     (double)kv::PagedKvCache::block_bytes((*draft)->model_hparams().kv_shape()) /
                     1048576.0,
                 options.spec_draft_max);
    ec.draft_model = std::move(*draft);
    ec.spec_draft_max = options.spec_draft_max;
  }
  b->engine_ =
      std::make_unique<engine::Engine>(*b->loaded_.model, *b->loaded_.tokenizer, *b->kv_, ec);
  b->engine_->start();
  return b;
}

LocalBackend::~LocalBackend() {
  if (engine_) engine_->stop();
}

Result<uint16_t> LocalBackend::resolve_model(const std::string& model) const {
  if (model.empty() || model == model_id_) return uint16_t{0};
  for (size_t i = 0; i < loaded_.adapters.size(); ++i)
    if (loaded_.adapters[i]->name == model) return static_cast<uint16_t>(i + 1);
  return Status::not_found("the model '" + model.substr(0, 200) + "' does not exist", "model");
}

Result<std::shared_ptr<const grammar::Grammar>> LocalBackend::compiled_grammar(
    const std::string& text) const {
  std::lock_guard lock(grammars_mu_);
  if (const auto it = grammars_.find(text); it != grammars_.end()) return it->second;
  auto g = grammar::parse_gbnf(text);
  if (!g) return invalid(g.status().message(), "grammar");
  if (grammars_.size() >= 64) grammars_.clear();  // a bounded cache; rebuilt on demand
  auto shared = std::make_shared<const grammar::Grammar>(std::move(*g));
  grammars_.emplace(text, shared);
  return shared;
}

Result<std::string> LocalBackend::render_chat(const GenerateRequest& req) const {
  const auto* messages = std::get_if<std::vector<ChatMessage>>(&req.prompt);
  if (!messages) return invalid("the request has no chat messages", "messages");
  if (messages->empty()) return invalid("messages must not be empty", "messages");
  chat::ChatInput in;
  in.messages.reserve(messages->size());
  for (const auto& m : *messages) in.messages.push_back({m.role, m.content, m.extra_json});
  if (!template_) return chat::chatml(in.messages, req.add_generation_prompt);
  const Tokenizer& tok = *loaded_.tokenizer;
  if (req.tool_choice != ToolChoice::None) in.tools_json = req.tools_json;
  in.template_kwargs_json = req.chat_template_kwargs_json;
  in.add_generation_prompt = req.add_generation_prompt;
  if (tok.bos() >= 0) in.bos_token = std::string(tok.token_text(tok.bos()));
  if (tok.eos() >= 0) in.eos_token = std::string(tok.token_text(tok.eos()));
  auto text = template_->apply(in);
  if (!text.is_ok()) return invalid("chat template: " + text.status().message(), "messages");
  return std::move(*text);
}

Result<OutputSyntax> LocalBackend::output_syntax(const GenerateRequest& req,
                                                 const std::string& rendered,
                                                 bool& render_special) const {
  OutputSyntax out;
  const bool tools = !req.tools_json.empty() && req.tool_choice != ToolChoice::None;
  if (tools && tool_format_ != chat::ToolFormat::None) {
    out.tool_format = std::string(chat::tool_format_name(tool_format_));
    // Several formats' markers are control tokens, which the output only
    // carries when asked.
    render_special = true;
  }
  if (split_reasoning_) {
    out.reasoning_open = reasoning_tags_.open;
    out.reasoning_close = reasoning_tags_.close;
    out.starts_in_reasoning = chat::prompt_opens_reasoning(rendered, reasoning_tags_);
  }
  return out;
}

Result<std::string> LocalBackend::tool_choice_grammar(const GenerateRequest& req,
                                                     const OutputSyntax& syntax) const {
  if (req.tool_choice != ToolChoice::Required && req.tool_choice != ToolChoice::Named) return std::string();
  if (req.tools_json.empty())
    return invalid("tool_choice forces a call but no tools are given", "tool_choice");
  if (tool_format_ == chat::ToolFormat::None)
    return invalid("the model's chat template has no tool-call format that cairn knows; "
                   "start the server with --tool-parser NAME",
                   "tool_choice");
  auto tools = nlohmann::ordered_json::parse(req.tools_json, nullptr, /*allow_exceptions=*/false);
  if (tools.is_discarded()) return invalid("tools are not valid JSON", "tools");
  chat::ToolChoice choice;
  if (req.tool_choice == ToolChoice::Named) {
    choice.kind = chat::ToolChoice::Kind::Named;
    choice.name = req.tool_choice_name;
  }
  // A model that reasons first may still do so; the grammar's reasoning is <think>'s.
  chat::GrammarReasoning reasoning = chat::GrammarReasoning::None;
  if (reasoning_tags_.open == "<think>") {
    if (syntax.starts_in_reasoning)
      reasoning = chat::GrammarReasoning::Open;
    else if (template_reasons_)
      reasoning = chat::GrammarReasoning::Optional;
  }
  auto g = chat::tool_call_grammar(tool_format_, tools, choice, req.parallel_tool_calls, reasoning);
  if (!g.is_ok()) return invalid(g.status().message(), "tools");
  return std::move(*g);
}

Result<std::vector<Token>> LocalBackend::prompt_tokens(const GenerateRequest& req,
                                                       std::string* rendered_out) const {
  const Tokenizer& tok = *loaded_.tokenizer;
  if (const auto* text = std::get_if<std::string>(&req.prompt)) {
    if (text->empty()) return invalid("the prompt is empty", "prompt");
    return tok.encode(*text, /*add_special=*/true, /*parse_special=*/true);
  }
  if (const auto* ids = std::get_if<std::vector<Token>>(&req.prompt)) {
    if (ids->empty()) return invalid("the prompt is empty", "prompt");
    const int32_t n_vocab = static_cast<int32_t>(loaded_.model->hparams().n_vocab);
    for (Token t : *ids)
      if (t < 0 || t >= n_vocab)
        return invalid("prompt token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                           std::to_string(n_vocab - 1) + ")",
                       "prompt");
    return *ids;
  }
  CAIRN_ASSIGN_OR_RETURN(const std::string rendered, render_chat(req));
  if (rendered_out) *rendered_out = rendered;
  // BOS as the model wants it; a template that writes bos_token itself must
  // not end up with two.
  auto ids = tok.encode(rendered, /*add_special=*/true, /*parse_special=*/true);
  if (ids.size() >= 2 && tok.bos() >= 0 && ids[0] == tok.bos() && ids[1] == tok.bos())
    ids.erase(ids.begin());
  return ids;
}

Result<RequestId> LocalBackend::submit(GenerateRequest req, std::shared_ptr<EventSink> sink) {
  if (draining_.load())
    return Status::unavailable("the server is shutting down and takes no new requests");
  CAIRN_ASSIGN_OR_RETURN(const uint16_t adapter, resolve_model(req.model));
  if (!generates_)
    return invalid("the model '" + model_id_ + "' is served for embeddings only (" +
                       (loaded_.model->hparams().has_lm_head ? "--embeddings"
                                                             : "it has no language-model head") +
                       "): use /v1/embeddings",
                   "model");
  if (!sink) return Status::internal("no event sink for the request");
  if (req.max_tokens == 0 || req.max_tokens < -1)
    return invalid("max_tokens must be at least 1 (got " + std::to_string(req.max_tokens) + ")",
                   "max_tokens");
  if (req.top_logprobs < -1 || req.top_logprobs > engine::SamplingParams::kMaxLogprobs)
    return invalid("top_logprobs must be between 0 and " +
                       std::to_string(engine::SamplingParams::kMaxLogprobs),
                   "top_logprobs");
  if (req.stop.size() > kMaxStopStrings)
    return invalid("at most " + std::to_string(kMaxStopStrings) + " stop strings are allowed",
                   "stop");
  for (const auto& s : req.stop)
    if (s.size() > kMaxStopBytes)
      return invalid("a stop string is longer than " + std::to_string(kMaxStopBytes) + " bytes",
                     "stop");

  if (req.handoff && req.resume)
    return invalid("a request is either handed off or resumed, not both", "handoff");
  if (req.handoff && (req.handoff->peer.empty() || req.handoff->id.empty()))
    return invalid("a handoff needs the decode worker's address and an id", "handoff");
  if (req.handoff && options_.remote_model)
    return invalid("this worker's K/V rows are held by its agents and cannot be handed off",
                   "handoff");
  if (req.resume && req.resume->forced.empty())
    return invalid("a resumed request needs the tokens already generated (forced)", "resume");

  std::string rendered;
  CAIRN_ASSIGN_OR_RETURN(std::vector<Token> prompt, prompt_tokens(req, &rendered));
  if (prompt.empty()) return invalid("the prompt is empty", "prompt");

  const int64_t n_ctx = engine_->n_ctx();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= n_ctx)
    return invalid("the prompt has " + std::to_string(n_prompt) +
                       " tokens, but the context holds " + std::to_string(n_ctx) +
                       " (prompt and completion together)",
                   "prompt");
  if (req.max_tokens > 0 && n_prompt + req.max_tokens > n_ctx)
    return invalid("the prompt has " + std::to_string(n_prompt) + " tokens and max_tokens is " +
                       std::to_string(req.max_tokens) + ": together more than the context of " +
                       std::to_string(n_ctx) + " tokens",
                   "max_tokens");

  engine::EngineRequest er;
  if (req.resume) {
    const auto& forced = req.resume->forced;
    const int32_t n_vocab = static_cast<int32_t>(loaded_.model->hparams().n_vocab);
    for (Token t : forced)
      if (t < 0 || t >= n_vocab)
        return invalid("forced token id " + std::to_string(t) + " is outside the vocabulary",
                       "resume");
    // The sender stops at max_tokens itself, so forced never reaches it.
    if (req.max_tokens > 0 && (int64_t)forced.size() >= req.max_tokens)
      return invalid("a resumed request has " + std::to_string(forced.size()) +
                         " tokens already generated, max_tokens is " +
                         std::to_string(req.max_tokens),
                     "resume");
    if (n_prompt + (int64_t)forced.size() >= n_ctx)
      return invalid("the prompt and the tokens already generated fill the context", "resume");
    er.forced = forced;
    // Rows computed for another prompt are useless here: recompute instead.
    if (req.resume->kv && req.resume->kv->prompt == prompt) {
      er.import_kv = req.resume->kv;
    } else if (req.resume->kv) {
      spdlog::warn("handoff {}: the handed-over rows belong to another prompt; recomputing",
                   req.resume->handoff_id.substr(0, 64));
    }
  }
  er.export_kv = req.handoff.has_value();

  const SamplingOptions& so = req.sampling;
  er.sampling.temperature = so.temperature;
  er.sampling.top_k = so.top_k;
  er.sampling.top_p = so.top_p;
  er.sampling.min_p = so.min_p;
  er.sampling.presence_penalty = so.presence_penalty;
  er.sampling.frequency_penalty = so.frequency_penalty;
  er.sampling.repetition_penalty = so.repetition_penalty;
  er.sampling.logit_bias = so.logit_bias;
  er.sampling.seed = so.seed;
  er.sampling.n_logprobs = std::max(0, req.top_logprobs);
  Status valid = er.sampling.validate(static_cast<int32_t>(loaded_.model->hparams().n_vocab));
  if (!valid.is_ok()) return invalid(valid.message(), sampling_param(valid.message()));
  er.logprobs = req.top_logprobs >= 0;
  er.prompt = std::move(prompt);
  er.max_tokens = req.max_tokens;
  er.ignore_eos = req.ignore_eos;
  er.speculative = req.speculative;
  er.stop = std::move(req.stop);
  er.adapter = adapter;
  std::optional<OutputSyntax> syntax;
  if (std::holds_alternative<std::vector<ChatMessage>>(req.prompt)) {
    CAIRN_ASSIGN_OR_RETURN(syntax, output_syntax(req, rendered, er.render_special));
    CAIRN_ASSIGN_OR_RETURN(std::string calls, tool_choice_grammar(req, *syntax));
    if (!calls.empty()) req.grammar = std::move(calls);
  }
  if (!req.grammar.empty()) {
    CAIRN_ASSIGN_OR_RETURN(er.grammar, compiled_grammar(req.grammar));
  }

  if (engine_->queued() >= options_.max_queue)
    return Status::unavailable("too many requests are queued (" +
                               std::to_string(options_.max_queue) + "); retry later");
  const bool logprobs = er.logprobs;
  if (syntax) sink->on_start(*syntax);  // before the engine can send a token
  auto id = engine_->submit(
      std::move(er), std::make_shared<SinkAdapter>(std::move(sink), *loaded_.tokenizer, logprobs));
  if (!id.is_ok()) return invalid(id.status().message());
  return *id;
}

Result<RequestId> LocalBackend::embed(EmbedRequest req, std::shared_ptr<EmbedSink> sink) {
  if (draining_.load())
    return Status::unavailable("the server is shutting down and takes no new requests");
  CAIRN_ASSIGN_OR_RETURN(const uint16_t adapter, resolve_model(req.model));
  if (!sink) return Status::internal("no sink for the request");
  if (adapter != 0)
    return invalid("LoRA adapters do not make embeddings; name the base model", "model");
  const bool rank = req.query.has_value();
  if (rank && pooling_ != model::Pooling::Rank)
    return invalid("the model '" + model_id_ +
                       "' is not a reranker (serve one with a classification head, --pooling rank)",
                   "model");
  if (!rank && pooling_ == model::Pooling::Rank)
    return invalid("the model '" + model_id_ + "' is served as a reranker: use /v1/rerank",
                   "model");
  const Tokenizer& tok = *loaded_.tokenizer;
  engine::EmbedRequest er;
  er.pooling = pooling_;
  er.inputs.reserve(req.inputs.size());
  for (auto& in : req.inputs) {
    std::vector<Token> ids;
    if (auto* text = std::get_if<std::string>(&in))
      ids = rank ? tok.encode_pair(*req.query, *text)
                 : tok.encode(*text, /*add_special=*/true, /*parse_special=*/true);
    else
      ids = std::move(std::get<std::vector<Token>>(in));
    er.inputs.push_back(std::move(ids));
  }
  if (engine_->queued() >= options_.max_queue)
    return Status::unavailable("too many requests are queued (" +
                               std::to_string(options_.max_queue) + "); retry later");
  auto id = engine_->submit_embedding(
      std::move(er), std::make_shared<EmbedSinkAdapter>(std::move(sink), req.normalize && !rank));
  if (!id.is_ok()) return invalid(id.status().message(), id.status().param());
  return *id;
}

void LocalBackend::cancel(RequestId id) { engine_->cancel(id); }

std::vector<ModelInfo> LocalBackend::models() const {
  const model::HParams& hp = loaded_.model->hparams();
  ModelInfo base{model_id_, engine_->n_ctx(), static_cast<int32_t>(hp.n_vocab), created_};
  base.n_ctx_train = static_cast<int32_t>(std::min<int64_t>(hp.n_ctx_train, INT32_MAX));
  base.n_embd = static_cast<int32_t>(hp.n_embd);
  base.n_params = n_params_;
  base.arch = hp.arch;
  base.generates = generates_;
  base.pooling = pooling_name(pooling_);
  base.chat_template = template_text_;
  std::vector<ModelInfo> out = {base};
  for (const auto& a : loaded_.adapters) {
    ModelInfo m = base;
    m.id = a->name;
    m.parent = model_id_;
    m.root = a->path;
    out.push_back(std::move(m));
  }
  return out;
}

Health LocalBackend::health() const {
  const engine::EngineStats s = engine_->stats();
  HealthState state = HealthState::Ready;
  if (draining_.load())
    state = HealthState::Draining;
  else if (options_.remote_ready && !options_.remote_ready())
    state = HealthState::Loading;
  return Health{state, s.running, engine_->queued()};
}

BackendStats LocalBackend::stats() const {
  const engine::EngineStats s = engine_->stats();
  BackendStats b;
  b.prompt_tokens_total = s.prompt_tokens_total;
  b.generated_tokens_total = s.generated_tokens_total;
  b.running = s.running;
  b.waiting = engine_->queued();
  b.kv_blocks_used = s.kv.blocks_used;
  b.kv_blocks_total = s.kv.blocks_total;
  b.prefix_cache_queries = s.kv.prefix_queries;
  b.prefix_cache_hits = s.kv.prefix_hits;
  b.preemptions = s.preemptions;
  b.spec_draft_tokens_total = s.spec_draft_tokens_total;
  b.spec_accepted_tokens_total = s.spec_accepted_tokens_total;
  b.requests_cancelled = s.requests_cancelled;
  b.embedding_inputs_total = s.embed_inputs_total;
  b.embedding_tokens_total = s.embed_tokens_total;
  b.time_to_first_token_s = s.time_to_first_token_s;
  b.inter_token_latency_s = s.inter_token_latency_s;
  b.queue_time_s = s.queue_time_s;
  b.e2e_latency_s = s.e2e_latency_s;
  return b;
}

Result<std::vector<Token>> LocalBackend::tokenize(const std::string& model, const std::string& text,
                                                  bool add_special, bool parse_special) const {
  CAIRN_RETURN_IF_ERROR(check_model(model));
  return loaded_.tokenizer->encode(text, add_special, parse_special);
}

Result<std::vector<std::string>> LocalBackend::token_pieces(const std::string& model,
                                                            const std::vector<Token>& tokens) const {
  CAIRN_RETURN_IF_ERROR(check_model(model));
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (Token t : tokens) out.push_back(loaded_.tokenizer->token_to_piece(t, /*render_special=*/true));
  return out;
}

Result<std::string> LocalBackend::detokenize(const std::string& model,
                                             const std::vector<Token>& tokens) const {
  CAIRN_RETURN_IF_ERROR(check_model(model));
  const int32_t n_vocab = static_cast<int32_t>(loaded_.model->hparams().n_vocab);
  for (Token t : tokens)
    if (t < 0 || t >= n_vocab)
      return invalid("token id " + std::to_string(t) + " is outside the vocabulary", "tokens");
  return loaded_.tokenizer->decode(tokens);
}

Result<kv::KvGeometry> LocalBackend::kv_geometry(const std::string& model) const {
  CAIRN_RETURN_IF_ERROR(check_model(model));
  if (options_.remote_model || !kv_)
    return Status::unavailable("the model's K/V rows are held by its agents, not here");
  const kv::KvShape shape = loaded_.model->kv_shape();
  kv::KvGeometry g;
  g.n_layer = shape.n_layer;
  g.row_elems = shape.row_elems;
  g.elem_bytes = kv_->dtype() == TensorType::F32 ? 4 : kv_->dtype() == TensorType::Q8_0 ? 1 : 2;
  g.dtype = kv_->dtype();
  g.block_tokens = kv_->block_tokens();
  return g;
}

void LocalBackend::start_draining() { draining_.store(true); }

}  // namespace cairn::serving
