// engine/scheduler.h — continuous batching: who runs in the next forward, and how much.
// Owns the waiting queue and the running set of sequences, the per-step token
// budget (decode tokens of running sequences first, then prefill chunks of
// waiting ones, first come first served), KV admission through
// kv::PagedKvCache (prefix reuse, reserve, commit, release) and preemption of
// the newest running sequence when blocks run out. Never runs the model,
// samples or formats text; never sees KV blocks, only the cache's yes/no.
// Not thread-safe: only the engine thread touches it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/draft.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_conditions.h"
#include "grammar/matcher.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace cairn::engine {

using Clock = std::chrono::steady_clock;

// One request's whole state while the engine holds it.
struct Sequence {
  Sequence(RequestId id, EngineRequest req, Sampler sampler, StopChecker stop,
           std::shared_ptr<SequenceSink> sink);

  RequestId id;
  EngineRequest request;
  std::vector<Token> tokens;  // prompt, then every generated token
  int32_t n_prompt = 0;
  Sampler sampler;
  StopChecker stop;
  std::shared_ptr<SequenceSink> sink;
  std::optional<grammar::Matcher> matcher;  // where the output is in the request's grammar

  // Scheduler state. `kv_seq` is fresh on every admission (the cache wants a
  // new id after a release); n_computed counts tokens whose K/V are cached.
  SeqId kv_seq = -1;
  bool in_kv = false;
  int32_t n_computed = 0;
  int32_t cached_prompt_tokens = -1;  // prefix hit of the first admission; -1 before
  std::string failure;                // set when the sequence cannot run at all
  int32_t exported = 0;               // export_kv: rows [0, exported) went to the sink
  int32_t import_next = -1;           // import_kv: rows [import_next, n_prompt) still to write
  bool done = false;                  // ended; the engine retires it this step

  // Speculative decoding (engine/draft.h): `draft_max` is how many draft
  // tokens the next decode step may verify (the engine sets it: the adaptive
  // length within the request's room; 0 for a sequence that never
  // speculates); `draft` the tokens riding in this step's chunk.
  bool speculate = false;
  int32_t draft_len = 0;  // adaptive: grows on full acceptance, shrinks on rejection
  int32_t draft_max = 0;
  std::vector<Token> draft;

  // Timing for latency statistics.
  Clock::time_point arrived;
  Clock::time_point last_token;
  bool started = false;    // scheduled at least once (queue time observed)
  bool has_token = false;  // produced at least one token

  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
};

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // tokens per forward, decode and prefill together
  int32_t max_seqs = 64;           // running sequences
  // Handed-over rows written per step and sequence: a long prompt's rows
  // are copied over several steps so no step of the running streams pays
  // for all of them at once.
  int32_t import_positions_per_step = std::numeric_limits<int32_t>::max();
};

// Tokens [start, start + n) of one sequence in this step's batch.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t start = 0;
  int32_t n = 0;
  bool wants_logits = false;  // the chunk reaches the sequence's end: sample after it
  // Speculative: the last n_draft tokens are seq->draft, not yet the
  // sequence's; every token of the chunk wants logits (the first verifies
  // draft[0], the last gives a bonus token), and commit() leaves the
  // chunk's K/V to the engine, which commits only the accepted rows.
  int32_t n_draft = 0;
};

struct ScheduledBatch {
  std::vector<ScheduledChunk> chunks;
  model::Batch batch;
  int32_t preempted = 0;
  int32_t decode_tokens = 0;   // chunks of one token of running sequences
  int32_t prefill_tokens = 0;  // every other scheduled token (draft tokens too)
  int32_t draft_tokens = 0;    // speculative draft tokens (counted in prefill_tokens)
  std::vector<Sequence*> failed;  // cannot fit the KV pool even alone; engine reports them
  // Handed-over K/V (EngineRequest::import_kv) of admitted sequences: rows
  // [from, to) are reserved (n_computed already counts them) and the engine
  // writes and commits them before this step's forward, which carries the
  // sequence's next chunk once its last rows are in.
  struct Import {
    Sequence* seq;
    int32_t from, to;
  };
  std::vector<Import> imports;

  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig cfg) : cfg_(cfg) {}

  // Speculative decoding: a decoding sequence with draft_max > 0 asks this
  // source for drafts (borrowed; null: nobody drafts).
  void set_draft_source(DraftSource* drafts) { drafts_ = drafts; }

  void add(std::unique_ptr<Sequence> seq);  // joins the back of the waiting queue

  // Plans the next step and reserves its KV slots. Every chunk's slots are
  // reserved when this returns; commit() must follow the forward.
  // `prefill_cap` bounds the prompt tokens (every chunk but a running
  // sequence's single next token) within the token budget: the stall-free
  // chunk size (engine/step_budget.h).
  void schedule(kv::PagedKvCache& kv, ScheduledBatch& plan,
                int32_t prefill_cap = std::numeric_limits<int32_t>::max());
  // Running sequences whose next chunk is one token (they decode).
  int32_t decoding() const;
  // Tokens that prompt chunks have yet to compute: the rest of running
  // prompts and the whole input of waiting sequences (preempted ones
  // recompute theirs); a running sequence's one token to decode is not.
  int64_t prompt_backlog() const;

  // Records the K/V the forward wrote for each chunk.
  void commit(const ScheduledBatch& plan, kv::PagedKvCache& kv);

  // Removes a sequence wherever it is, releasing its blocks; nullptr if unknown.
  std::unique_ptr<Sequence> remove(RequestId id, kv::PagedKvCache& kv);
  // Removes every sequence marked done or failed, releasing their blocks.
  std::vector<std::unique_ptr<Sequence>> take_done(kv::PagedKvCache& kv);
  // Removes every sequence (shutdown), releasing their blocks.
  std::vector<std::unique_ptr<Sequence>> take_all(kv::PagedKvCache& kv);

  int32_t running() const { return static_cast<int32_t>(running_.size()); }
  int32_t waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }

 private:
  void schedule_running(kv::PagedKvCache& kv, ScheduledBatch& plan, int32_t& budget,
                        int32_t& prefill_left);
  void admit_waiting(kv::PagedKvCache& kv, ScheduledBatch& plan, int32_t& budget,
                     int32_t& prefill_left);
  // The head of the queue when it brings handed-over K/V: 1 admitted (or
  // failed), 0 take the plain path (the prefix cache covers the prompt),
  // -1 wait for blocks.
  int admit_imported(Sequence& seq, kv::PagedKvCache& kv, ScheduledBatch& plan, bool alone,
                     int32_t& budget);
  // Plans the next rows of an admitted import; true when they are the last
  // (the sequence may then compute in this step).
  bool plan_import(Sequence& seq, ScheduledBatch& plan);
  // Reserves up to `want` tokens for `seq`, shrinking the chunk when the pool
  // is short; 0 when not even one token fits.
  int32_t reserve_chunk(Sequence& seq, int32_t want, kv::PagedKvCache& kv);
  void preempt(size_t running_index, kv::PagedKvCache& kv);
  void add_chunk(Sequence& seq, int32_t n, ScheduledBatch& plan);
  SeqId next_kv_seq();
  std::vector<std::unique_ptr<Sequence>> take_if(kv::PagedKvCache& kv,
                                                 const std::function<bool(const Sequence&)>& pred);

  // Before the running sequences are planned: drafts for every decoding
  // sequence that may speculate, in one batched proposal (a draft model
  // shares its forwards), each as long as the step could take.
  void propose_all_drafts(int32_t budget, int32_t prefill_left);
  // How many of seq.draft fit `room` (the rest dropped).
  int32_t propose_drafts(Sequence& seq, int32_t room);
  std::vector<DraftAsk> asks_;

  SchedulerConfig cfg_;
  DraftSource* drafts_ = nullptr;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order: newest last
  SeqId kv_seq_counter_ = 0;
};

}  // namespace cairn::engine
