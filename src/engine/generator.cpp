// engine/generator.cpp — the single-sequence generation loop behind `cairn run`.
#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "kv/contiguous_kv.h"

namespace cairn::engine {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kUnboundedCtx = 4096;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Result<GenerateResult> Generator::generate(std::string_view prompt, const GenerateOptions& options,
                                           const TextCallback& on_text) {
  std::vector<Token> tokens = tok_.encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  return generate_tokens(std::move(tokens), options, on_text);
}

Result<GenerateResult> Generator::generate_tokens(std::vector<Token> prompt,
                                                  const GenerateOptions& options,
                                                  const TextCallback& on_text) {
  const model::HParams& hp = model_.hparams();
  if (prompt.empty()) return Status::error("the prompt is empty (and the model adds no BOS token)");
  if (options.max_tokens < -1) return Status::error("the token limit must be >= -1");
  if (options.prefill_chunk < 1) return Status::error("prefill chunk must be >= 1");
  for (Token t : prompt)
    if (t < 0 || t >= hp.n_vocab)
      return Status::error("prompt token " + std::to_string(t) + " is outside the vocabulary");

  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t limit = hp.n_ctx_train > 0 ? hp.n_ctx_train : INT32_MAX;
  // Without a token limit, a model's full context (128k for some) would be
  // many GiB of K/V: default to llama.cpp's 4096 unless asked for more.
  int64_t n_ctx = options.n_ctx;
  if (n_ctx <= 0)
    n_ctx = options.max_tokens >= 0 ? n_prompt + options.max_tokens
                                    : std::max<int64_t>(kUnboundedCtx, n_prompt);
  n_ctx = std::min(n_ctx, limit);
  if (n_prompt > n_ctx)
    return Status::error("the prompt has " + std::to_string(n_prompt) +
                         " tokens but the context holds " + std::to_string(n_ctx));

  auto sampler = Sampler::create(options.sampling, static_cast<int32_t>(hp.n_vocab));
  if (!sampler.is_ok()) return sampler.status();
  CAIRN_RETURN_IF_ERROR(kv::check_kv_type(options.kv_type, hp.kv_row_elems(), hp.head_dim));
  auto cache = kv::ContiguousKvCache::create(hp.kv_shape(), 1, n_ctx, options.kv_type);
  if (!cache.is_ok()) return cache.status();

  GenerateResult res;
  res.seed = sampler->seed();
  res.prompt_tokens = prompt;
  sampler->accept(prompt);  // the prompt counts for repetition penalties, as in llama.cpp

  model::Batch batch;
  model::Logits logits;
  const auto t_prefill = Clock::now();
  for (int64_t start = 0; start < n_prompt; start += options.prefill_chunk) {
    const int64_t end = std::min<int64_t>(n_prompt, start + options.prefill_chunk);
    batch.clear();
    for (int64_t i = start; i < end; ++i)
      batch.add(prompt[i], static_cast<int32_t>(i), 0, i == n_prompt - 1);
    CAIRN_RETURN_IF_ERROR(model_.forward(batch, **cache, logits));
  }
  res.prefill_seconds = seconds_since(t_prefill);

  StreamingDetokenizer detok(tok_);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return true;
    res.text += text;
    return !on_text || on_text(text);
  };

  const auto t_decode = Clock::now();
  const int32_t spec_max = options.drafts ? std::clamp(options.spec_max, 0, 64) : 0;
  int32_t draft_len = spec_max;  // adaptive as in the engine: doubles on a full acceptance
  std::vector<Token> history = prompt, drafted;
  if (options.drafts) options.drafts->forget(0);  // whatever an earlier call left behind
  int64_t pos = n_prompt;  // where the next token fed goes
  bool stopped = false, done = false;
  const auto full = [&] {
    return options.max_tokens >= 0 && static_cast<int64_t>(res.tokens.size()) >= options.max_tokens;
  };
  while (!done && !full()) {
    // Row i verifies drafted[i]; the last row gives one more token.
    if (logits.rows() != 1 + drafted.size())
      return Status::error("the model returned no logits for the last token");
    Token t = -1;
    int32_t accepted = 0;
    for (size_t i = 0; i <= drafted.size(); ++i) {
      const Token draft = i < drafted.size() ? drafted[i] : -1;
      auto sample = draft >= 0 ? sampler->sample_draft(logits.row(i), draft)
                               : sampler->sample(logits.row(i));
      if (!sample.is_ok()) return sample.status();
      t = sample->token;
      res.tokens.push_back(t);
      res.samples.push_back(std::move(*sample));
      sampler->accept(t);
      history.push_back(t);
      if ((!options.ignore_eos && tok_.is_eog(t)) || !emit(detok.push(t))) {
        stopped = done = true;
        break;
      }
      if (t != draft || full()) break;
      ++accepted;
    }
    if (!drafted.empty()) {
      res.draft_tokens += static_cast<int64_t>(drafted.size());
      res.accepted_tokens += accepted;
      draft_len = accepted == static_cast<int32_t>(drafted.size()) ? std::min(spec_max, 2 * draft_len)
                                                                  : std::max(1, accepted + 1);
    }
    pos += accepted;  // the kept drafts' rows are this sequence's K/V now
    if (done || full() || pos >= n_ctx) break;  // no room for t's K/V: the context is full
    // Drafts only where every token they could add fits the limit and the context.
    int64_t room = std::min<int64_t>(draft_len, n_ctx - 1 - pos);
    if (options.max_tokens >= 0)
      room = std::min<int64_t>(room, options.max_tokens - static_cast<int64_t>(res.tokens.size()) - 1);
    drafted.clear();
    if (room > 0) options.drafts->propose(0, history, static_cast<int32_t>(room), drafted);
    if (static_cast<int64_t>(drafted.size()) > room) drafted.resize(static_cast<size_t>(room));
    batch.clear();
    batch.add(t, static_cast<int32_t>(pos), 0, true);
    for (size_t i = 0; i < drafted.size(); ++i)
      batch.add(drafted[i], static_cast<int32_t>(pos + 1 + i), 0, true);
    // Without drafts this forward would be one token: its rows take the
    // one-token float orders, so greedy output is the plain loop's bit for bit.
    batch.one_token_order = !drafted.empty();
    CAIRN_RETURN_IF_ERROR(model_.forward(batch, **cache, logits));
    ++pos;
  }
  if (options.drafts) options.drafts->forget(0);
  emit(detok.flush());
  res.decode_seconds = seconds_since(t_decode);
  res.finish = stopped ? FinishReason::Stop : FinishReason::Length;
  return res;
}

}  // namespace cairn::engine
