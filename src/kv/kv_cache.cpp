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
// and tokens match is exactly the prefix, whatever the hash does.
//
// Sliding-window layers (KvShape::window, sliding): the layers form groups of
// G layers each (G = gcd(global, sliding layer counts)); a block holds one
// group's rows, and a sequence has one block table per group, global groups
// first. A sliding table drops (back to the pool) each block that lies wholly
// before the window of the next token to compute, so it holds about
// ceil(window / bt) + 1 blocks plus the chunk in flight. The prefix chain runs
// over table 0's blocks (the "leads"); the same 16 tokens' blocks of the other
// tables are "companions", findable by (lead serial, table). A hit needs every
// global companion, and the sliding companions of the last window positions of
// the hit: where they were evicted the hit is shortened. With no global layer
// at all there is no lead chain, and hits are refused.
#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/quant.h"
#include "kernels/type_ops.h"

namespace cairn::kv {
namespace {

constexpr int32_t kMaxBlockTokens = 1024;

// How a shape's layers map onto blocks: G layers per block, `tables` block
// tables per sequence (global ones first), layer l in table table_of[l] at
// slot slot_of[l] of its block.
struct Groups {
  int32_t layers_per_block = 0;
  int32_t tables = 1;
  int32_t global_tables = 1;
  int32_t window = 0;  // > 0: tables from global_tables on slide
  std::vector<int32_t> table_of, slot_of;
};

Groups groups_of(const KvShape& shape, bool keep_all) {
  Groups g;
  const int32_t n = std::max(shape.n_layer, 0);
  int32_t n_slide = 0;
  if (!keep_all && shape.window > 0 && (int32_t)shape.sliding.size() == n)
    for (uint8_t v : shape.sliding) n_slide += v != 0;
  const int32_t n_global = n - n_slide;
  g.layers_per_block = n;
  g.table_of.assign((size_t)n, 0);
  g.slot_of.resize((size_t)n);
  std::iota(g.slot_of.begin(), g.slot_of.end(), 0);
  if (n_slide == 0) return g;  // today's layout: one table, every layer in one block
  g.window = shape.window;
  if (n_global == 0) {  // every layer slides: one sliding table
    g.global_tables = 0;
    return g;
  }
  const int32_t G = std::gcd(n_global, n_slide);
  g.layers_per_block = G;
  g.global_tables = n_global / G;
  g.tables = g.global_tables + n_slide / G;
  int32_t ig = 0, is = 0;
  for (int32_t l = 0; l < n; ++l) {
    const bool slide = shape.sliding[(size_t)l] != 0;
    const int32_t i = slide ? is++ : ig++;
    g.table_of[(size_t)l] = (slide ? g.global_tables : 0) + i / G;
    g.slot_of[(size_t)l] = i % G;
  }
  return g;
}

class Paged final : public PagedKvCache {
 public:
  Paged(const KvShape& shape, const KvConfig& cfg, Groups groups, int32_t n_blocks,
        int64_t block_bytes, std::unique_ptr<uint8_t[]> pool)
      : shape_(shape),
        g_(std::move(groups)),
        bt_(cfg.block_tokens),
        shift_(std::countr_zero((uint32_t)cfg.block_tokens)),
        prefix_cache_(cfg.prefix_cache && g_.global_tables > 0),
        hash_(cfg.hash_for_testing ? cfg.hash_for_testing : &hash_block),
        generation_fn_(cfg.storage_generation),
        generation_(generation_fn_ ? generation_fn_() : 0),
        block_bytes_((size_t)block_bytes),
        row_bytes_((size_t)kv_row_bytes(shape.dtype, shape.row_elems)),
        from_float_(kv_row_quantizer(shape.dtype)),
        pool_(std::move(pool)),
        blocks_((size_t)n_blocks),
        block_ids_((size_t)n_blocks * (size_t)bt_) {
    free_.reserve((size_t)n_blocks);
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out 0, 1, ... first
    rebuild_slots();
  }

  // --- KvView ---
  TensorType dtype() const override { return shape_.dtype; }
  int64_t capacity(SeqId seq) const override {
    const Seq* s = find(seq);
    return s ? s->reserved : 0;
  }
  void write(int layer, SeqId seq, int32_t pos, const float* k, const float* v) override {
    const Seq* s = pool_ ? find(seq) : nullptr;
    // Full blocks are immutable: they may be shared or findable by others.
    // A sliding layer's block that fell out of the window is gone.
    if (!s || layer < 0 || layer >= shape_.n_layer || pos < s->n_frozen * bt_ ||
        pos >= s->reserved || block_of(*s, layer, pos) < 0) {
      writes_skipped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Q8_0: each block of 32 quantized as it is written (kv_row_quantizer).
    from_float_(k, const_cast<void*>(row(*s, layer, pos, 0)), shape_.row_elems);
    from_float_(v, const_cast<void*>(row(*s, layer, pos, 1)), shape_.row_elems);
  }
  bool stores_rows() const override { return pool_ != nullptr; }
  bool read_raw(int layer, SeqId seq, int32_t pos, void* k, void* v) const override {
    const Seq* s = pool_ ? find(seq) : nullptr;
    if (!s || layer < 0 || layer >= shape_.n_layer || pos < 0 || pos >= s->reserved ||
        (size_t)(pos >> shift_) >= s->n_blocks() || block_of(*s, layer, pos) < 0)
      return false;
    std::memcpy(k, row(*s, layer, pos, 0), row_bytes_);
    std::memcpy(v, row(*s, layer, pos, 1), row_bytes_);
    return true;
  }
  bool write_raw(int layer, SeqId seq, int32_t pos, const void* k, const void* v) override {
    const Seq* s = pool_ ? find(seq) : nullptr;
    if (!s || layer < 0 || layer >= shape_.n_layer || pos < 0 || pos < s->n_frozen * bt_ ||
        pos >= s->reserved || block_of(*s, layer, pos) < 0) {
      writes_skipped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    std::memcpy(const_cast<void*>(row(*s, layer, pos, 0)), k, row_bytes_);
    std::memcpy(const_cast<void*>(row(*s, layer, pos, 1)), v, row_bytes_);
    return true;
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
  int64_t kept_window(int layer) const override {
    return g_.window > 0 && layer >= 0 && layer < shape_.n_layer &&
                   g_.table_of[(size_t)layer] >= g_.global_tables
               ? g_.window
               : 0;
  }

  // --- scheduler side ---
  int32_t reuse_prefix(SeqId seq, std::span<const Token> prompt, uint32_t space) override {
    check_generation();
    if (const Seq* s = find(seq); s && (!s->tokens.empty() || s->n_blocks() != 0)) return 0;
    // A space's chain hangs from a root no block's serial can equal (serials
    // count up from 1), so a hit is verified to be of the same space.
    const uint64_t root_key = space, root_serial = space == 0 ? 0 : kSpaceRoot | space;
    if (space != 0) {
      Seq& s = seqs_[seq];
      s.generation = generation_;
      s.tables.assign((size_t)g_.tables, {});
      s.last_key = root_key;
      s.last_serial = root_serial;
      rebuild_slots();
    }
    const size_t n_prompt = std::min<size_t>(prompt.size(), std::numeric_limits<int32_t>::max());
    prefix_queries_ += n_prompt;
    if (!prefix_cache_ || n_prompt < 2) return 0;

    // Leads whose global companions are all still cached.
    std::vector<int32_t> matched;
    std::vector<uint64_t> keys;
    uint64_t prev_key = root_key, prev_serial = root_serial;
    for (size_t start = 0; start + (size_t)bt_ <= n_prompt; start += (size_t)bt_) {
      const std::span<const Token> ids = prompt.subspan(start, (size_t)bt_);
      const uint64_t k = hash_(prev_key, ids);
      const int32_t b = find_cached(k, prev_serial, ids);
      if (b < 0) break;
      bool whole = true;
      for (int32_t t = 1; t < g_.global_tables && whole; ++t)
        whole = find_companion(blocks_[(size_t)b].serial, t) >= 0;
      if (!whole) break;
      matched.push_back(b);
      keys.push_back(k);
      prev_key = k;
      prev_serial = blocks_[(size_t)b].serial;
    }
    // The sliding layers need their rows of the hit's last window positions:
    // shorten the hit until every one of those blocks is still cached.
    size_t n_hit = matched.size();
    for (; n_hit > 0 && g_.tables > g_.global_tables; --n_hit) {
      const int32_t reused = (int32_t)std::min<size_t>(n_hit * (size_t)bt_, n_prompt - 1);
      bool ok = true;
      for (size_t k = (size_t)window_start(reused); k < n_hit && ok; ++k)
        for (int32_t t = g_.global_tables; t < g_.tables && ok; ++t)
          ok = find_companion(blocks_[(size_t)matched[k]].serial, t) >= 0;
      if (ok) break;
    }
    if (n_hit == 0) return 0;
    matched.resize(n_hit);

    const int32_t reused = (int32_t)std::min<size_t>(n_hit * (size_t)bt_, n_prompt - 1);
    Seq& s = seqs_[seq];
    s.generation = generation_;
    s.tables.assign((size_t)g_.tables, {});
    s.trimmed = g_.tables > g_.global_tables ? window_start(reused) : 0;
    for (int32_t t = 0; t < g_.tables; ++t) {
      std::vector<int32_t>& table = s.tables[(size_t)t];
      table.assign(n_hit, -1);
      for (size_t k = t < g_.global_tables ? 0 : (size_t)s.trimmed; k < n_hit; ++k) {
        const int32_t b = t == 0 ? matched[k] : find_companion(blocks_[(size_t)matched[k]].serial, t);
        acquire(b);
        table[k] = b;
      }
    }
    s.tokens.assign(prompt.begin(), prompt.begin() + reused);
    s.reserved = reused;
    s.n_frozen = (int32_t)n_hit;
    s.last_key = keys[n_hit - 1];
    s.last_serial = blocks_[(size_t)matched[n_hit - 1]].serial;
    rebuild_slots();
    prefix_hits_ += (uint64_t)reused;
    return reused;
  }

  bool reserve(SeqId seq, int32_t n) override {
    if (n < 0) return false;
    Seq* s = find_mut(seq);
    const int64_t need = (s ? (int64_t)s->tokens.size() : 0) + n;
    if (need > std::numeric_limits<int32_t>::max()) return false;
    const int64_t have = s ? (int64_t)s->n_blocks() : 0;
    // Every table grows by the same blocks: a sliding one holds the new
    // positions until commit() drops what falls out of the window.
    const int64_t grow = std::max<int64_t>(0, tokens_to_blocks((int32_t)need) - have);
    if (grow * g_.tables > free_blocks()) return false;
    if (!s) {
      check_generation();
      s = &seqs_[seq];
      s->generation = generation_;
      s->tables.assign((size_t)g_.tables, {});
      rebuild_slots();
    }
    for (std::vector<int32_t>& table : s->tables) {
      for (int64_t i = 0; i < grow; ++i) {
        const int32_t b = take_block();
        assert(b >= 0);  // free_blocks() said there was room
        acquire(b);
        table.push_back(b);
      }
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
      const size_t blk = (size_t)s->tables[0][pos >> shift_];
      if (pos < (size_t)s->n_frozen * (size_t)bt_ && blocks_[blk].serial != 0)
        assert(block_ids_[blk * (size_t)bt_ + (pos & (size_t)(bt_ - 1))] == tokens[i]);
    }
#endif
    s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.begin() + (ptrdiff_t)n);
    while ((size_t)(s->n_frozen + 1) * (size_t)bt_ <= s->tokens.size()) freeze_next(*s);
    // Blocks wholly before the next token's window go back (frozen above first,
    // so the prefix cache may still find them until evicted).
    if (g_.tables > g_.global_tables) {
      const int32_t lo = window_start((int32_t)s->tokens.size());
      for (int32_t k = s->trimmed; k < lo; ++k)
        for (int32_t t = g_.global_tables; t < g_.tables; ++t) {
          int32_t& b = s->tables[(size_t)t][(size_t)k];
          if (b >= 0) drop(b);
          b = -1;
        }
      s->trimmed = std::max(s->trimmed, lo);
    }
  }

  void unreserve(SeqId seq) override {
    Seq* s = find_mut(seq);
    if (!s) return;
    const int32_t n = (int32_t)s->tokens.size();
    s->reserved = std::min(s->reserved, n);
    const size_t keep = (size_t)std::max(tokens_to_blocks(n), s->n_frozen);
    for (std::vector<int32_t>& table : s->tables)
      while (table.size() > keep) {
        if (table.back() >= 0) drop(table.back());
        table.pop_back();
      }
  }

  void release(SeqId seq) override {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    // Tail first: the LRU then evicts a chain's end before its beginning, so a
    // later prompt still finds the longest surviving prefix.
    for (const std::vector<int32_t>& table : it->second.tables)
      for (auto b = table.rbegin(); b != table.rend(); ++b)
        if (*b >= 0) drop(*b);
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

  // A chunk writes every layer's rows before any sliding block can go back.
  int32_t blocks_for(int32_t n_tokens) const override {
    const int64_t n = (int64_t)tokens_to_blocks(n_tokens) * g_.tables;
    return (int32_t)std::min<int64_t>(n, std::numeric_limits<int32_t>::max());
  }
  int32_t free_blocks() const override { return (int32_t)free_.size() + n_lru_; }
  int32_t block_tokens() const override { return bt_; }

  SeqLayout layout(SeqId seq) const override {
    const Seq* s = find(seq);
    if (!s || s->tables.empty()) return {};
    return {s->tables[0], s->n_frozen * bt_, s->reserved, s->generation};
  }

 private:
  struct Seq {
    // One block table per group of layers (g_.tables), all the same length;
    // a sliding table's entries below `trimmed` are -1 (gone).
    std::vector<std::vector<int32_t>> tables;
    int32_t trimmed = 0;
    std::vector<Token> tokens;    // committed
    int32_t reserved = 0;         // writable positions: [n_frozen * bt, reserved)
    int32_t n_frozen = 0;         // leading full blocks, never written again
    uint64_t last_key = 0;        // chain key of block n_frozen - 1 (0: none)
    uint64_t last_serial = 0;     // serial of the cached block holding that prefix (0: none)
    uint64_t generation = 0;      // of the storage when the sequence started
    size_t n_blocks() const { return tables.empty() ? 0 : tables[0].size(); }
  };
  struct Block {
    int32_t ref = 0;
    int32_t lru_prev = -1, lru_next = -1;
    uint64_t key = 0;
    uint64_t serial = 0;  // != 0 while findable by prefix
    uint64_t parent_serial = 0;
    int32_t table = 0;         // findable: 0, a lead (index_); else a companion of
    uint64_t lead_serial = 0;  // the lead with this serial (companions_)
  };
  struct Slot {
    SeqId id = 0;
    Seq* seq = nullptr;
  };

  int32_t block_of(const Seq& s, int layer, int32_t pos) const {
    return s.tables[(size_t)g_.table_of[(size_t)layer]][(size_t)(pos >> shift_)];
  }
  const void* row(const Seq& s, int layer, int32_t pos, int which) const {
    assert(pos >= 0 && (size_t)(pos >> shift_) < s.n_blocks());
    assert(layer >= 0 && layer < shape_.n_layer);
    const int32_t b = block_of(s, layer, pos);
    assert(b >= 0 && "a sliding layer's row that fell out of the window");
    const size_t slot = ((size_t)g_.slot_of[(size_t)layer] * 2 + (size_t)which) * (size_t)bt_ +
                        (size_t)(pos & (bt_ - 1));
    return pool_.get() + (size_t)b * block_bytes_ + slot * row_bytes_;
  }
  int32_t tokens_to_blocks(int32_t n_tokens) const {
    return n_tokens <= 0 ? 0 : (int32_t)(((int64_t)n_tokens + bt_ - 1) >> shift_);
  }
  // The first block a sliding table needs once `n` tokens are committed: the
  // next token (position n) sees positions n + 1 - window on.
  int32_t window_start(int32_t n) const {
    return (int32_t)(std::max<int64_t>(0, (int64_t)n + 1 - g_.window) >> shift_);
  }
  int32_t find_companion(uint64_t lead_serial, int32_t table) const {
    auto it = companions_.find({lead_serial, table});
    return it == companions_.end() ? -1 : it->second;
  }
  void add_companion(int32_t b, uint64_t lead_serial, int32_t table) {
    Block& blk = blocks_[(size_t)b];
    assert(blk.serial == 0);
    blk.serial = next_serial_++;
    blk.table = table;
    blk.lead_serial = lead_serial;
    companions_[{lead_serial, table}] = b;
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
  // The other tables' blocks of those tokens become its companions (a
  // duplicate's missing ones are filled from ours).
  void freeze_next(Seq& s) {
    const size_t k = (size_t)s.n_frozen;
    const int32_t b = s.tables[0][k];
    ++s.n_frozen;
    if (!prefix_cache_) return;
    const std::span<const Token> ids(s.tokens.data() + k * (size_t)bt_, (size_t)bt_);
    const uint64_t key = hash_(s.last_key, ids);
    s.last_key = key;
    if (const int32_t dup = find_cached(key, s.last_serial, ids); dup >= 0) {
      s.last_serial = blocks_[(size_t)dup].serial;  // our lead stays private and blank
      for (int32_t t = 1; t < g_.tables; ++t) {
        const int32_t c = s.tables[(size_t)t][k];
        if (c >= 0 && blocks_[(size_t)c].serial == 0 && find_companion(s.last_serial, t) < 0)
          add_companion(c, s.last_serial, t);
      }
      return;
    }
    Block& blk = blocks_[(size_t)b];
    assert(blk.serial == 0);
    blk.key = key;
    blk.parent_serial = s.last_serial;
    blk.serial = next_serial_++;
    blk.table = 0;
    std::copy(ids.begin(), ids.end(), block_ids_.begin() + (ptrdiff_t)((size_t)b * (size_t)bt_));
    index_.emplace(key, b);
    s.last_serial = blk.serial;
    for (int32_t t = 1; t < g_.tables; ++t)
      if (const int32_t c = s.tables[(size_t)t][k]; c >= 0 && blocks_[(size_t)c].serial == 0)
        add_companion(c, blk.serial, t);
  }

  // The storage behind the blocks was replaced: no block's content may be
  // found by prefix any more. Cached blocks with no holder become blank.
  void check_generation() {
    if (!generation_fn_) return;
    const uint64_t g = generation_fn_();
    if (g == generation_) return;
    generation_ = g;
    for (int32_t b = 0; b < (int32_t)blocks_.size(); ++b) {
      if (blocks_[(size_t)b].serial == 0) continue;  // (a lead's forget() may have freed it)
      if (blocks_[(size_t)b].ref == 0) {
        lru_remove(b);
        free_.push_back(b);
      }
      forget(b);
    }
  }

  // b stops being findable. A lead's companions can never be found again
  // either: the idle ones go back to the pool at once.
  void forget(int32_t b) {
    Block& blk = blocks_[(size_t)b];
    if (blk.serial == 0) return;
    const uint64_t serial = blk.serial;
    blk.serial = 0;
    if (blk.table != 0) {
      auto it = companions_.find({blk.lead_serial, blk.table});
      if (it != companions_.end() && it->second == b) companions_.erase(it);
      return;
    }
    auto [lo, hi] = index_.equal_range(blk.key);
    for (auto it = lo; it != hi; ++it)
      if (it->second == b) {
        index_.erase(it);
        break;
      }
    for (int32_t t = 1; t < g_.tables; ++t) {
      const int32_t c = find_companion(serial, t);
      if (c < 0) continue;
      forget(c);
      if (blocks_[(size_t)c].ref == 0) {
        lru_remove(c);
        free_.push_back(c);
      }
    }
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
  const Groups g_;
  const int32_t bt_;
  const int shift_;
  const bool prefix_cache_;
  const BlockHashFn hash_;
  const std::function<uint64_t()> generation_fn_;
  uint64_t generation_;
  const size_t block_bytes_;
  const size_t row_bytes_;
  // kv_row_quantizer(shape_.dtype) (F16: the type table's scalar bits,
  // vectorised where the CPU allows; Q8_0: the reference cache's rounding).
  void (*const from_float_)(const float*, void*, int64_t);
  std::unique_ptr<uint8_t[]> pool_;

  std::vector<Block> blocks_;
  std::vector<Token> block_ids_;  // bt token ids per block, meaningful while findable
  std::vector<int32_t> free_;     // blank blocks with ref 0
  int32_t lru_head_ = -1, lru_tail_ = -1, n_lru_ = 0;  // findable blocks with ref 0
  std::unordered_multimap<uint64_t, int32_t> index_;   // key -> findable leads
  std::map<std::pair<uint64_t, int32_t>, int32_t> companions_;  // (lead serial, table) -> block
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

int32_t PagedKvCache::tables(const KvShape& shape) {
  return shape.n_layer <= 0 ? 0 : groups_of(shape, false).tables;
}

int64_t PagedKvCache::block_bytes(const KvShape& shape, int32_t block_tokens) {
  const int64_t row = kv_row_bytes(shape.dtype, shape.row_elems);
  if (shape.n_layer <= 0 || row <= 0 || block_tokens <= 0) return 0;
  const int32_t layers = groups_of(shape, false).layers_per_block;
  // 2 (K and V) * layers * tokens * row bytes; each factor < 2^36.
  const unsigned __int128 bytes =
      (unsigned __int128)2 * (uint64_t)layers * (uint64_t)block_tokens * (uint64_t)row;
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
  if (shape.window < 0 || (!shape.sliding.empty() && (int32_t)shape.sliding.size() != shape.n_layer))
    return Status::error("KV sliding layers: window " + std::to_string(shape.window) + ", " +
                         std::to_string(shape.sliding.size()) + " flags for " +
                         std::to_string(shape.n_layer) + " layers");
  if (shape.dtype != TensorType::F16 && shape.dtype != TensorType::Q8_0)
    return Status::error("KV cache type " + std::string(type_info(shape.dtype).name) +
                         " is not supported by the paged cache (f16, q8_0)");
  if (Status st = check_kv_type(shape.dtype, shape.row_elems); !st.is_ok()) return st;
  // Rows kept elsewhere are laid out by their holder (layout()): one table.
  Groups groups = groups_of(shape, cfg.tables_only);
  const unsigned __int128 bytes128 = (unsigned __int128)2 * (uint64_t)groups.layers_per_block *
                                     (uint64_t)cfg.block_tokens *
                                     (uint64_t)kv_row_bytes(shape.dtype, shape.row_elems);
  if (bytes128 > (unsigned __int128)std::numeric_limits<int64_t>::max())
    return Status::error("KV block size overflows");
  const int64_t bb = (int64_t)bytes128;
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
      new Paged(shape, cfg, std::move(groups), (int32_t)n_blocks, bb, std::move(pool)));
}

}  // namespace cairn::kv
