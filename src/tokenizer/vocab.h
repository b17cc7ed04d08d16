// tokenizer/vocab.h — the validated vocabulary both tokenizer models share:
// token texts, scores, kinds, special ids and flags, the text -> id index, and
// the matcher that finds special/added tokens in raw text. Internal to the
// tokenizer layer. Owns copies of everything it reads from the gguf::File.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/tokenizer.h"

namespace cairn::tok {

enum class Model { Spm, Bpe, Wpm };

struct Vocab {
  Model model = Model::Spm;
  std::string pre;  // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenAttr> attr;
  // Whitespace eaten around a special token when it is matched in text
  // (llama.cpp's LSTRIP / RSTRIP attributes; set for Phi-3).
  std::vector<uint8_t> lstrip, rstrip;
  TextIndex index;  // over `text`, which therefore never changes after loading

  Token bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::unordered_set<Token> eog;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  bool valid(Token t) const { return t >= 0 && t < size(); }
  Token find(std::string_view s) const { return index.find(s); }
};

// Reads and validates the vocabulary. `model` decides the defaults llama.cpp
// uses (SPM: bos 1, eos 2, unk 0, add_bos, space prefix; BPE: add_bos only
// for the Llama-3 style pre-tokenizers; WPM (BERT): bos is [CLS]
// (cls_token_id, default 101), eos is [SEP] (seperator_token_id, default
// 102), unk 100, both added unless add_bos_token / add_sep_token say no).
Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& file, Model model);

// A piece of input after special tokens are taken out: raw text (a view into
// the caller's string) or one matched token.
struct Fragment {
  Token token = -1;  // -1: raw text
  std::string_view text;
};

// Finds control / user-defined / unknown tokens written in text, the way
// llama.cpp does: longest token first over the whole text, each occurrence
// cut out and never split, whitespace stripped beside tokens that ask for it.
// A trie first finds which specials occur at all, so the common case (none)
// costs one pass over the text however many specials the vocabulary has.
class SpecialMatcher {
 public:
  explicit SpecialMatcher(const Vocab& v);
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    Token token = -1;
  };
  int32_t child(int32_t node, unsigned char c) const;

  const Vocab& vocab_;
  std::vector<Node> nodes_;         // nodes_[0] is the root
  std::vector<int32_t> root_next_;  // 256 entries: the root's children, for speed
};

}  // namespace cairn::tok
