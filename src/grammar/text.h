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

// Whether `s` is well-formed UTF-8: shortest forms only, no surrogates,
// nothing past U+10FFFF.
inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = (unsigned char)s[i];
    const int len = utf8_length(c);
    if (len == 0 || i + (size_t)len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = (unsigned char)s[i + (size_t)k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += (size_t)len;
  }
  return true;
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
