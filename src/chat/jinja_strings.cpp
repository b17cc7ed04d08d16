// chat/jinja_strings.cpp — Python's str methods on UTF-8 text.
#include "chat/jinja_strings.h"

#include <algorithm>

#include "chat/jinja_value.h"
#include "core/utf8.h"

namespace cairn::chat::jinja {

namespace {

struct CodePoint {
  char32_t cp;
  size_t begin, end;
};

std::vector<CodePoint> decode(std::string_view s) {
  std::vector<size_t> offs = utf8_offsets(s);
  std::vector<CodePoint> out;
  out.reserve(offs.size());
  for (size_t i = 0; i < offs.size(); ++i) {
    size_t b = offs[i], e = i + 1 < offs.size() ? offs[i + 1] : s.size();
    char32_t cp = static_cast<unsigned char>(s[b]);
    if (e - b > 1) {
      cp = e - b == 2 ? (cp & 0x1f) : e - b == 3 ? (cp & 0x0f) : (cp & 0x07);
      for (size_t k = b + 1; k < e; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[k]) & 0x3f);
    }
    out.push_back({cp, b, e});
  }
  return out;
}

bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char up(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char low(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::vector<CodePoint> cps = decode(s);
  std::vector<CodePoint> set = chars ? decode(*chars) : std::vector<CodePoint>{};
  auto strip_me = [&](char32_t c) {
    if (!chars) return py_space(c);
    return std::any_of(set.begin(), set.end(), [c](const CodePoint& p) { return p.cp == c; });
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b].cp)) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1].cp)) --e;
  if (b == e) return "";
  return std::string(s.substr(cps[b].begin, cps[e - 1].end - cps[b].begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  long long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) return {std::string(s)};  // Python raises; callers check first
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long long>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::vector<CodePoint> cps = decode(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && py_space(cps[i].cp)) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
      size_t e = cps.size();
      while (e > i && py_space(cps[e - 1].cp)) --e;
      out.emplace_back(s.substr(cps[i].begin, cps[e - 1].end - cps[i].begin));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !py_space(cps[j].cp)) ++j;
    out.emplace_back(s.substr(cps[i].begin, cps[j - 1].end - cps[i].begin));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   long long maxsplit) {
  if (maxsplit < 0 || !sep || sep->empty()) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  size_t end = s.size();
  while (static_cast<long long>(out.size()) < maxsplit) {
    size_t f = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string_view::npos;
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
    end = f;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       long long count) {
  std::string out;
  if (old.empty()) {
    std::vector<size_t> offs = utf8_offsets(s);
    long long n = 0;
    for (size_t i = 0; i <= offs.size(); ++i) {
      if (count < 0 || n < count) {
        out.append(repl);
        ++n;
      }
      if (i < offs.size()) {
        size_t e = i + 1 < offs.size() ? offs[i + 1] : s.size();
        out.append(s.substr(offs[i], e - offs[i]));
      }
    }
    return out;
  }
  size_t pos = 0;
  long long n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(repl);
    pos = f + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {


// Simple case pairs for the scripts chat text most often mixes with ASCII (Latin-1,
// Latin Extended-A, Greek, Cyrillic); other code points keep their case.
char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 0x20;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17f) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_upper ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3b1 && c <= 0x3c9) return c == 0x3c2 ? 0x3a3 : c - 0x20;
  if (c >= 0x430 && c <= 0x44f) return c - 0x20;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 0x20;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17f) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_upper ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42f) return c + 0x20;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  return c;
}

std::string map_case(std::string_view s, char32_t (*f)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (const CodePoint& p : decode(s)) {
    char32_t m = f(p.cp);
    if (m == p.cp)
      out.append(s.substr(p.begin, p.end - p.begin));  // keeps invalid bytes as they were
    else
      append_utf8(out, static_cast<uint32_t>(m));
  }
  return out;
}

}  // namespace

std::string py_upper(std::string_view s) { return map_case(s, to_upper_cp); }
std::string py_lower(std::string_view s) { return map_case(s, to_lower_cp); }

std::string py_title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = prev_cased ? low(c) : up(c);
      prev_cased = true;
    } else {
      // Non-ASCII letters count as cased in Python; treating UTF-8 bytes so keeps
      // "éa" from capitalizing the "a".
      prev_cased = static_cast<unsigned char>(c) >= 0x80;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = up(out[0]);
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      out.emplace_back(s.substr(start, i - start));
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace cairn::chat::jinja
