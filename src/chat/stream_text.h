// chat/stream_text.h — small helpers of the streaming output parsers
// (reasoning.cpp, tool_calls.cpp): how much of a buffer is safe to release.
// Header-only, pure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace cairn::chat::detail {

// The length of `s` without a UTF-8 sequence cut short at its end, so a
// released delta never splits a character.
inline size_t complete_utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

// The length of the longest end of `s` that is a proper start of `marker`:
// text that may still become the marker once more arrives.
inline size_t marker_prefix_at_end(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace cairn::chat::detail
