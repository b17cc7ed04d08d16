// grammar/token_mask.cpp — the vocabulary trie, the state table and the mask walks.
#include "grammar/token_mask.h"

#include "grammar/text.h"

#include <algorithm>
#include <map>

namespace cairn::grammar {

// ---- StateTable

void StateTable::set_grammar(std::shared_ptr<const Grammar> g) {
  clear();
  grammar_ = std::move(g);
  class_starts_.assign(1, 0);
  for (const Rule& r : grammar_->rules())
    for (const auto& alt : r.alternatives)
      for (const Element& e : alt) {
        if (e.kind != Element::Kind::Chars) continue;
        for (size_t i = 0; i + 1 < e.ranges.size(); i += 2) {
          class_starts_.push_back(e.ranges[i]);
          if (e.ranges[i + 1] != UINT32_MAX) class_starts_.push_back(e.ranges[i + 1] + 1);
        }
      }
  std::sort(class_starts_.begin(), class_starts_.end());
  class_starts_.erase(std::unique(class_starts_.begin(), class_starts_.end()), class_starts_.end());
}

int32_t StateTable::add_whole(Matcher m, std::string key) {
  const int32_t id = (int32_t)states_.size();
  State st;
  st.whole = (int32_t)wholes_.size();
  st.can_end = m.can_end();
  // The key is held twice (map and matcher stacks, about as large).
  bytes_ += sizeof(State) + sizeof(Matcher) + 3 * key.size() + 96;
  states_.push_back(st);
  rows_.emplace_back();
  wholes_.push_back(std::move(m));
  whole_ids_.emplace(std::move(key), id);
  return id;
}

int32_t StateTable::partial_state(int32_t whole, int32_t pending, uint32_t partial) {
  const uint64_t key = (uint64_t)whole << 32 | (uint64_t)pending << 24 | partial;
  const auto it = partial_ids_.find(key);
  if (it != partial_ids_.end()) return it->second;
  if (bytes_ > 2 * max_bytes_) return kFull;
  const int32_t id = (int32_t)states_.size();
  states_.push_back(State{whole, pending, partial, false});
  rows_.emplace_back();
  partial_ids_.emplace(key, id);
  bytes_ += sizeof(State) + 48;
  return id;
}

int32_t StateTable::intern(const Matcher& m) {
  if (m.g_ != grammar_) set_grammar(m.g_);
  Matcher w = m;
  w.pending_ = 0;
  w.partial_ = 0;
  std::string key = w.state_key();
  const auto it = whole_ids_.find(key);
  const int32_t s = it != whole_ids_.end() ? it->second : add_whole(std::move(w), std::move(key));
  if (m.pending_ == 0) return s;
  const int32_t p = partial_state(states_[(size_t)s].whole, m.pending_, m.partial_);
  if (p != kFull) return p;
  // Over the bound already: room for this one state, cleared after the walk.
  const int32_t id = (int32_t)states_.size();
  states_.push_back(State{states_[(size_t)s].whole, m.pending_, m.partial_, false});
  rows_.emplace_back();
  return id;
}

const int32_t* StateTable::row(int32_t s) {
  auto& r = rows_[(size_t)s];
  if (!r) {
    r.reset(new int32_t[256]);
    std::fill(r.get(), r.get() + 256, kUnknown);
    bytes_ += 256 * sizeof(int32_t);
  }
  return r.get();
}

bool StateTable::takes_any(int32_t whole, uint32_t lo, uint32_t hi) {
  return wholes_[(size_t)whole].advance_code_point(lo, hi, false);  // only checks
}

int32_t StateTable::complete(int32_t whole, uint32_t cp) {
  const uint32_t cls =
      (uint32_t)(std::upper_bound(class_starts_.begin(), class_starts_.end(), cp) - class_starts_.begin());
  const uint64_t ckey = (uint64_t)whole << 32 | cls;
  const auto it = completions_.find(ckey);
  if (it != completions_.end()) return it->second;
  Matcher m = wholes_[(size_t)whole];
  int32_t t = kRefused;
  if (m.advance_code_point(cp, cp, true)) {
    std::string key = m.state_key();
    const auto found = whole_ids_.find(key);
    if (found != whole_ids_.end()) {
      t = found->second;
    } else {
      if (bytes_ > 2 * max_bytes_) return kFull;
      t = add_whole(std::move(m), std::move(key));
    }
  }
  completions_.emplace(ckey, t);
  bytes_ += 48;
  return t;
}

int32_t StateTable::compute(int32_t s, uint8_t b) {
  // Matcher::accept_byte step by step, over interned states.
  row(s);
  const State st = states_[(size_t)s];
  int32_t t = kRefused;
  if (st.pending == 0) {
    if (b < 0x80) {
      t = complete(st.whole, b);
    } else {
      uint32_t lo, hi;
      if (utf8_lead_range(b, lo, hi) && takes_any(st.whole, lo, hi)) {
        const int len = utf8_length(b);
        t = partial_state(st.whole, len - 1, b & (0x7F >> len));
      }
    }
  } else if (utf8_continuation_ok(st.pending, st.partial, b)) {
    const uint32_t bits = (st.partial << 6) | (b & 0x3F);
    const int rest = st.pending - 1;
    if (rest > 0) {
      const uint32_t lo = bits << (6 * rest), hi = lo | ((1u << (6 * rest)) - 1);
      if (takes_any(st.whole, lo, std::min(hi, 0x10FFFFu))) t = partial_state(st.whole, rest, bits);
    } else {
      t = complete(st.whole, bits);
    }
  }
  if (t == kFull) return t;  // not remembered
  rows_[(size_t)s][b] = t;
  return t;
}

void StateTable::clear() {
  states_.clear();
  rows_.clear();
  wholes_.clear();
  whole_ids_.clear();
  partial_ids_.clear();
  completions_.clear();
  bytes_ = 0;
}

// ---- TokenTrie

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
  // Depth-first layout, iteratively (a piece may be long).
  nodes_.reserve(b.size() + 1);
  struct Open {
    uint32_t src, placed;
    std::map<uint8_t, uint32_t>::const_iterator next;
  };
  std::vector<Open> path;
  const auto place = [&](uint32_t src, uint8_t byte) {
    Node n;
    n.token = (uint32_t)tokens_.size();
    n.depth = (uint32_t)path.size();
    n.byte = byte;
    tokens_.insert(tokens_.end(), b[src].tokens.begin(), b[src].tokens.end());
    nodes_.push_back(n);
    path.push_back(Open{src, (uint32_t)nodes_.size() - 1, b[src].children.begin()});
  };
  place(0, 0);
  while (!path.empty()) {
    Open& o = path.back();
    if (o.next == b[o.src].children.end()) {
      nodes_[o.placed].end = (uint32_t)nodes_.size();
      path.pop_back();
      continue;
    }
    const auto [byte, child] = *o.next;
    ++o.next;
    place(child, byte);
  }
  Node sentinel;
  sentinel.token = (uint32_t)tokens_.size();
  nodes_.push_back(sentinel);
}

bool TokenTrie::walk_table(int32_t start, StateTable& table, std::vector<uint8_t>& allowed,
                           int32_t& count) const {
  // Front to back over the depth-first nodes: the state a node's byte is
  // read from is its parent's, kept per depth; a refused byte skips the
  // subtree.
  const size_t n = nodes_.size() - 1;
  std::vector<int32_t> state(1, start);
  std::vector<const int32_t*> rows(1, table.row(start));
  uint8_t* out = allowed.data();
  const Node* nodes = nodes_.data();
  for (size_t i = 1; i < n;) {
    const Node& node = nodes[i];
    const uint32_t d = node.depth;
    int32_t t = rows[d - 1][node.byte];
    if (t == StateTable::kUnknown) t = table.next(state[d - 1], node.byte);
    if (t < 0) {
      if (t == StateTable::kFull) return false;
      i = node.end;
      continue;
    }
    for (uint32_t k = node.token; k < nodes[i + 1].token; ++k) {
      out[tokens_[k]] = 1;
      ++count;
    }
    if (node.end != i + 1) {  // has children: they read from t
      if (state.size() <= d) {
        state.resize(d + 1);
        rows.resize(d + 1);
      }
      state[d] = t;
      rows[d] = table.row(t);
    }
    ++i;
  }
  return true;
}

void TokenTrie::walk_copying(uint32_t node, const Matcher& m, std::vector<uint8_t>& allowed,
                             int32_t& count) const {
  for (uint32_t c = node + 1; c < nodes_[node].end; c = nodes_[c].end) {
    Matcher next = m;
    if (!next.accept_byte(nodes_[c].byte)) continue;
    for (uint32_t k = nodes_[c].token; k < nodes_[c + 1].token; ++k) {
      allowed[(size_t)tokens_[k]] = 1;
      ++count;
    }
    walk_copying(c, next, allowed, count);
  }
}

int32_t TokenTrie::add_end_tokens(bool can_end, std::vector<uint8_t>& allowed) const {
  int32_t count = 0;
  if (can_end)
    for (int32_t id : end_tokens_)
      if (id >= 0 && id < n_vocab_ && !allowed[(size_t)id]) {
        allowed[(size_t)id] = 1;
        ++count;
      }
  return count;
}

int32_t TokenTrie::fill_mask_by_copying(const Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign((size_t)n_vocab_, 0);
  int32_t count = 0;
  walk_copying(0, m, allowed, count);
  return count + add_end_tokens(m.can_end(), allowed);
}

int32_t TokenTrie::fill_mask(const Matcher& m, std::vector<uint8_t>& allowed,
                             StateTable& table) const {
  // Cleared between walks, so one walk has the whole bound (twice, see
  // StateTable::next) before it gives up.
  if (table.over_budget()) table.clear();
  allowed.assign((size_t)n_vocab_, 0);
  int32_t count = 0;
  if (!walk_table(table.intern(m), table, allowed, count)) {
    table.clear();
    return fill_mask_by_copying(m, allowed);
  }
  return count + add_end_tokens(m.can_end(), allowed);
}

int32_t TokenTrie::fill_mask(const Matcher& m, std::vector<uint8_t>& allowed) const {
  StateTable table;
  return fill_mask(m, allowed, table);
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
  const int32_t count = fill_mask(m, allowed, cache.table());
  cache.put(std::move(key), allowed);
  return count;
}

// ---- MaskCache

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
