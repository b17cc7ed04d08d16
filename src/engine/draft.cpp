// engine/draft.cpp — prompt lookup: the n-gram search that proposes draft tokens.
#include "engine/draft.h"

#include <algorithm>

namespace cairn::engine {

void PromptLookup::propose(uint64_t /*seq*/, std::span<const Token> tokens, int32_t max,
                           std::vector<Token>& out) {
  out.clear();
  const int64_t T = (int64_t)tokens.size();
  if (max <= 0) return;
  const int64_t lo = std::max<int64_t>(0, T - std::max(cfg_.window, 1));
  for (int32_t n = cfg_.max_ngram; n >= std::max(cfg_.min_ngram, 1); --n) {
    if (T < n + 1) continue;
    const Token* suffix = tokens.data() + (T - n);
    // Most recent occurrence first: nearby text predicts best. An occurrence
    // may overlap the suffix (a repeating run proposes its own period).
    for (int64_t i = T - n - 1; i >= lo; --i) {
      if (tokens[(size_t)i] != suffix[0] ||
          !std::equal(suffix, suffix + n, tokens.begin() + (ptrdiff_t)i))
        continue;
      const int64_t from = i + n, to = std::min<int64_t>(from + max, T);
      out.assign(tokens.begin() + (ptrdiff_t)from, tokens.begin() + (ptrdiff_t)to);
      return;
    }
  }
}

}  // namespace cairn::engine
