// tokenizer/tokenizer.h — text <-> token ids, built from GGUF metadata.
// Owns the SentencePiece-style (`llama`) and byte-level BPE (`gpt2`) models,
// pre-tokenizers (PCRE2, Unicode-aware), special/added tokens and streaming
// detokenization. Never touches model weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace cairn {

using Token = int32_t;

enum class TokenAttr : uint8_t { Normal, Unknown, Control, UserDefined, Unused, Byte };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Reads tokenizer.ggml.* from the file; an error names the bad key.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  // add_special: prepend BOS / append EOS as the file's add_bos/add_eos flags say.
  // parse_special: match special/control tokens written in the text ("<|im_end|>").
  virtual std::vector<Token> encode(std::string_view text, bool add_special,
                                    bool parse_special = true) const = 0;

  // Bytes of one token as it appears in text (byte-fallback tokens give one raw
  // byte, so a piece may be an incomplete UTF-8 sequence). Control tokens give
  // their text only when `render_special`.
  virtual std::string token_to_piece(Token t, bool render_special = false) const = 0;
  std::string decode(const std::vector<Token>& tokens, bool render_special = false) const;

  virtual int32_t vocab_size() const = 0;
  virtual Token bos() const = 0;  // -1 when none
  virtual Token eos() const = 0;
  virtual bool is_eog(Token t) const = 0;  // end of generation: eos, eot, eom...
  virtual TokenAttr attr(Token t) const = 0;
  virtual std::string_view token_text(Token t) const = 0;  // as stored in the vocab
};

// Turns a stream of token pieces into valid UTF-8 text: bytes of a character
// split across tokens are held back until the character is complete.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool render_special = false);
  // Text that is now complete (may be empty).
  std::string push(Token t);
  // Whatever is held back at the end (invalid bytes become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace cairn
