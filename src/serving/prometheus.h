// serving/prometheus.h — the one rule of the Prometheus text format that
// every /metrics producer needs (the HTTP front-end's own series and a
// backend's extra_metrics()): escaping a label value. Formats nothing else.
#pragma once

#include <string>

namespace cairn::serving {

// A label value inside double quotes: backslash, quote and newline escaped.
inline std::string prometheus_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace cairn::serving
