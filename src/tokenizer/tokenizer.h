// tokenizer/tokenizer.h — text <-> token ids, built from GGUF metadata.
// Owns the SentencePiece-style (`llama`) and byte-level BPE (`gpt2`) models,
// pre-tokenizers (PCRE2, Unicode-aware), special/added tokens and streaming
// detokenization. Never touches model weights, and never keeps a pointer into
// the gguf::File it was built from (the file may be closed afterwards).
//
// Behaviour follows llama.cpp's tokenizer (the reference the golden files come
// from): SPM bigram merges by score with <0xNN> byte fallback and a space
// prefix; BPE merges by rank after the pre-tokenizer named by
// `tokenizer.ggml.pre`; control / user-defined tokens matched before either.
// Deliberate differences: SPM merges never produce control, unknown or byte
// tokens from plain text, and bytes of invalid UTF-8 in BPE input are kept
// (byte-level) instead of being replaced by U+FFFD.
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

// Per-token kind, from `tokenizer.ggml.token_type` (1 normal, 2 unknown,
// 3 control, 4 user-defined, 5 unused, 6 byte; 0 "undefined" counts as normal).
enum class TokenAttr : uint8_t { Normal, Unknown, Control, UserDefined, Unused, Byte };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Reads tokenizer.ggml.* from the file; an error names the bad key. Every
  // array and id is validated (lengths, types, ids inside the vocabulary,
  // merges naming existing tokens), so later calls cannot fail.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  // add_special: prepend BOS / append EOS as the file's add_bos/add_eos flags say.
  // parse_special: match control/unknown tokens written in the text
  // ("<|im_end|>"). User-defined (added) tokens are matched either way, as in
  // Hugging Face tokenizers. Matched tokens are never split.
  virtual std::vector<Token> encode(std::string_view text, bool add_special,
                                    bool parse_special = true) const = 0;

  // Two texts as one input (a reranker's query and document), joined as the
  // reference's rerank joins them: bos (add_bos), a, then [SEP] for a
  // WordPiece vocabulary (BERT's add_sep) or else eos where add_eos, b, and
  // eos again where add_eos (not for WordPiece).
  std::vector<Token> encode_pair(std::string_view a, std::string_view b) const;
  // True for BERT's WordPiece vocabularies, whose eos() is the [SEP] between segments.
  virtual bool wordpiece() const { return false; }

  // Bytes of one token as it appears in text (byte-fallback tokens give one raw
  // byte, so a piece may be an incomplete UTF-8 sequence). Control and unknown
  // tokens give their text only when `render_special`; unused tokens give
  // nothing. Out-of-range ids give an empty piece.
  virtual std::string token_to_piece(Token t, bool render_special = false) const = 0;

  // Concatenated pieces of a whole text: the space SPM put in front of the text
  // (add_space_prefix) is removed from the first non-control token, so
  // decode(encode(x, add_special)) == x for text without special tokens. The
  // result is raw bytes: it can be invalid UTF-8 where the tokens are.
  std::string decode(const std::vector<Token>& tokens, bool render_special = false) const;

  virtual int32_t vocab_size() const = 0;
  virtual Token bos() const = 0;                           // -1 when none
  virtual Token eos() const = 0;                           // -1 when none
  virtual bool is_eog(Token t) const = 0;                  // end of generation: eos, eot, eom...
  virtual TokenAttr attr(Token t) const = 0;               // Normal for out-of-range ids
  virtual std::string_view token_text(Token t) const = 0;  // as stored in the vocab

  virtual bool add_bos() const = 0;  // encode(..., add_special=true) prepends bos()
  virtual bool add_eos() const = 0;
  // True when encode puts a space before the text (SPM's add_space_prefix).
  virtual bool add_space_prefix() const = 0;
  // Id of the token whose vocabulary text is exactly `text`, or -1.
  virtual Token find_token(std::string_view text) const = 0;
};

// Turns a stream of token pieces into valid UTF-8 text: bytes of a character
// split across tokens are held back until the character is complete; bytes
// that can never form a character are emitted as U+FFFD.
//
// `at_start`: the tokens begin the text (a whole prompt, or decoding from the
// first token), so the space SPM prefixed is removed from the first
// non-control token, as decode() does. Generated continuations pass false:
// their first token " there" keeps its space.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool render_special = false,
                                bool at_start = false);
  // Text that is now complete (may be empty).
  std::string push(Token t);
  // Whatever is held back at the end (an incomplete character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
  bool strip_space_;  // the leading space of the next non-control token is SPM's prefix
};

}  // namespace cairn
