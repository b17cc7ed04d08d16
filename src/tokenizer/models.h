// tokenizer/models.h — the two tokenizer models behind cairn::Tokenizer.
// Internal to the tokenizer layer: from_gguf builds one of these.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/flat_map.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace cairn::tok {

// What both models share: the vocabulary, special-token matching, pieces.
class VocabTokenizer : public Tokenizer {
 public:
  std::vector<Token> encode(std::string_view text, bool add_special,
                            bool parse_special) const final;
  std::string token_to_piece(Token t, bool render_special) const final;
  int32_t vocab_size() const final { return vocab_->size(); }
  Token bos() const final { return vocab_->bos; }
  Token eos() const final { return vocab_->eos; }
  bool is_eog(Token t) const final { return vocab_->eog.count(t) > 0; }
  TokenAttr attr(Token t) const final {
    return vocab_->valid(t) ? vocab_->attr[t] : TokenAttr::Normal;
  }
  std::string_view token_text(Token t) const final {
    return vocab_->valid(t) ? std::string_view(vocab_->text[t]) : std::string_view();
  }
  bool add_bos() const final { return vocab_->add_bos; }
  bool add_eos() const final { return vocab_->add_eos; }
  bool add_space_prefix() const final { return vocab_->add_space_prefix; }
  Token find_token(std::string_view text) const final { return vocab_->find(text); }

 protected:
  explicit VocabTokenizer(std::unique_ptr<Vocab> v);
  // Fills pieces_ (render_special form); models call it once built.
  void build_pieces();
  // Tokens of one run of plain text. `after_special`: it starts the input or
  // follows a matched special token (SPM puts a space there).
  virtual void encode_text(std::string_view text, bool after_special,
                           std::vector<Token>& out) const = 0;
  virtual std::string make_piece(Token t) const = 0;

  std::unique_ptr<Vocab> vocab_;
  SpecialMatcher matcher_;
  std::vector<std::string> pieces_;
};

// SentencePiece-style: spaces become U+2581, adjacent symbols merge by best
// score (ties: leftmost), leftovers fall back to <0xNN> byte tokens.
class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(std::unique_ptr<Vocab> v);

 private:
  void encode_text(std::string_view text, bool after_special,
                   std::vector<Token>& out) const override;
  std::string make_piece(Token t) const override;
  // Token for a bigram text, or -1 when it is not a mergeable token.
  Token mergeable(std::string_view s) const;

  std::array<Token, 256> byte_tokens_{};
};

// Byte-level BPE: the family's normalizer (NFC for Qwen, see normalizer.h)
// on each run of plain text, pre-tokenizer words, each byte as its GPT-2
// character, merges applied lowest rank first (ties: leftmost), via a heap.
class BpeTokenizer final : public VocabTokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(std::unique_ptr<Vocab> v,
                                                      const gguf::File& file);

 private:
  explicit BpeTokenizer(std::unique_ptr<Vocab> v) : VocabTokenizer(std::move(v)) {}
  void encode_text(std::string_view text, bool after_special,
                   std::vector<Token>& out) const override;
  std::string make_piece(Token t) const override;
  void encode_word(std::string_view word, std::vector<Token>& out) const;

  PairMap merges_;
  std::array<Token, 256> byte_tokens_{};  // token of each byte's GPT-2 character, or -1
  std::unique_ptr<Pretokenizer> pre_;
  bool ignore_merges_ = false;  // a word that is already a token is not merged (Llama 3)
  Normalization norm_ = Normalization::None;
};

// WordPiece (BERT), as llama.cpp's WPM tokenizer: BERT's basic tokenizer
// (control characters dropped, whitespace splits, punctuation, ASCII
// symbols and CJK ideographs become words of their own; with the
// normalizer's lowercase, also lowercasing and accent stripping), then
// greedy longest-match-first pieces per word. The GGUF stores a word's first
// piece with a U+2581 prefix and continuations bare (the converter's form of
// "##"); a word with no complete cover becomes [UNK].
class WpmTokenizer final : public VocabTokenizer {
 public:
  static Result<std::unique_ptr<WpmTokenizer>> create(std::unique_ptr<Vocab> v,
                                                      const gguf::File& file);
  bool wordpiece() const override { return true; }

 private:
  explicit WpmTokenizer(std::unique_ptr<Vocab> v) : VocabTokenizer(std::move(v)) {}
  void encode_text(std::string_view text, bool after_special,
                   std::vector<Token>& out) const override;
  std::string make_piece(Token t) const override;
  void encode_word(std::string_view word, std::vector<Token>& out) const;

  bool lowercase_ = true;
  bool strip_accents_ = true;
  size_t max_token_len_ = 0;  // bytes of the longest token text
};

}  // namespace cairn::tok
