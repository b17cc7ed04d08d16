// grammar/token_mask.cpp — the vocabulary trie and the mask walk.
#include "grammar/token_mask.h"

#include <algorithm>
#include <map>

namespace cairn::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, std::vector<int32_t> end_tokens)
    : n_vocab_((int32_t)pieces.size()), end_tokens_(std::move(end_tokens)) {
  // Built as a pointer trie first, then laid out breadth-first so each
  // node's children sit together, sorted by byte.
  struct Build {
    std::map<uint8_t, uint32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Build> b(1);
  for (int32_t id = 0; id < n_vocab_; ++id) {
    const std::string& p = pieces[(size_t)id];
    if (p.empty()) continue;
    uint32_t n = 0;
    for (char c : p) {
      const auto it = b[n].children.find((uint8_t)c);
      if (it != b[n].children.end()) {
        n = it->second;
      } else {
        b.push_back({});
        b[n].children.emplace((uint8_t)c, (uint32_t)b.size() - 1);
        n = (uint32_t)b.size() - 1;
      }
    }
    b[n].tokens.push_back(id);
  }
  nodes_.resize(b.size());
  std::vector<uint32_t> order = {0}, place(b.size(), 0);
  nodes_[0].tokens = b[0].tokens;
  uint32_t next = 1;
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t src = order[k];
    Node& dst = nodes_[place[src]];
    dst.first_child = next;
    dst.n_children = (uint32_t)b[src].children.size();
    for (const auto& [byte, child] : b[src].children) {
      place[child] = next;
      nodes_[next].byte = byte;
      nodes_[next].tokens = std::move(b[child].tokens);
      ++next;
      order.push_back(child);
    }
  }
}

void TokenTrie::walk(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed,
                     int32_t& count) const {
  const Node& n = nodes_[node];
  for (uint32_t c = 0; c < n.n_children; ++c) {
    const Node& child = nodes_[n.first_child + c];
    Matcher next = m;
    if (!next.accept_byte(child.byte)) continue;
    for (int32_t id : child.tokens) {
      allowed[(size_t)id] = 1;
      ++count;
    }
    walk(n.first_child + c, next, allowed, count);
  }
}

int32_t TokenTrie::fill_mask(const Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign((size_t)n_vocab_, 0);
  int32_t count = 0;
  walk(0, m, allowed, count);
  if (m.can_end())
    for (int32_t id : end_tokens_)
      if (id >= 0 && id < n_vocab_ && !allowed[(size_t)id]) {
        allowed[(size_t)id] = 1;
        ++count;
      }
  return count;
}

int32_t TokenTrie::fill_mask(const Matcher& m, std::vector<uint8_t>& allowed,
                             MaskCache& cache) const {
  std::string key = m.state_key();
  if (const std::vector<uint8_t>* hit = cache.find(key)) {
    allowed = *hit;
    int32_t count = 0;
    for (uint8_t a : allowed) count += a;
    return count;
  }
  const int32_t count = fill_mask(m, allowed);
  cache.put(std::move(key), allowed);
  return count;
}

const std::vector<uint8_t>* MaskCache::find(const std::string& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.last_use = ++clock_;
  return &it->second.mask;
}

void MaskCache::put(std::string key, const std::vector<uint8_t>& mask) {
  const size_t cost = mask.size() + key.size();
  if (cost > max_bytes_) return;
  while (bytes_ + cost > max_bytes_ && !entries_.empty()) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    bytes_ -= oldest->second.mask.size() + oldest->first.size();
    entries_.erase(oldest);
  }
  bytes_ += cost;
  entries_[std::move(key)] = Entry{mask, ++clock_};
}

}  // namespace cairn::grammar
