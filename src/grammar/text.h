// grammar/text.h — internal to src/grammar: the small text readers the
// grammar, regex and schema translators share (UTF-8 lead bytes, hex escapes).
#pragma once

#include <algorithm>
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

// The code points a sequence that starts with lead byte `b` (2 to 4 bytes
// long) may become, shortest forms only and no surrogates; false for a byte
// that starts no such sequence.
inline bool utf8_lead_range(unsigned char b, uint32_t& lo, uint32_t& hi) {
  const int len = utf8_length(b);
  if (len < 2 || b == 0xC0 || b == 0xC1 || b > 0xF4) return false;
  const uint32_t bits = b & (0x7F >> len);
  const int rest = len - 1;
  lo = std::max<uint32_t>(bits << (6 * rest), len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u);
  hi = std::min<uint32_t>((bits << (6 * rest)) | ((1u << (6 * rest)) - 1), b == 0xED ? 0xD7FFu : 0x10FFFFu);
  return true;
}

// Whether continuation byte `b` may follow a partial sequence (`pending`
// bytes still to come, `partial` its bits so far). Only a lead's first
// continuation is constrained: E0 needs A0..BF (else overlong), ED 80..9F
// (else a surrogate), F0 90..BF (overlong), F4 80..8F (past U+10FFFF).
inline bool utf8_continuation_ok(int pending, uint32_t partial, unsigned char b) {
  if ((b & 0xC0) != 0x80) return false;
  if (pending == 2 && partial < 16) {  // right after a three-byte lead
    if (partial == 0x0) return b >= 0xA0;
    if (partial == 0xD) return b <= 0x9F;
  }
  if (pending == 3) {  // right after a four-byte lead
    if (partial == 0) return b >= 0x90;
    if (partial == 4) return b <= 0x8F;
  }
  return true;
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
