// engine/engine.h — one model's engine thread: continuous batching end to end.
// Owns the thread-safe inbox (new and cancelled requests), the engine thread
// and its loop (DESIGN.md: take requests, schedule, one forward over the
// ragged batch, sample, stop checks, events, free), and the latency
// histograms and counters it measures. The model, tokenizer and KV cache are
// borrowed and touched only by the engine thread once start() ran. Never
// blocks on a sink, never parses or renders text formats.
#pragma once

#include <atomic>
#include <optional>
#include <unordered_map>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/histogram.h"
#include "core/status.h"
#include "engine/draft.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_budget.h"
#include "grammar/token_mask.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::engine {

struct EngineConfig {
  int32_t max_batch_tokens = 512;  // tokens per forward (decode + prefill chunks)
  int32_t max_seqs = 64;           // sequences running at once
  int32_t n_ctx = 0;               // tokens per sequence; 0: the model's context_length (or 4096)
  // Stall-free batching (engine/step_budget.h): the step-time target in ms
  // that sizes prompt chunks while streams decode; 0 automatic, < 0 off.
  double max_step_ms = -1;
  // Handed-over K/V rows copied per step and sequence: a long prompt's rows
  // enter over many steps, so the running streams' steps each grow by a
  // fraction of a millisecond (docs/performance.md, prefill and decode workers).
  int64_t import_bytes_per_step = int64_t(1) << 20;
  // Speculative decoding by prompt lookup (engine/draft.h): the most draft
  // tokens a decoding sequence verifies per step (adaptive below it); 0 off.
  int32_t spec_lookup_max = 0;
  // Speculative decoding by a draft model (engine/draft_model.h; shared so
  // the config stays copyable; only the engine thread calls it): at most
  // spec_draft_max draft tokens per step (adaptive below it). With lookup
  // too, lookup proposes first and the model when lookup finds nothing.
  std::shared_ptr<DraftSource> draft_model = nullptr;
  int32_t spec_draft_max = 8;
};

using LatencyHistogram = Histogram;

struct EngineStats {
  uint64_t prompt_tokens_total = 0;  // of requests admitted
  uint64_t generated_tokens_total = 0;
  uint64_t requests_finished = 0;  // ended with stop or length
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  uint64_t embed_requests_total = 0;  // embedding jobs answered
  uint64_t embed_inputs_total = 0;
  uint64_t embed_tokens_total = 0;
  uint64_t spec_draft_tokens_total = 0;     // draft tokens verified
  uint64_t spec_accepted_tokens_total = 0;  // of those, accepted (emitted)
  int32_t running = 0;
  int32_t waiting = 0;  // queued, not yet admitted (inbox included)
  kv::KvStats kv;
  LatencyHistogram time_to_first_token_s;
  LatencyHistogram inter_token_latency_s;
  LatencyHistogram queue_time_s;
  LatencyHistogram e2e_latency_s;
};

class Engine {
 public:
  Engine(model::Model& model, const Tokenizer& tok, kv::PagedKvCache& kv, EngineConfig cfg);
  ~Engine();  // stops the thread; unfinished requests get an error
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();  // runs the loop on the engine thread
  void stop();   // idempotent; joins the thread and fails what is left

  // Any thread. Checks the request (prompt ids, context, sampling) and queues
  // it; the error is one line naming the problem.
  Result<RequestId> submit(EngineRequest req, std::shared_ptr<SequenceSink> sink);
  // Any thread. Checks an embedding job (inputs non-empty, inside the
  // vocabulary and the context; a non-causal model's inputs at most one
  // forward long; the model able to pool so) and queues it. Its inputs run
  // in forwards of their own between generation steps, batched with other
  // jobs' up to max_batch_tokens.
  Result<RequestId> submit_embedding(EmbedRequest req, std::shared_ptr<EmbedSink> sink);
  // Any thread, idempotent: the request leaves the batch and frees its
  // blocks in the next step; its sink gets on_end(Cancelled) (an embedding
  // job's on_error(Cancelled)).
  void cancel(RequestId id);

  EngineStats stats() const;  // any thread: a snapshot taken after the last step
  int32_t queued() const;     // any thread: requests not yet running
  int32_t n_ctx() const { return cfg_.n_ctx; }
  // The K/V rows a handoff moves (kv/transfer.h); n_layer 0 when this
  // engine's cache stores none (a distributed model's agents hold them).
  const kv::KvGeometry& kv_geometry() const { return geometry_; }

  // One loop iteration on the calling thread, for tests that never call
  // start(). Returns false when there was nothing to do.
  bool step();

 private:
  void run();
  void take_new_and_cancelled_requests();
  void observe_queue_times(const ScheduledBatch& plan);
  void sample_and_check_stops(const ScheduledBatch& plan);
  // One logits row through the grammar mask and the sampler (verifying
  // `draft` when >= 0); nullopt when the sequence failed.
  std::optional<SampleResult> sample_row(Sequence& seq, std::span<const float> logits, Token draft);
  // Appends a sampled token, reports it and checks the stops; false when the
  // sequence ended (or failed) with it.
  bool emit(Sequence& seq, SampleResult sample);
  // After a speculative chunk: commits the accepted drafts' rows, gives
  // back the rest, counts, and adapts the draft length.
  void finish_speculation(Sequence& seq, const ScheduledChunk& c, int32_t accepted);
  // Sets how many drafts the sequence's next step may verify.
  void plan_draft(Sequence& seq);
  void fail(Sequence& seq, const std::string& message, StatusCode code = StatusCode::Internal);
  void free_finished();
  void publish_stats();
  // One forward over queued embedding inputs; false when none wait.
  bool embed_step();
  void fail_embedding(size_t job, const Status& error);
  // Handoff: checks an export/import request and replays its forced tokens.
  Status check_handoff(const EngineRequest& req) const;
  Status replay_forced(Sequence& seq);
  // Sends rows [seq.exported, upto) of an export_kv sequence to its sink.
  void export_rows(Sequence& seq, int32_t upto);
  // Writes an admitted sequence's handed-over rows [from, to) and commits
  // those prompt tokens.
  void import_rows(Sequence& seq, int32_t from, int32_t to);

  model::Model& model_;
  const Tokenizer& tok_;
  kv::PagedKvCache& kv_;
  EngineConfig cfg_;
  int32_t n_vocab_ = 0;
  kv::KvGeometry geometry_;

  // Engine-thread state.
  std::shared_ptr<DraftSource> drafts_;  // null: no speculative decoding
  int32_t spec_max_ = 0;                 // the most drafts a step verifies
  Scheduler scheduler_;
  StepBudget step_budget_;
  ScheduledBatch plan_;
  model::Logits logits_;
  EngineStats counters_;
  // Constrained decoding: the vocabulary's bytes as a trie (built at the
  // first request with a grammar), a mask and a masked logits row.
  std::unique_ptr<grammar::TokenTrie> trie_;
  std::vector<uint8_t> mask_;
  std::vector<float> masked_;
  // Masks by grammar (requests with the same grammar text share the
  // compiled object, see serving's grammar cache) and recognizer state.
  struct GrammarMasks {
    std::shared_ptr<const grammar::Grammar> grammar;  // keeps the key alive
    grammar::MaskCache cache;
  };
  std::unordered_map<const grammar::Grammar*, std::unique_ptr<GrammarMasks>> mask_caches_;
  grammar::MaskCache& mask_cache(const std::shared_ptr<const grammar::Grammar>& g);

  // Embedding jobs (engine thread): their inputs in arrival order, the
  // next input to schedule, and the vectors made so far.
  struct EmbedJob {
    RequestId id = 0;
    EmbedRequest request;
    std::shared_ptr<EmbedSink> sink;
    std::vector<std::vector<float>> vectors;
    size_t next = 0, finished = 0;
    int32_t n_tokens = 0;
  };
  std::vector<std::unique_ptr<EmbedJob>> embed_jobs_;
  std::unique_ptr<kv::ContiguousKvCache> embed_kv_;  // scratch K/V of one embedding forward
  model::Batch embed_batch_;
  model::Logits hidden_;

  // Inbox, shared with submitting threads.
  mutable std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_new_;
  std::vector<RequestId> inbox_cancelled_;
  std::vector<std::unique_ptr<EmbedJob>> inbox_embed_;
  bool stopping_ = false;
  std::atomic<RequestId> next_id_{1};

  mutable std::mutex stats_mu_;
  EngineStats published_;

  std::thread thread_;
};

}  // namespace cairn::engine
