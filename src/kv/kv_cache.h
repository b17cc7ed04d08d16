// kv/kv_cache.h — the paged KV cache: block pool, block tables, prefix cache.
// Owns all K/V memory of one model: a pool of fixed 16-token F16 blocks sized
// once at start-up, a block table per sequence, and content-addressed full
// blocks that later prompts reuse. The scheduler sees only the methods below
// (vLLM's KVCacheManager boundary); it never sees blocks. Not thread-safe:
// only the engine thread touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/kv_view.h"

namespace cairn::kv {

// The geometry of one model's K/V: what a block must hold.
struct KvShape {
  int32_t n_layer = 0;
  int32_t row_elems = 0;  // n_head_kv * head_dim
};

struct KvStats {
  int32_t blocks_total = 0;
  int32_t blocks_used = 0;        // held by at least one live sequence
  int32_t blocks_cached = 0;      // free but still findable by prefix (evictable, LRU)
  uint64_t prefix_queries = 0;    // prompt tokens looked up
  uint64_t prefix_hits = 0;       // prompt tokens found cached
};

struct KvConfig {
  int64_t pool_bytes = 0;       // whole pool; rounded down to whole blocks
  int32_t block_tokens = 16;
  bool prefix_cache = true;
};

class PagedKvCache : public KvView {
 public:
  static Result<std::unique_ptr<PagedKvCache>> create(const KvShape& shape, const KvConfig& cfg);
  // Bytes one block takes for this model (all layers, K and V).
  static int64_t block_bytes(const KvShape& shape, int32_t block_tokens = 16);

  // Starts `seq` (must be new) on `prompt`: attaches the longest run of cached
  // full blocks that prefixes it and returns how many tokens that covers
  // (always < prompt.size(), so at least one token is computed for logits).
  virtual int32_t reuse_prefix(SeqId seq, std::span<const Token> prompt) = 0;
  // Makes room for `n` more tokens after the sequence's current length;
  // false (and nothing changed) when the pool cannot supply the blocks.
  virtual bool reserve(SeqId seq, int32_t n) = 0;
  // Records tokens whose K/V a forward has written (in order); full blocks
  // become content-addressed and findable by later prompts.
  virtual void commit(SeqId seq, std::span<const Token> tokens) = 0;
  // Frees the sequence's blocks (cached ones stay findable until evicted).
  virtual void release(SeqId seq) = 0;
  virtual int32_t length(SeqId seq) const = 0;  // committed tokens
  virtual KvStats stats() const = 0;
  // Blocks a sequence of n tokens needs; for admission decisions.
  virtual int32_t blocks_for(int32_t n_tokens) const = 0;
  virtual int32_t free_blocks() const = 0;  // free + evictable
};

}  // namespace cairn::kv
