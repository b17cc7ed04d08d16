// WordPiece (BERT) tokenization: the basic tokenizer over Unicode data from
// utf8proc, then greedy longest-match pieces (see models.h).
#include <utf8proc.h>

#include <algorithm>
#include <string>

#include "tokenizer/models.h"

namespace cairn::tok {

namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581

// The White_Space property (utf8proc has categories, not this property).
bool is_whitespace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The CJK ideograph blocks BERT splits into single-character words, as the
// reference lists them (0x2B920, not 0x2B820, as Hugging Face's Rust code has it).
bool is_cjk(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The first code point of c's canonical decomposition (c itself when it has
// none): the reference's accent stripping maps each code point so, then drops
// what is left that is a mark.
int32_t nfd_first(int32_t c) {
  utf8proc_int32_t buf[8];
  int last_boundclass = 0;
  const utf8proc_ssize_t n =
      utf8proc_decompose_char(c, buf, 8, UTF8PROC_DECOMPOSE, &last_boundclass);
  return n >= 1 && n <= 8 ? buf[0] : c;  // longer than the buffer: nothing was written
}

void append_utf8(std::string& s, int32_t c) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(c, buf);
  s.append(reinterpret_cast<const char*>(buf), (size_t)n);
}

}  // namespace

Result<std::unique_ptr<WpmTokenizer>> WpmTokenizer::create(std::unique_ptr<Vocab> v,
                                                           const gguf::File& file) {
  if (v->unk < 0) return Status::error("tokenizer: a WordPiece vocabulary needs an unknown token");
  std::unique_ptr<WpmTokenizer> t(new WpmTokenizer(std::move(v)));
  // tokenizer.ggml.normalizer.*: absent, BERT's uncased default (the
  // lowercasing the reference applied to every WordPiece vocabulary before
  // these keys existed, and which the shared test vectors expect).
  for (auto [name, field] : {std::pair{"tokenizer.ggml.normalizer.lowercase", &t->lowercase_},
                             std::pair{"tokenizer.ggml.normalizer.strip_accents",
                                       &t->strip_accents_}}) {
    auto r = file.get_bool(name);
    if (!r) return Status::error("tokenizer: " + r.status().message());
    if (r.value()) *field = *r.value();
    // strip_accents follows lowercase unless it is given itself.
    if (field == &t->lowercase_) t->strip_accents_ = t->lowercase_;
  }
  for (const std::string& s : t->vocab_->text) t->max_token_len_ = std::max(t->max_token_len_, s.size());
  t->build_pieces();
  return t;
}

void WpmTokenizer::encode_text(std::string_view text, bool, std::vector<Token>& out) const {
  // Words are built with the U+2581 prefix already in place.
  std::string word(kWordStart);
  const auto finish = [&] {
    if (word.size() > kWordStart.size()) encode_word(word, out);
    word.resize(kWordStart.size());
  };
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = (utf8proc_ssize_t)text.size();
  while (left > 0) {
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) {  // invalid UTF-8: one byte as U+FFFD, which is dropped below
      n = 1;
      c = 0xFFFD;
    }
    p += n;
    left -= n;
    if (strip_accents_) c = nfd_first(c);
    if (is_whitespace(c)) {
      finish();
      continue;
    }
    const utf8proc_category_t cat = utf8proc_category(c);
    const bool control = cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
    if (c == 0 || c == 0xFFFD || control) continue;
    const bool mark = cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
                      cat == UTF8PROC_CATEGORY_ME;
    if (strip_accents_ && mark) continue;
    const bool punct = cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
    const bool symbol = cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
    const int32_t lc = lowercase_ ? utf8proc_tolower(c) : c;
    if (punct || (c < 0x7F && symbol) || is_cjk(c)) {  // a word of its own
      finish();
      append_utf8(word, lc);
      finish();
    } else {
      append_utf8(word, lc);
    }
  }
  finish();
}

// Longest match first from each position; a word that cannot be covered
// whole becomes [UNK] (its partial pieces are taken back).
void WpmTokenizer::encode_word(std::string_view word, std::vector<Token>& out) const {
  const size_t start = out.size();
  size_t i = 0;
  while (i < word.size()) {
    Token id = -1;
    size_t j = std::min(word.size(), i + max_token_len_);
    for (; j > i; --j)
      if ((id = vocab_->find(word.substr(i, j - i))) >= 0) break;
    if (id < 0) {
      out.resize(start);
      break;
    }
    out.push_back(id);
    i = j;
  }
  if (out.size() == start) out.push_back(vocab_->unk);
}

// A word's first piece reads " word", a continuation glues on as stored.
std::string WpmTokenizer::make_piece(Token t) const {
  const std::string& s = vocab_->text[t];
  if (vocab_->attr[t] == TokenAttr::Unused) return std::string();
  if (s.starts_with(kWordStart)) return " " + s.substr(kWordStart.size());
  return s;
}

}  // namespace cairn::tok
