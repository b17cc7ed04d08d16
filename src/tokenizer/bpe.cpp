// Byte-level BPE: merge table loading/validation and the merge loop.
#include <limits>
#include <queue>

#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace cairn::tok {

namespace {

struct Symbol {
  int32_t prev, next;
  Token id;  // -1: a byte whose character is missing from the vocabulary
  bool alive;
};

struct Pair {
  int32_t rank;
  int32_t left, right;  // symbol indices
  Token left_id, right_id, result;
};
struct PairOrder {
  // Lowest rank first; on ties the leftmost pair.
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(std::unique_ptr<Vocab> v,
                                                           const gguf::File& file) {
  std::string pre_used;
  auto pre = Pretokenizer::create(v->pre, &pre_used);
  if (!pre) return pre.status();

  auto merges = file.get_string_array("tokenizer.ggml.merges");
  if (!merges) return Status::error("tokenizer: " + merges.status().message());
  if (!merges.value()) {
    return Status::error("tokenizer: tokenizer.ggml.merges is missing (required for gpt2)");
  }
  const auto& list = *merges.value();
  if (list.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::error("tokenizer: too many merges");
  }

  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(v)));
  const Vocab& voc = *tok->vocab_;
  tok->pre_ = std::move(pre.value());
  tok->ignore_merges_ = pre_used == "llama-bpe" || pre_used == "tekken";
  tok->norm_ = bpe_normalization(voc.pre);

  // Every merge must name two tokens and produce a third (as Hugging Face
  // requires), which lets the merge loop work on ids instead of strings.
  tok->merges_ = PairMap(list.size());
  std::string joined;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string_view m = list[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos) {
      return Status::error("tokenizer: merge " + std::to_string(i) + " has no space separator");
    }
    const std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
    const Token ta = voc.find(a), tb = voc.find(b);
    joined.assign(a);
    joined.append(b);
    const Token tr = voc.find(joined);
    if (ta < 0 || tb < 0 || tr < 0) {
      const std::string_view missing = ta < 0 ? a : tb < 0 ? b : std::string_view(joined);
      return Status::error("tokenizer: merge " + std::to_string(i) + " refers to '" +
                           std::string(missing.substr(0, 64)) + "', which is not a token");
    }
    // A repeated pair keeps its first (best) rank.
    tok->merges_.insert(ta, tb, {static_cast<int32_t>(i), tr});
  }

  const ByteLevel& bl = byte_level();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, bl.byte_to_cp[b]);
    tok->byte_tokens_[b] = voc.find(ch);
  }
  tok->build_pieces();
  return tok;
}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/,
                               std::vector<Token>& out) const {
  // Special tokens were split off before this, so normalization never reaches
  // across one (as Hugging Face normalizes only the text between them).
  if (norm_ == Normalization::Nfc && !is_ascii(text)) {
    const std::string normalized = nfc(text);
    for (std::string_view word : pre_->split(normalized)) encode_word(word, out);
    return;
  }
  for (std::string_view word : pre_->split(text)) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<Token>& out) const {
  if (ignore_merges_) {
    const Token whole = vocab_->find(byte_level_encode(word));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // One symbol per byte: byte-level BPE spells each byte as one character.
  std::vector<Symbol> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const auto idx = static_cast<int32_t>(i);
    sym[i] = {idx - 1, i + 1 == word.size() ? -1 : idx + 1,
              byte_tokens_[static_cast<unsigned char>(word[i])], true};
  }
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    const PairMap::Value* m = merges_.find(sym[l].id, sym[r].id);
    if (m != nullptr) queue.push({m->rank, l, r, sym[l].id, sym[r].id, m->result});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = sym[p.left];
    Symbol& r = sym[p.right];
    // Stale: either side changed since the pair was queued.
    if (!l.alive || !r.alive || l.id != p.left_id || r.id != p.right_id) continue;
    l.id = p.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }

  for (int32_t i = 0; i >= 0 && !sym.empty(); i = sym[i].next) {
    if (sym[i].id >= 0) {
      out.push_back(sym[i].id);
    } else if (vocab_->unk >= 0) {
      out.push_back(vocab_->unk);
    }
  }
}

std::string BpeTokenizer::make_piece(Token t) const {
  const std::string& s = vocab_->text[t];
  switch (vocab_->attr[t]) {
    case TokenAttr::Normal:
      return byte_level_decode(s);
    case TokenAttr::Byte:
      // Not produced by byte-level BPE; decode it the same way if it appears.
      return byte_level_decode(s);
    case TokenAttr::Unused:
      return std::string();
    default:  // control, unknown, user-defined: their text as written
      return s;
  }
}

}  // namespace cairn::tok
