// Prompt lookup: which draft tokens it proposes, and when none.
#include "engine/draft.h"

#include <gtest/gtest.h>

#include <vector>

namespace cairn::engine {
namespace {

std::vector<Token> propose(PromptLookup& p, const std::vector<Token>& toks, int32_t max) {
  std::vector<Token> out = {99};  // cleared by propose
  p.propose(1, toks, max, out);
  return out;
}

TEST(PromptLookup, ProposesWhatFollowedTheLastNgram) {
  PromptLookup p;
  // "... 1 2 3 4 5 ... 1 2" -> 3 4 5
  EXPECT_EQ(propose(p, {7, 1, 2, 3, 4, 5, 8, 1, 2}, 3), (std::vector<Token>{3, 4, 5}));
  // Up to `max`, and never past the end of the tokens.
  EXPECT_EQ(propose(p, {7, 1, 2, 3, 4, 5, 8, 1, 2}, 2), (std::vector<Token>{3, 4}));
  EXPECT_EQ(propose(p, {1, 2, 3, 1, 2}, 8), (std::vector<Token>{3, 1, 2}));
}

TEST(PromptLookup, LongestNgramFirstThenMostRecent) {
  PromptLookup p;
  // Bigram "2 3" occurs twice (followed by 9, then by 6); the trigram
  // "1 2 3" only before 9: the trigram wins.
  EXPECT_EQ(propose(p, {1, 2, 3, 9, 5, 2, 3, 6, 1, 2, 3}, 1), (std::vector<Token>{9}));
  // Without a trigram match, the most recent bigram's continuation.
  EXPECT_EQ(propose(p, {4, 2, 3, 9, 5, 2, 3, 6, 1, 2, 3}, 1), (std::vector<Token>{6}));
}

TEST(PromptLookup, NothingWithoutAMatch) {
  PromptLookup p;
  EXPECT_TRUE(propose(p, {1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(propose(p, {1, 2, 1, 2}, 0).empty());  // max 0
  EXPECT_TRUE(propose(p, {}, 4).empty());
  EXPECT_TRUE(propose(p, {5}, 4).empty());
  // A single repeated token is below min_ngram 2 ...
  EXPECT_TRUE(propose(p, {3, 8, 4, 3}, 4).empty());
  // ... unless configured so.
  PromptLookup unigram({3, 1, 4096});
  EXPECT_EQ(propose(unigram, {3, 8, 4, 3}, 2), (std::vector<Token>{8, 4}));
}

TEST(PromptLookup, SearchesOnlyTheWindow) {
  PromptLookup near({3, 2, 6});
  // The match "1 2" at the start lies outside the last 6 tokens.
  EXPECT_TRUE(propose(near, {1, 2, 3, 5, 6, 7, 8, 9, 1, 2}, 2).empty());
  PromptLookup far({3, 2, 64});
  EXPECT_EQ(propose(far, {1, 2, 3, 5, 6, 7, 8, 9, 1, 2}, 2), (std::vector<Token>{3, 5}));
}

}  // namespace
}  // namespace cairn::engine
