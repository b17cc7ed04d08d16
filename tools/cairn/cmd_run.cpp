// `cairn run`: generate a continuation of one prompt, streamed to stdout.
// Without -m it runs the built-in demo model (written once to the cache folder).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "core/thread_pool.h"
#include "engine/draft.h"
#include "engine/draft_model.h"
#include "engine/generator.h"
#include "model/load.h"
#include "modelgen/demo_model.h"
#include "server_flags.h"

namespace cairn::cli {

namespace {

struct RunArgs {
  std::string model;
  model::AdapterOptions adapters;  // --lora only: merged at load
  std::string prompt;
  int32_t n_predict = 128;
  float temp = 0.8f;  // llama.cpp's CLI defaults for the filters
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  int threads = 0;
  int64_t ctx = 0;
  TensorType kv_type = TensorType::F16;
  int32_t spec_lookup = 0;
  std::string draft_model;
  int32_t draft_max = 8;
  float draft_p_min = 0.0f;
};

Status run(const RunArgs& a) {
  engine::GenerateOptions go;
  go.max_tokens = a.n_predict;
  go.ignore_eos = a.ignore_eos;
  go.n_ctx = a.ctx;
  go.kv_type = a.kv_type;
  auto& s = go.sampling;
  s.temperature = a.temp;
  s.top_k = a.top_k;
  s.top_p = a.top_p;
  s.min_p = a.min_p;
  s.repetition_penalty = a.repeat_penalty;
  s.penalty_last_n = a.repeat_last_n;
  s.presence_penalty = a.presence_penalty;
  s.frequency_penalty = a.frequency_penalty;
  s.seed = a.seed;

  // Bad flags fail before anything is written or loaded (vocabulary bounds are
  // checked again once the model is known).
  CAIRN_RETURN_IF_ERROR(s.validate(INT32_MAX));

  auto resolved = modelgen::model_or_demo(a.model);
  if (!resolved.is_ok()) return resolved.status();
  const std::string path = *resolved;
  model::LoadOptions lo;
  lo.n_threads = a.threads;
  lo.n_ctx = a.ctx;  // LongRoPE's choice of factors; 0: the model's context, as llama.cpp's -c 0
  auto loaded = model::load_model(path, lo, {}, a.adapters);
  if (!loaded.is_ok()) return loaded.status();
  const auto& hp = loaded->model->hparams();
  CAIRN_RETURN_IF_ERROR(kv::check_kv_type(a.kv_type, hp.kv_row_elems(), hp.head_dim));
  spdlog::info("loaded {}: {}, {} layers, dim {}, vocab {}; {} threads", path, hp.arch, hp.n_layer,
               hp.n_embd, hp.n_vocab, a.threads > 0 ? a.threads : ThreadPool::default_size());

  if (a.spec_lookup > 0) go.drafts = std::make_shared<engine::PromptLookup>();
  if (!a.draft_model.empty()) {
    engine::DraftModelConfig dc;
    dc.n_ctx = a.ctx > 0 ? (int32_t)std::min<int64_t>(a.ctx, INT32_MAX) : dc.n_ctx;
    dc.max_seqs = 1;
    dc.p_min = a.draft_p_min;
    auto draft =
        engine::DraftModel::load(a.draft_model, a.threads, *loaded->tokenizer, hp.n_vocab, dc);
    if (!draft.is_ok()) return draft.status();
    std::shared_ptr<engine::DraftSource> model_drafts = std::move(*draft);
    go.drafts = go.drafts ? std::make_shared<engine::FirstOfDrafts>(go.drafts, model_drafts)
                          : model_drafts;
  }
  go.spec_max = std::max(a.spec_lookup, a.draft_model.empty() ? 0 : a.draft_max);

  bool write_failed = false;
  engine::Generator gen(*loaded->model, *loaded->tokenizer);
  auto res = gen.generate(a.prompt, go, [&](std::string_view piece) {
    if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size() ||
        std::fflush(stdout) != 0) {
      write_failed = true;  // e.g. the reader of a pipe went away: stop quietly
      return false;
    }
    return true;
  });
  if (!res.is_ok()) return res.status();
  if (!write_failed && isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  const double tps = res->decode_seconds > 0 ? res->tokens.size() / res->decode_seconds : 0;
  spdlog::info(
      "prompt {} tokens in {:.3f} s; generated {} tokens in {:.3f} s ({:.1f} tok/s); seed {}; {}",
      res->prompt_tokens.size(), res->prefill_seconds, res->tokens.size(), res->decode_seconds, tps,
      res->seed, res->finish == engine::FinishReason::Stop ? "stopped" : "length limit");
  if (res->draft_tokens > 0)
    spdlog::info("speculative decoding: {} of {} drafted tokens accepted ({:.1f} %)",
                 res->accepted_tokens, res->draft_tokens,
                 100.0 * res->accepted_tokens / res->draft_tokens);
  return Status::ok();
}

}  // namespace

void register_run(CLI::App& app, CommandResult& result) {
  auto* cmd =
      app.add_subcommand("run", "generate a continuation of a prompt (stdout: the text only)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the built-in demo model)");
  add_lora_flags(cmd, a->adapters, /*runtime=*/false);
  cmd->add_option("-p,--prompt", a->prompt, "prompt text (default: empty, i.e. start from BOS)");
  cmd->add_option("-n,--n-predict", a->n_predict,
                  "tokens to generate; -1: until end of text or full context")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--temp", a->temp, "temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "top-k; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "top-p; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", a->min_p, "min-p; 0 = off")->capture_default_str();
  cmd->add_option("--repeat-penalty", a->repeat_penalty, "repetition penalty; 1 = off")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", a->repeat_last_n, "penalty window; 0 = off, -1 = all")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", a->presence_penalty, "presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", a->frequency_penalty, "frequency penalty")
      ->capture_default_str();
  cmd->add_option_function<uint64_t>(
      "-s,--seed", [a](const uint64_t& v) { a->seed = v; }, "sampling seed (default: random)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-text tokens");
  // Left out, the pool takes one thread per physical core this process may run on; typed,
  // 0 or a negative count is an error rather than a silent "all cores".
  cmd->add_option("-t,--threads", a->threads,
                  "compute threads, this one included (default: one per physical core)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx", a->ctx, "context size (default: prompt + n, at most the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  add_kv_type_flag(cmd, a->kv_type);
  add_speculative_flags(cmd, a->spec_lookup, a->draft_model, a->draft_max, a->draft_p_min);
  cmd->callback([&result, a] { result.status = run(*a); });
}

}  // namespace cairn::cli
