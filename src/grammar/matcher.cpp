// grammar/matcher.cpp — advancing the parse stacks byte by byte.
#include "grammar/matcher.h"

#include "grammar/text.h"

#include <algorithm>

namespace cairn::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  const Rule& root = g_->rules()[g_->root()];
  std::vector<Stack> out;
  for (uint32_t a = 0; a < root.alternatives.size(); ++a) expand(Stack{Pos{g_->root(), a, 0}}, out);
  normalize(out);
  stacks_ = std::move(out);
}

const Element& Matcher::at(const Pos& p) const {
  return g_->rules()[p.rule].alternatives[p.alt][p.index];
}

void Matcher::expand(Stack s, std::vector<Stack>& out) const {
  // A work list, not recursion: a chain of rules may be as deep as a grammar
  // is long.
  std::vector<Stack> work;
  work.push_back(std::move(s));
  while (!work.empty()) {
    Stack cur = std::move(work.back());
    work.pop_back();
    for (;;) {
      if (cur.empty()) {  // the root is complete: the input may end here
        out.push_back(std::move(cur));
        break;
      }
      const Pos top = cur.back();
      const Element& e = at(top);
      if (e.kind == Element::Kind::Chars) {
        out.push_back(std::move(cur));
        break;
      }
      if (e.kind == Element::Kind::End) {
        cur.pop_back();  // the rule is done: back to what follows it
        continue;
      }
      // Continue after the reference once the rule is matched; a
      // continuation at an End is popped now, so right recursion (x ::= a
      // x) keeps the stack from growing.
      cur.back().index += 1;
      if (at(cur.back()).kind == Element::Kind::End) cur.pop_back();
      const Rule& r = g_->rules()[e.rule];
      for (uint32_t a = 0; a + 1 < r.alternatives.size(); ++a) {
        Stack alt = cur;
        alt.push_back(Pos{e.rule, a, 0});
        work.push_back(std::move(alt));
      }
      cur.push_back(Pos{e.rule, (uint32_t)r.alternatives.size() - 1, 0});
    }
    if (out.size() > kMaxStacks) break;
  }
}

void Matcher::normalize(std::vector<Stack>& stacks) const {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

bool Matcher::advance_code_point(uint32_t lo, uint32_t hi, bool complete) {
  if (!complete) {  // only check that some stack can still take it
    for (const Stack& s : stacks_)
      if (!s.empty() && at(s.back()).matches_any(lo, hi)) return true;
    return false;
  }
  std::vector<Stack> next;
  for (const Stack& s : stacks_) {
    if (s.empty() || !at(s.back()).matches(lo)) continue;
    Stack t = s;
    t.back().index += 1;
    expand(std::move(t), next);
  }
  if (next.empty()) return false;
  normalize(next);
  if (next.size() > kMaxStacks) next.resize(kMaxStacks);
  stacks_ = std::move(next);
  return true;
}

bool Matcher::accept_byte(uint8_t b) {
  if (pending_ == 0) {
    if (b < 0x80) return advance_code_point(b, b, true);
    uint32_t lo, hi;
    if (!utf8_lead_range(b, lo, hi)) return false;  // not a UTF-8 lead byte
    if (!advance_code_point(lo, hi, false)) return false;
    const int len = utf8_length(b);
    pending_ = len - 1;
    partial_ = b & (0x7F >> len);
    return true;
  }
  if (!utf8_continuation_ok(pending_, partial_, b)) return false;
  const uint32_t bits = (partial_ << 6) | (b & 0x3F);
  const int rest = pending_ - 1;
  if (rest > 0) {
    const uint32_t lo = bits << (6 * rest), hi = lo | ((1u << (6 * rest)) - 1);
    if (!advance_code_point(lo, std::min(hi, 0x10FFFFu), false)) return false;
    partial_ = bits;
    pending_ = rest;
    return true;
  }
  if (!advance_code_point(bits, bits, true)) return false;
  pending_ = 0;
  partial_ = 0;
  return true;
}

bool Matcher::accept(std::string_view s) {
  for (char c : s)
    if (!accept_byte((uint8_t)c)) return false;
  return true;
}

std::string Matcher::state_key() const {
  std::string key;
  const auto put = [&key](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put((uint32_t)pending_);
  put(partial_);
  for (const Stack& s : stacks_) {
    put((uint32_t)s.size());
    for (const Pos& p : s) {
      put(p.rule);
      put(p.alt);
      put(p.index);
    }
  }
  return key;
}

bool Matcher::can_end() const {
  if (pending_ != 0) return false;
  for (const Stack& s : stacks_)
    if (s.empty()) return true;
  return false;
}

bool Matcher::can_continue() const {
  for (const Stack& s : stacks_)
    if (!s.empty()) return true;
  return false;
}

}  // namespace cairn::grammar
