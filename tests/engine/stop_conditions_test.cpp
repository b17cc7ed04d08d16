// StopChecker: end-of-generation, token limits, full context, stop strings
// split across tokens (never sent, nor any prefix of one) and UTF-8 hold-back.
#include "engine/stop_conditions.h"

#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using test_support::demo;

struct Fed {
  std::vector<std::string> sent;  // text of each push, then of the end
  std::string text;
  std::optional<EndReason> end;
  size_t pushed = 0;
};

// Feeds `tokens` (a continuation after a 1-token prompt) until the checker ends.
Fed feed(const std::vector<Token>& tokens, StopConfig cfg) {
  const Tokenizer& tok = *demo().tokenizer;
  StopChecker sc(tok, std::move(cfg));
  Fed r;
  for (Token t : tokens) {
    StopStep st = sc.push(t, static_cast<int32_t>(1 + ++r.pushed));
    r.sent.push_back(st.text);
    r.text += st.text;
    if (st.end) {
      r.end = st.end;
      return r;
    }
  }
  const std::string rest = sc.finish();
  r.sent.push_back(rest);
  r.text += rest;
  return r;
}

std::vector<Token> words(const std::string& text) {
  return demo().tokenizer->encode(text, /*add_special=*/false);
}

TEST(StopConditions, ReasonNames) {
  EXPECT_STREQ(end_reason_name(EndReason::Stop), "stop");
  EXPECT_STREQ(end_reason_name(EndReason::Length), "length");
  EXPECT_STREQ(end_reason_name(EndReason::Cancelled), "cancelled");
}

TEST(StopConditions, PlainTextPassesThroughAndMaxTokensEndsWithLength) {
  const auto ids = words("the little dog ran home");
  ASSERT_GE(ids.size(), 5u);
  Fed all = feed(ids, {-1, 0, false, {}});
  EXPECT_FALSE(all.end);
  EXPECT_EQ(all.text, " the little dog ran home");  // a continuation keeps its leading space

  Fed limited = feed(ids, {3, 0, false, {}});
  ASSERT_TRUE(limited.end);
  EXPECT_EQ(*limited.end, EndReason::Length);
  EXPECT_EQ(limited.pushed, 3u);
  EXPECT_EQ(limited.text, demo().tokenizer->token_to_piece(ids[0]) +
                              demo().tokenizer->token_to_piece(ids[1]) +
                              demo().tokenizer->token_to_piece(ids[2]));
}

TEST(StopConditions, ContextFullEndsWithLength) {
  const auto ids = words("the little dog ran home");
  // One prompt token + 2 generated fill a context of 3.
  Fed r = feed(ids, {-1, 3, false, {}});
  ASSERT_TRUE(r.end);
  EXPECT_EQ(*r.end, EndReason::Length);
  EXPECT_EQ(r.pushed, 2u);
}

TEST(StopConditions, EndOfGenerationStopsUnlessIgnored) {
  const Tokenizer& tok = *demo().tokenizer;
  ASSERT_GE(tok.eos(), 0);
  auto ids = words("the dog");
  ids.push_back(tok.eos());
  for (Token t : words("ran")) ids.push_back(t);
  Fed r = feed(ids, {-1, 0, false, {}});
  ASSERT_TRUE(r.end);
  EXPECT_EQ(*r.end, EndReason::Stop);
  EXPECT_EQ(r.pushed, 3u);
  EXPECT_EQ(r.text, " the dog");

  Fed ignored = feed(ids, {-1, 0, true, {}});
  EXPECT_FALSE(ignored.end);
  EXPECT_EQ(ignored.pushed, ids.size());
  EXPECT_EQ(ignored.text.find("</s>"), std::string::npos);  // control text never rendered
  EXPECT_NE(ignored.text.find("ran"), std::string::npos);
}

TEST(StopConditions, StopStringSplitAcrossTokensIsNeverSent) {
  const auto ids = words("the little dog ran home");
  // "tle do" spans " little" and " dog".
  Fed r = feed(ids, {-1, 0, false, {"tle do"}});
  ASSERT_TRUE(r.end);
  EXPECT_EQ(*r.end, EndReason::Stop);
  EXPECT_EQ(r.text, " the lit");
  for (const auto& s : r.sent) EXPECT_EQ(s.find("tle"), std::string::npos) << s;
}

TEST(StopConditions, PartialPrefixIsHeldBackThenReleased) {
  const auto ids = words("the dog ran home");
  // " dog" could start " dogs": held back until " ran" shows it is not one.
  Fed r = feed(ids, {-1, 0, false, {" dogs"}});
  EXPECT_FALSE(r.end);
  EXPECT_EQ(r.text, " the dog ran home");
  ASSERT_GE(r.sent.size(), 3u);
  EXPECT_EQ(r.sent[0], " the");
  EXPECT_EQ(r.sent[1], "");                                  // " dog" held
  EXPECT_EQ(r.sent[2].rfind(" dog r", 0), 0u) << r.sent[2];  // released with the next word
}

TEST(StopConditions, HeldTextIsReleasedAtTheLimitAndAtEndOfGeneration) {
  const Tokenizer& tok = *demo().tokenizer;
  const auto ids = words("the dog");
  Fed at_limit = feed(ids, {2, 0, false, {" dogs"}});
  ASSERT_TRUE(at_limit.end);
  EXPECT_EQ(*at_limit.end, EndReason::Length);
  EXPECT_EQ(at_limit.sent.back(), " dog");  // the held part comes with the end
  EXPECT_EQ(at_limit.text, " the dog");

  auto with_eos = ids;
  with_eos.push_back(tok.eos());
  Fed at_eos = feed(with_eos, {-1, 0, false, {" dogs"}});
  ASSERT_TRUE(at_eos.end);
  EXPECT_EQ(*at_eos.end, EndReason::Stop);
  EXPECT_EQ(at_eos.text, " the dog");
}

TEST(StopConditions, EarliestOfSeveralStopStringsWins) {
  const auto ids = words("the little dog ran home");
  Fed r = feed(ids, {-1, 0, false, {"ran", "little", ""}});
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.text, " the ");
}

TEST(StopConditions, MultiByteCharactersAreHeldUntilComplete) {
  const Tokenizer& tok = *demo().tokenizer;
  const std::string text = "caf\xC3\xA9 \xE2\x9C\x93 ok";  // é and ✓ become byte tokens
  const auto ids = words(text);
  ASSERT_GT(ids.size(), 6u);
  Fed r = feed(ids, {-1, 0, false, {}});
  EXPECT_EQ(r.text, " " + text);
  for (const auto& s : r.sent) {
    // Every piece sent is whole UTF-8: no piece ends inside a character.
    int need = 0;
    for (unsigned char c : s) {
      if (need > 0) {
        EXPECT_EQ(c & 0xC0, 0x80);
        --need;
      } else if (c >= 0xF0)
        need = 3;
      else if (c >= 0xE0)
        need = 2;
      else if (c >= 0xC0)
        need = 1;
    }
    EXPECT_EQ(need, 0) << "piece ends mid-character";
  }
  // A stop string inside a multi-byte character sequence is found too.
  Fed stopped = feed(ids, {-1, 0, false, {"\xE2\x9C\x93"}});
  ASSERT_TRUE(stopped.end);
  EXPECT_EQ(stopped.text, " caf\xC3\xA9 ");
  (void)tok;
}

TEST(StopConditions, FinishAfterEndReturnsNothing) {
  StopChecker sc(*demo().tokenizer, {1, 0, false, {}});
  auto st = sc.push(words("dog")[0], 2);
  EXPECT_TRUE(st.end);
  EXPECT_EQ(sc.finish(), "");
  EXPECT_FALSE(sc.push(words("dog")[0], 3).end);  // ignored after the end
}

// Property: for random texts and random stop strings taken from them, the
// text sent is exactly the text before the stop string's first occurrence,
// and every intermediate send is consistent with that (nothing retracted).
TEST(StopConditions, RandomStopStringsMatchFindSemantics) {
  const Tokenizer& tok = *demo().tokenizer;
  static const char* kWords[] = {"the",  "little", "dog",   "ran",         "home",
                                 "to",   "his",    "a",     "caf\xC3\xA9", "\xE2\x9C\x93",
                                 "time", "when",   "there", "was"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 400; ++iter) {
    std::string text;
    const int n = 3 + (int)(rng() % 10);
    for (int i = 0; i < n; ++i)
      text += std::string(i ? " " : "") + kWords[rng() % std::size(kWords)];
    const auto ids = tok.encode(text, false);
    std::string full;
    {
      StreamingDetokenizer d(tok);
      for (Token t : ids) full += d.push(t);
      full += d.flush();
    }
    std::string stop;
    if (rng() % 4 == 0) {
      stop = "zz" + std::to_string(iter);  // absent
    } else {
      size_t a = rng() % full.size(), len = 1 + rng() % 8;
      stop = full.substr(a, len);
    }
    Fed r = feed(ids, {-1, 0, false, {stop}});
    const size_t at = full.find(stop);
    const std::string want = at == std::string::npos ? full : full.substr(0, at);
    EXPECT_EQ(r.text, want) << "text '" << full << "' stop '" << stop << "'";
    EXPECT_EQ(r.end.has_value(), at != std::string::npos);
  }
}

}  // namespace
}  // namespace cairn::engine
