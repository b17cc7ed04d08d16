// engine/engine.cpp — the engine thread's loop: inbox, schedule, forward, sample, stop, report.
#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <utility>

#include "kernels/kernels.h"
#include "model/pooling.h"

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

kv::KvGeometry geometry_of(const model::Model& model, const kv::PagedKvCache& kv) {
  kv::KvGeometry g;
  if (!kv.stores_rows()) {
    g.n_layer = 0;  // a distributed model's agents hold the rows: no handoff
    return g;
  }
  const kv::KvShape shape = model.kv_shape();
  g.n_layer = shape.n_layer;
  g.row_elems = shape.row_elems;
  g.elem_bytes = kv.dtype() == TensorType::F32 ? 4 : kv.dtype() == TensorType::Q8_0 ? 1 : 2;
  g.dtype = kv.dtype();
  g.block_tokens = kv.block_tokens();
  return g;
}

int32_t import_positions(const kv::KvGeometry& g, int64_t bytes_per_step) {
  const int64_t per_position = std::max<int64_t>(1, g.bytes_for(1));
  return (int32_t)std::clamp<int64_t>(bytes_per_step / per_position, 1, INT32_MAX);
}

EngineConfig resolve(EngineConfig cfg, const model::HParams& hp) {
  const int64_t train = hp.n_ctx_train > 0 ? hp.n_ctx_train : INT32_MAX;
  int64_t n = cfg.n_ctx > 0 ? cfg.n_ctx : std::min<int64_t>(kDefaultCtx, train);
  cfg.n_ctx = static_cast<int32_t>(std::min(n, train));
  cfg.max_batch_tokens = std::max(1, cfg.max_batch_tokens);
  cfg.max_seqs = std::max(1, cfg.max_seqs);
  cfg.spec_lookup_max = std::clamp(cfg.spec_lookup_max, 0, 64);
  cfg.spec_draft_max = std::clamp(cfg.spec_draft_max, 0, 64);
  if (cfg.spec_draft_max == 0) cfg.draft_model.reset();
  return cfg;
}

}  // namespace

Engine::Engine(model::Model& model, const Tokenizer& tok, kv::PagedKvCache& kv, EngineConfig cfg)
    : model_(model),
      tok_(tok),
      kv_(kv),
      cfg_(resolve(cfg, model.hparams())),
      n_vocab_(static_cast<int32_t>(model.hparams().n_vocab)),
      geometry_(geometry_of(model, kv)),
      scheduler_(SchedulerConfig{cfg_.max_batch_tokens, cfg_.max_seqs,
                                 import_positions(geometry_, cfg_.import_bytes_per_step)}),
      step_budget_(StepBudgetConfig{.max_step_ms = cfg_.max_step_ms,
                                    .token_granule = kernels::batch_token_granule()}) {
  counters_.time_to_first_token_s = LatencyHistogram(request_buckets());
  counters_.queue_time_s = LatencyHistogram(request_buckets());
  counters_.e2e_latency_s = LatencyHistogram(request_buckets());
  counters_.inter_token_latency_s = LatencyHistogram(token_buckets());
  if (cfg_.spec_lookup_max > 0) drafts_ = std::make_shared<PromptLookup>();
  if (cfg_.draft_model)
    drafts_ = drafts_ ? std::make_shared<FirstOfDrafts>(drafts_, cfg_.draft_model)
                      : cfg_.draft_model;
  spec_max_ = std::max(cfg_.spec_lookup_max, cfg_.draft_model ? cfg_.spec_draft_max : 0);
  if (drafts_) scheduler_.set_draft_source(drafts_.get());
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
  for (auto& seq : scheduler_.take_all(kv_)) {
    if (drafts_) drafts_->forget(seq->id);
    fail(*seq, "the engine stopped");
  }
  while (!embed_jobs_.empty()) fail_embedding(0, Status::error("the engine stopped"));
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
  CAIRN_RETURN_IF_ERROR(check_handoff(req));
  const int64_t wanted =
      n_prompt + std::max<int64_t>(std::max(req.max_tokens, 1), (int64_t)req.forced.size() + 1);
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
  // Speculation needs rows this cache holds (a distributed model's agents
  // hold theirs) and has nothing to do on the prefill side of a handoff.
  seq->speculate = drafts_ && seq->request.speculative && !seq->request.export_kv &&
                   kv_.stores_rows();
  seq->draft_len = seq->speculate ? spec_max_ : 0;
  CAIRN_RETURN_IF_ERROR(replay_forced(*seq));
  plan_draft(*seq);
  {
    std::lock_guard lk(inbox_mu_);
    if (stopping_) return Status::error("the engine is stopping");
    inbox_new_.push_back(std::move(seq));
  }
  inbox_cv_.notify_one();
  return id;
}

Status Engine::check_handoff(const EngineRequest& req) const {
  if (req.export_kv && (!req.forced.empty() || req.import_kv))
    return Status::invalid_argument("a request cannot both hand its K/V over and continue a handoff");
  if ((req.export_kv || req.import_kv) && geometry_.n_layer == 0)
    return Status::invalid_argument("this model's K/V rows are not held here (a distributed model): "
                                    "it cannot take part in a prefill/decode handoff");
  for (Token t : req.forced)
    if (t < 0 || t >= n_vocab_)
      return Status::invalid_argument("handed-over token " + std::to_string(t) +
                                      " is outside the vocabulary of " + std::to_string(n_vocab_));
  if (!req.import_kv) return Status::ok();
  if (req.forced.empty())
    return Status::invalid_argument("handed-over K/V comes with the first token generated from it");
  if (std::string why = kv::geometry_mismatch(geometry_, req.import_kv->geometry); !why.empty())
    return Status::invalid_argument("the handed-over K/V does not fit this model's cache: " + why);
  CAIRN_RETURN_IF_ERROR(req.import_kv->check());
  if (req.import_kv->prompt != req.prompt)
    return Status::invalid_argument(
        "the handed-over K/V was computed for another prompt (" +
        std::to_string(req.import_kv->prompt.size()) + " tokens; this request's has " +
        std::to_string(req.prompt.size()) + ")");
  return Status::ok();
}

Status Engine::replay_forced(Sequence& seq) {
  // The tokens were sampled and sent elsewhere: the stop checks, grammar and
  // sampler see them as if sampled here, and nothing is reported.
  for (Token t : seq.request.forced) {
    if (seq.matcher && !tok_.is_eog(t) && !seq.matcher->accept(tok_.token_to_piece(t)))
      return Status::invalid_argument("a handed-over token leaves the request's grammar");
    seq.sampler.replay(t);
    seq.tokens.push_back(t);
    if (seq.stop.push(t, static_cast<int32_t>(seq.tokens.size())).end)
      return Status::invalid_argument("the handed-over tokens already end the request");
  }
  if (!seq.request.forced.empty()) {
    seq.has_token = true;
    seq.last_token = seq.arrived;
  }
  return Status::ok();
}

void Engine::export_rows(Sequence& seq, int32_t upto) {
  if (upto <= seq.exported) return;
  kv::KvRun run;
  if (seq.exported == 0) {
    run.geometry = geometry_;
    run.prompt = seq.request.prompt;
  }
  const int32_t n = upto - seq.exported;
  run.rows.first = seq.exported;
  run.rows.n = n;
  // Zero-filled: a row a sliding layer has already dropped stays zeros.
  run.rows.bytes.assign((size_t)geometry_.bytes_for(n), '\0');
  const size_t rb = (size_t)geometry_.row_bytes();
  auto* out = reinterpret_cast<uint8_t*>(run.rows.bytes.data());
  for (int32_t l = 0; l < geometry_.n_layer; ++l) {
    uint8_t* k = out + (size_t)l * 2 * (size_t)n * rb;
    uint8_t* v = k + (size_t)n * rb;
    for (int32_t i = 0; i < n; ++i)
      kv_.read_raw(l, seq.kv_seq, seq.exported + i, k + (size_t)i * rb, v + (size_t)i * rb);
  }
  seq.exported = upto;
  seq.sink->on_kv(std::move(run));
}

void Engine::import_rows(Sequence& seq, int32_t from, int32_t to) {
  const kv::ImportedKv& in = *seq.request.import_kv;
  const size_t rb = (size_t)geometry_.row_bytes();
  for (const kv::KvRows& run : in.runs) {
    const int32_t lo = std::max(from, run.first), hi = std::min(to, run.first + run.n);
    if (lo >= hi) continue;
    const auto* base = reinterpret_cast<const uint8_t*>(run.bytes.data());
    for (int32_t l = 0; l < geometry_.n_layer; ++l) {
      const uint8_t* k = base + (size_t)l * 2 * (size_t)run.n * rb;
      const uint8_t* v = k + (size_t)run.n * rb;
      for (int32_t pos = lo; pos < hi; ++pos) {
        const size_t at = (size_t)(pos - run.first) * rb;
        kv_.write_raw(l, seq.kv_seq, pos, k + at, v + at);
      }
    }
  }
  kv_.commit(seq.kv_seq,
             std::span<const Token>(seq.tokens).subspan((size_t)from, (size_t)(to - from)));
}

Result<RequestId> Engine::submit_embedding(EmbedRequest req, std::shared_ptr<EmbedSink> sink) {
  if (!sink) return Status::error("a request needs a sink");
  const model::HParams& hp = model_.hparams();
  using model::Pooling;
  if (req.pooling != Pooling::Mean && req.pooling != Pooling::Cls &&
      req.pooling != Pooling::Last && req.pooling != Pooling::Rank)
    return Status::invalid_argument("embeddings need mean, cls, last or rank pooling");
  if (req.pooling == Pooling::Rank && hp.n_cls_out <= 0)
    return Status::invalid_argument("this model has no classification head to rank with");
  if (req.inputs.empty()) return Status::invalid_argument("there is no input to embed", "input");
  // A non-causal model sees each input whole in one forward.
  const int64_t longest = hp.causal ? cfg_.n_ctx : std::min<int64_t>(cfg_.n_ctx, std::max(cfg_.max_batch_tokens, 1));
  int64_t total = 0;
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    const auto& in = req.inputs[i];
    const std::string which = req.inputs.size() > 1 ? "input " + std::to_string(i) : "the input";
    if (in.empty()) return Status::invalid_argument(which + " has no tokens", "input");
    if ((int64_t)in.size() > longest)
      return Status::invalid_argument(
          which + " has " + std::to_string(in.size()) + " tokens; at most " +
              std::to_string(longest) +
              (hp.causal || longest == cfg_.n_ctx ? " fit the context"
                                                  : " fit one forward (raise --batch-tokens)"),
          "input");
    for (Token t : in)
      if (t < 0 || t >= n_vocab_)
        return Status::invalid_argument(which + " has token " + std::to_string(t) +
                                            ", outside the vocabulary of " + std::to_string(n_vocab_),
                                        "input");
    total += (int64_t)in.size();
  }
  if (total > INT32_MAX) return Status::invalid_argument("too many input tokens", "input");
  auto job = std::make_unique<EmbedJob>();
  job->id = next_id_.fetch_add(1);
  job->vectors.resize(req.inputs.size());
  job->request = std::move(req);
  job->sink = std::move(sink);
  const RequestId id = job->id;
  {
    std::lock_guard lk(inbox_mu_);
    if (stopping_) return Status::unavailable("the engine is stopping");
    inbox_embed_.push_back(std::move(job));
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
    inbox = static_cast<int32_t>(inbox_new_.size() + inbox_embed_.size());
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
               !inbox_embed_.empty() || !embed_jobs_.empty() || (!scheduler_.idle() && worked);
      };
      // A step that could schedule nothing (everyone waits for blocks that
      // never come) retries on the next request or shortly after.
      if (worked || (scheduler_.idle() && embed_jobs_.empty()))
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
  scheduler_.schedule(kv_, plan_,
                      step_budget_.prefill_tokens(scheduler_.decoding(), cfg_.max_batch_tokens,
                                                    scheduler_.prompt_backlog()));
  for (Sequence* seq : plan_.failed) fail(*seq, seq->failure);
  counters_.preemptions += static_cast<uint64_t>(plan_.preempted);
  {
    // Who runs and waits is published before this step's tokens go out: a
    // client that saw its first token never reads "0 running" (a drain's log).
    std::lock_guard lk(stats_mu_);
    published_.running = scheduler_.running();
    published_.waiting = scheduler_.waiting() + static_cast<int32_t>(embed_jobs_.size());
  }
  for (const ScheduledBatch::Import& im : plan_.imports) import_rows(*im.seq, im.from, im.to);
  const bool worked = !plan_.empty() || !plan_.imports.empty();
  if (!plan_.empty()) {
    observe_queue_times(plan_);
    const auto started = Clock::now();
    // A lone stream verifying drafts: without them this step would be one
    // token, so its rows take the one-token float orders and greedy output
    // stays the plain path's bit for bit (docs/architecture.md).
    plan_.batch.one_token_order = plan_.chunks.size() == 1 && plan_.chunks[0].n_draft > 0 &&
                                  plan_.chunks[0].n == plan_.chunks[0].n_draft + 1;
    Status st = model_.forward(plan_.batch, kv_, logits_);
    if (st.is_ok()) {
      scheduler_.commit(plan_, kv_);
      // Whole blocks of a prompt still being computed leave now, so the
      // transfer overlaps the next chunks; the rest follows the first token.
      const int32_t bt = std::max(1, kv_.block_tokens());
      for (const ScheduledChunk& c : plan_.chunks)
        if (c.seq->request.export_kv && c.seq->n_computed < c.seq->n_prompt)
          export_rows(*c.seq, c.seq->n_computed / bt * bt);
      sample_and_check_stops(plan_);
      const double took = seconds(Clock::now() - started);
      spdlog::debug("step: {} decode + {} prompt tokens, modelled {:.1f} ms (target {:.1f}), took {:.1f} ms",
                    plan_.decode_tokens, plan_.prefill_tokens,
                    1000 * (step_budget_.fixed_s() + step_budget_.per_token_s() *
                                                         (plan_.decode_tokens + plan_.prefill_tokens)),
                    1000 * step_budget_.target_s(plan_.decode_tokens), 1000 * took);
      step_budget_.observe(plan_.decode_tokens, plan_.prefill_tokens, took);
    } else {
      for (const ScheduledChunk& c : plan_.chunks) fail(*c.seq, "forward failed: " + st.message(),
                                                         st.code() == StatusCode::Unavailable ? st.code() : StatusCode::Internal);
    }
    ++counters_.steps;
  }
  free_finished();
  const bool embedded = embed_step();
  publish_stats();
  return worked || embedded;
}

namespace {

// Which of an input's n tokens give rows for this pooling.
bool pooled_row(model::Pooling p, int32_t pos, int32_t n) {
  switch (p) {
    case model::Pooling::Cls:
    case model::Pooling::Rank:
      return pos == 0;
    case model::Pooling::Last:
      return pos == n - 1;
    default:
      return true;
  }
}

}  // namespace

bool Engine::embed_step() {
  if (embed_jobs_.empty()) return false;
  // Whole inputs, oldest job first, up to the step's token budget (an input
  // longer than that runs alone); the scratch K/V is one slab per input of
  // the longest input's length, so that is bounded too.
  struct Item {
    EmbedJob* job;
    size_t input;
  };
  std::vector<Item> items;
  const int64_t budget = cfg_.max_batch_tokens;
  int64_t tokens = 0, longest = 0;
  for (auto& job : embed_jobs_) {
    bool full = false;
    while (job->next < job->request.inputs.size()) {
      const int64_t n = (int64_t)job->request.inputs[job->next].size();
      const int64_t l = std::max(longest, n);
      if (!items.empty() &&
          (tokens + n > budget || (int64_t)(items.size() + 1) * l > 2 * budget)) {
        full = true;
        break;
      }
      items.push_back({job.get(), job->next++});
      tokens += n;
      longest = l;
    }
    if (full) break;
  }
  if (items.empty()) return false;
  Status st = Status::ok();
  // A non-causal model never reads K/V (each input is whole in the batch):
  // a one-row slab satisfies the interface.
  const bool causal = model_.hparams().causal;
  const int want_seqs = causal ? (int)items.size() : 1;
  const int64_t want_ctx = causal ? longest : 1;
  if (!embed_kv_ || embed_kv_->n_seqs() < want_seqs || embed_kv_->n_ctx() < want_ctx) {
    const int n_seqs = std::max<int>(want_seqs, embed_kv_ ? embed_kv_->n_seqs() : 0);
    const int64_t n_ctx = std::max<int64_t>(want_ctx, embed_kv_ ? embed_kv_->n_ctx() : 0);
    embed_kv_.reset();  // the old slab goes before the new one is made
    auto made = kv::ContiguousKvCache::create(model_.kv_shape(), n_seqs, n_ctx);
    if (made.is_ok())
      embed_kv_ = std::move(*made);
    else
      st = Status::error("no memory for its K/V: " + made.status().message());
  }
  if (st.is_ok()) {
    embed_batch_.clear();
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& in = items[i].job->request.inputs[items[i].input];
      const int32_t n = (int32_t)in.size();
      for (int32_t pos = 0; pos < n; ++pos)
        embed_batch_.add(in[(size_t)pos], pos, (SeqId)i,
                         pooled_row(items[i].job->request.pooling, pos, n));
    }
    st = model_.forward_hidden(embed_batch_, *embed_kv_, hidden_);
  }
  std::vector<EmbedJob*> failed;
  if (!st.is_ok()) {
    for (const Item& it : items) failed.push_back(it.job);
  } else {
    const int64_t d = hidden_.n_vocab;
    size_t row = 0;
    std::vector<float> scores;
    for (const Item& it : items) {
      EmbedJob& job = *it.job;
      const auto& in = job.request.inputs[it.input];
      const int32_t n = (int32_t)in.size();
      const model::Pooling pooling = job.request.pooling;
      const size_t rows = pooling == model::Pooling::Mean ? (size_t)n : 1;
      if (row + rows > hidden_.rows()) {
        failed.push_back(&job);
        continue;
      }
      // The rows of one forward are in batch order: this input's, in order.
      const float* first = hidden_.data.data() + row * (size_t)d;
      row += rows;
      std::vector<float> v;
      Status pooled = model::pool_rows(pooling, first, (int64_t)rows, d, v);
      if (pooled.is_ok() && pooling == model::Pooling::Rank) {
        pooled = model_.classify(v, scores);
        v = scores;
      }
      if (!pooled.is_ok()) {
        if (st.is_ok()) st = pooled;  // the reason the failed jobs are told
        failed.push_back(&job);
        continue;
      }
      job.vectors[it.input] = std::move(v);
      job.n_tokens += n;
      ++job.finished;
      counters_.embed_tokens_total += (uint64_t)n;
      ++counters_.embed_inputs_total;
    }
  }
  for (size_t j = embed_jobs_.size(); j-- > 0;) {
    EmbedJob& job = *embed_jobs_[j];
    if (std::find(failed.begin(), failed.end(), &job) != failed.end()) {
      fail_embedding(j, Status::error("the embedding forward failed: " +
                                      (st.is_ok() ? std::string("rows missing") : st.message())));
      continue;
    }
    if (job.finished < job.request.inputs.size()) continue;
    job.sink->on_embeddings(std::move(job.vectors), job.n_tokens);
    ++counters_.embed_requests_total;
    embed_jobs_.erase(embed_jobs_.begin() + (std::ptrdiff_t)j);
  }
  // The scratch K/V is as large as the largest batch seen: not kept while no
  // embedding waits (a generating model rarely embeds).
  if (embed_jobs_.empty()) embed_kv_.reset();
  return true;
}

void Engine::fail_embedding(size_t j, const Status& error) {
  embed_jobs_[j]->sink->on_error(error);
  if (error.code() != StatusCode::Cancelled) ++counters_.requests_failed;
  embed_jobs_.erase(embed_jobs_.begin() + (std::ptrdiff_t)j);
}

void Engine::take_new_and_cancelled_requests() {
  std::vector<std::unique_ptr<Sequence>> fresh;
  std::vector<RequestId> cancelled;
  std::vector<std::unique_ptr<EmbedJob>> embeds;
  {
    std::lock_guard lk(inbox_mu_);
    fresh.swap(inbox_new_);
    cancelled.swap(inbox_cancelled_);
    embeds.swap(inbox_embed_);
  }
  for (auto& seq : fresh) scheduler_.add(std::move(seq));
  for (auto& job : embeds) embed_jobs_.push_back(std::move(job));
  for (RequestId id : cancelled) {
    for (size_t j = 0; j < embed_jobs_.size(); ++j)
      if (embed_jobs_[j]->id == id) {
        fail_embedding(j, Status::error(StatusCode::Cancelled, "the request was cancelled"));
        ++counters_.requests_cancelled;
        break;
      }
    std::unique_ptr<Sequence> seq = scheduler_.remove(id, kv_);
    if (!seq) continue;  // finished already, or never existed: cancel is idempotent
    if (drafts_) drafts_->forget(seq->id);
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
    // A continued handoff's prompt was counted where it was first computed.
    if (c.seq->request.forced.empty())
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
    const size_t first = row;
    row += 1 + (size_t)c.n_draft;
    // Row i verifies draft[i] (the last row, past the drafts, gives one
    // more token): each row's token is sampled exactly as the plain path
    // would, with the tokens accepted so far in its history, and the first
    // that differs from the draft ends the chunk.
    int32_t accepted = 0;
    for (int32_t i = 0; i <= c.n_draft; ++i) {
      const Token draft = i < c.n_draft ? seq.draft[(size_t)i] : -1;
      std::optional<SampleResult> sample = sample_row(seq, logits_.row(first + (size_t)i), draft);
      if (!sample) break;
      const Token t = sample->token;
      const bool more = emit(seq, std::move(*sample));
      if (t != draft) break;
      ++accepted;  // (also when a stop ends the sequence on it)
      if (!more) break;
    }
    if (c.n_draft > 0) finish_speculation(seq, c, accepted);
    if (!seq.done) plan_draft(seq);
  }
}

std::optional<SampleResult> Engine::sample_row(Sequence& seq, std::span<const float> logits,
                                               Token draft) {
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
      return std::nullopt;
    }
    masked_.assign(logits.begin(), logits.end());
    for (size_t i = 0; i < masked_.size(); ++i)
      if (!mask_[i]) masked_[i] = -INFINITY;
    logits = masked_;
  }
  auto sample = draft >= 0 ? seq.sampler.sample_draft(logits, draft) : seq.sampler.sample(logits);
  if (!sample.is_ok()) {
    fail(seq, sample.status().message());
    return std::nullopt;
  }
  return std::move(*sample);
}

bool Engine::emit(Sequence& seq, SampleResult sample) {
  const Token t = sample.token;
  if (seq.matcher && !tok_.is_eog(t) && !seq.matcher->accept(tok_.token_to_piece(t))) {
    fail(seq, "internal: a sampled token left the grammar");
    return false;
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
    out.sample = std::move(sample);
    seq.sink->on_token(out);
  }
  if (!st.end && seq.request.export_kv) {
    // The prefill side's part is done: the rest of the rows, then the end
    // that tells the caller to continue on the decode side (the held-back
    // text stays held: the decode side's replay holds the same).
    export_rows(seq, seq.n_prompt);
    EndOutput end;
    end.reason = EndReason::Handoff;
    end.prompt_tokens = seq.n_prompt;
    end.completion_tokens = static_cast<int32_t>(seq.tokens.size()) - seq.n_prompt;
    end.cached_prompt_tokens = std::max(0, seq.cached_prompt_tokens);
    seq.sink->on_end(end);
    seq.done = true;
    return false;
  }
  if (!st.end) return true;
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
  return false;
}

void Engine::finish_speculation(Sequence& seq, const ScheduledChunk& c, int32_t accepted) {
  counters_.spec_draft_tokens_total += (uint64_t)c.n_draft;
  counters_.spec_accepted_tokens_total += (uint64_t)accepted;
  // The accepted drafts' rows are the sequence's K/V now; the rejected
  // ones' were never committed, so they never reach the prefix cache, and
  // their positions go back (overwritten when computed for real).
  if (seq.in_kv) {
    kv_.commit(seq.kv_seq, std::span<const Token>(seq.tokens)
                               .subspan((size_t)c.start + 1, (size_t)accepted));
    seq.n_computed += accepted;
    kv_.unreserve(seq.kv_seq);
  }
  // Adaptive length: double after a full acceptance, else one past what
  // was accepted (a draft that keeps failing costs one row per step).
  seq.draft_len = accepted == c.n_draft ? std::min(spec_max_, 2 * seq.draft_len)
                                        : std::max(1, accepted + 1);
}

void Engine::plan_draft(Sequence& seq) {
  if (!seq.speculate) return;
  // Room: every emitted token within max_tokens (the verified drafts and
  // one more), every verified position inside the context.
  int64_t room = (int64_t)cfg_.n_ctx - (int64_t)seq.tokens.size() - 1;
  if (seq.request.max_tokens > 0)
    room = std::min<int64_t>(room, (int64_t)seq.request.max_tokens -
                                       ((int64_t)seq.tokens.size() - seq.n_prompt) - 1);
  seq.draft_max = (int32_t)std::clamp<int64_t>(room, 0, seq.draft_len);
}

void Engine::fail(Sequence& seq, const std::string& message, StatusCode code) {
  if (seq.done) return;
  seq.done = true;
  if (seq.failure.empty()) seq.failure = message;
  seq.sink->on_error(Status::error(code, message));
  ++counters_.requests_failed;
}

void Engine::free_finished() {
  for (auto& seq : scheduler_.take_done(kv_))
    if (drafts_) drafts_->forget(seq->id);
}

void Engine::publish_stats() {
  EngineStats s = counters_;
  s.running = scheduler_.running();
  s.waiting = scheduler_.waiting() + static_cast<int32_t>(embed_jobs_.size());
  s.kv = kv_.stats();
  std::lock_guard lk(stats_mu_);
  published_ = std::move(s);
}

}  // namespace cairn::engine
