// tokenizer/utf8.h — the few UTF-8 and byte-level helpers the tokenizers share.
// Internal to the tokenizer layer. Pure functions on bytes; no allocation
// beyond the strings they return.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace cairn::tok {

// Length of the sequence a lead byte announces (1 for ASCII and for stray
// continuation bytes), as llama.cpp splits text into symbols.
inline size_t utf8_lead_len(unsigned char c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

// What sits at s[0..]: a complete valid character (its length), a valid but
// unfinished prefix of one that more bytes could complete, or bytes that can
// never be valid (how many to replace by one U+FFFD: the maximal subpart).
enum class Utf8Scan { Complete, Incomplete, Invalid };
struct Utf8Step {
  Utf8Scan kind;
  size_t len;
};
Utf8Step utf8_step(std::string_view s);

using cairn::append_utf8;  // core/utf8.h

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// GPT-2's reversible byte <-> printable-codepoint table used by byte-level BPE.
struct ByteLevel {
  std::array<uint32_t, 256> byte_to_cp;
  // Codepoints 0..323 back to bytes; -1 where none.
  std::array<int16_t, 324> cp_to_byte;
};
const ByteLevel& byte_level();

// The byte-level spelling of raw bytes ("Hello world" -> "HelloĠworld").
std::string byte_level_encode(std::string_view raw);
// Back to raw bytes; characters outside the table are kept as they are.
std::string byte_level_decode(std::string_view text);

}  // namespace cairn::tok
