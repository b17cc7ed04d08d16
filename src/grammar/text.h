// grammar/text.h — internal to src/grammar: the small text readers the
// grammar, regex and schema translators share (UTF-8 lead bytes, hex escapes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cairn::grammar {

// Bytes of the UTF-8 sequence a lead byte starts (1 to 4), 0 for a byte
// that cannot start one.
inline int utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
}

// `n` hex digits of `s` from `i` (advanced past those read), or nullopt at
// the end of `s` or a character that is not a hex digit.
inline std::optional<uint32_t> read_hex(std::string_view s, size_t& i, int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) {
    if (i >= s.size()) return std::nullopt;
    const char c = s[i++];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + (uint32_t)d;
  }
  return v;
}

}  // namespace cairn::grammar
