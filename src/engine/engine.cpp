// engine/engine.cpp — the engine thread's loop: inbox, schedule, forward, sample, stop, report.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <utility>

namespace cairn::engine {

namespace {

constexpr int32_t kDefaultCtx = 4096;

// Prometheus-style buckets: request-level latencies span milliseconds to
// minutes; inter-token latency lives around milliseconds.
std::vector<double> request_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}
std::vector<double> token_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

EngineConfig resolve(EngineConfig cfg, const model::HParams& hp) {
  const int64_t train = hp.n_ctx_train > 0 ? hp.n_ctx_train : INT32_MAX;
  int64_t n = cfg.n_ctx > 0 ? cfg.n_ctx : std::min<int64_t>(kDefaultCtx, train);
  cfg.n_ctx = static_cast<int32_t>(std::min(n, train));
  cfg.max_batch_tokens = std::max(1, cfg.max_batch_tokens);
  cfg.max_seqs = std::max(1, cfg.max_seqs);
  return cfg;
}

}  // namespace

LatencyHistogram::LatencyHistogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void LatencyHistogram::observe(double s) {
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), s) - bounds.begin();
  ++counts[bucket];
  sum += s;
  ++count;
}

Engine::Engine(model::Model& model, const Tokenizer& tok, kv::PagedKvCache& kv, EngineConfig cfg)
    : model_(model),
      tok_(tok),
      kv_(kv),
      cfg_(resolve(cfg, model.hparams())),
      n_vocab_(static_cast<int32_t>(model.hparams().n_vocab)),
      scheduler_(SchedulerConfig{cfg_.max_batch_tokens, cfg_.max_seqs}) {
  counters_.time_to_first_token_s = LatencyHistogram(request_buckets());
  counters_.queue_time_s = LatencyHistogram(request_buckets());
  counters_.e2e_latency_s = LatencyHistogram(request_buckets());
  counters_.inter_token_latency_s = LatencyHistogram(token_buckets());
  publish_stats();
}

Engine::~Engine() { stop(); }

void Engine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Engine::stop() {
  {
    std::lock_guard lk(inbox_mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  inbox_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is left never runs: tell its clients rather than leave them hanging.
  take_new_and_cancelled_requests();
  for (auto& seq : scheduler_.take_all(kv_)) fail(*seq, "the engine stopped");
  publish_stats();
}

Result<RequestId> Engine::submit(EngineRequest req, std::shared_ptr<SequenceSink> sink) {
  if (!sink) return Status::error("a request needs an event sink");
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  if (n_prompt == 0) return Status::error("the prompt is empty");
  for (Token t : req.prompt)
    if (t < 0 || t >= n_vocab_)
      return Status::error("prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                           std::to_string(n_vocab_));
  if (req.max_tokens == 0 || req.max_tokens < -1)
    return Status::error("max_tokens must be positive (or -1 for no limit)");
  if (req.adapter > model_.n_adapters())
    return Status::error("LoRA adapter " + std::to_string(req.adapter) + " is not loaded");
  const int64_t wanted = n_prompt + std::max(req.max_tokens, 1);
  if (wanted > cfg_.n_ctx)
    return Status::error("the prompt has " + std::to_string(n_prompt) + " tokens and " +
                         std::to_string(std::max(req.max_tokens, 1)) +
                         " more are asked for, but the context holds " +
                         std::to_string(cfg_.n_ctx));
  req.sampling.n_logprobs = std::max(0, req.sampling.n_logprobs);
  auto sampler = Sampler::create(req.sampling, n_vocab_);
  if (!sampler.is_ok()) return sampler.status();
  sampler->accept(req.prompt);  // the prompt counts for repetition penalties, as in llama.cpp

  StopConfig stop{req.max_tokens, cfg_.n_ctx, req.ignore_eos, req.stop, req.render_special};
  const RequestId id = next_id_.fetch_add(1);
  auto seq = std::make_unique<Sequence>(id, std::move(req), std::move(*sampler),
                                        StopChecker(tok_, std::move(stop)), std::move(sink));
  if (seq->request.grammar) seq->matcher.emplace(seq->request.grammar);
  {
    std::lock_guard lk(inbox_mu_);
    if (stopping_) return Status::error("the engine is stopping");
    inbox_new_.push_back(std::move(seq));
  }
  inbox_cv_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lk(inbox_mu_);
    inbox_cancelled_.push_back(id);
  }
  inbox_cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(stats_mu_);
  return published_;
}

int32_t Engine::queued() const {
  int32_t inbox;
  {
    std::lock_guard lk(inbox_mu_);
    inbox = static_cast<int32_t>(inbox_new_.size());
  }
  std::lock_guard lk(stats_mu_);
  return inbox + published_.waiting;
}

void Engine::run() {
  bool worked = true;
  for (;;) {
    {
      std::unique_lock lk(inbox_mu_);
      auto has_work = [&] {
        return stopping_ || !inbox_new_.empty() || !inbox_cancelled_.empty() ||
               (!scheduler_.idle() && worked);
      };
      // A step that could schedule nothing (everyone waits for blocks that
      // never come) retries on the next request or shortly after.
      if (worked || scheduler_.idle())
        inbox_cv_.wait(lk, has_work);
      else
        inbox_cv_.wait_for(lk, std::chrono::milliseconds(5), has_work);
      if (stopping_) break;
    }
    worked = step();
  }
}

// DESIGN.md's loop: requests in, schedule, one forward, sample + stop, events out, free.
bool Engine::step() {
  take_new_and_cancelled_requests();
  scheduler_.schedule(kv_, plan_);
  for (Sequence* seq : plan_.failed) fail(*seq, seq->failure);
  counters_.preemptions += static_cast<uint64_t>(plan_.preempted);
  const bool worked = !plan_.empty();
  if (worked) {
    observe_queue_times(plan_);
    Status st = model_.forward(plan_.batch, kv_, logits_);
    if (st.is_ok()) {
      scheduler_.commit(plan_, kv_);
      sample_and_check_stops(plan_);
    } else {
      for (const ScheduledChunk& c : plan_.chunks) fail(*c.seq, "forward failed: " + st.message(),
                                                         st.code() == StatusCode::Unavailable ? st.code() : StatusCode::Internal);
    }
    ++counters_.steps;
  }
  free_finished();
  publish_stats();
  return worked;
}

void Engine::take_new_and_cancelled_requests() {
  std::vector<std::unique_ptr<Sequence>> fresh;
  std::vector<RequestId> cancelled;
  {
    std::lock_guard lk(inbox_mu_);
    fresh.swap(inbox_new_);
    cancelled.swap(inbox_cancelled_);
  }
  for (auto& seq : fresh) scheduler_.add(std::move(seq));
  for (RequestId id : cancelled) {
    std::unique_ptr<Sequence> seq = scheduler_.remove(id, kv_);
    if (!seq) continue;  // finished already, or never existed: cancel is idempotent
    EndOutput end;
    end.reason = EndReason::Cancelled;
    end.prompt_tokens = seq->n_prompt;
    end.completion_tokens = static_cast<int32_t>(seq->tokens.size()) - seq->n_prompt;
    end.cached_prompt_tokens = std::max(0, seq->cached_prompt_tokens);
    seq->sink->on_end(end);
    ++counters_.requests_cancelled;
  }
}

void Engine::observe_queue_times(const ScheduledBatch& plan) {
  const auto now = Clock::now();
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.seq->started) continue;
    c.seq->started = true;
    counters_.queue_time_s.observe(seconds(now - c.seq->arrived));
    counters_.prompt_tokens_total += static_cast<uint64_t>(c.seq->n_prompt);
  }
}

grammar::MaskCache& Engine::mask_cache(const std::shared_ptr<const grammar::Grammar>& g) {
  auto it = mask_caches_.find(g.get());
  if (it != mask_caches_.end()) return it->second->cache;
  // Grammars no request holds any more go before a new one is added.
  if (mask_caches_.size() >= 16)
    for (auto e = mask_caches_.begin(); e != mask_caches_.end();)
      e = e->second->grammar.use_count() == 1 ? mask_caches_.erase(e) : std::next(e);
  if (mask_caches_.size() >= 16) mask_caches_.erase(mask_caches_.begin());  // only a cache
  auto entry = std::make_unique<GrammarMasks>();
  entry->grammar = g;
  // 16 grammars x 16 MiB at most.
  entry->cache = grammar::MaskCache(size_t{16} << 20);
  return mask_caches_.emplace(g.get(), std::move(entry)).first->second->cache;
}

void Engine::sample_and_check_stops(const ScheduledBatch& plan) {
  size_t row = 0;  // logits rows follow the batch order of the tokens that asked
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.wants_logits) continue;
    Sequence& seq = *c.seq;
    std::span<const float> logits = logits_.row(row++);
    if (seq.matcher) {
      if (!trie_) {
        // The bytes each token writes; control tokens none (never allowed),
        // end-of-generation tokens only where the grammar may end.
        std::vector<std::string> pieces((size_t)n_vocab_);
        std::vector<int32_t> ends;
        for (Token t = 0; t < n_vocab_; ++t) {
          if (tok_.is_eog(t)) {
            ends.push_back(t);
            continue;
          }
          pieces[(size_t)t] = tok_.token_to_piece(t);
        }
        trie_ = std::make_unique<grammar::TokenTrie>(pieces, std::move(ends));
      }
      if (trie_->fill_mask(*seq.matcher, mask_, mask_cache(seq.request.grammar)) == 0) {
        fail(seq, "the grammar allows no token of this vocabulary here", StatusCode::InvalidArgument);
        continue;
      }
      masked_.assign(logits.begin(), logits.end());
      for (size_t i = 0; i < masked_.size(); ++i)
        if (!mask_[i]) masked_[i] = -INFINITY;
      logits = masked_;
    }
    auto sample = seq.sampler.sample(logits);
    if (!sample.is_ok()) {
      fail(seq, sample.status().message());
      continue;
    }
    const Token t = sample->token;
    if (seq.matcher && !tok_.is_eog(t) && !seq.matcher->accept(tok_.token_to_piece(t))) {
      fail(seq, "internal: a sampled token left the grammar");
      continue;
    }
    seq.sampler.accept(t);
    seq.tokens.push_back(t);
    ++counters_.generated_tokens_total;

    const auto now = Clock::now();
    if (seq.has_token)
      counters_.inter_token_latency_s.observe(seconds(now - seq.last_token));
    else
      counters_.time_to_first_token_s.observe(seconds(now - seq.arrived));
    seq.has_token = true;
    seq.last_token = now;

    StopStep st = seq.stop.push(t, static_cast<int32_t>(seq.tokens.size()));
    const bool end_token = st.end && !seq.request.ignore_eos && tok_.is_eog(t);
    if (!end_token) {
      TokenOutput out;
      out.id = t;
      out.text = std::move(st.text);
      out.sample = std::move(*sample);
      seq.sink->on_token(out);
    }
    if (!st.end) continue;
    EndOutput end;
    end.reason = *st.end;
    if (end_token) end.text = std::move(st.text);
    end.prompt_tokens = seq.n_prompt;
    end.completion_tokens = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    end.cached_prompt_tokens = std::max(0, seq.cached_prompt_tokens);
    seq.sink->on_end(end);
    seq.done = true;
    ++counters_.requests_finished;
    counters_.e2e_latency_s.observe(seconds(now - seq.arrived));
  }
}

void Engine::fail(Sequence& seq, const std::string& message, StatusCode code) {
  if (seq.done) return;
  seq.done = true;
  if (seq.failure.empty()) seq.failure = message;
  seq.sink->on_error(Status::error(code, message));
  ++counters_.requests_failed;
}

void Engine::free_finished() { scheduler_.take_done(kv_); }

void Engine::publish_stats() {
  EngineStats s = counters_;
  s.running = scheduler_.running();
  s.waiting = scheduler_.waiting();
  s.kv = kv_.stats();
  std::lock_guard lk(stats_mu_);
  published_ = std::move(s);
}

}  // namespace cairn::engine
