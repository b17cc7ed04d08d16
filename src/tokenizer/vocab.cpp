// Vocabulary loading and validation, and the special-token matcher.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

namespace cairn::tok {

namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) { return std::string(kPrefix) + std::string(name); }

// token_type values as the GGUF spec numbers them, 0 (undefined) included.
constexpr std::array<TokenAttr, 7> kTypeToAttr = {
    TokenAttr::Normal,      TokenAttr::Normal, TokenAttr::Unknown, TokenAttr::Control,
    TokenAttr::UserDefined, TokenAttr::Unused, TokenAttr::Byte,
};

// Which special-id keys fill which field. llama.cpp's deprecated spellings
// and the keys it only validates (sep, cls, mask, fim_*) are range-checked by
// the generic pass below.
struct IdKey {
  std::string_view name;
  Token Vocab::*field;
};
constexpr std::array<IdKey, 6> kIdKeys = {{
    {"bos_token_id", &Vocab::bos},
    {"eos_token_id", &Vocab::eos},
    {"eot_token_id", &Vocab::eot},
    {"eom_token_id", &Vocab::eom},
    {"unknown_token_id", &Vocab::unk},
    {"padding_token_id", &Vocab::pad},
}};

// Texts that end generation whatever their declared type (llama.cpp's list;
// converters often forget to point eot_token_id at them).
constexpr std::array<std::string_view, 12> kEogTexts = {
    "<|eot_id|>",      "<|im_end|>",         "<|end|>",    "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",         "<EOT>",      "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<|return|>", "<|call|>",
};

// Roles llama.cpp recognizes by text when their *_token_id key is absent: the
// first text of the list found in the vocabulary takes the role and becomes a
// control token. End-of-turn and FIM pad / repo / separator also end
// generation (as do those ids when the keys give them).
struct RoleTexts {
  std::string_view key;
  bool ends_generation;
  std::array<std::string_view, 10> texts;  // "" pads the list
};
#define CAIRN_FW_BAR "\xEF\xBD\x9C"  // U+FF5C, DeepSeek's fullwidth bar
#define CAIRN_SP "\xE2\x96\x81"      // U+2581
const std::array<RoleTexts, 7> kRoles = {{
    {"eot_token_id",
     true,
     {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
      "<EOT>", "_<EOT>", "<" CAIRN_FW_BAR "end" CAIRN_SP "of" CAIRN_SP "sentence" CAIRN_FW_BAR ">",
      "<end_of_utterance>"}},
    {"eom_token_id", true, {"<|eom_id|>"}},
    {"fim_pre_token_id",
     false,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
      "<" CAIRN_FW_BAR "fim" CAIRN_SP "begin" CAIRN_FW_BAR ">", "<PRE>", CAIRN_SP "<PRE>",
      "<|code_prefix|>"}},
    {"fim_suf_token_id",
     false,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<" CAIRN_FW_BAR "fim" CAIRN_SP "hole" CAIRN_FW_BAR ">", "<SUF>", CAIRN_SP "<SUF>",
      "<|code_suffix|>"}},
    {"fim_mid_token_id",
     false,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
      "<" CAIRN_FW_BAR "fim" CAIRN_SP "end" CAIRN_FW_BAR ">", "<MID>", CAIRN_SP "<MID>",
      "<|code_middle|>"}},
    {"fim_pad_token_id", true, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
    {"fim_rep_token_id",
     true,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
}};
#undef CAIRN_FW_BAR
#undef CAIRN_SP
constexpr std::string_view kFimSepKey = "fim_sep_token_id";

// Pre-tokenizers after which a BPE vocabulary adds BOS by default.
constexpr std::array<std::string_view, 10> kBpeAddBos = {
    "llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
    "pixtral", "midm-2.0", "lfm2",      "tekken",  "chameleon"};

bool is_no_token(const gguf::Value& v) {
  using gguf::ValueType;
  if (v.type == ValueType::UINT32) return v.u == 0xFFFFFFFFu;
  if (v.type == ValueType::UINT64) return v.u == std::numeric_limits<uint64_t>::max();
  const bool is_signed = v.type == ValueType::INT8 || v.type == ValueType::INT16 ||
                         v.type == ValueType::INT32 || v.type == ValueType::INT64;
  return is_signed && v.i == -1;
}

bool is_integer_type(gguf::ValueType t) {
  using gguf::ValueType;
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

// Every tokenizer.ggml.*_token_id: an integer naming a token, or "none".
Status check_id_keys(const gguf::File& f, int32_t n) {
  for (const gguf::KeyValue& kv : f.metadata()) {
    const std::string_view k = kv.key;
    if (!k.starts_with(kPrefix) || !k.ends_with("_token_id")) continue;
    const gguf::Value& v = kv.value;
    if (!is_integer_type(v.type)) {
      return Status::error("tokenizer: " + kv.key + " has type " + gguf::value_type_string(v) +
                           ", expected an integer token id");
    }
    if (is_no_token(v)) continue;
    const bool negative = v.i < 0;
    if (negative || v.u >= static_cast<uint64_t>(n)) {
      return Status::error("tokenizer: " + kv.key + " = " +
                           (negative ? std::to_string(v.i) : std::to_string(v.u)) +
                           " is outside the vocabulary of " + std::to_string(n) + " tokens");
    }
  }
  return Status::ok();
}

Result<Token> read_id(const gguf::File& f, std::string_view name, Token dflt, int32_t n) {
  const gguf::Value* v = f.find(key(name));
  if (v == nullptr) return dflt >= 0 && dflt < n ? dflt : Token{-1};
  if (is_no_token(*v)) return Token{-1};
  return static_cast<Token>(v->u);  // range-checked by check_id_keys
}

Status read_flag(const gguf::File& f, std::string_view name, bool& out) {
  auto r = f.get_bool(key(name));
  if (!r) return Status::error("tokenizer: " + r.status().message());
  if (r.value()) out = *r.value();
  return Status::ok();
}

bool is_byte_token_text(std::string_view s) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  return s.size() == 6 && s.starts_with("<0x") && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

Status load_tokens(const gguf::File& f, Vocab& v) {
  auto tokens = f.get_string_array(key("tokens"));
  if (!tokens) return Status::error("tokenizer: " + tokens.status().message());
  if (!tokens.value() || tokens.value()->empty()) {
    return Status::error("tokenizer: " + key("tokens") + " is missing or empty");
  }
  const auto& list = *tokens.value();
  if (list.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::error("tokenizer: " + std::to_string(list.size()) + " tokens is too many");
  }
  const size_t n = list.size();
  v.text.assign(list.begin(), list.end());

  auto scores = f.get_float_array(key("scores"));
  if (!scores) return Status::error("tokenizer: " + scores.status().message());
  if (scores.value()) {
    if (scores.value()->size() != n) {
      return Status::error("tokenizer: " + key("scores") + " has " +
                           std::to_string(scores.value()->size()) + " entries for " +
                           std::to_string(n) + " tokens");
    }
    v.score = std::move(*scores.value());
  } else {
    v.score.assign(n, 0.0f);
  }

  v.attr.assign(n, TokenAttr::Normal);
  auto types = f.get_int_array(key("token_type"));
  if (!types) return Status::error("tokenizer: " + types.status().message());
  if (types.value()) {
    const auto& t = *types.value();
    if (t.size() != n) {
      return Status::error("tokenizer: " + key("token_type") + " has " + std::to_string(t.size()) +
                           " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      if (t[i] < 0 || t[i] >= static_cast<int64_t>(kTypeToAttr.size())) {
        return Status::error("tokenizer: token_type of token " + std::to_string(i) + " is " +
                             std::to_string(t[i]) + ", not a known type (0..6)");
      }
      v.attr[i] = kTypeToAttr[static_cast<size_t>(t[i])];
      if (v.attr[i] == TokenAttr::Byte && v.model == Model::Spm && !is_byte_token_text(v.text[i])) {
        return Status::error("tokenizer: byte token " + std::to_string(i) +
                             " is not spelled <0xNN>");
      }
    }
  }

  int32_t first = -1;
  const int32_t dup = v.index.build(v.text, &first);
  if (dup >= 0) {
    return Status::error("tokenizer: tokens " + std::to_string(first) + " and " +
                         std::to_string(dup) + " have the same text");
  }
  return Status::ok();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& f, Model model) {
  auto v = std::make_unique<Vocab>();
  v->model = model;
  auto pre = f.get_string(key("pre"));
  if (!pre) return Status::error("tokenizer: " + pre.status().message());
  if (pre.value()) v->pre = std::string(*pre.value());

  CAIRN_RETURN_IF_ERROR(load_tokens(f, *v));
  const int32_t n = v->size();
  CAIRN_RETURN_IF_ERROR(check_id_keys(f, n));

  const bool spm = model == Model::Spm;
  const bool wpm = model == Model::Wpm;
  const std::array<Token, 6> defaults = {spm ? 1 : -1, spm ? 2 : -1, -1, -1,
                                         spm ? 0 : wpm ? 100 : -1, wpm ? 0 : -1};
  for (size_t k = 0; k < kIdKeys.size(); ++k) {
    auto id = read_id(f, kIdKeys[k].name, defaults[k], n);
    if (!id) return id.status();
    (*v).*(kIdKeys[k].field) = id.value();
  }
  if (wpm) {
    // BERT's ends are [CLS] and [SEP] (llama.cpp's bos and sep), which its
    // converter writes under their own keys (and "seperator", sic).
    if (f.find(key("bos_token_id")) == nullptr) {
      auto id = read_id(f, "cls_token_id", 101, n);
      if (!id) return id.status();
      v->bos = id.value();
    }
    if (f.find(key("eos_token_id")) == nullptr) {
      auto id = read_id(f, "seperator_token_id", 102, n);
      if (!id) return id.status();
      v->eos = id.value();
    }
  }

  v->add_space_prefix = spm;
  v->add_bos = spm || wpm ||
               std::find(kBpeAddBos.begin(), kBpeAddBos.end(), v->pre) != kBpeAddBos.end();
  v->add_eos = wpm;
  CAIRN_RETURN_IF_ERROR(read_flag(f, "add_bos_token", v->add_bos));
  CAIRN_RETURN_IF_ERROR(read_flag(f, wpm ? "add_sep_token" : "add_eos_token", v->add_eos));
  CAIRN_RETURN_IF_ERROR(read_flag(f, "add_space_prefix", v->add_space_prefix));
  if (!spm) v->add_space_prefix = false;  // the BPE path never adds one
  // WordPiece starts every word with a phantom U+2581, so a decoded text's
  // first piece has a space for decode() to drop.
  if (wpm) v->add_space_prefix = true;

  // End of generation: declared ids, then tokens known by their text (which
  // become control tokens, so plain text never produces them).
  for (Token t : {v->eos, v->eot, v->eom}) {
    if (t >= 0) v->eog.insert(t);
  }
  for (const RoleTexts& role : kRoles) {
    auto id = read_id(f, role.key, -1, n);
    if (!id) return id.status();
    Token t = id.value();
    if (f.find(key(role.key)) == nullptr) {
      for (std::string_view s : role.texts) {
        if (!s.empty() && (t = v->find(s)) >= 0) break;
      }
      if (t >= 0) v->attr[t] = TokenAttr::Control;
    }
    if (t >= 0 && role.ends_generation) v->eog.insert(t);
  }
  {
    auto id = read_id(f, kFimSepKey, -1, n);
    if (!id) return id.status();
    Token t = id.value();
    if (f.find(key(kFimSepKey)) == nullptr && (t = v->find("<|file_sep|>")) >= 0) {
      v->attr[t] = TokenAttr::Control;
    }
    if (t >= 0) v->eog.insert(t);
  }
  for (std::string_view s : kEogTexts) {
    const Token t = v->find(s);
    if (t < 0) continue;
    v->eog.insert(t);
    v->attr[t] = TokenAttr::Control;
  }
  // gpt-oss (o200k_harmony) ends turns with <|return|> / <|call|>; its <|end|>
  // separates messages and must not stop generation.
  const Token ret = v->find("<|return|>"), call = v->find("<|call|>"), end = v->find("<|end|>");
  if (ret >= 0 && call >= 0 && end >= 0) {
    v->eog.erase(end);
    v->attr[end] = TokenAttr::UserDefined;
  }

  // Phi-3 eats the whitespace after its special tokens (llama.cpp sets this by
  // model name; the GGUF has no per-token flag for it).
  v->lstrip.assign(n, 0);
  v->rstrip.assign(n, 0);
  auto name = f.get_string("general.name");
  if (!name) return Status::error("tokenizer: " + name.status().message());
  const std::string lname = name.value() ? lower(*name.value()) : std::string();
  if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
    for (Token t = 0; t < n; ++t) {
      const TokenAttr a = v->attr[t];
      if (a == TokenAttr::Control || a == TokenAttr::UserDefined || a == TokenAttr::Unknown) {
        v->rstrip[t] = 1;
      }
    }
    for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const Token t = v->find(s); t >= 0) v->rstrip[t] = 0;
    }
  }
  return v;
}

// ---- SpecialMatcher ----

SpecialMatcher::SpecialMatcher(const Vocab& v) : vocab_(v), nodes_(1), root_next_(256, -1) {
  for (Token t = 0; t < v.size(); ++t) {
    const TokenAttr a = v.attr[t];
    if (v.text[t].empty()) continue;
    if (a != TokenAttr::Control && a != TokenAttr::UserDefined && a != TokenAttr::Unknown) {
      continue;
    }
    int32_t node = 0;
    for (char ch : v.text[t]) {
      const auto c = static_cast<unsigned char>(ch);
      int32_t nx = child(node, c);
      if (nx < 0) {
        nx = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) {
          root_next_[c] = nx;
        } else {
          nodes_[node].next.emplace_back(c, nx);
        }
      }
      node = nx;
    }
    nodes_[node].token = t;
  }
}

int32_t SpecialMatcher::child(int32_t node, unsigned char c) const {
  if (node == 0) return root_next_[c];
  for (const auto& [ch, nx] : nodes_[node].next) {
    if (ch == c) return nx;
  }
  return -1;
}

std::vector<Fragment> SpecialMatcher::split(std::string_view text, bool parse_special) const {
  auto eligible = [&](Token t) {
    return parse_special || vocab_.attr[t] == TokenAttr::UserDefined;
  };
  // Which specials occur anywhere: only those can be cut out below, since
  // cutting text into pieces never creates an occurrence.
  std::vector<Token> found;
  if (nodes_.size() > 1) {
    for (size_t i = 0; i < text.size(); ++i) {
      int32_t node = root_next_[static_cast<unsigned char>(text[i])];
      for (size_t j = i + 1; node >= 0; ++j) {
        const Token t = nodes_[node].token;
        if (t >= 0 && eligible(t)) found.push_back(t);
        if (j >= text.size()) break;
        node = child(node, static_cast<unsigned char>(text[j]));
      }
    }
  }
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, text});
  if (found.empty()) return frags;

  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  std::stable_sort(found.begin(), found.end(),
                   [&](Token a, Token b) { return vocab_.text[a].size() > vocab_.text[b].size(); });

  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  };
  for (Token t : found) {
    const std::string_view needle = vocab_.text[t];
    std::vector<Fragment> out;
    out.reserve(frags.size() + 2);
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr);
        continue;
      }
      std::string_view rest = fr.text;
      while (!rest.empty()) {
        const size_t at = rest.find(needle);
        if (at == std::string_view::npos) {
          out.push_back({-1, rest});
          break;
        }
        std::string_view left = rest.substr(0, at);
        if (vocab_.lstrip[t]) {
          while (!left.empty() && is_space(left.back())) left.remove_suffix(1);
        }
        if (!left.empty()) out.push_back({-1, left});
        out.push_back({t, needle});
        rest = rest.substr(at + needle.size());
        if (vocab_.rstrip[t]) {
          while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
        }
      }
    }
    frags = std::move(out);
  }
  return frags;
}

}  // namespace cairn::tok
