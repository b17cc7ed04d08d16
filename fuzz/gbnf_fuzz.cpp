// libFuzzer target: any bytes as a GBNF grammar must parse or fail with a
// Status; a parsed grammar must take bytes, say whether it may end and fill a
// token mask without crashing or running away.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto g = cairn::grammar::parse_gbnf(text);
  if (!g) return 0;
  auto grammar = std::make_shared<const cairn::grammar::Grammar>(std::move(*g));
  static const cairn::grammar::TokenTrie trie(
      {"", "a", "b", "ab", "{", "}", "\"", "0", "12", " ", "\xC3\xA9", "\xC3", "\xA9", "\xF0\x9F\x98\x80"},
      {0});
  cairn::grammar::Matcher m(grammar);
  std::vector<uint8_t> mask;
  for (const char* probe : {"a", "b", "{", "0", "\xC3", "\xA9"}) {
    trie.fill_mask(m, mask);
    (void)m.can_end();
    if (!m.accept(probe)) break;
  }
  return 0;
}
