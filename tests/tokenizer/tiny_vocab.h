// Small vocabularies the tokenizer tests write themselves with gguf::Writer,
// so the suite exercises every path without ../shared.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace cairn::test {

// Parses the writer's bytes and builds a tokenizer; the bytes live as long as
// this object (the tokenizer copies what it needs anyway).
struct Built {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::File> file;
  Result<std::unique_ptr<Tokenizer>> tok = Status::error("not built");
  std::string error;  // from the reader or from from_gguf, "" when both succeeded

  explicit Built(const gguf::Writer& w) : bytes(w.to_bytes()) {
    auto f = gguf::File::parse(bytes);
    if (!f) {
      error = f.status().message();
      return;
    }
    file = std::move(f.value());
    tok = Tokenizer::from_gguf(*file);
    if (!tok) error = tok.status().message();
  }
  const Tokenizer& operator*() const { return *tok.value(); }
  const Tokenizer* operator->() const { return tok.value().get(); }
};

inline const std::string kSp = "\xE2\x96\x81";  // U+2581

// SPM: <unk> <s> </s>, 256 byte tokens, then pieces with scores, a control
// token and a user-defined one. Ids of the pieces: spm_id("...").
struct SpmSpec {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

inline SpmSpec spm_spec() {
  SpmSpec s;
  auto add = [&](const std::string& t, float score, int32_t type) {
    s.tokens.push_back(t);
    s.scores.push_back(score);
    s.types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, 6);
  }
  // Longer pieces score higher, as in a trained model.
  const std::vector<std::string> pieces = {
      kSp,         "h",           "e",  "l",   "o",           "w",       "r",  "d",
      "a",         "b",           "c",  "<",   ">",           "s",       "/",  "|",
      kSp + "h",   kSp + "he",    "ll", "llo", kSp + "hello", kSp + "w", "or", "ld",
      kSp + "wor", kSp + "world", "ab", "bc",  kSp + kSp};
  for (const std::string& p : pieces) add(p, static_cast<float>(p.size()), 1);
  add("<|end|>", 0, 3);
  add("<tool>", 0, 4);
  add("[unused]", 0, 5);
  return s;
}

inline gguf::Writer spm_writer(const SpmSpec& s) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", s.tokens);
  w.set_float32_array("tokenizer.ggml.scores", s.scores);
  w.set_int32_array("tokenizer.ggml.token_type", s.types);
  w.set_uint32("tokenizer.ggml.bos_token_id", 1);
  w.set_uint32("tokenizer.ggml.eos_token_id", 2);
  w.set_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.set_uint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // "none", as llama.cpp writes it
  return w;
}

// Byte-level BPE: the 256 byte characters, merges (in rank order) and their
// results, <|endoftext|> as control and <tool> as user-defined.
inline std::string byte_char(unsigned char b) {
  // GPT-2's table: printable Latin-1 stands for itself, the rest from U+0100.
  int n = 0;
  for (int c = 0; c < 256; ++c) {
    const bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    uint32_t cp = printable ? static_cast<uint32_t>(c) : static_cast<uint32_t>(256 + n++);
    if (c == b) {
      std::string out;
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
      return out;
    }
  }
  return {};
}

struct BpeSpec {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<int32_t> types;
  std::string pre = "gpt-2";
};

inline BpeSpec bpe_spec(std::vector<std::string> merges = {}) {
  BpeSpec s;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_char(static_cast<unsigned char>(b)));
  const std::string G = byte_char(' ');  // "Ġ"
  if (merges.empty()) {
    merges = {"h e",      "l l", "he ll",      "hell o", G + " w", "o r",
              G + "w or", "l d", G + "wor ld", "o " + G, "1 2",    "12 3"};
  }
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ', 1);
    const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
    bool have = false;
    for (const auto& t : s.tokens) have = have || t == joined;
    if (!have) s.tokens.push_back(joined);
  }
  s.merges = merges;
  s.types.assign(s.tokens.size(), 1);
  s.tokens.push_back("<|endoftext|>");
  s.types.push_back(3);
  s.tokens.push_back("<tool>");
  s.types.push_back(4);
  return s;
}

inline gguf::Writer bpe_writer(const BpeSpec& s) {
  gguf::Writer w;
  w.set_string("general.architecture", "gpt2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", s.pre);
  w.set_string_array("tokenizer.ggml.tokens", s.tokens);
  w.set_int32_array("tokenizer.ggml.token_type", s.types);
  w.set_string_array("tokenizer.ggml.merges", s.merges);
  w.set_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(s.tokens.size() - 2));
  return w;
}

}  // namespace cairn::test
