// Tokenizer construction from GGUF, the shared encode path (special tokens,
// BOS/EOS), pieces, decode and the streaming detokenizer.
#include "tokenizer/tokenizer.h"

#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace cairn {

namespace tok {

VocabTokenizer::VocabTokenizer(std::unique_ptr<Vocab> v)
    : vocab_(std::move(v)), matcher_(*vocab_) {}

void VocabTokenizer::build_pieces() {
  pieces_.resize(vocab_->text.size());
  for (Token t = 0; t < vocab_->size(); ++t) pieces_[t] = make_piece(t);
}

std::vector<Token> VocabTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_->add_bos && vocab_->bos >= 0) out.push_back(vocab_->bos);
  bool after_special = true;
  for (const Fragment& f : matcher_.split(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_text(f.text, after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_->add_eos && vocab_->eos >= 0) out.push_back(vocab_->eos);
  return out;
}

std::string VocabTokenizer::token_to_piece(Token t, bool render_special) const {
  if (!vocab_->valid(t)) return std::string();
  const TokenAttr a = vocab_->attr[t];
  if (!render_special && (a == TokenAttr::Control || a == TokenAttr::Unknown)) {
    return std::string();
  }
  return pieces_[t];
}

}  // namespace tok

std::vector<Token> Tokenizer::encode_pair(std::string_view a, std::string_view b) const {
  std::vector<Token> out;
  if (add_bos() && bos() >= 0) out.push_back(bos());
  const auto first = encode(a, /*add_special=*/false);
  out.insert(out.end(), first.begin(), first.end());
  const bool close = add_eos() && eos() >= 0;
  if (close) out.push_back(eos());
  const auto second = encode(b, /*add_special=*/false);
  out.insert(out.end(), second.begin(), second.end());
  if (close && !wordpiece()) out.push_back(eos());
  return out;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model) return Status::error("tokenizer: " + model.status().message());
  if (!model.value()) return Status::error("tokenizer: tokenizer.ggml.model is missing");
  const std::string_view name = *model.value();
  if (name == "llama") {
    auto v = tok::load_vocab(file, tok::Model::Spm);
    if (!v) return v.status();
    return std::unique_ptr<Tokenizer>(new tok::SpmTokenizer(std::move(v.value())));
  }
  if (name == "gpt2") {
    auto v = tok::load_vocab(file, tok::Model::Bpe);
    if (!v) return v.status();
    auto t = tok::BpeTokenizer::create(std::move(v.value()), file);
    if (!t) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  if (name == "bert") {
    auto v = tok::load_vocab(file, tok::Model::Wpm);
    if (!v) return v.status();
    auto t = tok::WpmTokenizer::create(std::move(v.value()), file);
    if (!t) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t.value()));
  }
  return Status::error("tokenizer: tokenizer.ggml.model '" + std::string(name.substr(0, 64)) +
                       "' is not supported (only 'llama', 'gpt2' and 'bert')");
}

std::string Tokenizer::decode(const std::vector<Token>& tokens, bool render_special) const {
  std::string out;
  bool strip = add_space_prefix();
  for (Token t : tokens) {
    std::string piece = token_to_piece(t, render_special);
    if (strip && attr(t) != TokenAttr::Control) {
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool render_special, bool at_start)
    : tok_(tok),
      render_special_(render_special),
      strip_space_(at_start && tok.add_space_prefix()) {}

std::string StreamingDetokenizer::push(Token t) {
  std::string piece = tok_.token_to_piece(t, render_special_);
  if (strip_space_ && tok_.attr(t) != TokenAttr::Control) {
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip_space_ = false;
  }
  pending_ += piece;

  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const tok::Utf8Step st = tok::utf8_step(std::string_view(pending_).substr(i));
    if (st.kind == tok::Utf8Scan::Incomplete) break;  // wait for the next token
    if (st.kind == tok::Utf8Scan::Complete) {
      out.append(pending_, i, st.len);
    } else {
      out += tok::kReplacementChar;
    }
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  if (!pending_.empty()) out = std::string(tok::kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace cairn
