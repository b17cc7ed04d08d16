// tokenizer/pretokenizer.h — splitting text into words before byte-level BPE,
// with the regex list named by `tokenizer.ggml.pre`. Internal to the
// tokenizer layer. Owns the compiled PCRE2 patterns; never allocates per
// match beyond the output vector.
//
// Semantics are llama.cpp's: the regexes apply in order, each one to every
// piece the previous ones produced, and each piece is cut into its matches
// and the unmatched text between them (so no byte is ever lost). A piece is
// matched on its own: `$` and lookaheads stop at its end.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cairn::tok {

class Pretokenizer {
 public:
  // `name` is tokenizer.ggml.pre ("" means default). An unknown name falls back
  // to the default list with a warning, as llama.cpp does; `*used` (if given)
  // receives the canonical name of the list chosen.
  static Result<std::unique_ptr<Pretokenizer>> create(std::string_view name,
                                                      std::string* used = nullptr);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Words of `text`, as views into it, in order; their concatenation is `text`.
  // Thread-safe (match data is per call). Invalid UTF-8 is allowed: its bytes
  // never match a pattern and so end up in pieces of their own.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  Pretokenizer() = default;
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace cairn::tok
