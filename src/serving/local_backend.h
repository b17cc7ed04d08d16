// serving/local_backend.h — a Backend that runs one model in this process.
// Owns the loaded model (file, weights, tokenizer), its paged KV cache and its
// engine thread, and everything between a GenerateRequest and the engine:
// synchronous validation (nothing malformed is queued), chat rendering,
// tokenization, queue limits, draining, and statistics for /metrics. Never
// parses HTTP or JSON and never blocks the caller on the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "core/status.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "model/load.h"
#include "serving/backend.h"

namespace cairn::serving {

struct LocalBackendOptions {
  std::string model_path;
  std::string model_name;          // empty: the file name without ".gguf"
  int32_t n_ctx = 0;               // tokens per sequence; 0: the model's, at most 4096
  int64_t kv_pool_bytes = 0;       // 0: kv::default_pool_bytes for this model and n_ctx
  // How K/V rows are stored (--kv-type): F16, or Q8_0 (half the bytes per
  // token; the model's n_head_kv * head_dim must be a multiple of 32).
  TensorType kv_type = TensorType::F16;
  int32_t max_batch_tokens = 512;  // tokens per forward (decode + prefill chunks)
  int32_t max_seqs = 64;           // sequences running at once
  double max_step_ms = 0;          // stall-free step target (engine::EngineConfig); 0 auto, < 0 off
  int32_t spec_lookup_max = 0;     // speculative decoding by prompt lookup: drafts per step; 0 off
  // Speculative decoding by a draft model of the same vocabulary (checked at
  // load): its file (empty: none) and the most drafts per step.
  std::string draft_model_path = {};
  int32_t spec_draft_max = 8;
  float draft_p_min = 0.0f;  // drafting stops below this draft probability; 0: never
  int32_t max_queue = 256;         // requests waiting to run; more get Unavailable
  int threads = 0;                 // kernel threads; <= 0: all cores
  // A model computed elsewhere (a distributed LLM's agents): its network is
  // made by this from the file's hyper-parameters, no weight is loaded
  // here, and the K/V cache keeps block tables only (kv::KvConfig::
  // tables_only), their contents lost whenever kv_generation() changes.
  model::RemoteModelFn remote_model = {};
  std::function<uint64_t()> kv_generation = {};
  // With remote_model: whether the remote side can compute now; health()
  // says Loading while it cannot (a controller then routes elsewhere).
  std::function<bool()> remote_ready = {};
  // LoRA adapters (model/lora.h): merged into the weights at load (--lora),
  // and served by name over the shared base weights (--lora-modules): a
  // request whose `model` is an adapter's name runs with it.
  model::AdapterOptions adapters = {};
  // Chat: Jinja text replacing the file's chat template (empty: the file's);
  // the tool-call format (a chat/tool_calls.h name; empty: detected from the
  // template); reasoning: "auto" (<think>...</think> split out as
  // reasoning_content when the template knows such tags), "deepseek" (split
  // out for any template) or "none" (left inline in the content).
  std::string chat_template = {};
  std::string tool_parser = {};
  std::string reasoning_format = "auto";
  // Embeddings: serve the model for /v1/embeddings (and /v1/rerank) only
  // (--embeddings; a model without a language-model head always is), and
  // the pooling ("mean", "cls", "last", "rank"; empty: the file's
  // pooling_type, else "last" for a decoder).
  bool embeddings_only = false;
  std::string pooling = {};
};

class LocalBackend final : public Backend {
 public:
  // Loads the model, sizes the KV pool (logging its size) and starts the
  // engine. The error is one line naming the file or the bad option.
  static Result<std::unique_ptr<LocalBackend>> create(const LocalBackendOptions& options);

  // The context and K/V pool create() gives a model of these
  // hyper-parameters (blocks of 16 tokens): a distributed model's agents
  // are told the same before its backend exists.
  struct KvPlan {
    int32_t n_ctx = 0;
    int64_t pool_bytes = 0;
    int32_t blocks = 0;
  };
  static Result<KvPlan> kv_plan(const LocalBackendOptions& options, const model::HParams& hp);
  ~LocalBackend() override;

  Result<RequestId> submit(GenerateRequest req, std::shared_ptr<EventSink> sink) override;
  Result<RequestId> embed(EmbedRequest req, std::shared_ptr<EmbedSink> sink) override;
  void cancel(RequestId id) override;
  std::vector<ModelInfo> models() const override;
  Health health() const override;
  BackendStats stats() const override;
  Result<std::vector<Token>> tokenize(const std::string& model, const std::string& text,
                                      bool add_special, bool parse_special = true) const override;
  Result<std::vector<std::string>> token_pieces(const std::string& model,
                                                const std::vector<Token>& tokens) const override;
  Result<std::string> detokenize(const std::string& model,
                                 const std::vector<Token>& tokens) const override;
  // The paged cache's row layout (F16 rows of kv_shape(), its block size);
  // Unavailable for a model computed elsewhere (its rows are not here).
  Result<kv::KvGeometry> kv_geometry(const std::string& model) const override;
  void start_draining() override;

  const std::string& model_id() const { return model_id_; }
  int32_t n_ctx() const { return engine_->n_ctx(); }
  int64_t kv_pool_bytes() const { return kv_pool_bytes_; }
  int32_t kv_blocks() const { return kv_blocks_; }  // of 16 tokens
  const Tokenizer& tokenizer() const { return *loaded_.tokenizer; }

  // The chat prompt `req` renders to (for tests and `cairn chat`).
  Result<std::string> render_chat(const GenerateRequest& req) const;
  Result<std::string> apply_template(const GenerateRequest& req) const override {
    CAIRN_RETURN_IF_ERROR(check_model(req.model));
    return render_chat(req);
  }

 private:
  LocalBackend() = default;
  // The LoRA adapter id `model` names (0: the base model), or not found.
  Result<uint16_t> resolve_model(const std::string& model) const;
  Status check_model(const std::string& model) const { return resolve_model(model).status(); }
  // How the API reads a chat request's output (rendered: its prompt); sets
  // render_special when the tool-call markers may be control tokens.
  Result<OutputSyntax> output_syntax(const GenerateRequest& req, const std::string& rendered,
                                     bool& render_special) const;
  // tool_choice required / named as GBNF text; empty for auto and none.
  Result<std::string> tool_choice_grammar(const GenerateRequest& req,
                                          const OutputSyntax& syntax) const;
  // `rendered` (if given) receives a chat prompt's rendered text.
  Result<std::vector<Token>> prompt_tokens(const GenerateRequest& req,
                                           std::string* rendered = nullptr) const;
  // The grammar of this text, compiled once: requests with the same schema
  // share one object, and with it the engine's cache of masks.
  Result<std::shared_ptr<const grammar::Grammar>> compiled_grammar(const std::string& text) const;

  LocalBackendOptions options_;
  std::string model_id_;
  int64_t created_ = 0;
  model::Pooling pooling_ = model::Pooling::Last;
  bool generates_ = true;       // completions and chat are served
  std::string template_text_;   // the chat template in use (empty: ChatML)
  int64_t n_params_ = 0;
  int64_t kv_pool_bytes_ = 0;
  int32_t kv_blocks_ = 0;
  std::atomic<bool> draining_{false};
  mutable std::mutex grammars_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const grammar::Grammar>> grammars_;
  model::LoadedModel loaded_;
  std::optional<chat::ChatTemplate> template_;  // absent: ChatML
  chat::ToolFormat tool_format_ = chat::ToolFormat::None;
  // The tags around the model's reasoning and whether it is split out.
  chat::ReasoningTags reasoning_tags_;
  bool split_reasoning_ = false;
  bool template_reasons_ = false;  // the template writes the tags itself
  std::unique_ptr<kv::PagedKvCache> kv_;
  std::unique_ptr<engine::Engine> engine_;  // last: stops before what it borrows goes away
};

}  // namespace cairn::serving
