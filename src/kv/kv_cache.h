// kv/kv_cache.h — the paged KV cache: block pool, block tables, prefix cache.
// Owns all K/V memory of one model: a pool of fixed 16-token blocks (rows in F16, or Q8_0 with --kv-type q8_0) sized
// once at start-up, a block table per sequence (one per group of layers when
// some layers slide: a sliding group keeps only the window), and
// content-addressed full blocks that later prompts reuse. The scheduler sees only the methods below
// (vLLM's KVCacheManager boundary); it never sees blocks. Not thread-safe:
// only the engine thread touches it (forward()'s kernel threads may read K/V
// rows concurrently through key()/value(), which never mutate anything).
// Must never hand out a block that another live sequence writes to, and never
// return K/V for a prefix whose tokens differ from the prompt's (hits are
// verified token by token, so a hash collision costs a miss, not wrong output).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/kv_view.h"

namespace cairn::kv {

struct KvStats {
  int32_t blocks_total = 0;
  int32_t blocks_used = 0;      // held by at least one live sequence
  int32_t blocks_cached = 0;    // free but still findable by prefix (evictable, LRU)
  uint64_t prefix_queries = 0;  // prompt tokens looked up
  uint64_t prefix_hits = 0;     // prompt tokens found cached
  // Row writes the cache declined because they targeted a full (immutable,
  // possibly shared) block. One per layer is expected when a prompt's last
  // token is recomputed inside a fully cached block; anything else is a bug
  // upstream that the guard kept from corrupting a shared prefix.
  uint64_t writes_skipped = 0;
};

// Key of a full block from its predecessor's key (0 for the first block) and
// its token ids. Replaceable in tests to force collisions.
using BlockHashFn = uint64_t (*)(uint64_t prev_key, std::span<const Token> tokens);
uint64_t hash_block(uint64_t prev_key, std::span<const Token> tokens);

struct KvConfig {
  int64_t pool_bytes = 0;     // whole pool; rounded down to whole blocks
  int32_t block_tokens = 16;  // a power of two in [1, 1024]
  bool prefix_cache = true;
  BlockHashFn hash_for_testing = nullptr;  // tests only: replaces hash_block
  // K/V computed and stored elsewhere (a distributed model's agents, which
  // keep their rows at the block ids this cache hands out): the cache keeps
  // the block tables and the prefix index but allocates no pool, and its
  // KvView rows must not be read or written (write() counts a skip).
  bool tables_only = false;
  // Optional: a number that changes when that storage is replaced (agents
  // restarted): before the next reuse_prefix() or new sequence, every block
  // stops being findable by prefix, and sequences started from then on carry
  // the new generation (SeqLayout::generation).
  std::function<uint64_t()> storage_generation = {};
};

// Where one sequence's K/V rows are: what a remote holder of the rows needs.
struct SeqLayout {
  std::span<const int32_t> blocks;  // the block table; position p is in blocks[p / block_tokens]
                                    // (tables_only caches: always the one table of every layer)
  int32_t writable_from = 0;        // earlier positions are in full blocks, never written again
  int32_t capacity = 0;             // positions reserved
  uint64_t generation = 0;          // KvConfig::storage_generation() when the sequence started
};

// The smallest pool create() accepts, in blocks.
inline constexpr int32_t kMinBlocks = 4;

class PagedKvCache : public KvView {
 public:
  // Rows are stored as shape.dtype: F16, or Q8_0 (row_elems % 32 == 0).
  // Errors (one line) on a bad shape or block size, a pool smaller than
  // kMinBlocks blocks, more blocks than int32 counts, or a failed allocation.
  static Result<std::unique_ptr<PagedKvCache>> create(const KvShape& shape, const KvConfig& cfg);
  // Bytes one block takes for this model (K and V of every layer, or with
  // sliding layers of one group of layers); 0 when the shape is invalid or the
  // size would overflow.
  static int64_t block_bytes(const KvShape& shape, int32_t block_tokens = 16);
  // Blocks per block_tokens positions when every group holds them: 1 without
  // sliding layers; with them, one per group of layers (kv_cache.cpp), of
  // which the sliding groups hold only the last window of a sequence.
  static int32_t tables(const KvShape& shape);

  // Starts `seq` (must be new) on `prompt`: attaches the longest run of cached
  // full blocks that prefixes it and returns how many tokens that covers
  // (always < prompt.size(), so at least one token is computed for logits).
  // When the prompt ends exactly on a cached block, that block is shared too
  // and the result is prompt.size() - 1: the last token is recomputed for its
  // logits, and its K/V write is skipped (the shared row already holds it).
  // A sequence that already holds tokens or blocks is left alone (returns 0).
  // The attached blocks belong to `seq` from here on: when the reserve() for
  // the rest of the prompt fails, release(seq) hands them back.
  // `space`: whose K/V these are (a LoRA adapter's id; 0: the base model).
  // Prefixes are found, and the sequence's own full blocks become findable,
  // only within the same space: the same tokens under another adapter are
  // other K/V.
  virtual int32_t reuse_prefix(SeqId seq, std::span<const Token> prompt, uint32_t space = 0) = 0;
  // Makes room for `n` more tokens after the sequence's current length
  // (creating the sequence if it is new); false (and nothing changed) when the
  // pool cannot supply the blocks, even after evicting every cached block.
  virtual bool reserve(SeqId seq, int32_t n) = 0;
  // Records tokens whose K/V a forward has written (in order); full blocks
  // become content-addressed and findable by later prompts. Tokens beyond the
  // reserved positions are ignored (a caller bug; asserted in debug builds).
  virtual void commit(SeqId seq, std::span<const Token> tokens) = 0;
  // Gives back the positions reserved past the committed length (a
  // speculative step's rejected draft rows): blocks wholly past it return
  // to the pool, and the next reserve() starts from the committed length.
  // Rows there were never committed, so no block holding them was ever
  // findable by prefix. Unknown sequences are ignored.
  virtual void unreserve(SeqId seq) { (void)seq; }
  // Frees the sequence's blocks (cached ones stay findable until evicted).
  // Unknown sequences are ignored.
  virtual void release(SeqId seq) = 0;
  virtual int32_t length(SeqId seq) const = 0;  // committed tokens
  virtual KvStats stats() const = 0;
  // Blocks a chunk of n tokens needs (every group's, before commit() gives
  // back the sliding blocks that fell out of the window); for admission.
  virtual int32_t blocks_for(int32_t n_tokens) const = 0;
  virtual int32_t free_blocks() const = 0;             // free + evictable
  virtual int32_t block_tokens() const { return 16; }  // tokens per block
  // Empty (no blocks, capacity 0) for an unknown sequence.
  virtual SeqLayout layout(SeqId seq) const = 0;

  // A row's bytes as stored (dtype() elements), for handing K/V to another
  // cache (kv/transfer.h). read_raw copies layer `layer`'s K and V rows at
  // `pos` out; false (nothing copied) when the sequence does not hold that
  // row (unknown, beyond its reservation, or fallen out of a sliding
  // window). write_raw copies them in under write()'s rules (false when
  // write() would skip it).
  virtual bool read_raw(int layer, SeqId seq, int32_t pos, void* k, void* v) const {
    (void)layer, (void)seq, (void)pos, (void)k, (void)v;
    return false;
  }
  virtual bool write_raw(int layer, SeqId seq, int32_t pos, const void* k, const void* v) {
    (void)layer, (void)seq, (void)pos, (void)k, (void)v;
    return false;
  }
  // false for a tables_only cache (its rows live elsewhere: none to hand over).
  virtual bool stores_rows() const { return false; }
};

// MemAvailable from /proc/meminfo in bytes, or -1 when it cannot be read.
int64_t available_memory_bytes();

// A default pool: room for max(4 * n_ctx, 4096) tokens, but at most half of
// `available_bytes` (-1: read available_memory_bytes(); unknown: no cap), and
// never below kMinBlocks blocks. 0 when the shape is invalid.
int64_t default_pool_bytes(const KvShape& shape, int64_t n_ctx, int64_t available_bytes = -1);

}  // namespace cairn::kv
