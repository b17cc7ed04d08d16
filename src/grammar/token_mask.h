// grammar/token_mask.h — which tokens a grammar allows next.
// Owns a trie of the vocabulary's byte strings (built once per tokenizer)
// and the walk that tries every token against a Matcher at once: a shared
// prefix is matched once, and a subtree is dropped as soon as its prefix is
// refused. The walk steps through a StateTable (recognizer states interned,
// their byte transitions remembered), so a byte is matched by a table load
// instead of a copy of the parse stacks. End-of-generation tokens are allowed
// only where the grammar may end. Never samples; the caller applies the mask
// to the logits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace cairn::grammar {

// The recognizer as a lazily built automaton: every state met is interned
// and its transition on a byte computed once, then looked up. A state with
// no code point half-read keeps its Matcher (interned by state_key()); one
// in the middle of a UTF-8 sequence is that state plus the bits read so far,
// with no copy of the stacks. Completing a code point depends on the code
// point only through which character sets match it, so that transition is
// computed once per class of code points the grammar's sets never tell
// apart. Exact (the transitions are the Matcher's own), and bounded: past
// `max_bytes` it is cleared between walks. Not thread-safe.
class StateTable {
 public:
  static constexpr int32_t kRefused = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kFull = -3;

  explicit StateTable(size_t max_bytes = size_t{32} << 20) : max_bytes_(max_bytes) {}
  // The id of the state `m` is in (interned now if new).
  int32_t intern(const Matcher& m);
  // The state after byte `b` from state `s`, or kRefused; kFull when a new
  // state would pass twice the byte bound (the caller falls back).
  int32_t next(int32_t s, uint8_t b) {
    const int32_t* r = rows_[(size_t)s].get();
    if (r && r[b] != kUnknown) return r[b];
    return compute(s, b);
  }
  // The transition row of `s` (kUnknown where not computed yet).
  const int32_t* row(int32_t s);
  bool can_end(int32_t s) const { return states_[(size_t)s].can_end; }
  size_t size() const { return states_.size(); }
  size_t bytes() const { return bytes_; }
  bool over_budget() const { return bytes_ > max_bytes_; }
  void clear();

 private:
  struct State {
    int32_t whole = 0;     // index into wholes_: the parse stacks
    int32_t pending = 0;   // UTF-8 bytes still to come (0: a whole state)
    uint32_t partial = 0;  // the bits read so far
    bool can_end = false;
  };
  int32_t compute(int32_t s, uint8_t b);
  int32_t add_whole(Matcher m, std::string key);
  int32_t partial_state(int32_t whole, int32_t pending, uint32_t partial);
  int32_t complete(int32_t whole, uint32_t cp);
  bool takes_any(int32_t whole, uint32_t lo, uint32_t hi);
  void set_grammar(std::shared_ptr<const Grammar> g);

  std::vector<State> states_;
  std::vector<std::unique_ptr<int32_t[]>> rows_;  // 256 per state, made at first use
  std::vector<Matcher> wholes_;                     // pending_ == 0
  std::unordered_map<std::string, int32_t> whole_ids_;      // state_key() -> state id
  std::unordered_map<uint64_t, int32_t> partial_ids_;       // (whole, pending, partial) -> state id
  std::unordered_map<uint64_t, int32_t> completions_;       // (whole, class) -> state id or kRefused
  // Code points where some character set of the grammar starts or stops
  // matching, ascending: a class is the run from one to the next.
  std::vector<uint32_t> class_starts_;
  std::shared_ptr<const Grammar> grammar_;  // held: the classes are its
  size_t bytes_ = 0, max_bytes_;
};

// Masks already computed for one grammar, by recognizer state: a state
// comes back again and again (inside a string every character returns to
// it), so most steps copy a mask instead of walking the trie. Bounded: past
// `max_bytes`, the least recently used masks go. Also holds the grammar's
// StateTable (bounded by half that, so a walk's peak stays within it), so a
// state never seen before still walks over transitions learnt by earlier
// walks. Not thread-safe.
class MaskCache {
 public:
  explicit MaskCache(size_t max_bytes = size_t{64} << 20)
      : max_bytes_(max_bytes), table_(max_bytes / 2) {}
  const std::vector<uint8_t>* find(const std::string& key);
  void put(std::string key, const std::vector<uint8_t>& mask);
  size_t size() const { return entries_.size(); }
  StateTable& table() { return table_; }

 private:
  struct Entry {
    std::vector<uint8_t> mask;
    uint64_t last_use = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  size_t bytes_ = 0, max_bytes_;
  uint64_t clock_ = 0;
  StateTable table_;
};

class TokenTrie {
 public:
  // pieces[id]: the bytes token id stands for (empty: never allowed, e.g.
  // control tokens); end_tokens: the ids that end generation.
  TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> end_tokens);

  int32_t n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  size_t n_nodes() const { return nodes_.size() - 1; }

  // allowed[id] = 1 when the grammar accepts token id after what `m` has
  // seen, else 0 (resized to n_vocab). Returns how many are allowed. Walks
  // with a fresh StateTable (every transition computed anew).
  int32_t fill_mask(const Matcher& m, std::vector<uint8_t>& allowed) const;
  // The same over `table` (transitions learnt before are looked up).
  int32_t fill_mask(const Matcher& m, std::vector<uint8_t>& allowed, StateTable& table) const;
  // The same through `cache` (masks of states seen before are copied).
  int32_t fill_mask(const Matcher& m, std::vector<uint8_t>& allowed, MaskCache& cache) const;
  // The walk that copies the Matcher at every trie node: the slow original,
  // kept as the fallback when a table fills up and as the tests' reference.
  int32_t fill_mask_by_copying(const Matcher& m, std::vector<uint8_t>& allowed) const;

 private:
  // false when the table filled up mid-walk (allowed is then incomplete).
  bool walk_table(int32_t start, StateTable& table, std::vector<uint8_t>& allowed,
                  int32_t& count) const;
  void walk_copying(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed,
                    int32_t& count) const;
  int32_t add_end_tokens(bool can_end, std::vector<uint8_t>& allowed) const;

  // Nodes in depth-first order (node 0 the root, a node's subtree the
  // nodes after it up to `end`, siblings sorted by byte), so a walk reads
  // them front to back and a refused byte skips its subtree with one jump.
  struct Node {
    uint32_t end = 0;    // one past the last node of the subtree
    uint32_t token = 0;  // this node's tokens: tokens_[token, next node's token)
    uint32_t depth = 0;  // bytes from the root
    uint8_t byte = 0;
  };
  std::vector<Node> nodes_;  // plus a sentinel at the end holding tokens_.size()
  std::vector<int32_t> tokens_;
  int32_t n_vocab_ = 0;
  std::vector<int32_t> end_tokens_;
};

}  // namespace cairn::grammar
