// grammar/matcher.h — the recognizer: where in a grammar the bytes so far may be.
// Owns the set of parse stacks (each the elements still to match, innermost
// first), advancing it by one byte at a time (UTF-8 decoded on the way, a
// partial code point kept as the range of code points it may still become),
// and whether the input may end here. Copying a Matcher is how token masks
// try a token without committing to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace cairn::grammar {

class Matcher {
 public:
  // At the start of the grammar's root rule. The grammar must outlive the matcher.
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Advances over one byte; false (and nothing changed) when no parse allows it.
  bool accept_byte(uint8_t b);
  // Advances over every byte of `s`; false, with the matcher left where the
  // first refused byte found it, when one is refused.
  bool accept(std::string_view s);
  // Whether the bytes so far are a whole sentence of the grammar (no code
  // point left half-read).
  bool can_end() const;
  // Whether any byte can follow (false: the input is complete and final).
  bool can_continue() const;
  size_t n_stacks() const { return stacks_.size(); }
  // The whole state as bytes: two matchers with equal keys accept exactly
  // the same continuations (the mask cache's key).
  std::string state_key() const;

  // Parses kept at once. A grammar ambiguous enough to pass it (alternatives
  // that match the same text, nested under repetitions) loses the parses
  // beyond it; grammars made from schemas stay far below.
  static constexpr size_t kMaxStacks = 4096;

 private:
  // The mask walk's automaton reads and advances the stacks directly.
  friend class StateTable;

  // A stack of positions: an element index into a sequence of the grammar
  // (rule, alternative, position), the top at the back.
  struct Pos {
    uint32_t rule = 0, alt = 0, index = 0;
    bool operator==(const Pos& o) const {
      return rule == o.rule && alt == o.alt && index == o.index;
    }
    bool operator<(const Pos& o) const {
      return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : index < o.index;
    }
  };
  using Stack = std::vector<Pos>;

  const Element& at(const Pos& p) const;
  // Expands `s` until its top is a code-point set, appending every stack so
  // made to `out` (a stack whose input may end is kept empty).
  void expand(Stack s, std::vector<Stack>& out) const;
  void normalize(std::vector<Stack>& stacks) const;
  bool advance_code_point(uint32_t lo, uint32_t hi, bool complete);

  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
  // A partial UTF-8 sequence: bytes still to come and the bits so far.
  int pending_ = 0;
  uint32_t partial_ = 0;
};

}  // namespace cairn::grammar
