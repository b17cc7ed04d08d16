// serving/backend_stats.cpp — counters and histograms of several backends added up.
#include "serving/backend_stats.h"

namespace cairn::serving {
namespace {

void add_histogram(Histogram& into, const Histogram& h) {
  if (h.bounds.empty()) return;
  if (into.bounds.empty()) {
    into = h;
    return;
  }
  if (into.bounds != h.bounds) return;
  for (size_t i = 0; i < into.counts.size() && i < h.counts.size(); ++i) into.counts[i] += h.counts[i];
  into.sum += h.sum;
  into.count += h.count;
}

}  // namespace

void add_stats(BackendStats& into, const BackendStats& from) {
  into.prompt_tokens_total += from.prompt_tokens_total;
  into.generated_tokens_total += from.generated_tokens_total;
  into.running += from.running;
  into.waiting += from.waiting;
  into.kv_blocks_used += from.kv_blocks_used;
  into.kv_blocks_total += from.kv_blocks_total;
  into.prefix_cache_queries += from.prefix_cache_queries;
  into.prefix_cache_hits += from.prefix_cache_hits;
  into.preemptions += from.preemptions;
  into.spec_draft_tokens_total += from.spec_draft_tokens_total;
  into.spec_accepted_tokens_total += from.spec_accepted_tokens_total;
  into.requests_cancelled += from.requests_cancelled;
  into.embedding_inputs_total += from.embedding_inputs_total;
  into.embedding_tokens_total += from.embedding_tokens_total;
  add_histogram(into.time_to_first_token_s, from.time_to_first_token_s);
  add_histogram(into.inter_token_latency_s, from.inter_token_latency_s);
  add_histogram(into.queue_time_s, from.queue_time_s);
  add_histogram(into.e2e_latency_s, from.e2e_latency_s);
}

}  // namespace cairn::serving
