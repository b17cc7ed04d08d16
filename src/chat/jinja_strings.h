// chat/jinja_strings.h — Python's str operations on UTF-8 text, as templates use them
// (strip, split, replace, case changes, splitlines). Case mapping covers ASCII only;
// whitespace is Python's (Unicode) whitespace. Pure functions; never throw.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cairn::chat::jinja {

// chars unset: strip Python whitespace; otherwise strip any code point in *chars.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// sep unset: split on runs of whitespace; maxsplit < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  long long maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   long long maxsplit);
// count < 0: replace all. An empty `old` inserts `repl` around every code point.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       long long count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::vector<std::string> py_splitlines(std::string_view s);
// markupsafe.escape: & < > " ' as entities.
std::string html_escape(std::string_view s);

}  // namespace cairn::chat::jinja
