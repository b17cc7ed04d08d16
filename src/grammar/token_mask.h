// grammar/token_mask.h — which tokens a grammar allows next.
// Owns a trie of the vocabulary's byte strings (built once per tokenizer)
// and the walk that tries every token against a Matcher at once: a shared
// prefix is matched once, and a subtree is dropped as soon as its prefix is
// refused. End-of-generation tokens are allowed only where the grammar may
// end. Never samples; the caller applies the mask to the logits.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace cairn::grammar {

// Masks already computed for one grammar, by recognizer state: a state
// comes back again and again (inside a string every character returns to
// it), so most steps copy a mask instead of walking the trie. Bounded: past
// `max_bytes`, the least recently used masks go. Not thread-safe.
class MaskCache {
 public:
  explicit MaskCache(size_t max_bytes = size_t{64} << 20) : max_bytes_(max_bytes) {}
  const std::vector<uint8_t>* find(const std::string& key);
  void put(std::string key, const std::vector<uint8_t>& mask);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<uint8_t> mask;
    uint64_t last_use = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  size_t bytes_ = 0, max_bytes_;
  uint64_t clock_ = 0;
};

class TokenTrie {
 public:
  // pieces[id]: the bytes token id stands for (empty: never allowed, e.g.
  // control tokens); end_tokens: the ids that end generation.
  TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> end_tokens);

  int32_t n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }

  // allowed[id] = 1 when the grammar accepts token id after what `m` has
  // seen, else 0 (resized to n_vocab). Returns how many are allowed.
  int32_t fill_mask(const Matcher& m, std::vector<uint8_t>& allowed) const;
  // The same through `cache` (masks of states seen before are copied).
  int32_t fill_mask(const Matcher& m, std::vector<uint8_t>& allowed, MaskCache& cache) const;

 private:
  struct Node {
    uint32_t first_child = 0, n_children = 0;  // into nodes_, children sorted by byte
    uint8_t byte = 0;
    std::vector<int32_t> tokens;  // the tokens whose bytes end here
  };
  void walk(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed, int32_t& count) const;

  std::vector<Node> nodes_;
  int32_t n_vocab_ = 0;
  std::vector<int32_t> end_tokens_;
};

}  // namespace cairn::grammar
