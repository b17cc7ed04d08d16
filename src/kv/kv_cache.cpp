// kv/kv_cache.cpp — the paged KV cache: block pool, block tables, verified prefix chains.
// Blocks are laid out [layer][K|V][slot][row] so one block's rows for a layer
// are contiguous; a block table maps a sequence's position p to block p / bt,
// slot p % bt (bt a power of two: shift and mask).
//
// A block is in exactly one of three states: referenced by live sequences
// (ref > 0), free and findable by prefix (ref == 0, serial != 0, on the LRU
// list), or free and blank (ref == 0, serial == 0, on the free stack).
//
// Prefix chains are verified, not trusted: each findable block records the
// serial of the block that held its predecessor when it was registered, and
// its own token ids. Serials are never reused, so a hit whose parent serial
// and tokens match is exactly the prompt's prefix, whatever the hash does.
#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <limits>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/quant.h"
#include "kernels/type_ops.h"

namespace cairn::kv {
namespace {

constexpr int32_t kMaxBlockTokens = 1024;

class Paged final : public PagedKvCache {
 public:
  Paged(const KvShape& shape, const KvConfig& cfg, int32_t n_blocks, int64_t block_bytes,
        std::unique_ptr<uint8_t[]> pool)
      : shape_(shape),
        bt_(cfg.block_tokens),
        shift_(std::countr_zero((uint32_t)cfg.block_tokens)),
        prefix_cache_(cfg.prefix_cache),
        hash_(cfg.hash_for_testing ? cfg.hash_for_testing : &hash_block),
        generation_fn_(cfg.storage_generation),
        generation_(generation_fn_ ? generation_fn_() : 0),
        block_bytes_((size_t)block_bytes),
        row_bytes_((size_t)shape.row_elems * 2),
        f16_from_float_(type_ops(TensorType::F16)->from_float),
        pool_(std::move(pool)),
        blocks_((size_t)n_blocks),
        block_ids_((size_t)n_blocks * (size_t)bt_) {
    free_.reserve((size_t)n_blocks);
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out 0, 1, ... first
    rebuild_slots();
  }

  // --- KvView ---
  TensorType dtype() const override { return TensorType::F16; }
  int64_t capacity(SeqId seq) const override {
    const Seq* s = find(seq);
    return s ? s->reserved : 0;
  }
  void write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) override {
    const Seq* s = pool_ ? find(seq) : nullptr;
    // Full blocks are immutable: they may be shared or findable by others.
    if (!s || layer < 0 || layer >= shape_.n_layer || pos < s->n_frozen * bt_ ||
        pos >= s->reserved) {
      writes_skipped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    uint16_t* dk = const_cast<uint16_t*>(static_cast<const uint16_t*>(row(*s, layer, pos, 0)));
    uint16_t* dv = const_cast<uint16_t*>(static_cast<const uint16_t*>(row(*s, layer, pos, 1)));
    f16_from_float_(k, dk, shape_.row_elems);
    f16_from_float_(v, dv, shape_.row_elems);
  }
  const void* key(int layer, SeqId seq, int32_t pos) const override {
    return row(*find(seq), layer, pos, 0);
  }
  const void* value(int layer, SeqId seq, int32_t pos) const override {
    return row(*find(seq), layer, pos, 1);
  }
  // A block holds its bt_ rows of one layer's K (and V) back to back.
  Rows rows(int layer, SeqId seq, int32_t pos, int32_t max_n) const override {
    const Seq& s = *find(seq);
    const int32_t n = std::max<int32_t>(1, std::min<int32_t>(max_n, bt_ - (pos & (bt_ - 1))));
    return {row(s, layer, pos, 0), row(s, layer, pos, 1), n};
  }
  int64_t n_layer() const override { return shape_.n_layer; }
  int64_t row_elems() const override { return shape_.row_elems; }

  // --- scheduler side ---
  int32_t reuse_prefix(SeqId seq, std::span<const Token> prompt, uint32_t space) override {
    check_generation();
    if (const Seq* s = find(seq); s && (!s->tokens.empty() || !s->blocks.empty())) return 0;
    // A space's chain hangs from a root no block's serial can equal (serials
    // count up from 1), so a hit is verified to be of the same space.
    const uint64_t root_key = space, root_serial = space == 0 ? 0 : kSpaceRoot | space;
    if (space != 0) {
      Seq& s = seqs_[seq];
      s.generation = generation_;
      s.last_key = root_key;
      s.last_serial = root_serial;
      rebuild_slots();
    }
    const size_t n_prompt = std::min<size_t>(prompt.size(), std::numeric_limits<int32_t>::max());
    prefix_queries_ += n_prompt;
    if (!prefix_cache_ || n_prompt < 2) return 0;

    std::vector<int32_t> matched;
    uint64_t prev_key = root_key, prev_serial = root_serial;
    for (size_t start = 0; start + (size_t)bt_ <= n_prompt; start += (size_t)bt_) {
      const std::span<const Token> ids = prompt.subspan(start, (size_t)bt_);
      const uint64_t k = hash_(prev_key, ids);
      const int32_t b = find_cached(k, prev_serial, ids);
      if (b < 0) break;
      matched.push_back(b);
      prev_key = k;
      prev_serial = blocks_[(size_t)b].serial;
    }
    if (matched.empty()) return 0;

    const int32_t reused = (int32_t)std::min<size_t>(matched.size() * (size_t)bt_, n_prompt - 1);
    Seq& s = seqs_[seq];
    s.generation = generation_;
    for (int32_t b : matched) acquire(b);
    s.blocks = std::move(matched);
    s.tokens.assign(prompt.begin(), prompt.begin() + reused);
    s.reserved = reused;
    s.n_frozen = (int32_t)s.blocks.size();
    s.last_key = prev_key;
    s.last_serial = prev_serial;
    rebuild_slots();
    prefix_hits_ += (uint64_t)reused;
    return reused;
  }

  bool reserve(SeqId seq, int32_t n) override {
    if (n < 0) return false;
    Seq* s = find_mut(seq);
    const int64_t need = (s ? (int64_t)s->tokens.size() : 0) + n;
    if (need > std::numeric_limits<int32_t>::max()) return false;
    const int64_t have = s ? (int64_t)s->blocks.size() : 0;
    const int64_t extra = std::max<int64_t>(0, blocks_for((int32_t)need) - have);
    if (extra > free_blocks()) return false;
    if (!s) {
      check_generation();
      s = &seqs_[seq];
      s->generation = generation_;
      rebuild_slots();
    }
    for (int64_t i = 0; i < extra; ++i) {
      const int32_t b = take_block();
      assert(b >= 0);  // free_blocks() said there was room
      acquire(b);
      s->blocks.push_back(b);
    }
    s->reserved = std::max(s->reserved, (int32_t)need);
    return true;
  }

  void commit(SeqId seq, std::span<const Token> tokens) override {
    Seq* s = find_mut(seq);
    assert(s && "commit to an unknown sequence");
    if (!s) return;
    const size_t room = (size_t)s->reserved - s->tokens.size();
    assert(tokens.size() <= room && "commit beyond reserved positions");
    const size_t n = std::min(tokens.size(), room);
#ifndef NDEBUG
    // Tokens landing in an already full (reused) block must be the ones it holds.
    for (size_t i = 0; i < n; ++i) {
      const size_t pos = s->tokens.size() + i;
      const size_t blk = (size_t)s->blocks[pos >> shift_];
      if (pos < (size_t)s->n_frozen * (size_t)bt_ && blocks_[blk].serial != 0)
        assert(block_ids_[blk * (size_t)bt_ + (pos & (size_t)(bt_ - 1))] == tokens[i]);
    }
#endif
    s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.begin() + (ptrdiff_t)n);
    while ((size_t)(s->n_frozen + 1) * (size_t)bt_ <= s->tokens.size()) freeze_next(*s);
  }

  void release(SeqId seq) override {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    // Tail first: the LRU then evicts a chain's end before its beginning, so a
    // later prompt still finds the longest surviving prefix.
    for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) drop(*b);
    seqs_.erase(it);
    rebuild_slots();
  }

  int32_t length(SeqId seq) const override {
    const Seq* s = find(seq);
    return s ? (int32_t)s->tokens.size() : 0;
  }

  KvStats stats() const override {
    KvStats st;
    st.blocks_total = (int32_t)blocks_.size();
    st.blocks_used = used_;
    st.blocks_cached = n_lru_;
    st.prefix_queries = prefix_queries_;
    st.prefix_hits = prefix_hits_;
    st.writes_skipped = writes_skipped_.load(std::memory_order_relaxed);
    return st;
  }

  int32_t blocks_for(int32_t n_tokens) const override {
    return n_tokens <= 0 ? 0 : (int32_t)(((int64_t)n_tokens + bt_ - 1) >> shift_);
  }
  int32_t free_blocks() const override { return (int32_t)free_.size() + n_lru_; }
  int32_t block_tokens() const override { return bt_; }

  SeqLayout layout(SeqId seq) const override {
    const Seq* s = find(seq);
    if (!s) return {};
    return {s->blocks, s->n_frozen * bt_, s->reserved, s->generation};
  }

 private:
  struct Seq {
    std::vector<int32_t> blocks;  // the block table
    std::vector<Token> tokens;    // committed
    int32_t reserved = 0;         // writable positions: [n_frozen * bt, reserved)
    int32_t n_frozen = 0;         // leading full blocks, never written again
    uint64_t last_key = 0;        // chain key of block n_frozen - 1 (0: none)
    uint64_t last_serial = 0;     // serial of the cached block holding that prefix (0: none)
    uint64_t generation = 0;      // of the storage when the sequence started
  };
  struct Block {
    int32_t ref = 0;
    int32_t lru_prev = -1, lru_next = -1;
    uint64_t key = 0;
    uint64_t serial = 0;  // != 0 while findable by prefix
    uint64_t parent_serial = 0;
  };
  struct Slot {
    SeqId id = 0;
    Seq* seq = nullptr;
  };

  const void* row(const Seq& s, int layer, int32_t pos, int which) const {
    assert(pos >= 0 && (size_t)(pos >> shift_) < s.blocks.size());
    assert(layer >= 0 && layer < shape_.n_layer);
    const size_t b = (size_t)s.blocks[(size_t)(pos >> shift_)];
    const size_t slot =
        ((size_t)layer * 2 + (size_t)which) * (size_t)bt_ + (size_t)(pos & (bt_ - 1));
    return pool_.get() + b * block_bytes_ + slot * row_bytes_;
  }

  // Open addressing over live sequences, rebuilt when one starts or ends, so
  // the per-row lookups of attention are a multiply and a probe or two.
  size_t slot_of(SeqId id) const { return ((uint32_t)id * 0x9e3779b9u) >> slot_shift_; }
  const Seq* find(SeqId id) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(id);; i = (i + 1) & mask) {
      if (!slots_[i].seq) return nullptr;
      if (slots_[i].id == id) return slots_[i].seq;
    }
  }
  Seq* find_mut(SeqId id) { return const_cast<Seq*>(find(id)); }
  void rebuild_slots() {
    size_t cap = 16;
    while (cap < 2 * (seqs_.size() + 1)) cap *= 2;
    slots_.assign(cap, Slot{});
    slot_shift_ = 32 - std::countr_zero(cap);
    for (auto& [id, s] : seqs_) {
      size_t i = slot_of(id);
      while (slots_[i].seq) i = (i + 1) & (cap - 1);
      slots_[i] = Slot{id, &s};
    }
  }

  int32_t find_cached(uint64_t key, uint64_t parent_serial, std::span<const Token> ids) const {
    auto [lo, hi] = index_.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      const Block& blk = blocks_[(size_t)it->second];
      const Token* stored = block_ids_.data() + (size_t)it->second * (size_t)bt_;
      if (blk.parent_serial == parent_serial && std::equal(ids.begin(), ids.end(), stored))
        return it->second;
    }
    return -1;
  }

  // Makes block n_frozen of `s` immutable and, unless an identical block is
  // already findable, findable itself.
  void freeze_next(Seq& s) {
    const size_t k = (size_t)s.n_frozen;
    const int32_t b = s.blocks[k];
    ++s.n_frozen;
    if (!prefix_cache_) return;
    const std::span<const Token> ids(s.tokens.data() + k * (size_t)bt_, (size_t)bt_);
    const uint64_t key = hash_(s.last_key, ids);
    s.last_key = key;
    if (const int32_t dup = find_cached(key, s.last_serial, ids); dup >= 0) {
      s.last_serial = blocks_[(size_t)dup].serial;  // our copy stays private and blank
      return;
    }
    Block& blk = blocks_[(size_t)b];
    assert(blk.serial == 0);
    blk.key = key;
    blk.parent_serial = s.last_serial;
    blk.serial = next_serial_++;
    std::copy(ids.begin(), ids.end(), block_ids_.begin() + (ptrdiff_t)((size_t)b * (size_t)bt_));
    index_.emplace(key, b);
    s.last_serial = blk.serial;
  }

  // The storage behind the blocks was replaced: no block's content may be
  // found by prefix any more. Cached blocks with no holder become blank.
  void check_generation() {
    if (!generation_fn_) return;
    const uint64_t g = generation_fn_();
    if (g == generation_) return;
    generation_ = g;
    for (int32_t b = 0; b < (int32_t)blocks_.size(); ++b) {
      if (blocks_[(size_t)b].serial == 0) continue;
      if (blocks_[(size_t)b].ref == 0) {
        lru_remove(b);
        free_.push_back(b);
      }
      forget(b);
    }
  }

  void forget(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    auto [lo, hi] = index_.equal_range(blk.key);
    for (auto it = lo; it != hi; ++it)
      if (it->second == b) {
        index_.erase(it);
        break;
      }
    blk.serial = 0;
  }

  // A blank block with ref 0: a free one, else the least recently used cached one.
  int32_t take_block() {
    if (!free_.empty()) {
      const int32_t b = free_.back();
      free_.pop_back();
      return b;
    }
    const int32_t b = lru_head_;
    if (b < 0) return -1;
    lru_remove(b);
    forget(b);
    return b;
  }

  void acquire(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    if (blk.ref++ == 0) {
      ++used_;
      if (blk.serial != 0) lru_remove(b);
    }
  }

  void drop(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    assert(blk.ref > 0);
    if (--blk.ref != 0) return;
    --used_;
    if (blk.serial != 0)
      lru_push_back(b);
    else
      free_.push_back(b);
  }

  void lru_push_back(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    blk.lru_prev = lru_tail_;
    blk.lru_next = -1;
    if (lru_tail_ >= 0)
      blocks_[(size_t)lru_tail_].lru_next = b;
    else
      lru_head_ = b;
    lru_tail_ = b;
    ++n_lru_;
  }

  void lru_remove(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    if (blk.lru_prev >= 0)
      blocks_[(size_t)blk.lru_prev].lru_next = blk.lru_next;
    else
      lru_head_ = blk.lru_next;
    if (blk.lru_next >= 0)
      blocks_[(size_t)blk.lru_next].lru_prev = blk.lru_prev;
    else
      lru_tail_ = blk.lru_prev;
    blk.lru_prev = blk.lru_next = -1;
    --n_lru_;
  }

  const KvShape shape_;
  const int32_t bt_;
  const int shift_;
  const bool prefix_cache_;
  const BlockHashFn hash_;
  const std::function<uint64_t()> generation_fn_;
  uint64_t generation_;
  const size_t block_bytes_;
  const size_t row_bytes_;
  // The type table's F16 quantizer: the scalar bits, vectorised where the CPU allows.
  void (*const f16_from_float_)(const float*, void*, int64_t);
  std::unique_ptr<uint8_t[]> pool_;

  std::vector<Block> blocks_;
  std::vector<Token> block_ids_;  // bt token ids per block, meaningful while findable
  std::vector<int32_t> free_;     // blank blocks with ref 0
  int32_t lru_head_ = -1, lru_tail_ = -1, n_lru_ = 0;  // findable blocks with ref 0
  std::unordered_multimap<uint64_t, int32_t> index_;   // key -> findable blocks
  uint64_t next_serial_ = 1;
  static constexpr uint64_t kSpaceRoot = uint64_t{1} << 63;
  int32_t used_ = 0;

  std::unordered_map<SeqId, Seq> seqs_;  // node-based: Seq addresses are stable
  std::vector<Slot> slots_;
  int slot_shift_ = 28;

  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  std::atomic<uint64_t> writes_skipped_{0};
};

}  // namespace

int64_t PagedKvCache::block_bytes(const KvShape& shape, int32_t block_tokens) {
  if (shape.n_layer <= 0 || shape.row_elems <= 0 || block_tokens <= 0) return 0;
  // 2 (K and V) * layers * tokens * row * 2 bytes (F16); each factor < 2^31.
  const unsigned __int128 bytes = (unsigned __int128)4 * (uint64_t)shape.n_layer *
                                  (uint64_t)block_tokens * (uint64_t)shape.row_elems;
  return bytes > (unsigned __int128)std::numeric_limits<int64_t>::max() ? 0 : (int64_t)bytes;
}

Result<std::unique_ptr<PagedKvCache>> PagedKvCache::create(const KvShape& shape,
                                                           const KvConfig& cfg) {
  if (shape.n_layer <= 0 || shape.row_elems <= 0)
    return Status::error("KV cache needs a positive layer count and row size (got " +
                         std::to_string(shape.n_layer) + " layers of " +
                         std::to_string(shape.row_elems) + ")");
  if (cfg.block_tokens <= 0 || cfg.block_tokens > kMaxBlockTokens ||
      !std::has_single_bit((uint32_t)cfg.block_tokens))
    return Status::error("KV block size " + std::to_string(cfg.block_tokens) +
                         " is not a power of two in [1, " + std::to_string(kMaxBlockTokens) + "]");
  const int64_t bb = block_bytes(shape, cfg.block_tokens);
  if (bb <= 0) return Status::error("KV block size overflows");
  const int64_t n_blocks = cfg.pool_bytes > 0 ? cfg.pool_bytes / bb : 0;
  if (n_blocks < kMinBlocks)
    return Status::error("KV pool of " + std::to_string(cfg.pool_bytes) + " bytes holds " +
                         std::to_string(n_blocks) + " blocks of " + std::to_string(bb) +
                         " bytes; at least " + std::to_string(kMinBlocks) + " are needed");
  if (n_blocks > std::numeric_limits<int32_t>::max() / 2 ||
      (uint64_t)n_blocks > std::numeric_limits<size_t>::max() / (uint64_t)bb)
    return Status::error("KV pool of " + std::to_string(n_blocks) + " blocks is too many");
  // Uninitialised on purpose: pages are committed as blocks are first written,
  // and a position is never read before a forward wrote it.
  std::unique_ptr<uint8_t[]> pool;
  if (!cfg.tables_only) pool.reset(new (std::nothrow) uint8_t[(size_t)(n_blocks * bb)]);
  if (!pool && !cfg.tables_only)
    return Status::error("cannot allocate a KV pool of " + std::to_string(n_blocks * bb) +
                         " bytes");
  return std::unique_ptr<PagedKvCache>(
      new Paged(shape, cfg, (int32_t)n_blocks, bb, std::move(pool)));
}

}  // namespace cairn::kv
