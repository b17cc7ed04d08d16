// SentencePiece-style tokenization as llama.cpp does it.
#include <queue>

#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace cairn::tok {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SPM's visible space

std::string escape_spaces(std::string_view s, bool prefix) {
  std::string out;
  out.reserve(s.size() + 3 * (prefix ? 1 : 0) + 8);
  if (prefix) out += kSpaceMark;
  for (char c : s) {
    if (c == ' ') {
      out += kSpaceMark;
    } else {
      out += c;
    }
  }
  return out;
}

struct Symbol {
  int32_t prev, next;
  size_t start, len;  // bytes of the escaped text; len 0 once merged away
};

struct Bigram {
  int32_t left, right;
  float score;
  size_t len;
};
struct BigramOrder {
  // Highest score first; on ties the leftmost pair.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(std::unique_ptr<Vocab> v) : VocabTokenizer(std::move(v)) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char spelled[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    Token t = vocab_->find(std::string_view(spelled, 6));
    if (t < 0) t = vocab_->find(std::string_view(std::string(1, static_cast<char>(b))));
    byte_tokens_[b] = t >= 0 ? t : vocab_->unk;
  }
  build_pieces();
}

Token SpmTokenizer::mergeable(std::string_view s) const {
  const Token t = vocab_->find(s);
  if (t < 0) return -1;
  const TokenAttr a = vocab_->attr[t];
  // Plain text must not turn into control tokens ("<s>" typed by a user), nor
  // into byte tokens spelled out ("<0x0A>").
  return a == TokenAttr::Normal || a == TokenAttr::UserDefined ? t : -1;
}

void SpmTokenizer::encode_text(std::string_view raw, bool after_special,
                               std::vector<Token>& out) const {
  const std::string text = escape_spaces(raw, after_special && vocab_->add_space_prefix);
  if (text.empty()) return;
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len =
        std::min(utf8_lead_len(static_cast<unsigned char>(text[off])), text.size() - off);
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const size_t len = sym[l].len + sym[r].len;
    const Token t = mergeable(std::string_view(text).substr(sym[l].start, len));
    if (t >= 0) queue.push({l, r, vocab_->score[t], len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = sym[bg.left];
    Symbol& r = sym[bg.right];
    // Stale: one side was merged into something else since it was queued.
    if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = std::string_view(text).substr(sym[i].start, sym[i].len);
    // A merged symbol is always a token; a single character may not be.
    const Token t = mergeable(piece);
    if (t >= 0) {
      out.push_back(t);
      continue;
    }
    for (char c : piece) {
      const Token b = byte_tokens_[static_cast<unsigned char>(c)];
      if (b >= 0) out.push_back(b);
    }
  }
}

std::string SpmTokenizer::make_piece(Token t) const {
  const std::string& s = vocab_->text[t];
  switch (vocab_->attr[t]) {
    case TokenAttr::Byte: {
      // Spelled <0xNN> (checked at load).
      return std::string(1, static_cast<char>(std::stoi(s.substr(3, 2), nullptr, 16)));
    }
    case TokenAttr::Normal: {
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        if (s.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
          out += ' ';
          i += kSpaceMark.size();
        } else {
          out += s[i++];
        }
      }
      return out;
    }
    case TokenAttr::Unused:
      return std::string();
    default:  // control, unknown, user-defined: their text as written
      return s;
  }
}

}  // namespace cairn::tok
