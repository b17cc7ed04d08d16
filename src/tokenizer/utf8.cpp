// UTF-8 scanning (RFC 3629: no overlongs, no surrogates, nothing past
// U+10FFFF) and GPT-2's byte-level table.
#include "tokenizer/utf8.h"

namespace cairn::tok {

namespace {

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Allowed range of the second byte for each lead byte (the first byte's row of
// the Unicode "well-formed byte sequences" table); {0,0} for invalid leads.
struct SecondRange {
  uint8_t lo, hi;
};
SecondRange second_range(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {0x80, 0xBF};
  if (lead == 0xE0) return {0xA0, 0xBF};
  if (lead >= 0xE1 && lead <= 0xEC) return {0x80, 0xBF};
  if (lead == 0xED) return {0x80, 0x9F};  // no surrogates
  if (lead >= 0xEE && lead <= 0xEF) return {0x80, 0xBF};
  if (lead == 0xF0) return {0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {0x80, 0xBF};
  if (lead == 0xF4) return {0x80, 0x8F};  // nothing past U+10FFFF
  return {0, 0};
}

ByteLevel make_byte_level() {
  ByteLevel t{};
  t.cp_to_byte.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the rest are shifted past 255
  // in byte order, so every byte becomes a visible, non-space character.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t.byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
    t.cp_to_byte[t.byte_to_cp[b]] = static_cast<int16_t>(b);
  }
  return t;
}

}  // namespace

Utf8Step utf8_step(std::string_view s) {
  const auto c0 = static_cast<unsigned char>(s[0]);
  if (c0 < 0x80) return {Utf8Scan::Complete, 1};
  const size_t need = utf8_lead_len(c0);
  const SecondRange r = second_range(c0);
  if (r.lo == 0) return {Utf8Scan::Invalid, 1};
  for (size_t k = 1; k < need; ++k) {
    if (k >= s.size()) return {Utf8Scan::Incomplete, k};
    const auto c = static_cast<unsigned char>(s[k]);
    const bool ok = k == 1 ? (c >= r.lo && c <= r.hi) : is_cont(c);
    if (!ok) return {Utf8Scan::Invalid, k};
  }
  return {Utf8Scan::Complete, need};
}


const ByteLevel& byte_level() {
  static const ByteLevel table = make_byte_level();
  return table;
}

std::string byte_level_encode(std::string_view raw) {
  const ByteLevel& t = byte_level();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) append_utf8(out, t.byte_to_cp[static_cast<unsigned char>(c)]);
  return out;
}

std::string byte_level_decode(std::string_view text) {
  const ByteLevel& t = byte_level();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step st = utf8_step(text.substr(i));
    if (st.kind != Utf8Scan::Complete) {  // not UTF-8: keep the byte
      out += text[i++];
      continue;
    }
    uint32_t cp = 0;
    const auto c0 = static_cast<unsigned char>(text[i]);
    if (st.len == 1) {
      cp = c0;
    } else if (st.len == 2) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
    }
    // Every table entry is below U+0800, so longer characters are never bytes.
    if (st.len <= 2 && cp < t.cp_to_byte.size() && t.cp_to_byte[cp] >= 0) {
      out += static_cast<char>(t.cp_to_byte[cp]);
    } else {
      out.append(text.substr(i, st.len));
    }
    i += st.len;
  }
  return out;
}

}  // namespace cairn::tok
